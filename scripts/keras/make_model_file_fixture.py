"""Writes tests/data/keras_cnn.keras and tests/data/keras_cnn_predictions.txt: a model file written
by Keras 3 itself, which tests/mpi/test_keras_model_file.cpp loads with kdist::load_model, and
Keras' predictions of it. Not run by the tests (they need no Keras): run it again (with
keras==3.15 and jax installed) only to regenerate the fixture.

The model (keras_cnn.keras): Input (8, 8, 1) -> Conv2D(4, 3, "same", relu) -> MaxPooling2D(2) -> Conv2D(3, 2) ->
UpSampling2D(2) -> AveragePooling2D(2, padding="same") -> Flatten -> Dropout(0.25) ->
Dense(10, softmax), compiled with Adam(0.01) and sparse_categorical_crossentropy and trained 3
steps on inputs x[i] = sin(0.37 i) with labels i % 10, so the file holds trained weights and the
optimizer's state. The predictions are of the 4 examples x[i] = cos(0.11 i), one row of 10 per
line.

It also writes tests/data/keras_unet.keras and keras_unet_predictions.txt: a Functional model of
skips (a U-Net's shape, below) trained and probed the same way on (8, 8, 2) inputs, and
tests/data/keras_fashion_tiny.keras (below), and tests/data/keras_gpt.keras: the GPT of
scripts/keras/gpt_keras_side.py in Keras' functional API (vocabulary 32, sequence 8, d_model 16,
2 heads, 2 blocks; Embedding, kdist's additive PositionEmbedding, LayerNormalization,
MultiHeadAttention with use_causal_mask, Add, Dense), AdamW and
SparseCategoricalCrossentropy(from_logits=True), trained 2 steps on that script's batch, with
Keras' logits for the batch (keras_gpt_predictions.txt, one position's 32 per line) and its loss
(keras_gpt_loss.txt).

    KERAS_BACKEND=jax python scripts/keras/make_model_file_fixture.py tests/data
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
keras.utils.set_random_seed(3)
model = keras.Sequential(
    [
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1"),
        keras.layers.MaxPooling2D(2, name="p1"),
        keras.layers.Conv2D(3, 2, name="c2"),
        keras.layers.UpSampling2D(2, name="up"),
        keras.layers.AveragePooling2D(2, padding="same", name="p2"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dropout(0.25, name="dropout"),
        keras.layers.Dense(10, activation="softmax", name="d"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
x = np.sin(0.37 * np.arange(16 * 64, dtype=np.float32)).reshape(16, 8, 8, 1)
y = np.arange(16) % 10
model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
model.save(os.path.join(out, "keras_cnn.keras"))
probe = np.cos(0.11 * np.arange(4 * 64, dtype=np.float32)).reshape(4, 8, 8, 1)
p = model.predict(probe, verbose=0)
np.savetxt(os.path.join(out, "keras_cnn_predictions.txt"), p, fmt="%.9e")
print("wrote", os.path.join(out, "keras_cnn.keras"), "iterations", int(model.optimizer.iterations))

# tests/data/keras_fashion_tiny.keras: a model of Fashion-MNIST's shape for the example trainer's
# tests (examples/keras_model_trainer.cpp): Conv2D(2, 3, relu) -> MaxPooling2D(4) -> Flatten ->
# Dense(10, softmax), Adam(0.01), trained 2 steps of 32 examples.
keras.utils.set_random_seed(4)
tiny = keras.Sequential(
    [
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(2, 3, activation="relu", name="c"),
        keras.layers.MaxPooling2D(4, name="p"),
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(10, activation="softmax", name="d"),
    ]
)
tiny.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
xf = np.sin(0.01 * np.arange(64 * 784, dtype=np.float32)).reshape(64, 28, 28, 1) ** 2
tiny.fit(xf, np.arange(64) % 10, batch_size=32, epochs=1, shuffle=False, verbose=0)
tiny.save(os.path.join(out, "keras_fashion_tiny.keras"))

# tests/data/keras_unet.keras: Input (8, 8, 2) -> Conv2D(4, 3, same, relu, "c1") -> x;
# x + Conv2D(4, 3, same, "c2")(x) ("skip1") -> x; concatenate([x, u]) ("cat") where u is
# MaxPooling2D(2) -> Conv2D(4, 3, same, relu, "c3") -> (v + Conv2D(4, 3, same, "c4")(v), "inner")
# -> UpSampling2D(2); then Flatten -> Dense(10, softmax). Adam(0.01), 3 steps as above.
keras.utils.set_random_seed(5)
x0 = keras.Input((8, 8, 2), name="in")
x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c1")(x0)
x = keras.layers.Add(name="skip1")([x, keras.layers.Conv2D(4, 3, padding="same", name="c2")(x)])
u = keras.layers.MaxPooling2D(2, name="p")(x)
u = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="c3")(u)
u = keras.layers.Add(name="inner")([u, keras.layers.Conv2D(4, 3, padding="same", name="c4")(u)])
u = keras.layers.UpSampling2D(2, name="up")(u)
x = keras.layers.Concatenate(name="cat")([x, u])
x = keras.layers.Flatten(name="flatten")(x)
unet = keras.Model(x0, keras.layers.Dense(10, activation="softmax", name="d")(x), name="unet")
unet.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
xu = np.sin(0.37 * np.arange(16 * 128, dtype=np.float32)).reshape(16, 8, 8, 2)
unet.fit(xu, np.arange(16) % 10, batch_size=16, epochs=3, shuffle=False, verbose=0)
unet.save(os.path.join(out, "keras_unet.keras"))
probe_u = np.cos(0.11 * np.arange(4 * 128, dtype=np.float32)).reshape(4, 8, 8, 2)
np.savetxt(os.path.join(out, "keras_unet_predictions.txt"), unet.predict(probe_u, verbose=0),
           fmt="%.9e")
print("layers", [l.name for l in unet.layers])

# The GPT (scripts/keras/gpt_keras_side.py's, at its default sizes)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_keras_side  # noqa: E402

keras.utils.set_random_seed(7)
gpt = gpt_keras_side.gpt()
gpt_keras_side.step(gpt)
gpt_keras_side.step(gpt)
gpt.save(os.path.join(out, "keras_gpt.keras"))
xg, yg = gpt_keras_side.batch()
np.savetxt(os.path.join(out, "keras_gpt_predictions.txt"),
           gpt.predict(xg, verbose=0).reshape(-1, gpt_keras_side.VOCAB), fmt="%.9e")
with open(os.path.join(out, "keras_gpt_loss.txt"), "w") as f:
    f.write("%.9e\n" % gpt_keras_side.loss(gpt))
print("gpt layers", [l.name for l in gpt.layers], "iterations", int(gpt.optimizer.iterations))
