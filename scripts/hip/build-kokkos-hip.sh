#!/bin/bash
# Build and install Kokkos 4.6.01 with HIP (C++20, Release) for kdist, through Debian's hipcc.
# usage: build-kokkos-hip.sh KOKKOS_SRC PREFIX
#   KOKKOS_SRC  a git dir of github.com/kokkos/kokkos (tag 4.6.01 is archived from it), or an
#               unpacked Kokkos source tree.
#   PREFIX      install prefix (created). Sources and build tree go to PREFIX.build unless
#               KOKKOS_BUILD_DIR says otherwise.
# Serial + HIP, Kokkos_ARCH_AMD_GFX90A (MI200), compiler hipcc (Debian 12: ROCm 5.2.3, clang 15;
# Kokkos 4.6 asks for hipcc 5.2 or later). No rocThrust (not in Debian 12). No GPU needed.
# clang 15 in HIP mode crashes on libstdc++ 12 under C++20 (std::pair's constrained operator=
# behind any std::map or <regex>: llvm-project#62017, kokkos#5737); where hipcc's clang is older
# than 16 the build takes libstdc++ 11's headers (apt-get install libstdc++-11-dev), as
# hip-stdlib-flags.sh beside this script says; the library linked is still the system's.
# env: JOBS (default: nproc), KOKKOS_TAG (default 4.6.01), KOKKOS_ARCH (default AMD_GFX90A),
#      HIPCC (default: hipcc on PATH), HIP_STDLIB_FLAGS (overrides hip-stdlib-flags.sh's answer).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IN=$1
TAG=${KOKKOS_TAG:-4.6.01}; JOBS=${JOBS:-$(nproc)}
HIPCC=${HIPCC:-$(command -v hipcc || true)}
[ -n "$HIPCC" ] || { echo "hipcc not found (apt-get install hipcc, or set HIPCC)" >&2; exit 1; }
STDLIB=${HIP_STDLIB_FLAGS-$("$HERE/hip-stdlib-flags.sh" "$HIPCC")}
mkdir -p "$2"; PREFIX=$(cd "$2" && pwd)
WORK=${KOKKOS_BUILD_DIR:-$PREFIX.build}; mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
T0=$(date +%s)

if [ -f "$IN/CMakeLists.txt" ] && [ -d "$IN/core" ]; then
  SRC=$(cd "$IN" && pwd)
elif git --git-dir="$IN" rev-parse -q --verify "$TAG^{commit}" >/dev/null 2>&1; then
  rm -rf "$WORK/src"; mkdir -p "$WORK/src"
  git --git-dir="$IN" archive --prefix="kokkos-$TAG/" "$TAG" | tar -x -C "$WORK/src"
  SRC=$WORK/src/kokkos-$TAG
else
  echo "$IN is neither a Kokkos source tree nor a git dir with tag $TAG" >&2; exit 1
fi
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)

cmake -S "$SRC" -B "$WORK/build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_STANDARD=20 -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_CXX_COMPILER="$HIPCC" \
  -DCMAKE_CXX_FLAGS="$STDLIB" \
  -DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_HIP=ON "-DKokkos_ARCH_${KOKKOS_ARCH:-AMD_GFX90A}=ON" \
  -DKokkos_ENABLE_ROCTHRUST=OFF -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF \
  -DCMAKE_INSTALL_PREFIX="$PREFIX"
cmake --build "$WORK/build" -j"$JOBS"
cmake --install "$WORK/build" >/dev/null
echo "build-kokkos-hip: HIP Kokkos $TAG installed in $PREFIX ($(( $(date +%s) - T0 )) s, -j$JOBS)"
