#!/bin/bash
# Compile check of kdist with Kokkos HIP (Debian's hipcc, clang 15 / ROCm 5.2); no GPU needed.
# usage (from the root of a kdist checkout):
#   build-kdist-hip.sh KOKKOS_HIP_PREFIX BUILD_DIR [targets...]   configure + build with -k 0, summary
#   build-kdist-hip.sh --summary BUILD_DIR                         the summary of BUILD_DIR/build.log again
# KOKKOS_HIP_PREFIX: what build-kokkos-hip.sh installed. Writes BUILD_DIR/configure.log,
# BUILD_DIR/build.log (ninja, full), BUILD_DIR/failed.txt (one line per failed step) and prints
# a one-screen summary: failing targets grouped under their first error (file:line: message).
# Device GEMMs: no rocBLAS in Debian 12, so kdist::ops::matmul runs its Kokkos kernel on HIP memory.
# env: JOBS (default: nproc), KDIST_CMAKE_ARGS (extra cmake arguments), QUIET=1 (no progress lines),
#      HIPCC (default: hipcc on PATH), HIP_STDLIB_FLAGS (default: what hip-stdlib-flags.sh prints:
#      libstdc++ 11's headers under clang < 16; must match what Kokkos was built with).
# Exit status: that of the build (non-zero when any step failed).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

summarize() {  # summarize BUILD_DIR: reads build.log, writes failed.txt, prints the summary
  local bld=$1 src
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$bld/CMakeCache.txt" 2>/dev/null)
  [ -f "$bld/build.log" ] || { echo "no $bld/build.log"; return 1; }
  # 1. one line per failed ninja step: "<target>\t<first error line, raw>"
  awk '
    function flush() { if (tgt != "") { print tgt "\t" (err != "" ? err : (other != "" ? other : "(no error line found)")) } tgt = ""; err = ""; other = "" }
    /^FAILED: / { flush(); o = ($2 ~ /^\[code=/) ? $3 : $2; n = split(o, p, "/")   # ninja >= 1.12 adds [code=N]
                  if (o ~ /CMakeFiles\/[^\/]+\.dir\//) {
                    t = o; sub(/^.*CMakeFiles\//, "", t); sub(/\.dir\/.*$/, "", t)
                    f = p[n]; sub(/\.o$/, "", f); sub(/\.(cpp|cc|cxx|cu|hip)$/, "", f)
                    tgt = (f == t) ? t : t ":" f
                  } else tgt = o
                  cmd = 1; next }
    /^\[[0-9]+\/[0-9]+\] / || /^ninja: / { flush(); next }
    tgt == "" { next }
    cmd == 1 { cmd = 0; next }                       # the command line ninja echoes
    err == "" && (/\): (catastrophic )?error/ || /:[0-9]+:[0-9]+: (fatal )?error:/ || /^(nvcc|clang|hipcc)(-[0-9]+)?: (fatal )?error/ || /undefined reference/ || /undefined symbol/ || /collect2: error/ || /ld(\.lld)?: error/) { err = $0; next }
    other == "" && /error/ { other = $0 }
    END { flush() }' "$bld/build.log" |
  sed -E 's#\t(.*)\(([0-9]+)\): (catastrophic )?error: #\t\1:\2: #; s#\t(.*):([0-9]+):[0-9]+: (fatal )?error: #\t\1:\2: #' |
  sed -E "s#\t${src:-/nonexistent}/#\t#; s#\t[^\t: ]*/include/#\t#" > "$bld/failed.txt"
  # 2. the summary
  local steps nf
  steps=$(grep -oE '^\[[0-9]+/[0-9]+\]' "$bld/build.log" | tail -1 | tr -d '[]' | cut -d/ -f2)
  nf=$(wc -l < "$bld/failed.txt")
  echo "== kdist HIP build: $nf of ${steps:-?} build steps failed; log $bld/build.log, list $bld/failed.txt"
  [ "$nf" -gt 0 ] || return 0
  awk -F'\t' '{ e = substr($2, 1, 170); if (!(e in c)) order[++k] = e; c[e]++; t[e] = t[e] " " $1 }
    END {
      # most frequent first errors first
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (c[order[j]] > c[order[i]]) { x = order[i]; order[i] = order[j]; order[j] = x }
      for (i = 1; i <= k; i++) {
        e = order[i]; printf "[%d] %s\n", c[e], e
        n = split(substr(t[e], 2), a, " "); line = "    "; rows = 0
        for (m = 1; m <= n; m++) {
          if (length(line) + length(a[m]) > 168) { if (rows == 1) { printf "%s +%d more\n", line, n - m + 1; line = ""; break } print line; rows++; line = "    " }
          line = line a[m] " "
        }
        if (line != "") print line
      }
    }' "$bld/failed.txt"
}

if [ "${1:-}" = --summary ]; then summarize "${2:?BUILD_DIR}"; exit; fi
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
KK=$(cd "$1" && pwd) || exit 1
mkdir -p "$2"; BLD=$(cd "$2" && pwd); shift 2
SRC=$(pwd)
grep -q 'project(kdist' "$SRC/CMakeLists.txt" 2>/dev/null || { echo "run this from the root of a kdist checkout" >&2; exit 2; }
grep -qs 'KOKKOS_ENABLE_HIP' "$KK/include/KokkosCore_config.h" ||
  { echo "$KK/include/KokkosCore_config.h: no Kokkos HIP there (build-kokkos-hip.sh first)" >&2; exit 2; }
HIPCC=${HIPCC:-$(command -v hipcc)} || { echo "hipcc not found (apt-get install hipcc)" >&2; exit 2; }
STDLIB=${HIP_STDLIB_FLAGS-$("$HERE/hip-stdlib-flags.sh" "$HIPCC")} || exit 2
JOBS=${JOBS:-$(nproc)}
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
T0=$(date +%s)
# shellcheck disable=SC2086  # KDIST_CMAKE_ARGS is a list of words
if ! cmake -S "$SRC" -B "$BLD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$HIPCC" \
     -DCMAKE_CXX_FLAGS="$STDLIB" -DKokkos_ROOT="$KK" ${KDIST_CMAKE_ARGS:-} > "$BLD/configure.log" 2>&1; then
  tail -30 "$BLD/configure.log"; echo "== configure FAILED (log $BLD/configure.log)"; exit 1
fi
KEEP=(-k 0); [ ${#GEN[@]} -eq 0 ] && KEEP=(-k)
echo "== building kdist in $BLD with -j$JOBS${*:+ (targets: $*)}"
cmake --build "$BLD" -j"$JOBS" -- "${KEEP[@]}" "$@" > "$BLD/build.log" 2>&1 &
BPID=$!
if [ "${QUIET:-0}" != 1 ]; then  # a progress line a minute
  while kill -0 $BPID 2>/dev/null; do
    sleep 60 & wait $!
    echo "   $(( $(date +%s) - T0 )) s: $(grep -oE '^\[[0-9]+/[0-9]+\]' "$BLD/build.log" | tail -1) $(grep -c '^FAILED:' "$BLD/build.log") failed"
  done
fi
wait $BPID; RC=$?
summarize "$BLD"
echo "== build exit $RC after $(( $(date +%s) - T0 )) s"
exit $RC
