#!/usr/bin/env bash
# Compile cost of kdist's meshes and layouts: times the compilation of
# benchmarks/compile_cost/meshes_and_layouts.cpp (N distinct mesh types, 5 layouts on each, each
# used: repr, static and run-time shard arithmetic, conversion to the run-time layout) against
# benchmarks/compile_cost/baseline.cpp (the same includes, nothing instantiated), front end only
# (-fsyntax-only) and to an -O2 object file. Reports the median of RUNS runs of CPU time
# (user + sys, steadier than wall time on a shared machine), wall time and peak memory.
#
#   bash benchmarks/compile_cost.sh [MESHES=100] [RUNS=3]       (CXX=clang++ to try another compiler)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MESHES="${1:-100}"
RUNS="${2:-3}"
CXX="${CXX:-c++}"
SRC="$ROOT/benchmarks/compile_cost"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
FLAGS=(-std=c++20 -I"$ROOT/include" -DKDIST_CC_MESHES="$MESHES")

# One compilation: prints "cpu_s wall_s peak_kb" (GNU time if present, else bash's time).
measure() {
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%U %S %e %M" -o "$OUT/t" "$@" >/dev/null 2>"$OUT/err" || { cat "$OUT/err" >&2; exit 1; }
    awk '{printf "%.3f %.3f %d\n", $1 + $2, $3, $4}' "$OUT/t"
  else
    local TIMEFORMAT="%U %S %R"
    { time "$@" >/dev/null 2>"$OUT/err"; } 2>"$OUT/t" || { cat "$OUT/err" >&2; exit 1; }
    awk '{printf "%.3f %.3f 0\n", $1 + $2, $3}' "$OUT/t"
  fi
}

# Median of RUNS measurements of one command, per column.
median_of() {
  for _ in $(seq "$RUNS"); do measure "$@"; done >"$OUT/runs"
  for col in 1 2 3; do
    sort -g -k"$col","$col" "$OUT/runs" | awk -v c="$col" '{v[NR] = $c} END {print v[int((NR + 1) / 2)]}'
  done | paste -sd' '
}

echo "compiler: $("$CXX" --version | head -1)"
echo "translation unit: $MESHES mesh types x 5 layouts ($((MESHES * 5)) layout types); median of $RUNS runs"
printf '%-22s %-10s %10s %10s %12s\n' mode tu cpu_s wall_s peak_MiB
for mode in syntax O2; do
  if [ "$mode" = syntax ]; then extra=(-fsyntax-only); else extra=(-O2 -c -o "$OUT/x.o"); fi
  read -r bc bw bm <<<"$(median_of "$CXX" "${FLAGS[@]}" "${extra[@]}" "$SRC/baseline.cpp")"
  read -r mc mw mm <<<"$(median_of "$CXX" "${FLAGS[@]}" "${extra[@]}" "$SRC/meshes_and_layouts.cpp")"
  printf '%-22s %-10s %10s %10s %12.0f\n' "$mode" baseline "$bc" "$bw" "$((bm / 1024))"
  printf '%-22s %-10s %10s %10s %12.0f\n' "$mode" instances "$mc" "$mw" "$((mm / 1024))"
  awk -v m="$mc" -v b="$bc" -v n="$MESHES" 'BEGIN {
    printf "%-22s per mesh type (5 layouts): %.1f ms CPU; per layout type: %.1f ms\n", "", (m - b) * 1000 / n, (m - b) * 1000 / (5 * n) }'
done
