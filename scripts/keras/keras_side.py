"""The Keras side of scripts/keras/check_keras_exchange.sh (needs keras==3.15 and jax from PyPI;
never a test dependency). The model is the trainers' MLP: Input(784) -> Dense(200, relu, no bias,
"d1") -> Dropout(0.4) -> Dense(10, softmax, "d2"), Adam(0.001), sparse categorical cross-entropy,
on Fashion-MNIST as Debian installs it (pixels / 255, as kdist reads them).

    python keras_side.py evaluate FILE        # load kdist's weights, print the test metrics
    python keras_side.py train FILE EPOCHS    # train, save FILE, print the test metrics

KERAS_DTYPE_POLICY=bfloat16 (or float16, mixed_bfloat16, ...) builds the model under that Keras
dtype policy: under "bfloat16" Keras saves and loads 16-bit variables.
"""
import gzip
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

DATA = os.environ.get("KDIST_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"


def load(split):
    with gzip.open(f"{DATA}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype("float32") / 255
    with gzip.open(f"{DATA}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype("int32")
    return x, y


def model():
    m = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(200, activation="relu", use_bias=False, name="d1"),
        keras.layers.Dropout(0.4, name="dropout"),
        keras.layers.Dense(10, activation="softmax", name="d2"),
    ])
    m.compile(optimizer=keras.optimizers.Adam(0.001),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def report(m, who):
    loss, acc = m.evaluate(*load("t10k"), batch_size=128, verbose=0)
    print(f"{who}: Test loss: {loss:.4f} - Test accuracy: {acc:.4f}")


if __name__ == "__main__":
    if os.environ.get("KERAS_DTYPE_POLICY"):
        keras.mixed_precision.set_global_policy(os.environ["KERAS_DTYPE_POLICY"])
    action, path = sys.argv[1], sys.argv[2]
    m = model()
    if action == "evaluate":
        m.load_weights(path)
        report(m, "Keras, kdist's weights")
    else:
        keras.utils.set_random_seed(1)
        m.fit(*load("train"), batch_size=128, epochs=int(sys.argv[3]), verbose=0)
        m.save_weights(path)
        report(m, "Keras, trained in Keras")
