"""The Keras side of scripts/keras/check_gpt_exchange.sh (needs keras 3 and jax from PyPI; never a
test dependency). The model is examples/common/gpt_model.hpp's make_gpt in Keras' functional API,
built so that its `.weights.h5` layout is the one kdist::save_keras_weights writes:

    tokens (int32, (sequence,)) -> Embedding(vocab, d_model) -> PositionEmbedding (x + table)
    per block:  x = Add()([x, MultiHeadAttention(heads, d_model // heads)(h, h,
                                                  use_causal_mask=True)]), h = LayerNormalization(x)
                x = Add()([x, Dense(d_model)(Dense(4 d_model, gelu)(LayerNormalization(x)))])
    LayerNormalization -> Dense(vocab, use_bias=False): the logits,
    SparseCategoricalCrossentropy(from_logits=True), AdamW.

The layers are created in the order of kdist's flattened layer list (a Residual is its inner
layers, then an Add), which is the functional model's topological order, so the groups
/layers/<class>[_<k>] agree.

    python gpt_keras_side.py layout FILE     # train one step, save FILE, list the variables
    python gpt_keras_side.py load FILE       # load FILE (weights and AdamW state), print the loss
                                             # on the fixed batch, train one step on it, print
                                             # the loss again
    python gpt_keras_side.py save FILE SEED  # Keras' initialisers (SEED), train one step, print
                                             # the loss, save FILE, train one more step, print
The sizes come from the environment: GPT_VOCAB (32), GPT_SEQ (8), GPT_D_MODEL (16), GPT_HEADS (2),
GPT_BLOCKS (2), GPT_BATCH (4); the batch is gpt_exchange.cpp's: token k of the stream is
(7 k^2 + 3 k + 1) mod vocab, x[i, j] = token(i seq + j), y[i, j] = token(i seq + j + 1).
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

VOCAB = int(os.environ.get("GPT_VOCAB", 32))
SEQ = int(os.environ.get("GPT_SEQ", 8))
D_MODEL = int(os.environ.get("GPT_D_MODEL", 16))
HEADS = int(os.environ.get("GPT_HEADS", 2))
BLOCKS = int(os.environ.get("GPT_BLOCKS", 2))
BATCH = int(os.environ.get("GPT_BATCH", 4))


@keras.saving.register_keras_serializable(package="kdist")
class PositionEmbedding(keras.layers.Layer):
    """keras-hub's PositionEmbedding (one variable, "embeddings", (sequence_length, features),
    glorot_uniform), adding the table to its input as kdist's PositionEmbedding does. Registered
    as "kdist>PositionEmbedding": the name kdist::load_model reads and kdist::save_model writes
    (a Keras program loading kdist's files defines or imports this class)."""

    def __init__(self, sequence_length, **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = sequence_length

    def get_config(self):
        return {**super().get_config(), "sequence_length": self.sequence_length}

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.sequence_length, input_shape[-1]),
            initializer="glorot_uniform")

    def call(self, x):
        return x + self.embeddings[None, : x.shape[1], :]


def batch():
    n = BATCH * SEQ + 1
    k = np.arange(n, dtype=np.int64)
    stream = (7 * k * k + 3 * k + 1) % VOCAB
    x = np.stack([stream[i * SEQ:(i + 1) * SEQ] for i in range(BATCH)]).astype("int32")
    y = np.stack([stream[i * SEQ + 1:(i + 1) * SEQ + 1] for i in range(BATCH)]).astype("int32")
    return x, y


def gpt():
    tokens = keras.Input((SEQ,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, D_MODEL, name="token_embedding")(tokens)
    x = PositionEmbedding(SEQ, name="position_embedding")(x)
    for b in range(BLOCKS):
        h = keras.layers.LayerNormalization(epsilon=1e-3, name=f"block{b}_ln1")(x)
        h = keras.layers.MultiHeadAttention(HEADS, D_MODEL // HEADS, name=f"block{b}_mha")(
            h, h, use_causal_mask=True)
        x = keras.layers.Add(name=f"block{b}_attn")([x, h])
        h = keras.layers.LayerNormalization(epsilon=1e-3, name=f"block{b}_ln2")(x)
        h = keras.layers.Dense(4 * D_MODEL, activation="gelu", name=f"block{b}_up")(h)
        h = keras.layers.Dense(D_MODEL, name=f"block{b}_down")(h)
        x = keras.layers.Add(name=f"block{b}_mlp")([x, h])
    x = keras.layers.LayerNormalization(epsilon=1e-3, name="final_norm")(x)
    logits = keras.layers.Dense(VOCAB, use_bias=False, name="lm_head")(x)
    m = keras.Model(tokens, logits, name="gpt")
    m.compile(optimizer=keras.optimizers.AdamW(0.01),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def loss(m):
    x, y = batch()
    return float(m.evaluate(x, y, batch_size=BATCH, verbose=0))


def step(m):
    m.fit(*batch(), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


if __name__ == "__main__":
    action, path = sys.argv[1], sys.argv[2]
    if action == "layout":
        keras.utils.set_random_seed(1)
        m = gpt()
        step(m)
        m.save_weights(path)
        for v in m.trainable_variables:
            print(v.path, tuple(v.shape))
    elif action == "load":
        m = gpt()
        # Keras loads an optimizer's state only into a built optimizer of as many variables
        m.optimizer.build(m.trainable_variables)
        m.load_weights(path)
        print(f"keras loss {loss(m):.9e}")
        step(m)
        print(f"keras loss after a step {loss(m):.9e}")
    elif action == "save":
        keras.utils.set_random_seed(int(sys.argv[3]))
        m = gpt()
        step(m)
        print(f"keras loss {loss(m):.9e}")
        m.save_weights(path)
        step(m)
        print(f"keras loss after a step {loss(m):.9e}")
    else:
        sys.exit(f"unknown action {action}")
