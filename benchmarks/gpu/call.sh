# Sourced by the device-call scripts (gpu_figures.sh, gpu_aware_mpi.sh), run from the repo root on
# the GPU machine: the work folder W, the output folder O ($OUT), the staged folder G, the call's
# deadline (KGPU_CALL_S, default 540 s), cap SECONDS (that, or what the call has left less a
# margin; 0: skip), log, and untar (tar, else Python's tarfile where tar lacks xz).
here=$(pwd)
W=${KGPU_WORK:-/tmp/kdist-gpu}; O=${OUT:-$W/out}; G=${KGPU_STAGED:-$here/.gpu}; mkdir -p "$O" "$W"
DEADLINE=$(( $(date +%s) + ${KGPU_CALL_S:-540} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
cap() {
  local l=$(( $(left) - 15 )); [ "$l" -lt "$1" ] && { [ "$l" -gt 10 ] && echo "$l" || echo 0; } || echo "$1"
}
log() { echo "[$(date +%T)] $*"; }
untar() { mkdir -p "$2"; tar -xf "$1" -C "$2" 2>/dev/null ||
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
