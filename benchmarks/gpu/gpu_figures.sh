#!/bin/bash
# The GPU figures of issues 36 (the step as one device graph) and 37 (mixed precision: bf16
# tensor-core products) in one device call (docs/gpu.md, "Issues 36 and 37 on a lent GPU"). Run on
# the GPU machine from the repo root, after staging here:
#   ../shared/gpu/stage.sh .gpu KK
#   bash benchmarks/gpu/prebuild.sh /tmp/kdist-cuda .gpu      # optional: binaries built here
# With .gpu/prebuilt.tar.xz the call runs at once (no device time spent building); without it, or
# when those binaries do not load there, it builds only the targets it needs (device.sh build).
# Every step has a time cap and the call a deadline (KGPU_CALL_S, 540 s): what does not fit is
# skipped and says so. In order of what matters most:
#   1. the attention, launch-count, GPT, metrics-on-device, device-graph and mixed-precision tests
#      (np 1 and 2, run side by side) and test_ops (the 16-bit products on cuBLAS) -> gpu-tests.log
#   2. the seeds' step (bench_trainer) and the GPT step (bench_gpt), launched and as one device
#      graph (KDIST_DEVICE_GRAPH=0 / 1; the benchmarks print why a step was not captured), then the
#      JAX anchors (../shared/gpu/jax_step.py, benchmarks/jax_gpt_step.py at JAX's default and
#      highest precision) -> gpu-bench.log, gpu-jax.log; the GPT under "float32", "mixed_bfloat16"
#      and "bfloat16" (BM_gpt_mixed_precision), gpt_trainer's tokens/s under each, and JAX's step
#      under "mixed_bfloat16" (benchmarks/jax_gpt_step.py --policy)
#   3. the attention kernels (matrices, tiled) x matmul precision (highest, high); the seeds' step
#      on 2 processes sharing the GPU (the graph split at the collectives); the GPT-2-small preset
#      (tokens/s, MFU; TF32 and "mixed_bfloat16") and JAX's step of the same model in each; an nsys
#      kernel summary of the GPT step when nsys is there -> gpu-bench.log, gpu-jax.log,
#      gpu-profile.log
#   bash benchmarks/gpu/gpu_figures.sh
set -u
. "$(dirname "${BASH_SOURCE[0]}")/call.sh"  # W, O, G, the deadline, cap, log, untar
export KGPU_TARGETS="bench_gpt bench_trainer gpt_trainer mpi_test_attention_grad mpi_test_step_launches mpi_test_gpt mpi_test_metrics_on_device mpi_test_device_graph test_ops mpi_test_mixed_precision"

