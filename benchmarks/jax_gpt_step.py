# JAX anchor for kdist's GPT (examples/common/gpt_model.hpp, bench_gpt's BM_gpt_step/1proc): the
# same model, optimizer and batch as one jitted training step, so kdist's step time can be set
# against XLA's on the same machine (a CPU here; a GPU in the device runs of issue 36).
# Model (GptConfig's defaults): Embedding(256, 128) + PositionEmbedding(128), 4 pre-norm blocks of
# [LayerNormalization -> MultiHeadAttention(4 heads, key_dim 32, causal, with biases) -> residual]
# and [LayerNormalization -> Dense(512, gelu) -> Dense(128) -> Dropout(0.1) -> residual], a final
# LayerNormalization and lm_head Dense(256, no bias); sparse categorical crossentropy of the
# logits against the next tokens; AdamW(1e-3, weight_decay 0.004, Keras' epsilon 1e-7); global
# batch 16 x 128 tokens. The whole step (dropout keys, forward, backward, AdamW) is one jax.jit
# call, timed after warm-up steps with block_until_ready; also the same steps under lax.scan (no
# per-step dispatch: a lower bound). `--policy mixed_bfloat16` computes as Keras' "mixed_bfloat16"
# does: float32 variables cast to bfloat16 where they are used, matrix products, GELU, dropout and
# the residual stream in bfloat16, layer normalisation, softmax and the loss in float32 (the
# figure beside kdist's "mixed_bfloat16" on a GPU, issue 37). Not used by the tests or the README
# commands.
#
#   python3 -m venv /tmp/jaxvenv && /tmp/jaxvenv/bin/pip install "jax[cpu]"
#   # one core, as kdist's single-process figure:
#   taskset -c 0 env XLA_FLAGS=--xla_cpu_multi_thread_eigen=false \
#       /tmp/jaxvenv/bin/python benchmarks/jax_gpt_step.py [steps] [--d-model N --blocks N ...]
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("steps", nargs="?", type=int, default=20)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--sequence", type=int, default=128)
ap.add_argument("--d-model", type=int, default=128)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--blocks", type=int, default=4)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--dropout", type=float, default=0.1)
ap.add_argument("--precision", default="default", help="jax.default_matmul_precision")
ap.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"],
                help="Keras' dtype policy the step computes under")
a = ap.parse_args()
CD = jnp.bfloat16 if a.policy == "mixed_bfloat16" else jnp.float32  # the compute dtype
V, T, D, H, L, B = a.vocab, a.sequence, a.d_model, a.heads, a.blocks, a.batch
K = D // H
jax.config.update("jax_default_matmul_precision", a.precision)
print(f"jax {jax.__version__}, devices {jax.devices()}, precision {a.precision}, "
      f"policy {a.policy}", flush=True)


def glorot(k, shape, fan_in, fan_out):
    lim = np.sqrt(6.0 / (fan_in + fan_out))
    return jax.random.uniform(k, shape, jnp.float32, -lim, lim)


def init(key):
    ks = iter(jax.random.split(key, 8 * L + 4))
    p = {"tok": jax.random.uniform(next(ks), (V, D), jnp.float32, -0.05, 0.05),
         "pos": glorot(next(ks), (T, D), T, D), "blocks": [],
         "lnf": (jnp.ones(D), jnp.zeros(D)), "head": glorot(next(ks), (D, V), D, V)}
    for _ in range(L):
        p["blocks"].append({
            "ln1": (jnp.ones(D), jnp.zeros(D)), "ln2": (jnp.ones(D), jnp.zeros(D)),
            "q": glorot(next(ks), (D, H, K), D, H * K), "k": glorot(next(ks), (D, H, K), D, H * K),
            "v": glorot(next(ks), (D, H, K), D, H * K), "o": glorot(next(ks), (H, K, D), H * K, D),
            "bq": jnp.zeros((H, K)), "bk": jnp.zeros((H, K)), "bv": jnp.zeros((H, K)),
            "bo": jnp.zeros(D),
            "up": glorot(next(ks), (D, 4 * D), D, 4 * D), "bup": jnp.zeros(4 * D),
            "down": glorot(next(ks), (4 * D, D), 4 * D, D), "bdown": jnp.zeros(D)})
    return p


def layer_norm(x, gb, eps=1e-3):  # Keras' epsilon; float32 inside, the result in CD
    x = x.astype(jnp.float32)
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return ((x - m) * jax.lax.rsqrt(v + eps) * gb[0] + gb[1]).astype(CD)


