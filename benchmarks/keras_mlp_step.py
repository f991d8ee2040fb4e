#!/usr/bin/env python3
# The issue-21 MLP (784-4096-10: Dense relu, Dropout(0.4), Dense softmax; Adam 1e-3, batch 128,
# categorical cross-entropy) in Keras 3 on JAX: ms per train_on_batch (jit-compiled), after a
# warm-up, on random data. Side by side with kdist's BM_mlp_step_paired (benchmarks/bench_dropout.cpp).
# Not used by the tests or the README commands. Needs a venv with keras and jax; one core, like
# one kdist process:
#   KERAS_BACKEND=jax XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
#     taskset -c 1 python benchmarks/keras_mlp_step.py [hidden] [steps] [hidden_layers]
# hidden_layers 2 is 784-4096-4096-10 (the second hidden Dense without dropout), as
# benchmarks/bench_mlp_step.cpp's BM_mlp_step/2/*. Whole machine: leave XLA_FLAGS and taskset out.
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np

hidden = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
hidden_layers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
rng = np.random.default_rng(0)
x = rng.random((128, 784), dtype=np.float32)
y = keras.utils.to_categorical(rng.integers(0, 10, 128), 10)
model = keras.Sequential([
    keras.Input((784,)),
    keras.layers.Dense(hidden, activation="relu"),
    keras.layers.Dropout(0.4),
    *[keras.layers.Dense(hidden, activation="relu") for _ in range(hidden_layers - 1)],
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy")
for _ in range(5):
    model.train_on_batch(x, y)
times = []
for _ in range(steps):
    t = time.perf_counter()
    model.train_on_batch(x, y)
    times.append(time.perf_counter() - t)
times.sort()
widths = "-".join([str(hidden)] * hidden_layers)
print(f"784-{widths}-10, batch 128, Adam, dropout 0.4: median {1e3 * times[len(times) // 2]:.1f} ms/step, "
      f"min {1e3 * times[0]:.1f} ms ({steps} steps, keras {keras.__version__})")
