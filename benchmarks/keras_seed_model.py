#!/usr/bin/env python3
# The seeds' model on Fashion-MNIST in Keras 3 (JAX, CPU), side by side with kdist's trainers.
# Not used by the tests or the README commands. Needs: pip install "jax[cpu]" keras numpy.
# usage: python3 benchmarks/keras_seed_model.py [batch_size] [seed] [dtype_policy] [epochs]
# (dtype_policy: Keras' name, "float32" by default; the mixed_bfloat16 figure of docs/benchmarks.md)
import gzip, os, sys, time
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np, keras
from keras import layers
d = "/usr/share/datasets/fashion-mnist"
def imgs(f):
    with gzip.open(os.path.join(d, f)) as g: return np.frombuffer(g.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1).astype("float32") / 255
def labs(f):
    with gzip.open(os.path.join(d, f)) as g: return np.frombuffer(g.read(), np.uint8, offset=8).astype("int32")
xt, yt = imgs("train-images-idx3-ubyte.gz"), labs("train-labels-idx1-ubyte.gz")
xs, ys = imgs("t10k-images-idx3-ubyte.gz"), labs("t10k-labels-idx1-ubyte.gz")
bs = int(sys.argv[1]) if len(sys.argv) > 1 else 128
keras.utils.set_random_seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1337)
keras.mixed_precision.set_global_policy(sys.argv[3] if len(sys.argv) > 3 else "float32")
epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 5
inputs = keras.Input(shape=(28, 28, 1))
y = layers.Flatten()(inputs)
y = layers.Dense(200, use_bias=False, activation="relu", name="d1")(y)
y = layers.Dropout(0.4)(y)
y = layers.Dense(10, activation="softmax", name="d2")(y)
m = keras.Model(inputs, y)
m.compile(optimizer=keras.optimizers.Adam(0.001), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
t = time.time()
m.fit(xt, yt, batch_size=bs, epochs=epochs, verbose=2)
print("train seconds", time.time() - t)
print("test", m.evaluate(xs, ys, verbose=0))