def c(w):  # a variable as the layer computes with it (Keras' autocast)
    return w.astype(CD)


MASK = jnp.tril(jnp.ones((T, T), bool))


def forward(p, tokens, key):
    h = (c(p["tok"])[tokens] + c(p["pos"])[None]).astype(CD)
    keys = jax.random.split(key, L)
    for blk, kd in zip(p["blocks"], keys):
        x = layer_norm(h, blk["ln1"])
        q = jnp.einsum("btd,dhk->bthk", x, c(blk["q"])) + c(blk["bq"])
        k = jnp.einsum("btd,dhk->bthk", x, c(blk["k"])) + c(blk["bk"])
        v = jnp.einsum("btd,dhk->bthk", x, c(blk["v"])) + c(blk["bv"])
        s = jnp.einsum("bthk,bshk->bhts", q / np.sqrt(K).astype(CD), k).astype(jnp.float32)
        s = jnp.where(MASK, s, -1e9)
        att = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(s, axis=-1).astype(CD), v)
        h = h + jnp.einsum("bthk,hkd->btd", att, c(blk["o"])) + c(blk["bo"])
        x = layer_norm(h, blk["ln2"])
        u = jax.nn.gelu(x @ c(blk["up"]) + c(blk["bup"]), approximate=False)
        y = u @ c(blk["down"]) + c(blk["bdown"])
        if a.dropout > 0:
            keep = jax.random.bernoulli(kd, 1 - a.dropout, y.shape)
            y = jnp.where(keep, y / jnp.asarray(1 - a.dropout, CD), jnp.zeros((), CD))
        h = h + y
    return (layer_norm(h, p["lnf"]) @ c(p["head"])).astype(jnp.float32)


def loss_fn(p, x, y, key):
    z = forward(p, x, key)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), y[..., None], axis=-1))


LR, WD, B1, B2, EPS = 1e-3, 0.004, 0.9, 0.999, 1e-7


def adamw(p, g, m, v, t):  # Keras' AdamW: decay, then Adam with bias correction
    t = t + 1
    alpha = LR * jnp.sqrt(1 - B2 ** t) / (1 - B1 ** t)
    m = jax.tree_util.tree_map(lambda m, g: m + (g - m) * (1 - B1), m, g)
    v = jax.tree_util.tree_map(lambda v, g: v + (g * g - v) * (1 - B2), v, g)
    p = jax.tree_util.tree_map(lambda p, m, v: p - p * WD * LR - alpha * m / (jnp.sqrt(v) + EPS),
                               p, m, v)
    return p, m, v, t


@jax.jit
def step(state, x, y):
    p, m, v, t, key = state
    key, kd = jax.random.split(key)
    loss, g = jax.value_and_grad(loss_fn)(p, x, y, kd)
    p, m, v, t = adamw(p, g, m, v, t)
    return (p, m, v, t, key), loss


@jax.jit
def scanned(state, xs, ys):
    return jax.lax.scan(lambda s, xy: step(s, *xy), state, (xs, ys))


rng = np.random.default_rng(7)
stream = rng.integers(0, V, size=(B, T + 1)).astype(np.int32)
x, y = jnp.asarray(stream[:, :-1]), jnp.asarray(stream[:, 1:])
p = init(jax.random.PRNGKey(0))
zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, p)
state = (p, zeros(), zeros(), jnp.zeros((), jnp.float32), jax.random.PRNGKey(1))
for _ in range(3):
    state, loss = step(state, x, y)
loss.block_until_ready()
t0 = time.perf_counter()
for _ in range(a.steps):
    state, loss = step(state, x, y)
loss.block_until_ready()
dt = (time.perf_counter() - t0) / a.steps
xs = jnp.broadcast_to(x, (a.steps,) + x.shape)
ys = jnp.broadcast_to(y, (a.steps,) + y.shape)
state2, losses = scanned(state, xs, ys)
losses.block_until_ready()
t0 = time.perf_counter()
state2, losses = scanned(state, xs, ys)
losses.block_until_ready()
ds = (time.perf_counter() - t0) / a.steps
print(f"GPT vocab {V} seq {T} d_model {D} heads {H} blocks {L} batch {B} {a.policy}: jitted step "
      f"{dt * 1e3:.2f} ms ({B * T / dt:,.0f} tokens/s), lax.scan {ds * 1e3:.2f} ms/step, "
      f"loss {float(loss):.4f}", flush=True)
