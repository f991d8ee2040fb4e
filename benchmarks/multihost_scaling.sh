#!/usr/bin/env bash
# DataParallel throughput across a network (docs/multihost.md, docs/benchmarks.md): the seeds'
# model at global batch 256 (bench_trainer's BM_data_parallel_throughput) on 1 process, on 2
# processes of one host (shared memory), and on 2 hosts of 1 process each made by
# scripts/netns/cluster.sh, per link setting. Needs root and network namespaces. Run it on an
# otherwise idle machine (2 busy-polling ranks on 2 cores).
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
bin=$(cd "$build" && pwd)/benchmarks/bench_trainer
cluster=$root/scripts/netns/cluster.sh
[ -x "$bin" ] || { echo "error: $bin not found; build the bench_trainer target" >&2; exit 2; }
export KDIST_NETNS_PREFIX=kdb KDIST_NETNS_SUBNET=10.79.0
"$cluster" check || exit 77
trap '"$cluster" down > /dev/null' EXIT
filter=(--benchmark_filter=BM_data_parallel_throughput --benchmark_color=false)
rate() { sed -n 's/^data_parallel_throughput .*examples_per_s=\([0-9.]*\).*/\1/p' | cut -d. -f1; }
one=$(mpiexec.hydra -n 1 "$bin" "${filter[@]}" 2> /dev/null | rate)
shm=$(mpiexec.hydra -n 2 "$bin" "${filter[@]}" 2> /dev/null | rate)
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-28s %12s %8s\n" "DataParallel, global batch 256" "examples/s" "vs 1"
printf "%-28s %12s %8s\n" "1 process" "$one" "1.00x"
printf "%-28s %12s %8s\n" "2 processes, 1 host" "$shm" "$(awk -v a="$shm" -v b="$one" 'BEGIN{printf "%.2fx", a/b}')"
"$cluster" up 2 > /dev/null
for link in "${links[@]}"; do
  "$cluster" shape "${link%%/*}" "$([[ "$link" == */* ]] && echo "${link#*/}" || echo 0us)"
  two=$("$cluster" run 2 -n 2 -ppn 1 "$bin" "${filter[@]}" 2> /dev/null | rate)
  printf "%-28s %12s %8s\n" "2 hosts x 1, link $link" "$two" "$(awk -v a="$two" -v b="$one" 'BEGIN{printf "%.2fx", a/b}')"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
