#!/usr/bin/env bash
# Several "hosts" on one Linux machine, for running kdist across a network before anyone runs it on
# a cluster (docs/multihost.md). Each host is a network namespace with its own eth0 (a veth pair on
# a bridge), its own hostname and its own boot id (so MPI does not take it for the same machine
# and use shared memory between hosts); `tc netem` gives the links a bandwidth and a latency. MPI
# runs over TCP between hosts and over shared memory within one. Needs root (CAP_NET_ADMIN and
# CAP_SYS_ADMIN), iproute2, util-linux's unshare and MPICH's mpiexec (Hydra).
#
#   cluster.sh check                 exit 0 when hosts can be made here, else say why, exit 77
#   cluster.sh up N [RATE DELAY]     N hosts; links shaped, e.g. up 2 10gbit 50us
#   cluster.sh shape RATE DELAY      reshape every link (RATE 'none': unshaped)
#   cluster.sh link I up|down        connect or cut host I's link (the watchdog test)
#   cluster.sh run H MPIEXEC_ARGS... mpiexec on hosts 0..H-1, e.g. run 2 -n 4 -ppn 2 prog
#   cluster.sh down                  remove the hosts, ending what still runs on them
#
# KDIST_NETNS_PREFIX (default kdist) names the namespaces (PREFIX-h0...), the bridge and the veths,
# KDIST_NETNS_SUBNET (default 10.77.0) their /24. The delay applies in each direction (round trip:
# twice DELAY), the rate to each host's sending and receiving side. Where the kernel has no netem,
# links get their rate from tbf and cannot be given a delay.
set -euo pipefail
prefix="${KDIST_NETNS_PREFIX:-kdist}"
subnet="${KDIST_NETNS_SUBNET:-10.77.0}"
state="/run/kdist-netns/$prefix"
bridge="${prefix}-br"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/$(basename "${BASH_SOURCE[0]}")"

host_name() { echo "${prefix}-h$1"; }
veth_name() { echo "${prefix}-v$1"; }
hosts() { cat "$state/hosts" 2>/dev/null || echo 0; }
die() {
  echo "netns/cluster.sh: $*" >&2
  exit 1
}

# Hydra's ssh launcher runs `LAUNCHER -x HOST COMMAND`: enter the host's namespaces, take its
# hostname and boot id, run the command there.
if [ "${1:-}" = -x ]; then
  host="$2"
  shift 2
  exec ip netns exec "$host" unshare --uts --mount /bin/sh -c \
    "hostname '$host' && mount --bind '$state/$host.boot_id' /proc/sys/kernel/random/boot_id && exec $*"
fi

check() {
  local why=""
  if [ "$(id -u)" -ne 0 ]; then
    why="not root"
  elif ! command -v ip > /dev/null || ! command -v tc > /dev/null; then
    why="iproute2 (ip, tc) is not installed"
  elif ! command -v mpiexec.hydra > /dev/null; then
    why="MPICH's mpiexec.hydra is not installed"
  elif ! ip netns add "${prefix}-probe" 2> /dev/null; then
    why="network namespaces cannot be made here (no CAP_NET_ADMIN; a container without it?)"
  elif ! ip netns exec "${prefix}-probe" unshare --uts --mount true 2> /dev/null; then
    why="unshare --uts --mount fails here (no CAP_SYS_ADMIN)"
  elif ! ip link add "${prefix}-probe" type bridge 2> /dev/null; then
    why="a bridge cannot be made here"
  elif ! ip -n "${prefix}-probe" link add probe0 type veth peer name probe1 2> /dev/null ||
    ! ip netns exec "${prefix}-probe" tc qdisc add dev probe0 root tbf rate 1gbit burst 64kb \
      latency 10ms 2> /dev/null; then
    why="veth pairs or tc's tbf are not available (kernel modules veth, sch_tbf)"
  fi
  ip link del "${prefix}-probe" 2> /dev/null || true
  ip netns del "${prefix}-probe" 2> /dev/null || true
  if [ -n "$why" ]; then
    echo "netns/cluster.sh: cannot make hosts here: $why" >&2
    return 77
  fi
}

# has_netem: whether the kernel has tc's netem (sch_netem); some (Firecracker guests) do not.
has_netem() {
  ip link add "${prefix}-nprobe" type dummy 2> /dev/null || return 1
  local ok=0
  tc qdisc add dev "${prefix}-nprobe" root netem delay 1ms 2> /dev/null || ok=1
  ip link del "${prefix}-nprobe"
  return $ok
}

# burst_for RATE: tbf's bucket, 4 ms of the rate (at least 64 KiB), so a 1000 Hz timer keeps up.
burst_for() {
  local r=${1,,} mult=1
  case "$r" in
    *gbit) mult=1000000000 r=${r%gbit} ;;
    *mbit) mult=1000000 r=${r%mbit} ;;
    *kbit) mult=1000 r=${r%kbit} ;;
    *bit) r=${r%bit} ;;
    *) die "shape: give the rate in bit, kbit, mbit or gbit (e.g. 10gbit), not '$1'" ;;
  esac
  [[ "$r" =~ ^[0-9]+$ ]] || die "shape: give the rate as a whole number of bit, kbit, mbit or gbit, not '$1'"
  local b=$((r * mult / 8 / 250))
  echo $((b < 65536 ? 65536 : b))
}

