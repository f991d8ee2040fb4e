#!/usr/bin/env bash
# Installs the Debian packages kdist needs (only those missing) and configures build/.
# Sourced by run-main.sh and run-tests.sh; safe to run again (installs nothing, reconfigures nothing
# that is configured already).
set -euo pipefail
KDIST_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KDIST_BUILD="${KDIST_BUILD:-$KDIST_ROOT/build}"

# The MPI: MPICH (default) or Open MPI (KDIST_MPI=openmpi, scripts/run-openmpi.sh); the parallel
# HDF5 follows. The build names its flavour (-DKDIST_MPI), so either may be Debian's default.
KDIST_MPI="${KDIST_MPI:-mpich}"
case "$KDIST_MPI" in
  mpich) kdist_mpi_packages=(mpich libmpich-dev libhdf5-mpich-dev) ;;
  openmpi) kdist_mpi_packages=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev) ;;
  *) echo "kdist: KDIST_MPI is '$KDIST_MPI'; give mpich or openmpi" >&2; exit 1 ;;
esac
KDIST_PACKAGES=(
  cmake make ninja-build g++ pkg-config  # toolchain (Ninja: the generator)
  ccache                             # compiler cache: a rebuild of the same sources compiles nothing
  libtrilinos-kokkos-dev             # Kokkos 3.4.1 (Serial)
  "${kdist_mpi_packages[@]}"         # MPI and its parallel HDF5 (checkpoints)
  libeigen3-dev                      # host linear algebra
  libopenblas-openmp-dev             # host GEMMs (OpenBLAS; threads per rank: OMP_NUM_THREADS)
  libre2-dev                         # linear-time regular expressions for LayoutMap
  librandom123-dev                   # counter-based random numbers (Philox)
  zlib1g-dev                         # reading the gzip'd dataset
  hdf5-tools                         # h5dump/h5ls for the checkpoint tests
  libcli11-dev                       # the example trainers' command-line flags
  nlohmann-json3-dev                 # LayoutMap rules in JSON files (kdist::io)
  libzip-dev                         # Keras model files (.keras: zip archives; kdist::io)
  gcc gfortran                       # C and Fortran callers (bindings/: the C API, the Fortran module)
  libgtest-dev libbenchmark-dev      # tests and benchmarks
  dataset-fashion-mnist              # the trainers' data
  fortunes                           # English text for the GPT trainer (/usr/share/games/fortunes)
  iproute2 procps                    # ip, tc, ps: the multi-host tests (scripts/netns/cluster.sh)
  ${KDIST_EXTRA_PACKAGES:-}          # what a caller needs besides (run-sanitizers.sh: clang)
)

missing=()
for p in "${KDIST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kdist: installing missing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "kdist: run as root (or install them yourself: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Ninja schedules the whole build as one graph (a directory configured with another generator
# keeps it).
if [ ! -f "$KDIST_BUILD/CMakeCache.txt" ]; then
  cmake -S "$KDIST_ROOT" -B "$KDIST_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKDIST_MPI="$KDIST_MPI" ${KDIST_CMAKE_ARGS:-}
fi
KDIST_JOBS="${KDIST_JOBS:-$(nproc)}"
