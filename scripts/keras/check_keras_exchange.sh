#!/usr/bin/env bash
# Weights trained by kdist load in Keras, and weights trained in Keras load into kdist, with the same
# test metrics (docs/checkpoints.md). Needs a built tree (scripts/run-tests.sh) and a Python with
# keras==3.15 and jax (PyPI): PYTHON=/path/to/venv/bin/python. Not part of the tests.
#   PYTHON=/tmp/kenv/bin/python bash scripts/keras/check_keras_exchange.sh [EPOCHS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="${PYTHON:-python3}"
epochs="${1:-2}"
trainer="$root/build/examples/model_parallel_trainer"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

echo "== kdist trains ($epochs epochs, mesh (1, 2)) and saves; Keras loads and evaluates"
mpiexec -n 2 "$trainer" --mesh 1x2 --epochs "$epochs" --quiet \
  --save-keras-weights "$dir/kdist.weights.h5" | sed 's/^/kdist, trained in kdist: /'
"$py" "$root/scripts/keras/keras_side.py" evaluate "$dir/kdist.weights.h5" 2>&1 | grep "Test"

echo "== Keras trains ($epochs epochs) and saves; kdist loads on mesh (2, 1) and evaluates"
"$py" "$root/scripts/keras/keras_side.py" train "$dir/keras.weights.h5" "$epochs" 2>&1 | grep "Test"
mpiexec -n 2 "$trainer" --mesh 2x1 --quiet --evaluate-only \
  --load-keras-weights "$dir/keras.weights.h5" | sed "s/^/kdist, Keras' weights: /"

echo "== Keras' \"bfloat16\" policy: kdist saves bfloat16 variables, Keras (bfloat16) evaluates them"
mpiexec -n 2 "$trainer" --mesh 1x2 --epochs "$epochs" --quiet --keras-weights-dtype bfloat16 \
  --save-keras-weights "$dir/kdist_bf16.weights.h5" | sed 's/^/kdist, trained in kdist (float32): /'
KERAS_DTYPE_POLICY=bfloat16 "$py" "$root/scripts/keras/keras_side.py" evaluate \
  "$dir/kdist_bf16.weights.h5" 2>&1 | grep "Test"

echo "== Keras trains under \"bfloat16\" and saves 16-bit variables; kdist loads them on (2, 1)"
KERAS_DTYPE_POLICY=bfloat16 "$py" "$root/scripts/keras/keras_side.py" train \
  "$dir/keras_bf16.weights.h5" "$epochs" 2>&1 | grep "Test"
mpiexec -n 2 "$trainer" --mesh 2x1 --quiet --evaluate-only \
  --load-keras-weights "$dir/keras_bf16.weights.h5" | sed "s/^/kdist, Keras' bfloat16 weights: /"
