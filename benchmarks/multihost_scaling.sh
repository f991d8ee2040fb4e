#!/usr/bin/env bash
# DataParallel throughput across a network (docs/multihost.md, docs/benchmarks.md): the seeds'
# model at global batch 256 (bench_trainer's BM_data_parallel_throughput), or with
# KDIST_SCALING_MODEL=gpt the example GPT on mesh (2, 1) (bench_gpt's BM_gpt_step/dp_2x1), on 1
# process, on 2 processes of one host (shared memory), and on 2 hosts of 1 process each made by
# scripts/netns/cluster.sh, per link setting; each 2-process figure with the gradient all-reduces
# overlapping the backward pass (KDIST_GRADIENT_OVERLAP=1) and after it (0). Needs root and
# network namespaces. Run it on an otherwise idle machine (2 busy-polling ranks on 2 cores).
#
#   benchmarks/multihost_scaling.sh [BUILD_DIR] [LINK...]   (default: build; none 10gbit 1gbit 100mbit)
#
# A LINK is a rate for cluster.sh's shape (none: unshaped veth), optionally RATE/DELAY where the
# kernel has tc netem (e.g. 10gbit/50us).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=${1:-$root/build}
shift || true
links=("$@")
((${#links[@]})) || links=(none 10gbit 1gbit 100mbit)
model=${KDIST_SCALING_MODEL:-mlp}
case $model in
  mlp)
    bin=$(cd "$build" && pwd)/benchmarks/bench_trainer
    filter=(--benchmark_filter=BM_data_parallel_throughput --benchmark_color=false)
    what="DataParallel, global batch 256 (examples/s)"
    rate() { sed -n 's/^data_parallel_throughput .*examples_per_s=\([0-9.]*\).*/\1/p' | cut -d. -f1; } ;;
  gpt)
    bin=$(cd "$build" && pwd)/benchmarks/bench_gpt
    filter=(--benchmark_filter='BM_gpt_step/(1proc|dp_2x1)' --benchmark_color=false)
    what="GPT (2,1) data parallel (tokens/s)"
    rate() { awk '$1 ~ /^BM_gpt_step\/(1proc|dp_2x1)$/ {print $3}'; } ;;
  *) echo "error: KDIST_SCALING_MODEL is '$model', not mlp or gpt" >&2; exit 2 ;;
esac
cluster=$root/scripts/netns/cluster.sh
[ -x "$bin" ] || { echo "error: $bin not found; build the $(basename "$bin") target" >&2; exit 2; }
export KDIST_NETNS_PREFIX=kdb KDIST_NETNS_SUBNET=10.79.0
"$cluster" check || exit 77
trap '"$cluster" down > /dev/null' EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx", a/b}'; }
one=$(mpiexec.hydra -n 1 "$bin" "${filter[@]}" 2> /dev/null | rate)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-44s %12s %8s %12s %8s\n" "$what" "overlap on" "vs 1" "overlap off" "vs 1"
printf "%-44s %12s %8s\n" "1 process" "$one" "1.00x"
on=$(KDIST_GRADIENT_OVERLAP=1 mpiexec.hydra -n 2 "$bin" "${filter[@]}" 2> /dev/null | rate)
off=$(KDIST_GRADIENT_OVERLAP=0 mpiexec.hydra -n 2 "$bin" "${filter[@]}" 2> /dev/null | rate)
printf "%-44s %12s %8s %12s %8s\n" "2 processes, 1 host" "$on" "$(ratio "$on" "$one")" "$off" "$(ratio "$off" "$one")"
"$cluster" up 2 > /dev/null
for link in "${links[@]}"; do
  "$cluster" shape "${link%%/*}" "$([[ "$link" == */* ]] && echo "${link#*/}" || echo 0us)"
  on=$("$cluster" run 2 -n 2 -ppn 1 -genv KDIST_GRADIENT_OVERLAP 1 "$bin" "${filter[@]}" 2> /dev/null | rate)
  off=$("$cluster" run 2 -n 2 -ppn 1 -genv KDIST_GRADIENT_OVERLAP 0 "$bin" "${filter[@]}" 2> /dev/null | rate)
  printf "%-44s %12s %8s %12s %8s\n" "2 hosts x 1, link $link" "$on" "$(ratio "$on" "$one")" "$off" "$(ratio "$off" "$one")"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
