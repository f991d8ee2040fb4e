#!/usr/bin/env bash
# The GPT's weights (and AdamW state) move between kdist and Keras 3 through `.weights.h5` files
# (docs/checkpoints.md): examples/common/gpt_model.hpp's make_gpt, tiny (vocab 32, sequence 8,
# d_model 16, 2 heads, 2 blocks, no dropout), and the same model in Keras' functional API
# (scripts/keras/gpt_keras_side.py), on one fixed batch. Each side trains a step and saves; the
# other loads: the loss on the batch must agree (the weights), and so must the loss after one
# more step on both sides (the optimizer's state and the training step). Needs a Python with
# keras 3 and jax (PyPI): PYTHON=/path/to/venv/bin/python. Not part of the tests. Builds the kdist
# side (scripts/keras/gpt_exchange/) in BUILD (default /tmp/kdist-gpt-exchange).
#   PYTHON=/tmp/kvenv/bin/python bash scripts/keras/check_gpt_exchange.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py="${PYTHON:-python3}"
build="${BUILD:-/tmp/kdist-gpt-exchange}"
tolerance="${TOLERANCE:-1e-5}"
export KERAS_BACKEND=jax GPT_VOCAB=32 GPT_SEQ=8 GPT_D_MODEL=16 GPT_HEADS=2 GPT_BLOCKS=2 GPT_BATCH=4
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT

cmake -S "$root/scripts/keras/gpt_exchange" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DKDIST_SOURCE_DIR="$root" > "$dir/cmake.log" 2>&1 || { cat "$dir/cmake.log"; exit 1; }
cmake --build "$build" -j "${JOBS:-1}" --target gpt_exchange > "$dir/build.log" 2>&1 ||
  { cat "$dir/build.log"; exit 1; }
exe="$build/gpt_exchange"

# the number after "<who> loss" / "<who> loss after a step" in a log
value() { sed -n "s/^$2 $3 \([-+0-9.e]*\)\$/\1/p" "$1"; }
status=0
compare() {  # what, kdist's value, Keras' value
  "$py" - "$1" "$2" "$3" "$tolerance" <<'PY' || status=1
import sys
what, a, b, tol = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rel = abs(a - b) / abs(b)
print(f"  {what}: kdist {a:.9e}  keras {b:.9e}  relative difference {rel:.2e}"
      f"  {'ok' if rel <= tol else 'FAILED (> %g)' % tol}")
sys.exit(0 if rel <= tol else 1)
PY
}

echo "== kdist (mesh 1x2, tensor parallel) trains a step and saves; Keras loads"
mpiexec -n 2 "$exe" save "$dir/kdist.weights.h5" 1x2 5 | tee "$dir/kdist_save.log"
"$py" "$root/scripts/keras/gpt_keras_side.py" load "$dir/kdist.weights.h5" 2>/dev/null |
  tee "$dir/keras_load.log"
compare "loss of kdist's weights" "$(value "$dir/kdist_save.log" kdist loss)" \
  "$(value "$dir/keras_load.log" keras loss)"
compare "loss after one more step" "$(value "$dir/kdist_save.log" kdist 'loss after a step')" \
  "$(value "$dir/keras_load.log" keras 'loss after a step')"

echo "== Keras trains a step and saves; kdist (mesh 2x1, data parallel) loads"
"$py" "$root/scripts/keras/gpt_keras_side.py" save "$dir/keras.weights.h5" 5 2>/dev/null |
  tee "$dir/keras_save.log"
mpiexec -n 2 "$exe" load "$dir/keras.weights.h5" 2x1 | tee "$dir/kdist_load.log"
compare "loss of Keras' weights" "$(value "$dir/kdist_load.log" kdist loss)" \
  "$(value "$dir/keras_save.log" keras loss)"
compare "loss after one more step" "$(value "$dir/kdist_load.log" kdist 'loss after a step')" \
  "$(value "$dir/keras_save.log" keras 'loss after a step')"
exit $status
