#!/usr/bin/env bash
# Compile cost of a user's translation unit (issue 39): benchmarks/compile_cost/user_fit.cpp builds
# the seeds' Sequential, compiles it and calls fit and evaluate - what every edit of such a file
# costs. Times it to an object file at -O0 and -O2, median of RUNS runs of CPU time (user + sys),
# with peak memory, three ways:
#   header-only  kdist as it is included by default: every template instantiated in the file
#   extern       -DKDIST_EXTERN_TEMPLATES, what linking kdist::instances gives (-DKDIST_INSTANCES=ON):
#                kdist's model classes, loss and optimizer holders declared `extern template`,
#                compiled once in the instance library (instances/*.cpp)
#   extern+lean  the same, including only the headers the file uses (-DKDIST_CC_LEAN) instead of
#                kdist/kdist.hpp
# A precompiled kdist.hpp was measured and left out: GCC's 327 MB PCH saved ~1 s at -O0 and nothing
# at -O2. Debian's include paths (MPICH, Kokkos 3.4, Eigen, OpenBLAS); CXX=clang++ for another
# compiler. With LINK=1 it also compiles the instances (float, at each level) and links and runs
# the extern program, which must train (its loss printed).
#
#   bash benchmarks/compile_cost_user.sh [RUNS=3]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-3}"
CXX="${CXX:-g++}"
SRC="$ROOT/benchmarks/compile_cost/user_fit.cpp"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
FLAGS=(-std=c++20 -fopenmp -pthread -DKDIST_ENABLE_CBLAS -I"$ROOT/include"
       -isystem /usr/include/x86_64-linux-gnu/mpich -isystem /usr/include/trilinos
       -isystem /usr/include/eigen3 -isystem /usr/include/x86_64-linux-gnu/openblas-openmp)

measure() {  # prints "cpu_s peak_mb"
  /usr/bin/time -f "%U %S %M" -o "$OUT/t" "$@" >/dev/null 2>"$OUT/err" || { cat "$OUT/err" >&2; exit 1; }
  awk '{printf "%.2f %.0f\n", $1 + $2, $3 / 1024}' "$OUT/t"
}
median_of() {
  for _ in $(seq "$RUNS"); do measure "$@"; done >"$OUT/runs"
  for col in 1 2; do
    sort -g -k"$col","$col" "$OUT/runs" | awk -v c="$col" '{v[NR] = $c} END {print v[int((NR + 1) / 2)]}'
  done | paste -sd' '
}

echo "compiler: $("$CXX" --version | head -1); load: $(cut -d' ' -f1-3 /proc/loadavg); runs: $RUNS"
printf "%-6s %-12s %8s %8s\n" level way cpu_s peak_MB
for level in -O0 -O2; do
  read -r cpu mb < <(median_of "$CXX" "${FLAGS[@]}" "$level" -c "$SRC" -o "$OUT/a.o")
  printf "%-6s %-12s %8s %8s\n" "$level" header-only "$cpu" "$mb"
  read -r cpu mb < <(median_of "$CXX" "${FLAGS[@]}" "$level" -DKDIST_EXTERN_TEMPLATES \
                       -DKDIST_INSTANCES_OF_DOUBLE=0 -c "$SRC" -o "$OUT/b.o")
  printf "%-6s %-12s %8s %8s\n" "$level" extern "$cpu" "$mb"
  read -r cpu mb < <(median_of "$CXX" "${FLAGS[@]}" "$level" -DKDIST_EXTERN_TEMPLATES \
                       -DKDIST_INSTANCES_OF_DOUBLE=0 -DKDIST_CC_LEAN -c "$SRC" -o "$OUT/c.o")
  printf "%-6s %-12s %8s %8s\n" "$level" extern+lean "$cpu" "$mb"
  if [ "${LINK:-0}" = 1 ]; then
    cat "$ROOT"/instances/*.cpp >"$OUT/instances.cpp"
    read -r cpu mb < <(measure "$CXX" "${FLAGS[@]}" "$level" -DKDIST_INSTANCES_OF_DOUBLE=0 \
                         -c "$OUT/instances.cpp" -o "$OUT/instances.o")
    printf "%-6s %-12s %8s %8s\n" "$level" "(instances)" "$cpu" "$mb"
    "$CXX" -fopenmp "$OUT/c.o" "$OUT/instances.o" -o "$OUT/user_fit" -ltrilinos_kokkoscore \
      -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lmpichcxx -lmpich -lre2 \
      -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp
    "$OUT/user_fit"
  fi
done
