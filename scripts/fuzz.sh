#!/usr/bin/env bash
# Fuzzes kdist for longer than CTest's smoke runs: each libFuzzer target (tests/fuzz/fuzz_*.cpp)
# for SECONDS (default 600) under ASan+UBSan, from the committed corpus, new inputs kept in
# build-sanitize/tests/fuzz/<target>/corpus. A crash leaves its input in .../artifacts/: copy it to
# tests/fuzz/corpus/<target>/regression-<what> with the fix, so it is replayed by every build.
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. bash scripts/fuzz.sh 3600 layout_map
set -euo pipefail
KDIST_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-600}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(fashion_mnist layout_map runtime_layout trainer_flags)
fi
build="${KDIST_SANITIZE_BUILD:-$KDIST_ROOT/build-sanitize}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  KDIST_SANITIZE_BUILD="$build" bash "$KDIST_ROOT/scripts/run-sanitizers.sh" -R '^fuzz\.' || true
fi
names=()
for t in "${targets[@]}"; do names+=("fuzz_$t"); done
cmake --build "$build" -j "$(nproc)" --target "${names[@]}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for t in "${targets[@]}"; do
  work="$build/tests/fuzz/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  echo "== fuzz_$t for $seconds s"
  "$build/tests/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" "$KDIST_ROOT/tests/fuzz/corpus/$t" || status=$?
done
exit $status
