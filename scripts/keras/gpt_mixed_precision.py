#!/usr/bin/env python3
"""Keras 3 / JAX reference for the mixed-precision figure of docs/benchmarks.md (issue 37): the
GPT of scripts/keras/gpt_step.py (kdist's examples/common/gpt_model.hpp) trained under "float32"
and under "mixed_bfloat16" from the same initial weights, on the same fixed batch, with
train_on_batch; prints each policy's loss after every `--report` steps and the ratio of the last
ones (mixed / float32). Not used by the tests or the README commands.

  KERAS_BACKEND=jax /tmp/kvenv/bin/python scripts/keras/gpt_mixed_precision.py --steps 60
"""
import argparse
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402

import gpt_step  # noqa: E402


def losses(policy, steps, report):
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(1)
    model = gpt_step.make_gpt()
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = gpt_step.batch()
    out = []
    for s in range(1, steps + 1):
        loss = float(model.train_on_batch(x, y))
        if s % report == 0:
            out.append((s, loss))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--report", type=int, default=20)
    a = p.parse_args()
    f32 = losses("float32", a.steps, a.report)
    bf16 = losses("mixed_bfloat16", a.steps, a.report)
    for (s, l32), (_, l16) in zip(f32, bf16):
        print(f"step {s}: float32 loss {l32:.4f}, mixed_bfloat16 loss {l16:.4f}, "
              f"ratio {l16 / l32:.4f}")


if __name__ == "__main__":
    main()
