#!/bin/bash
# GPU-aware MPI for real (issue 39): two processes on the one GPU, MPI handed device pointers
# (a CUDA-aware MPICH built by scripts/gpu/build-cuda-aware-mpich.sh) against the same run staged
# through the host (KDIST_MPI_GPU_AWARE=0), in one device call. Prepare here (no GPU needed):
#   bash scripts/gpu/build-cuda-aware-mpich.sh /opt/mpich-cuda      # once, ~30-55 min (its header)
#   ../shared/gpu/build-kokkos.sh KK /tmp/kokkos-cuda cuda                    # once
#   KDIST_CMAKE_ARGS="-DKDIST_MPI=mpich -DMPI_CXX_COMPILER=/opt/mpich-cuda/bin/mpicxx \
#     -DMPI_C_COMPILER=/opt/mpich-cuda/bin/mpicc" ../shared/gpu/build-kdist-cuda.sh \
#     /tmp/kokkos-cuda /tmp/kdist-cuda-aware $KGPU_AWARE_TARGETS
#   ../shared/gpu/stage.sh .gpu KK
#   bash benchmarks/gpu/prebuild.sh /tmp/kdist-cuda-aware .gpu $KGPU_AWARE_TARGETS
#   tar -C /opt/mpich-cuda -cJf .gpu/mpich-cuda.tar.xz .
# then on the GPU machine, from the repo root: bash benchmarks/gpu/gpu_aware_mpi.sh
# KGPU_AWARE_TARGETS: test_mpi_gpu_aware mpi_test_collectives mpi_test_redistribute
#   mpi_test_gradient_sync mpi_test_halo_exchange mpi_test_mixed_precision bench_trainer
# Writes under $OUT: aware-info.log (the MPI's answer), aware-tests.log (the tests at np 2, MPI
# handed device pointers and staged), aware-bench.log (bench_trainer's data-parallel step and the
# ZeRO-1 step at np 2, both ways: step time, host_staged_bytes_per_step), aware-summary.txt.
# Every step has a time cap and the call a deadline (KGPU_CALL_S, 540 s).
set -u
. "$(dirname "${BASH_SOURCE[0]}")/call.sh"  # W, O, G, the deadline, cap, log, untar

# ---- the CUDA-aware MPICH and the binaries built against it here ---------------------------------
M=$W/mpich-cuda
[ -x "$M/bin/mpiexec" ] || { [ -s "$G/mpich-cuda.tar.xz" ] && untar "$G/mpich-cuda.tar.xz" "$M"; }
[ -x "$M/bin/mpiexec" ] || { log "no CUDA-aware MPICH: stage .gpu/mpich-cuda.tar.xz (see the header)"; exit 1; }
[ -s "$G/prebuilt.tar.xz" ] || { log "no prebuilt binaries: run benchmarks/gpu/prebuild.sh (see the header)"; exit 1; }
rm -rf "$W/prebuilt"; untar "$G/prebuilt.tar.xz" "$W"; BIN=$W/prebuilt
cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcudart.so.* /usr/local/cuda*/targets/x86_64-linux/lib/libcudart.so.* 2>/dev/null | head -1)" 2>/dev/null)
export PATH=$M/bin:$PATH
export LD_LIBRARY_PATH=$M/lib${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d "$W/deps/usr/lib" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(ls -d "$W"/deps/usr/lib/*-linux-gnu | head -1)
export MPIR_CVAR_ENABLE_GPU=1   # MPICH: device buffers on (its default when built with CUDA)
# MPICH caches CUDA IPC mappings by address and size, and its cudaFree hooks do not see the
# program's frees: a buffer freed and allocated again at the same address could be read through a
# stale mapping (scripts/gpu/build-cuda-aware-mpich.sh's header)
export MPIR_CVAR_CH4_IPC_GPU_HANDLE_CACHE=0
missing=$(for t in "$BIN"/*; do [ -x "$t" ] && ldd "$t" 2>&1 | grep -E 'not found'; done | sort -u)
[ -z "$missing" ] || { log "the prebuilt binaries miss libraries here: $missing"; exit 1; }

{
  log "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
  mpichversion 2>&1 | head -3
  cat "$BIN/MANIFEST.txt"
  # the MPI library's own answer as kdist reads it (MPIX_GPU_query_support), and the overrides
  env -u KDIST_MPI_GPU_AWARE "$BIN/test_mpi_gpu_aware" 2>&1 | grep -E "GPU support|PASSED|FAILED"
  KDIST_MPI_GPU_AWARE=blocking "$BIN/test_mpi_gpu_aware" 2>&1 | grep -E "PASSED|FAILED"
} > "$O/aware-info.log" 2>&1

# ---- the tests at np 2 on the one GPU, both ways -------------------------------------------------
run2() {  # run2 MODE SECONDS PROGRAM ARGS...: mpiexec -n 2, KDIST_MPI_GPU_AWARE=MODE (unset: ask)
  local mode=$1 s; s=$(cap "$2"); shift 2
  [ "$s" -gt 0 ] || { echo "SKIPPED (no time left): $*"; return 0; }
  if [ "$mode" = unset ]; then timeout "$s" mpiexec -n 2 env -u KDIST_MPI_GPU_AWARE "$@"
  else timeout "$s" mpiexec -n 2 env KDIST_MPI_GPU_AWARE="$mode" "$@"; fi
  echo "rc=$? mode=$mode $(basename "$1")"
}
{
  for t in mpi_test_collectives mpi_test_redistribute mpi_test_gradient_sync mpi_test_halo_exchange mpi_test_mixed_precision; do
    [ -x "$BIN/$t" ] || { echo "not built: $t"; continue; }
    for mode in unset 0; do
      log "$t, KDIST_MPI_GPU_AWARE=$mode"
      run2 "$mode" 90 "$BIN/$t" 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |FAILED|rc=|SKIPPED' | sort -u
    done
  done
} > "$O/aware-tests.log" 2>&1

# ---- the data-parallel step and ZeRO-1 at np 2: step time and bytes through the host ------------
{
  for mode in unset 0; do
    log "bench_trainer, KDIST_MPI_GPU_AWARE=$mode"
    KDIST_DEVICE_GRAPH=0 run2 "$mode" 120 "$BIN/bench_trainer" \
      --benchmark_filter='data_parallel_throughput|data_parallel_sharded_state' \
      --benchmark_min_time=0.2 --benchmark_counters_tabular=true 2>&1 | grep -vE '^\*\*\*|^$'
  done
} > "$O/aware-bench.log" 2>&1

{
  echo "== info"; cat "$O/aware-info.log"
  echo "== tests (each: np 2, device pointers to MPI = unset, staged = 0)"; grep -E 'rc=|FAILED' "$O/aware-tests.log"
  echo "== bench"; grep -E 'data_parallel|KDIST_MPI_GPU_AWARE' "$O/aware-bench.log"
} > "$O/aware-summary.txt"
cat "$O/aware-summary.txt"
