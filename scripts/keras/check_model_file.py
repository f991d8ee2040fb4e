"""Checks kdist's Keras model files against Keras 3 both ways (issue 39; not run by the tests, which
need no Keras): for each model below, Keras builds it, trains it one epoch on Fashion-MNIST (so
the file holds an optimizer's state), evaluates it on the test set and saves it as a .keras file;
kdist's examples/keras_model_trainer loads that file (kdist::load_model), evaluates it (the loss
must be that of Keras' predictions within --tolerance, relative), trains it on and saves it
(kdist::save_model); Keras loads kdist's file (keras.saving.load_model) and predicts the test set
(the loss of its predictions must be kdist's after training within --tolerance). Prints one line per model and exits 1 if any check fails.

    KERAS_BACKEND=jax python scripts/keras/check_model_file.py \
        --trainer build/examples/keras_model_trainer [--processes 2] [--dir /tmp/kdist_keras_files]

Models: the seeds' model (Flatten, Dense(200, relu, no bias), Dropout(0.4), Dense(10, softmax)),
and a small CNN (Conv2D same relu, MaxPooling2D, Conv2D valid, UpSampling2D, AveragePooling2D
same, Flatten, Dropout, Dense softmax), each with Adam; the CNN also with SGD(momentum, nesterov)
and RMSprop(centered); a Functional model of skips (Add and Concatenate, nested: a U-Net's shape)
with Adam.
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


def unet():
    """A Functional model of skips: x + f(x), and concatenate([x, g(x)]) with y + h(y) in g."""
    x0 = keras.Input((28, 28, 1))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(x0)
    x = layers.Add()([x, layers.Conv2D(8, 3, padding="same")(x)])
    u = layers.MaxPooling2D(2)(x)
    u = layers.Conv2D(8, 3, padding="same", activation="relu")(u)
    u = layers.Add()([u, layers.Conv2D(8, 3, padding="same")(u)])
    u = layers.UpSampling2D(2)(u)
    x = layers.Concatenate()([x, u])
    x = layers.AveragePooling2D(4)(x)
    y = layers.Dense(10, activation="softmax")(layers.Flatten()(x))
    return keras.Model(x0, y)


cases = [("seeds_adam", seeds, lambda: keras.optimizers.Adam(0.001)),
         ("cnn_adam", cnn, lambda: keras.optimizers.Adam(0.001)),
         ("cnn_sgd_nesterov", cnn, lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True)),
         ("cnn_rmsprop_centered", cnn, lambda: keras.optimizers.RMSprop(0.001, centered=True)),
         ("unet_functional_adam", unet, lambda: keras.optimizers.Adam(0.001))]
def keras_loss_of(model):
    """The test set's mean cross-entropy of Keras' predictions, in float64. (Keras' evaluate clips
    probabilities to [1e-7, 1 - 1e-7] where it cannot see the softmax's logits - the Functional
    model here: 0.88502 against 0.88517 of its own predictions - and kdist does not clip.)"""
    p = model.predict(xs, batch_size=128, verbose=0).astype(np.float64)
    return float(-np.log(p[np.arange(len(ys)), ys]).mean())


failed = False
for name, build, optimizer in cases:
    keras.utils.set_random_seed(1337)
    m = build()
    m.compile(optimizer=optimizer(), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    m.fit(xt[:6000], yt[:6000], batch_size=128, epochs=1, verbose=0)
    keras_loss = keras_loss_of(m)
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
    keras_after = keras_loss_of(back)
    e1 = abs(before - keras_loss) / keras_loss
    e2 = abs(keras_after - after) / after
    ok = e1 <= args.tolerance and e2 <= args.tolerance
    failed |= not ok
    print(f"{name}: Keras' file in kdist: loss {before:.7f} vs Keras {keras_loss:.7f} (rel {e1:.1e}); "
          f"kdist's file in Keras after {args.steps} kdist steps: {keras_after:.7f} vs kdist "
          f"{after:.7f} (rel {e2:.1e}); iterations {int(back.optimizer.iterations)} "
          f"{'ok' if ok else 'FAILED'}")
sys.exit(1 if failed else 0)
