#!/bin/bash
# Issue 36's GPU figures in one or two device calls (docs/gpu.md, "Issue 36 on a lent GPU"). Run on
# the GPU machine from the repo root after `../shared/gpu/stage.sh .gpu KK` here; every log lands
# in $OUT. It builds only the targets the figures need (KGPU_TARGETS), so a cold call spends about
# 2 minutes building, then runs, each step within the call's time:
#   - ctest of the attention, launch-count, GPT, metrics-on-device and device-graph tests;
#   - bench_gpt BM_gpt_step/1proc with the attention kernels (matrices, tiled) and the matmul
#     precision (highest, high) crossed, and the GPT-2-small preset of gpt_trainer (MFU);
#   - bench_trainer's seeds' step (the 0.15 ms/step target) and the GPT step, launched and as one
#     device graph (KDIST_DEVICE_GRAPH=0 / 1; the benchmarks print why a step was not captured),
#     and the seeds' step on 2 processes sharing the GPU (the graph split at the collectives);
#   - the JAX anchors: ../shared/gpu/jax_step.py (seeds) and benchmarks/jax_gpt_step.py (the GPT,
#     default and highest precision).
#   bash benchmarks/gpu/issue36_figures.sh [build|run|all]   (default all; a second call: run)
set -u
what=${1:-all}
export KGPU_TARGETS="bench_gpt bench_trainer gpt_trainer test_attention_grad mpi_test_step_launches mpi_test_gpt mpi_test_metrics_on_device mpi_test_device_graph"
O=${OUT:-/tmp/kdist-gpu/out}; mkdir -p "$O"
B=${KGPU_WORK:-/tmp/kdist-gpu}/build
here=$(pwd)
if [ "$what" != run ]; then
  bash .gpu/device.sh info build=330 || { echo "build unfinished: call again with 'run' once it is"; exit 1; }
fi
[ "$what" = build ] && exit 0
[ -x "$B/benchmarks/bench_gpt" ] || { echo "no build in $B: run with 'build' first"; exit 1; }
D=$(ls -d "${KGPU_WORK:-/tmp/kdist-gpu}"/deps/usr 2>/dev/null)
ma=$(ls "$D/lib" 2>/dev/null | grep -m1 -- '-linux-gnu$')
export PATH=$D/bin:$PATH LD_LIBRARY_PATH=$D/lib/$ma${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  (cd "$B" && timeout 150 ctest -R 'attention|step_launches|mpi_test_gpt|metrics_on_device|device_graph' --output-on-failure -j4)
} > "$O/issue36-ctest.log" 2>&1
echo "ctest: $(grep -E 'tests passed|tests failed' "$O/issue36-ctest.log")"
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$B/CMakeCache.txt")
{
  for kernel in matrices tiled; do
    for precision in highest high; do
      echo "### KDIST_ATTENTION_KERNEL=$kernel KDIST_MATMUL_PRECISION=$precision"
      KDIST_ATTENTION_KERNEL=$kernel KDIST_MATMUL_PRECISION=$precision timeout 90 \
        "$B/benchmarks/bench_gpt" --benchmark_filter='BM_gpt_step/1proc' 2>&1 | grep -E 'median|tokens'
    done
  done
  for graph in 0 1; do
    echo "### KDIST_DEVICE_GRAPH=$graph: GPT step (matrices, high) and the seeds' step"
    KDIST_DEVICE_GRAPH=$graph KDIST_MATMUL_PRECISION=high timeout 90 \
      "$B/benchmarks/bench_gpt" --benchmark_filter='BM_gpt_step/1proc' 2>&1 | grep -E 'median|tokens|graph'
    KDIST_DEVICE_GRAPH=$graph timeout 90 "$B/benchmarks/bench_trainer" \
      --benchmark_filter='BM_step_kdist_data_parallel|BM_step_eigen' 2>&1 | grep -vE '^\s*$' | tail -15
    echo "### KDIST_DEVICE_GRAPH=$graph: the seeds' step on 2 processes sharing the GPU (split graph)"
    KDIST_DEVICE_GRAPH=$graph timeout 60 "$mpiexec" -n 2 "$B/benchmarks/bench_trainer" \
      --benchmark_filter='BM_step_kdist_data_parallel' 2>&1 | grep -vE '^\s*$' | tail -6
  done
  echo "### gpt_trainer --preset gpt2-small (2 epochs of at most 4 steps)"
  timeout 150 "$B/examples/gpt_trainer" --preset gpt2-small --epochs 2 --steps 4 \
    --matmul-precision high --peak-tflops 494.7 2>&1 | tail -8
} > "$O/issue36-bench.log" 2>&1
cat "$O/issue36-bench.log" | cut -c1-160
{
  cd "$here"
  timeout 120 python3 ../shared/gpu/jax_step.py "${KGPU_WORK:-/tmp/kdist-gpu}/data" 2 2>&1 | tail -4
  for precision in default highest; do
    timeout 90 python3 benchmarks/jax_gpt_step.py 20 --precision $precision 2>&1 | tail -1
  done
} > "$O/issue36-jax.log" 2>&1
cat "$O/issue36-jax.log"
