#!/usr/bin/env bash
# Compile cost of including kdist: an -O2 object file of a TU holding only `#include <HEADER>`,
# for kdist.hpp and each public header, against the same TU including only <Kokkos_Core.hpp>
# (what every kdist header pays at least). Median CPU time (user + sys) of RUNS runs.
# Budget (issue 10): kdist.hpp at most 3 s, each per-concept header less.
#   bash benchmarks/compile_cost_headers.sh [RUNS=3]          (CXX=clang++ for another compiler)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-3}"
CXX="${CXX:-c++}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
# kdist's include directories as the build uses them (MPICH, Kokkos, Eigen, RE2, HDF5).
INC=(-I"$ROOT/include" $(pkg-config --cflags-only-I eigen3 re2 hdf5-mpich 2>/dev/null)
     -I/usr/include/trilinos $(mpicxx -show 2>/dev/null | tr ' ' '\n' | grep '^-I' || true))
FLAGS=(-std=c++20 -O2 -w "${INC[@]}")

cpu_of() {  # cpu seconds of compiling $1 (a file holding one #include)
  /usr/bin/time -f "%U %S" -o "$OUT/t" "$CXX" "${FLAGS[@]}" -c "$1" -o "$OUT/x.o" 2>"$OUT/err" ||
    { cat "$OUT/err" >&2; exit 1; }
  awk '{printf "%.2f\n", $1 + $2}' "$OUT/t"
}
median_cpu() {
  for _ in $(seq "$RUNS"); do cpu_of "$1"; done | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

echo "compiler: $("$CXX" --version | head -1); median of $RUNS runs, CPU seconds, -O2"
printf '%-34s %8s\n' header cpu_s
echo '#include <Kokkos_Core.hpp>' >"$OUT/tu.cpp"
printf '%-34s %8s\n' "<Kokkos_Core.hpp> (baseline)" "$(median_cpu "$OUT/tu.cpp")"
headers=(kdist.hpp)
while IFS= read -r h; do headers+=("$h"); done < <(cd "$ROOT/include/kdist" && find . -name '*.hpp' \
  ! -path './detail/*' ! -path './*/detail/*' ! -name kdist.hpp | sed 's#^\./##' | sort)
for h in "${headers[@]}"; do
  echo "#include <kdist/$h>" >"$OUT/tu.cpp"
  printf '%-34s %8s\n' "<kdist/$h>" "$(median_cpu "$OUT/tu.cpp")"
done