# ---- the binaries: prebuilt here, or built on the device ------------------------------------------
D=$W/deps/usr
[ -x "$D/bin/mpiexec.hydra" ] || { log "unpacking deps"; untar "$G/deps.tar.xz" "$W/deps"; }
ma=$(ls "$D/lib" 2>/dev/null | grep -m1 -- '-linux-gnu$')
cuda_lib=$(dirname "$(ls /usr/local/cuda/lib64/libcublas.so.* /usr/local/cuda*/targets/x86_64-linux/lib/libcublas.so.* 2>/dev/null | head -1)" 2>/dev/null)
export PATH=$D/bin:$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=$D/lib/$ma${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$W/data"; cp -n "$G"/data/*.gz "$W/data/" 2>/dev/null
export KDIST_FASHION_MNIST_DIR=$W/data
[ -s "$G/fortunes.txt.gz" ] && gunzip -c "$G/fortunes.txt.gz" > "$W/fortunes.txt"
MPIEXEC=$D/bin/mpiexec.hydra
BIN=
if [ -s "$G/prebuilt.tar.xz" ]; then
  rm -rf "$W/prebuilt"; untar "$G/prebuilt.tar.xz" "$W"
  missing=$(for t in $KGPU_TARGETS; do ldd "$W/prebuilt/$t" 2>&1 | grep -E 'not found|No such'; done | sort -u)
  if [ -z "$missing" ] && timeout 60 "$MPIEXEC" -n 1 "$W/prebuilt/bench_gpt" --benchmark_list_tests > "$W/list.log" 2>&1; then
    BIN=$W/prebuilt; log "prebuilt binaries ($(head -1 "$BIN/MANIFEST.txt"))"
  else
    log "the prebuilt binaries do not load here, building instead: ${missing:-bench_gpt --benchmark_list_tests failed: $(tail -3 "$W/list.log")}"
  fi
fi
if [ -z "$BIN" ]; then
  bash .gpu/device.sh info build="$(cap 330)" || { log "build unfinished: call again"; exit 1; }
  BIN=$W/build
fi
bin() { find "$BIN" -maxdepth 2 -type f -name "$1" | head -1; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
  echo "cores $(nproc); $(nvcc --version 2>/dev/null | tail -2 | head -1); $(python3 --version 2>&1)"
  [ -f "$BIN/MANIFEST.txt" ] && cat "$BIN/MANIFEST.txt" | head -2; } > "$O/gpu-info.log" 2>&1
cat "$O/gpu-info.log"

# ---- 1. the tests, side by side --------------------------------------------------------------------
t=$(cap 90)
log "tests (at most $t s)"
rm -rf "$W/t"; mkdir -p "$W/t"
( cd "$W/t" && timeout "$t" "$MPIEXEC" -n 1 "$(bin mpi_test_attention_grad)" > attention.log 2>&1; echo "rc $?" >> attention.log ) &
( cd "$W/t" && timeout "$t" "$MPIEXEC" -n 1 "$(bin test_ops)" > test_ops.log 2>&1; echo "rc $?" >> test_ops.log ) &
for name in mpi_test_device_graph mpi_test_step_launches mpi_test_metrics_on_device mpi_test_gpt mpi_test_mixed_precision; do
  for np in 1 2; do
    ( cd "$W/t" && timeout "$t" "$MPIEXEC" -n $np "$(bin $name)" > "$name.np$np.log" 2>&1; echo "rc $?" >> "$name.np$np.log" ) &
  done
done
wait
for f in "$W"/t/*.log; do
  printf '%-40s %s; %s\n' "${f##*/}" "$(tail -1 "$f")" \
    "$(grep -hE '^\[  (PASSED|FAILED) ' "$f" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"
done | tee "$O/gpu-tests.log"
for f in "$W"/t/*.log; do echo "======== ${f##*/}"; grep -vE '^\[ +(RUN|OK) +\]' "$f" | tail -60; done >> "$O/gpu-tests.log"

# ---- 2. the figures ---------------------------------------------------------------------------------
B_OUT=$O/gpu-bench.log; J_OUT=$O/gpu-jax.log; : > "$B_OUT"; : > "$J_OUT"
bench() {  # bench CAP LABEL ENV... -- COMMAND...: one run, its lines that carry figures
  local c; c=$(cap "$1"); shift; local label=$1; shift
  [ "$c" -gt 0 ] || { echo "### $label: skipped, out of time" >> "$B_OUT"; return; }
  echo "### $label" >> "$B_OUT"
  local t0; t0=$(date +%s)
  env "$@" > "$W/b.log" 2>&1 < /dev/null; local rc=$?
  sed 's/\x1b\[[0-9;]*m//g; /^Sample (/,$d' "$W/b.log" | grep -vE '^\s*$|^-+$|^(Run on|CPU Caches|  L[123] |Load Average|\*\*\*)' | tail -14 >> "$B_OUT"
  echo "    rc $rc, $(( $(date +%s) - t0 )) s" >> "$B_OUT"
}
seeds="$(bin bench_trainer) --benchmark_filter=BM_step_kdist_data_parallel/128"
gpt="$(bin bench_gpt) --benchmark_filter=BM_gpt_step/1proc"
one="$MPIEXEC -n 1"
log "figures"
for graph in 0 1; do
  bench 60 "seeds' step, 1 process, KDIST_DEVICE_GRAPH=$graph" KDIST_DEVICE_GRAPH=$graph timeout 55 $one $seeds
  bench 60 "GPT step, 1 process, matrices, high, KDIST_DEVICE_GRAPH=$graph" KDIST_DEVICE_GRAPH=$graph \
    KDIST_ATTENTION_KERNEL=matrices KDIST_MATMUL_PRECISION=high timeout 55 $one $gpt
