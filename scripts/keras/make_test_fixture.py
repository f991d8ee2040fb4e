"""Writes tests/data/keras_small.weights.h5: a file written by Keras 3 itself, which
tests/mpi/test_keras_weights.cpp loads into kdist. Not run by the tests (they need no Keras):
run it again (with keras==3.15 and jax installed) only to regenerate the fixture.

The model is the tests' small_model(): Flatten -> Dense(10, relu, "d1") -> Dropout(0.4) ->
Dense(10, softmax, "d2") on (8, 8, 1) inputs, compiled with RMSprop(0.01) and trained 3 steps, so
the file holds trained weights and the optimizer's state (iterations 3, the velocities).
With --loss-scale it writes tests/data/keras_small_lso.weights.h5 instead: the same model with
LossScaleOptimizer(Adam(0.01), initial_scale=1024, dynamic_growth_steps=2), whose 3 steps leave
the scale at 2048 and its step counter at 1.

    KERAS_BACKEND=jax python scripts/keras/make_test_fixture.py tests/data/keras_small.weights.h5
    KERAS_BACKEND=jax python scripts/keras/make_test_fixture.py --loss-scale
    KERAS_BACKEND=jax python scripts/keras/make_test_fixture.py --policy bfloat16
    KERAS_BACKEND=jax python scripts/keras/make_test_fixture.py --policy float16

With --policy P (Keras' "bfloat16" or "float16" dtype policy) it writes
tests/data/keras_small_P.weights.h5: the same model and steps with its variables and optimizer
slots in 16 bits, as Keras stores them (float16: IEEE half; bfloat16: 2-byte opaque values with
the attribute dtype = "bfloat16").
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
import numpy as np  # noqa: E402

loss_scale = "--loss-scale" in sys.argv
policy = None
args = []
rest = [a for a in sys.argv[1:] if a != "--loss-scale"]
while rest:
    a = rest.pop(0)
    if a == "--policy":
        policy = rest.pop(0)
    else:
        args.append(a)
if args:
    out = args[0]
elif policy:
    out = f"tests/data/keras_small_{policy}.weights.h5"
else:
    out = ("tests/data/keras_small_lso.weights.h5" if loss_scale
           else "tests/data/keras_small.weights.h5")
if policy:
    keras.mixed_precision.set_global_policy(policy)
keras.utils.set_random_seed(7)
model = keras.Sequential([
    keras.Input((8, 8, 1)),
    keras.layers.Flatten(),
    keras.layers.Dense(10, activation="relu", name="d1"),
    keras.layers.Dropout(0.4, name="dropout"),
    keras.layers.Dense(10, activation="softmax", name="d2"),
])
optimizer = keras.optimizers.RMSprop(0.01)
if loss_scale:
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01),
                                                    initial_scale=1024.0, dynamic_growth_steps=2)
model.compile(optimizer=optimizer, loss="mse")
rng = np.random.default_rng(7)
x = rng.normal(size=(48, 8, 8, 1)).astype("float32")
y = rng.normal(size=(48, 10)).astype("float32")
model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False)
model.save_weights(out)
print("wrote", out, "after", int(model.optimizer.iterations.numpy()), "steps")
if loss_scale:
    print("loss scale", float(optimizer.dynamic_scale.numpy()), "step counter",
          int(optimizer.step_counter.numpy()))