# shape_link DEV NETNS RATE DELAY: one side of a link, netem where the kernel has it (rate and
# delay), else tbf (rate only: a delay is then an error).
shape_link() {
  local dev=$1 ns=$2 rate=$3 delay=$4
  local -a in=()
  [ -n "$ns" ] && in=(ip netns exec "$ns")
  "${in[@]}" tc qdisc del dev "$dev" root 2> /dev/null || true
  if [ "$(cat "$state/netem")" = yes ]; then
    local -a args=()
    [ "$rate" != none ] && args+=(rate "$rate")
    [[ "$delay" =~ ^0+(us|ms|s)?$ ]] || args+=(delay "$delay")
    ((${#args[@]})) && "${in[@]}" tc qdisc add dev "$dev" root netem "${args[@]}" limit 100000
    return 0
  fi
  [[ "$delay" =~ ^0+(us|ms|s)?$ ]] ||
    die "shape: this kernel has no tc netem (sch_netem), so links cannot be given a delay; give 0us"
  [ "$rate" = none ] ||
    "${in[@]}" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$(burst_for "$rate")" latency 50ms
}

shape() {
  local rate=${1:-} delay=${2:-0us} n i
  [ -n "$rate" ] || die "shape: give RATE [DELAY], e.g. 10gbit 50us, or none"
  n=$(hosts)
  ((n > 0)) || die "shape: no hosts are up ('up N' first)"
  [ "$rate" = none ] || burst_for "$rate" > /dev/null  # a bad rate ends here, before any link
  for ((i = 0; i < n; i++)); do
    shape_link "$(veth_name "$i")" "" "$rate" "$delay"
    shape_link eth0 "$(host_name "$i")" "$rate" "$delay"
  done
  echo "$rate $delay" > "$state/shape"
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}-h[0-9]*$" || true); do
    ip netns pids "$ns" | xargs -r kill -9 2> /dev/null || true
    ip netns del "$ns"
  done
  ip link del "$bridge" 2> /dev/null || true
  rm -rf "$state"
}

up() {
  local n=$1 i h
  [[ "$n" =~ ^[1-9][0-9]?$ ]] && ((n <= 200)) || die "up: give 1 to 200 hosts, not '$n'"
  check || exit 77
  down
  mkdir -p "$state"
  if has_netem; then echo yes; else echo no; fi > "$state/netem"
  ip link add "$bridge" type bridge
  ip addr add "$subnet.254/24" dev "$bridge"
  ip link set "$bridge" up
  for ((i = 0; i < n; i++)); do
    h=$(host_name "$i")
    ip netns add "$h"
    ip link add "$(veth_name "$i")" type veth peer name eth0 netns "$h"
    ip link set "$(veth_name "$i")" master "$bridge" up
    ip -n "$h" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    cat /proc/sys/kernel/random/uuid > "$state/$h.boot_id"
  done
  cc -shared -fPIC -O2 "$here/ucx_no_disconnect.c" -o "$state/ucx_no_disconnect.so"
  echo "$n" > "$state/hosts"
  shape "${2:-none}" "${3:-0us}"
  echo "netns/cluster.sh: $n hosts $(host_name 0).. on $subnet.0/24, links: $(cat "$state/shape")" \
    "(netem: $(cat "$state/netem"))"
}

link() {
  local i=$1 updown=$2
  ((i < $(hosts))) || die "link: no host $i (there are $(hosts))"
  [[ "$updown" = up || "$updown" = down ]] || die "link: up or down, not '$updown'"
  ip link set "$(veth_name "$i")" "$updown"
}

run() {
  local h=$1 i list=""
  shift
  ((h >= 1 && h <= $(hosts))) || die "run: $h hosts asked for, $(hosts) are up ('up N' first)"
  for ((i = 0; i < h; i++)); do list+="${list:+,}$(host_name "$i")"; done
  # Between hosts MPI goes over TCP on eth0 (UCX under Debian's MPICH, libfabric's tcp provider
  # under an OFI build); within a host, shared memory. Hydra's proxies reach mpiexec on the bridge.
  # ucx_no_disconnect.c: MPICH 4.0's MPI_Finalize hang over TCP (KDIST_NETNS_FINALIZE_FIX=0: off).
  local -a fix=()
  [ "${KDIST_NETNS_FINALIZE_FIX:-1}" = 0 ] || fix=(-genv LD_PRELOAD "$state/ucx_no_disconnect.so")
  exec mpiexec.hydra -launcher ssh -launcher-exec "$self" -localhost "$subnet.254" -hosts "$list" \
    -genv UCX_NET_DEVICES eth0 -genv FI_PROVIDER tcp "${fix[@]}" "$@"
}

case "${1:-}" in
  check) check ;;
  up) up "${@:2}" ;;
  down) down ;;
  shape) shape "${@:2}" ;;
  link) link "${@:2}" ;;
  run) run "${@:2}" ;;
  *) die "give check, up N [RATE DELAY], shape RATE DELAY, link I up|down, run H ARGS... or down" ;;
esac
