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

echo "== kdist trains under \"bfloat16\" (16-bit variables and slots) and saves them as they are;"
echo "   Keras (bfloat16) evaluates them"
mpiexec -n 2 "$trainer" --mesh 1x2 --epochs "$epochs" --quiet --dtype-policy bfloat16 \
  --save-keras-weights "$dir/kdist_pure_bf16.weights.h5" | sed 's/^/kdist, trained in kdist (bfloat16): /'
KERAS_DTYPE_POLICY=bfloat16 "$py" "$root/scripts/keras/keras_side.py" evaluate \
  "$dir/kdist_pure_bf16.weights.h5" 2>&1 | grep "Test"

echo "== Keras' \"bfloat16\" file into kdist under \"bfloat16\" and saved again: the same datasets"
mpiexec -n 2 "$trainer" --mesh 2x1 --quiet --evaluate-only --dtype-policy bfloat16 \
  --load-keras-weights "$dir/keras_bf16.weights.h5" \
  --save-keras-weights "$dir/back_bf16.weights.h5" | sed "s/^/kdist (bfloat16), Keras' weights: /"
"$py" - "$dir/keras_bf16.weights.h5" "$dir/back_bf16.weights.h5" <<'PY'
import sys
import h5py
import numpy as np
keras_file, kdist_file = (h5py.File(p, "r") for p in sys.argv[1:3])
names = []
keras_file.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
same = [n for n in names if n in kdist_file and kdist_file[n].dtype == keras_file[n].dtype
        and np.array_equal(kdist_file[n][()], keras_file[n][()])]
print(f"{len(same)} of {len(names)} datasets of Keras' file equal in kdist's: dtype and values")
for n in sorted(set(names) - set(same)):
    print("  differs:", n, keras_file[n].dtype, kdist_file[n].dtype if n in kdist_file else "missing")
PY
