#!/bin/bash
# Packs kdist CUDA binaries built here (../shared/gpu/build-kdist-cuda.sh, nvcc + Kokkos CUDA, no
# GPU needed) into a staged folder, so a device call runs them at once instead of spending minutes
# of its device time on the build. Also packs the fortunes text the GPT trainer reads (the device
# image has no /usr/share/games/fortunes). gpu_figures.sh uses the pack when it is there and
# its binaries load; else it builds on the device as before.
#   bash benchmarks/gpu/prebuild.sh BUILD_DIR STAGED_DIR [target...]
# BUILD_DIR: what build-kdist-cuda.sh built against MPICH, as the staged deps carry it
# (KDIST_CMAKE_ARGS=-DKDIST_MPI=mpich where Debian's default MPI is Open MPI);
# STAGED_DIR: what ../shared/gpu/stage.sh filled (.gpu).
# Writes STAGED_DIR/prebuilt.tar.xz (flat: the executables + MANIFEST.txt with the commit they were
# built from, nvcc's version and each file's libraries) and STAGED_DIR/fortunes.txt.gz.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,10p' "$0"; exit 2; }
B=$(realpath "$1"); S=$(realpath "$2"); shift 2
targets=${*:-bench_gpt bench_trainer gpt_trainer mpi_test_attention_grad mpi_test_step_launches mpi_test_gpt mpi_test_metrics_on_device mpi_test_device_graph test_ops mpi_test_mixed_precision}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir "$T/prebuilt"
grep -q '^MPI_CXX_LIB_NAMES:STRING=.*mpich' "$B/CMakeCache.txt" || {
  echo "prebuild: $B is not built against MPICH, which the staged deps carry: configure it with" \
       "KDIST_CMAKE_ARGS=-DKDIST_MPI=mpich" >&2; exit 1; }
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$B/CMakeCache.txt")
{
  echo "built from $(git -C "$src" rev-parse --short HEAD)$(git -C "$src" diff --quiet HEAD || echo ' + uncommitted changes') in $B"
  nvcc --version | tail -2 | head -1
} > "$T/prebuilt/MANIFEST.txt"
for t in $targets; do
  f=$(find "$B" -maxdepth 2 -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "prebuild: $t is not built in $B" >&2; exit 1; }
  strip -o "$T/prebuilt/$t" "$f"
  echo "$t: $(ldd "$f" | awk '{print $1}' | grep -vE '^(linux-vdso|/lib64)' | tr '\n' ' ')" >> "$T/prebuilt/MANIFEST.txt"
done
tar -C "$T" -cJf "$S/prebuilt.tar.xz" prebuilt
# Debian's fortunes as one file (the trainer's default input, the same bytes in the same order)
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | LC_ALL=C sort |
  xargs cat | gzip -9 > "$S/fortunes.txt.gz"
du -h "$S/prebuilt.tar.xz" "$S/fortunes.txt.gz"
