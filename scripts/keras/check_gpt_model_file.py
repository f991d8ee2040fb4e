"""Checks a GPT written in Keras' functional API against kdist's model files both ways (issue 39;
not run by the tests, which need no Keras). Keras builds scripts/keras/gpt_keras_side.py's GPT
(Embedding, the additive PositionEmbedding, LayerNormalization, causal MultiHeadAttention, Add,
Dense; AdamW, SparseCategoricalCrossentropy(from_logits=True)), trains 2 steps and saves it;
scripts/keras/gpt_model_file.c (kdist's C API, compiled here against libkdist_c) loads it under
mpiexec, writes its logits and loss for the batch (which must be Keras' within --tolerance,
relative to 1 + |logit|), trains --steps steps and saves it; Keras loads kdist's file and its
logits and loss must be kdist's. Prints the differences, exits 1 if a check fails.

    KERAS_BACKEND=jax python scripts/keras/check_gpt_model_file.py \
        --libdir build-tests/bindings [--processes 2] [--dir /tmp/kdist_gpt_files]
"""
import argparse
import os
import re
import subprocess
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import gpt_keras_side as g  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--libdir", required=True, help="the directory of libkdist_c.so")
p.add_argument("--processes", type=int, default=2)
p.add_argument("--mpiexec", default="mpiexec.mpich")
p.add_argument("--mpicc", default="mpicc.mpich")
p.add_argument("--dir", default="/tmp/kdist_gpt_files")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--tolerance", type=float, default=2e-5)
args = p.parse_args()
os.makedirs(args.dir, exist_ok=True)
f = lambda name: os.path.join(args.dir, name)  # noqa: E731
libdir = os.path.abspath(args.libdir)

program = f("gpt_model_file")
subprocess.run([args.mpicc, "-std=c11", "-O1", os.path.join(here, "gpt_model_file.c"),
                "-I", os.path.join(here, "..", "..", "bindings", "c"), "-L", libdir, "-lkdist_c",
                f"-Wl,-rpath,{libdir}", "-o", program], check=True)

keras.utils.set_random_seed(11)
m = g.gpt()
g.step(m)
g.step(m)
m.save(f("keras_gpt.keras"))
x, _ = g.batch()
keras_logits = m.predict(x, verbose=0).reshape(-1)
keras_loss = g.loss(m)

out = subprocess.run([args.mpiexec, "-n", str(args.processes), program, f("keras_gpt.keras"),
                      f("kdist_logits.txt"), str(args.steps), f("kdist_logits_after.txt"),
                      f("kdist_gpt.keras")], check=True, capture_output=True, text=True).stdout
kdist_loss = float(re.search(r"kdist loss (\S+)", out).group(1))
kdist_after = float(re.search(r"kdist loss after \d+ steps (\S+)", out).group(1))
kdist_logits = np.loadtxt(f("kdist_logits.txt")).reshape(-1)

back = keras.saving.load_model(f("kdist_gpt.keras"))
back_logits = back.predict(x, verbose=0).reshape(-1)
back_loss = g.loss(back)
kdist_logits_after = np.loadtxt(f("kdist_logits_after.txt")).reshape(-1)

def worst(a, b):
    return float(np.max(np.abs(a - b) / (1 + np.abs(b))))

checks = [
    ("Keras' file in kdist: logits", worst(kdist_logits, keras_logits)),
    ("Keras' file in kdist: loss", abs(kdist_loss - keras_loss) / keras_loss),
    (f"kdist's file ({args.steps} more steps) in Keras: logits", worst(back_logits, kdist_logits_after)),
    (f"kdist's file ({args.steps} more steps) in Keras: loss", abs(back_loss - kdist_after) / kdist_after),
]
print(f"Keras loss {keras_loss:.9e}, kdist {kdist_loss:.9e}; after {args.steps} kdist steps: "
      f"kdist {kdist_after:.9e}, Keras on kdist's file {back_loss:.9e} "
      f"(iterations {int(back.optimizer.iterations)})")
failed = False
for name, d in checks:
    ok = d <= args.tolerance
    failed |= not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {d:.2e} (tolerance {args.tolerance:g})")
sys.exit(1 if failed else 0)
