#!/usr/bin/env python3
"""Keras 3 / JAX reference for benchmarks/bench_gpt.cpp: the same GPT (examples/common/gpt_model.hpp
with GptConfig's defaults: vocabulary 256, sequence 128, d_model 128, 4 heads of 32, 4 pre-norm
blocks, MLP 4 * d_model with exact GELU, dropout 0.1 after the MLP, a final LayerNormalization, an
lm_head without bias), the same batch (16 sequences of 128 tokens), the same loss (sparse
categorical cross-entropy from logits) and optimizer (AdamW(1e-3), Keras' weight decay 0.004).
Prints the median time of one training step and tokens/s, two ways:

  - train_on_batch: Keras' own jitted train step (what a Keras user calls), after warm-up;
  - stateless:      one jax.jit'ed step of model.stateless_call + jax.value_and_grad +
                    optimizer.stateless_apply, the state donated (no Python in the loop but
                    the call itself).

Run (CPU):
  python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install -q keras jax
  KERAS_BACKEND=jax /tmp/kvenv/bin/python scripts/keras/gpt_step.py            # XLA: all cores
  # one core, like one kdist process (kdist's Kokkos Serial backend uses one core per rank):
  KERAS_BACKEND=jax XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
    taskset -c 0 /tmp/kvenv/bin/python scripts/keras/gpt_step.py
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

VOCAB, SEQ, D_MODEL, HEADS, BLOCKS, DROPOUT, BATCH = 256, 128, 128, 4, 4, 0.1, 16


class PositionEmbedding(layers.Layer):
    """kdist's PositionEmbedding: a learned (sequence, features) table added to the input."""

    def __init__(self, sequence_length, **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = sequence_length

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer="glorot_uniform",
        )

    def call(self, x):
        return x + self.embeddings[None, : x.shape[1], :]


def make_gpt():
    tokens = keras.Input((SEQ,), dtype="int32")
    x = layers.Embedding(VOCAB, D_MODEL, name="token_embedding")(tokens)
    x = PositionEmbedding(SEQ, name="position_embedding")(x)
    for b in range(BLOCKS):
        h = layers.LayerNormalization(epsilon=1e-3, name=f"block{b}_ln1")(x)
        h = layers.MultiHeadAttention(HEADS, D_MODEL // HEADS, name=f"block{b}_mha")(
            h, h, use_causal_mask=True
        )
        x = layers.Add()([x, h])
        h = layers.LayerNormalization(epsilon=1e-3, name=f"block{b}_ln2")(x)
        h = layers.Dense(4 * D_MODEL, activation="gelu", name=f"block{b}_up")(h)
        h = layers.Dense(D_MODEL, name=f"block{b}_down")(h)
        h = layers.Dropout(DROPOUT, name=f"block{b}_dropout")(h)
        x = layers.Add()([x, h])
    x = layers.LayerNormalization(epsilon=1e-3, name="final_norm")(x)
    logits = layers.Dense(VOCAB, use_bias=False, name="lm_head")(x)
    return keras.Model(tokens, logits)


def batch():
    stream = (np.arange(BATCH * (SEQ + 1)) * 7919 % VOCAB).astype("int32")
    stream = stream.reshape(BATCH, SEQ + 1)
    return stream[:, :-1], stream[:, 1:]


def median_seconds(step, steps, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_train_on_batch(x, y, steps, warmup):
    keras.utils.set_random_seed(1)
    model = make_gpt()
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return median_seconds(lambda: model.train_on_batch(x, y), steps, warmup), model


def time_stateless(x, y, steps, warmup):
    keras.utils.set_random_seed(1)
    model = make_gpt()
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss_and_state(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, logits), non_trainable

    grad_fn = jax.value_and_grad(loss_and_state, has_aux=True)

    def train_step(state, x, y):
        trainable, non_trainable, opt = state
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, opt = optimizer.stateless_apply(opt, grads, trainable)
        return loss, (trainable, non_trainable, opt)

    train_step = jax.jit(train_step, donate_argnums=0)
    state = [
        (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in optimizer.variables],
        )
    ]
    xj, yj = jax.numpy.asarray(x), jax.numpy.asarray(y)

    def step():
        loss, state[0] = train_step(state[0], xj, yj)
        jax.block_until_ready(loss)

    return median_seconds(step, steps, warmup)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    x, y = batch()
    tokens = BATCH * SEQ
    with open("/proc/loadavg") as f:
        load_begin = f.read().split()[0]
    t_keras, model = time_train_on_batch(x, y, args.steps, args.warmup)
    t_jax = time_stateless(x, y, args.steps, args.warmup)
    with open("/proc/loadavg") as f:
        load_end = f.read().split()[0]
    print(
        f"keras {keras.__version__} jax {jax.__version__} backend {keras.backend.backend()} "
        f"devices {jax.devices()} affinity {sorted(os.sched_getaffinity(0))} "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
    print(f"parameters {model.count_params()} batch {BATCH} sequence {SEQ} tokens/step {tokens}")
    print(f"train_on_batch  {t_keras * 1e3:9.2f} ms/step {tokens / t_keras:10.0f} tokens/s")
    print(f"stateless jit   {t_jax * 1e3:9.2f} ms/step {tokens / t_jax:10.0f} tokens/s")
    print(f"load average (1 min) at start {load_begin}, at end {load_end}")


if __name__ == "__main__":
    main()
