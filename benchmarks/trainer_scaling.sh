#!/bin/sh
# DataParallel throughput at global batch 256 on 2 processes over 1 process (target >= 1.7), and
# ModelParallel weight memory per process on mesh (1, 2) over mesh (1, 1) (target <= 0.55). The
# 1-process figures come from a separate `mpiexec -n 1` run of the same binary.
#
#   benchmarks/trainer_scaling.sh [BUILD_DIR]      (default: build)
#
# Each run prints its own table; the last lines are the ratios. Run it on an otherwise idle
# machine: with 2 processes on 2 cores, any other load steals a core from a busy-polling rank.
set -eu
build=${1:-build}
bin=$build/benchmarks/bench_trainer
filter='BM_data_parallel_throughput|BM_model_parallel_memory'
[ -x "$bin" ] || { echo "error: $bin not found; build the bench_trainer target" >&2; exit 2; }
# The launcher of the MPI the build uses: plain mpiexec is Open MPI's once that is installed.
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
mpiexec=${mpiexec:-mpiexec}
one=$(mktemp) two=$(mktemp)
trap 'rm -f "$one" "$two"' EXIT
"$mpiexec" -n 1 "$bin" --benchmark_filter="$filter" --benchmark_color=false | tee "$one"
"$mpiexec" -n 2 "$bin" --benchmark_filter="$filter" --benchmark_color=false | tee "$two"
field() { sed -n "s/^$1 .*$2=\([0-9.e+]*\).*/\1/p" "$3" | tail -n 1; }
t1=$(field data_parallel_throughput examples_per_s "$one")
t2=$(field data_parallel_throughput examples_per_s "$two")
m1=$(field model_parallel_memory bytes_per_rank "$one")
m2=$(field model_parallel_memory bytes_per_rank "$two")
awk -v t1="$t1" -v t2="$t2" -v m1="$m1" -v m2="$m2" 'BEGIN {
  printf "DataParallel throughput, global batch 256: 1 rank %.0f, 2 ranks %.0f examples/s: %.2fx (target >= 1.7)\n", t1, t2, t2 / t1
  printf "ModelParallel weight+Adam memory per rank: 1 rank %d, 2 ranks %d bytes: %.3fx (target <= 0.55)\n", m1, m2, m2 / m1
}'