done
jax() {  # jax CAP ARGS...
  local c; c=$(cap "$1"); shift
  [ "$c" -gt 0 ] || { echo "jax $*: skipped, out of time" >> "$J_OUT"; return; }
  echo "### python3 $*" >> "$J_OUT"
  (cd "$here" && PYTHONUNBUFFERED=1 timeout "$c" python3 "$@" 2>&1 | grep -vE 'Warning|warn\(' | tail -5) >> "$J_OUT"
}
jax 70 "$G/jax_step.py" "$W/data" 2
for precision in default highest; do jax 60 benchmarks/jax_gpt_step.py 20 --precision $precision; done
log "mixed precision ($(left) s left)"
bench 90 "GPT under float32 / mixed_bfloat16 / bfloat16, 1 process (BM_gpt_mixed_precision)" \
  timeout 85 $one "$(bin bench_gpt)" --benchmark_filter=BM_gpt_mixed_precision/1proc
trainer() {  # trainer CAP LABEL ARGS...: gpt_trainer on the fortunes, the second epoch's tokens/s
  local c=$1 label=$2; shift 2
  bench "$c" "gpt_trainer $label" timeout $(( c - 5 )) $one "$(bin gpt_trainer)" \
    --text "$W/fortunes.txt" --epochs 2 "$@"
}
trainer 45 "float32 (highest)" --steps 30
trainer 45 "float32 (high: TF32)" --steps 30 --matmul-precision high
trainer 45 "mixed_bfloat16" --steps 30 --dtype-policy mixed_bfloat16
jax 60 benchmarks/jax_gpt_step.py 20 --policy mixed_bfloat16
log "more figures ($(left) s left)"
for kernel in matrices tiled; do
  for precision in highest high; do
    [ "$kernel$precision" = matriceshigh ] && continue
    bench 45 "GPT step, 1 process, $kernel, $precision, KDIST_DEVICE_GRAPH=0" KDIST_DEVICE_GRAPH=0 \
      KDIST_ATTENTION_KERNEL=$kernel KDIST_MATMUL_PRECISION=$precision timeout 40 $one $gpt
  done
done
for graph in 0 1; do
  bench 45 "seeds' step, 2 processes sharing the GPU, KDIST_DEVICE_GRAPH=$graph" \
    KDIST_DEVICE_GRAPH=$graph timeout 40 "$MPIEXEC" -n 2 $seeds
done
bench 100 "gpt_trainer --preset gpt2-small" KDIST_MATMUL_PRECISION=high timeout 95 $one "$(bin gpt_trainer)" \
  --preset gpt2-small --text "$W/fortunes.txt" --epochs 1 --steps 6 --matmul-precision high --peak-tflops 494.7
jax 70 benchmarks/jax_gpt_step.py 6 --d-model 768 --heads 12 --blocks 12 --sequence 1024 --batch 16
bench 100 "gpt_trainer --preset gpt2-small --dtype-policy mixed_bfloat16" timeout 95 $one "$(bin gpt_trainer)" \
  --preset gpt2-small --text "$W/fortunes.txt" --epochs 1 --steps 6 --dtype-policy mixed_bfloat16 --peak-tflops 989.4
jax 70 benchmarks/jax_gpt_step.py 6 --d-model 768 --heads 12 --blocks 12 --sequence 1024 --batch 16 --policy mixed_bfloat16
if command -v nsys > /dev/null && [ "$(cap 60)" -ge 50 ]; then
  log "nsys kernel summary of the GPT step"
  (cd "$W" && KDIST_ATTENTION_KERNEL=matrices KDIST_MATMUL_PRECISION=high timeout 55 nsys profile -o gpt -f true \
     --stats=true --trace=cuda $gpt > nsys.log 2>&1
   grep -A40 -E 'cuda_gpu_kern_sum|CUDA GPU Kernel Summary' nsys.log | cut -c1-220 | head -45
   grep -A14 -E 'cuda_api_sum|CUDA API Summary' nsys.log | cut -c1-200 | head -16) > "$O/gpu-profile.log" 2>&1
fi
log "done ($(left) s left)"
cat "$B_OUT" | cut -c1-190
cat "$J_OUT"
