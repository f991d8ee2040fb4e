"""Checks kdist's Keras model files against Keras 3 both ways (issue 39; not run by the tests, which
need no Keras): for each model below, Keras builds it, trains it one epoch on Fashion-MNIST (so
the file holds an optimizer's state), evaluates it on the test set and saves it as a .keras file;
kdist's examples/keras_model_trainer loads that file (kdist::load_model), evaluates it (the loss
must be Keras' within --tolerance, relative), trains it on and saves it (kdist::save_model); Keras
loads kdist's file (keras.saving.load_model) and evaluates it (the loss must be kdist's after
training within --tolerance). Prints one line per model and exits 1 if any check fails.

    KERAS_BACKEND=jax python scripts/keras/check_model_file.py \
        --trainer build/examples/keras_model_trainer [--processes 2] [--dir /tmp/kdist_keras_files]

Models: the seeds' model (Flatten, Dense(200, relu, no bias), Dropout(0.4), Dense(10, softmax)),
and a small CNN (Conv2D same relu, MaxPooling2D, Conv2D valid, UpSampling2D, AveragePooling2D
same, Flatten, Dropout, Dense softmax), each with Adam; the CNN also with SGD(momentum, nesterov)
and RMSprop(centered).
"""
import argparse
import gzip
import os
import re
import subprocess
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--trainer", required=True)
p.add_argument("--processes", type=int, default=2)
p.add_argument("--mpiexec", default="mpiexec.mpich")
p.add_argument("--dir", default="/tmp/kdist_keras_files")
p.add_argument("--tolerance", type=float, default=1e-5)
p.add_argument("--steps", type=int, default=50, help="kdist's training steps")
args = p.parse_args()
os.makedirs(args.dir, exist_ok=True)

d = "/usr/share/datasets/fashion-mnist"


def images(f):
    with gzip.open(os.path.join(d, f)) as g:
        return np.frombuffer(g.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1).astype("float32") / 255


def labels(f):
    with gzip.open(os.path.join(d, f)) as g:
        return np.frombuffer(g.read(), np.uint8, offset=8).astype("int32")


xt, yt = images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz")
xs, ys = images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz")


def seeds():
    return keras.Sequential([keras.Input((28, 28, 1)), layers.Flatten(),
                             layers.Dense(200, use_bias=False, activation="relu", name="d1"),
                             layers.Dropout(0.4), layers.Dense(10, activation="softmax", name="d2")])


def cnn():
    return keras.Sequential([keras.Input((28, 28, 1)),
                             layers.Conv2D(8, 3, padding="same", activation="relu"),
                             layers.MaxPooling2D(2), layers.Conv2D(8, 3), layers.UpSampling2D(2),
                             layers.AveragePooling2D(2, padding="same"), layers.Flatten(),
                             layers.Dropout(0.25), layers.Dense(10, activation="softmax")])


cases = [("seeds_adam", seeds, lambda: keras.optimizers.Adam(0.001)),
         ("cnn_adam", cnn, lambda: keras.optimizers.Adam(0.001)),
         ("cnn_sgd_nesterov", cnn, lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)),
         ("cnn_rmsprop_centered", cnn, lambda: keras.optimizers.RMSprop(0.001, centered=True))]
failed = False
for name, build, optimizer in cases:
    keras.utils.set_random_seed(1337)
    m = build()
    m.compile(optimizer=optimizer(), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    m.fit(xt[:6000], yt[:6000], batch_size=128, epochs=1, verbose=0)
    keras_loss = m.evaluate(xs, ys, batch_size=128, verbose=0)[0]
    path = os.path.join(args.dir, name + ".keras")
    out = os.path.join(args.dir, name + "_kdist.keras")
    m.save(path)
    run = subprocess.run([args.mpiexec, "-n", str(args.processes), args.trainer, "--model", path,
                          "--out", out, "--epochs", "1", "--max-steps", str(args.steps)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(name, "FAILED: keras_model_trainer exited", run.returncode, run.stdout, run.stderr)
        failed = True
        continue
    before = float(re.search(r"test loss before: (\S+)", run.stdout).group(1))
    after = float(re.search(r"test loss after: (\S+)", run.stdout).group(1))
    back = keras.saving.load_model(out)
    r = back.evaluate(xs, ys, batch_size=128, verbose=0)  # kdist writes no metrics: the loss alone
    keras_after = r[0] if isinstance(r, list) else r
    e1 = abs(before - keras_loss) / keras_loss
    e2 = abs(keras_after - after) / after
    ok = e1 <= args.tolerance and e2 <= args.tolerance
    failed |= not ok
    print(f"{name}: Keras' file in kdist: loss {before:.7f} vs Keras {keras_loss:.7f} (rel {e1:.1e}); "
          f"kdist's file in Keras after {args.steps} kdist steps: {keras_after:.7f} vs kdist "
          f"{after:.7f} (rel {e2:.1e}); iterations {int(back.optimizer.iterations)} "
          f"{'ok' if ok else 'FAILED'}")
sys.exit(1 if failed else 0)
