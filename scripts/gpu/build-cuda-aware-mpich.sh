#!/bin/bash
# Build a CUDA-aware MPICH 4.0.2 from Debian bookworm's own source package into a relocatable PREFIX
# (for a GPU machine -- H100/H200, driver + CUDA 13 -- where ranks on one GPU pass device pointers).
# usage: build-cuda-aware-mpich.sh PREFIX [SRC]
#   PREFIX  install prefix (created; can be moved afterwards). Build tree: PREFIX.build unless
#           MPICH_BUILD_DIR says otherwise; logs: MPICH_LOG_DIR (default PREFIX.build/logs).
#   SRC     a folder holding mpich_4.0.2-3.dsc + mpich_4.0.2.orig.tar.xz + mpich_4.0.2-3.debian.tar.xz
#           (unpacked with dpkg-source when present, else the orig tarball with tar), or an unpacked
#           mpich-4.0.2 tree (copied). Without SRC: `apt-get source --download-only mpich`
#           (needs a deb-src line for bookworm) into PREFIX.build/dl.
# env: JOBS (default nproc), CUDA_HOME (default /usr/local/cuda), CUDA_SM (default 90 = Hopper;
#      comma list, e.g. 80,90), MPICH_FRESH=1 (unpack + configure again although PREFIX.build holds a
#      tree configured with the same options; otherwise a rerun only runs make + install),
#      MPICH_CONFIGURE_EXTRA (more configure arguments, appended).
# What it builds: MPICH 4.0.2, device ch4:ofi with the embedded libfabric (provider sockets only),
#   POSIX shm + GPU IPC shmmods (intranode device buffers: CUDA IPC handles from
#   MPIR_CVAR_CH4_IPC_GPU_P2P_THRESHOLD bytes up, yaksa CUDA copies through shm cells below),
#   yaksa datatype engine with its CUDA backend (kernels for sm_$CUDA_SM only), hydra, ROMIO,
#   C + C++ bindings, shared libraries only. Collectives on device buffers (MPI_Allreduce,
#   MPI_Iallreduce, ...) are staged through host buffers by MPICH itself.
# Options chosen, and why:
#   --with-device=ch4:ofi:sockets --with-libfabric=embedded  Debian's build is ch4:ucx, but Debian's
#       UCX has no CUDA transport and MPICH 4.0's ucx netmod hands device pointers to UCX as they
#       are. The ofi netmod packs device buffers into host memory when the provider lacks FI_HMEM
#       (sockets does), and the embedded libfabric needs nothing from the device image.
#       Intranode traffic (the use case) goes through ch4 shm anyway, not through the netmod.
#   --with-hwloc=embedded  no libhwloc.so.15 needed on the device (MPICH and hydra).
#   --with-cuda=$CUDA_HOME --with-cuda-sm=$CUDA_SM  MPL GPU layer (pointer queries, IPC handles,
#       cudaFree hooks) + yaksa CUDA backend (yaksa's own sm list stops at 86: give it explicitly).
#       libmpich then NEEDs libcudart.so.13 and libcuda.so.1; hydra (mpiexec) needs neither.
#   --without-hip --without-ze --enable-rocr-dlopen  a machine with ROCm's HIP/HSA libraries (this
#       Debian one has libamdhip64 + libhsa-runtime64 5.2) would otherwise get yaksa's HIP backend and
#       a libfabric linked to libhsa-runtime64: libmpich would then need ROCm on the device too.
#       (libfabric 1.13 ignores --without-rocr; with rocr-dlopen it only tries a dlopen, silently.)
#   --disable-fortran  kdist uses the C bindings only (keeps gfortran out); --enable-cxx is the
#       default (mpicxx wrapper, libmpichcxx). MPILIBNAME=mpich: libmpich.so.12 like Debian's, so
#       Debian's libhdf5_mpich (ROMIO is kept for it) runs against this library.
#   --disable-static  the nvcc objects are then built once (patch a).
#   --enable-fast=O2 --disable-dependency-tracking  a plain optimised build.
# Patches (to the unpacked tree, idempotent; the why is given where each is applied):
#   (a) yaksa cudalt.sh: compile each .cu once (PIC) and copy it as the unused non-PIC object;
#   (b) MPL mpl_gpu_cuda.c: dlopen libcuda.so.1 / libcudart.so.<major> (not the -dev symlinks),
#       dlsym cuMemFree_v2 (cuda.h maps cuMemFree to it), free hooks set up on first use;
#   (c) CUDA 13: yaksa read cudaDeviceProp::computeMode (removed): use cudaDeviceGetAttribute.
#   Nothing else in MPICH/yaksa/libfabric 4.0.2 failed to build with CUDA 13.0.
# Measured here (Debian 12, 2 cores shared with other builds, -j2, nice 15, CUDA 13.0, 2026-12-01):
#   configure 245 s, make 2986 s (54 min wall, 48 min CPU): 279 nvcc runs for yaksa's CUDA kernels,
#   436 C files of yaksa's host pack/unpack code, then MPICH. PREFIX: 265 MB, nearly all
#   lib/libmpich.so.12 (179 MB of it sm_90 kernels); as a tar.xz (xz -6) the prefix is 14.5 MB.
# Check: PREFIX/bin/mpichversion (prints the configure line; it needs libcuda.so.1 like any program
#   linked with libmpich); `grep MPIX_GPU_query_support PREFIX/include/mpi_proto.h` (mpi.h includes
#   it; MPIX_GPU_SUPPORT_CUDA is in mpi.h); at run time MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA,
#   &x) sets x=1 (x=0 under MPIR_CVAR_ENABLE_GPU=0); PREFIX/share/build-cuda-aware-mpich.txt.
# Run time (on the device):
#   PATH=PREFIX/bin:$PATH. Programs linked by PREFIX's mpicc/mpicxx get a runpath to PREFIX/lib
#   (computed where PREFIX lies when they are linked); others, and PREFIX/bin/mpichversion, need
#   LD_LIBRARY_PATH=PREFIX/lib. libcudart.so.13 comes from the loader's path (CUDA's packages add
#   /usr/local/cuda/lib64 to ld.so.conf) or LD_LIBRARY_PATH=$CUDA_HOME/lib64; libcuda.so.1 from the
#   driver. The wrappers and mpich.pc find PREFIX from where they lie (tested by moving it).
#   MPIR_CVAR_ENABLE_GPU=1 (the default) is GPU support on; it needs a working GPU + driver. Without
#   one (tested here with CUDA's stub libcuda.so.1): yaksa's CUDA init fails and MPI_Init
#   segfaults, so set MPIR_CVAR_ENABLE_GPU=0 there; without any libcuda.so.1 nothing linked with
#   libmpich loads, or links (ld wants it too: put a dir holding a libcuda.so.1 -> CUDA's
#   lib64/stubs/libcuda.so link on LD_LIBRARY_PATH). MPIR_CVAR_CH4_IPC_GPU_P2P_THRESHOLD (default
#   32768 bytes) moves the IPC/shm-cell boundary. MPIR_CVAR_CH4_IPC_GPU_HANDLE_CACHE=0: MPICH 4.0.2
#   caches IPC mappings by (buffer base, length) and learns of frees only through its own cudaFree
#   wrapper, which the application's cudaFree never reaches (hidden symbol; static cudart): a device
#   buffer freed and reallocated at the same address can then be read through the old mapping
#   (read from the source, not seen on a GPU yet). Set it to 0 unless buffers given to MPI live as
#   long as the run. The GPU must be in Default compute mode (nvidia-smi -q | grep 'Compute Mode'),
#   else yaksa switches CUDA off unless CUDA_VISIBLE_DEVICES is set (and two ranks cannot share it).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"; exit 2; }
VERSION=4.0.2
JOBS=${JOBS:-$(nproc)}; CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}; CUDA_SM=${CUDA_SM:-90}
mkdir -p "$1"; PREFIX=$(cd "$1" && pwd)
WORK=${MPICH_BUILD_DIR:-$PREFIX.build}; mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
LOGS=${MPICH_LOG_DIR:-$WORK/logs}; mkdir -p "$LOGS"; LOGS=$(cd "$LOGS" && pwd)
T0=$(date +%s)
say() { echo "build-cuda-aware-mpich: $*"; }

# ---- 0. tools ------------------------------------------------------------------------------------
[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "no $CUDA_HOME/bin/nvcc (set CUDA_HOME)" >&2; exit 1; }
CUDA_MAJOR=$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
missing=(); for t in gcc g++ make tar xz perl; do command -v $t >/dev/null || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "missing ${missing[*]}: installing build-essential xz-utils perl"
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || { echo "install: ${missing[*]}" >&2; exit 1; }
  apt-get install -y --no-install-recommends build-essential xz-utils perl
fi

# ---- 1. source -----------------------------------------------------------------------------------
CONFIG=(--prefix="$PREFIX"
  --with-device=ch4:ofi:sockets --with-libfabric=embedded --with-hwloc=embedded
  --with-cuda="$CUDA_HOME" --with-cuda-sm="$CUDA_SM" --without-hip --without-ze --enable-rocr-dlopen
  --with-pm=hydra --enable-shared --disable-static --disable-fortran --enable-cxx --enable-romio
  --enable-fast=O2 --disable-dependency-tracking MPILIBNAME=mpich
  ${MPICH_CONFIGURE_EXTRA:-})
S=$WORK/src/mpich-$VERSION
STAMP=$S/.build-cuda-aware-mpich.configured
REUSE=0
if [ "${MPICH_FRESH:-0}" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "${CONFIG[*]}" ]; then
  REUSE=1; say "reusing the configured tree $S (MPICH_FRESH=1 starts over)"
else
  IN=${2:-}
  if [ -z "$IN" ]; then
    mkdir -p "$WORK/dl"; (cd "$WORK/dl" && apt-get source --download-only mpich)
    IN=$WORK/dl
  fi
  rm -rf "$WORK/src"; mkdir -p "$WORK/src"
  if [ -x "$IN/configure" ] && [ -d "$IN/src/mpid/ch4" ]; then
    cp -a "$IN" "$S"
  else
    DSC=$(ls "$IN"/mpich_"$VERSION"-*.dsc 2>/dev/null | tail -1 || true)
    ORIG=$IN/mpich_$VERSION.orig.tar.xz
    if [ -n "$DSC" ] && command -v dpkg-source >/dev/null; then
      # checks the tarballs against the .dsc, applies debian/patches (only missing-conf.patch is in
      # the series: a confdb file that autogen.sh wants; the release's configure is used as shipped)
      (cd "$WORK/src" && dpkg-source -x "$DSC" "mpich-$VERSION") > "$LOGS/dpkg-source.log" 2>&1
    elif [ -f "$ORIG" ]; then
      tar -xf "$ORIG" -C "$WORK/src"
    else
      echo "$IN holds neither mpich_$VERSION-*.dsc nor mpich_$VERSION.orig.tar.xz nor an mpich tree" >&2; exit 1
    fi
  fi
  [ -x "$S/configure" ] || { echo "no $S/configure after unpacking" >&2; exit 1; }
fi

# ---- 2. patches (idempotent: also run on a reused tree) ----------------------------------------------
# (a) yaksa compiles each of its 279 .cu files twice, -fPIC and not: with --disable-static the
#     non-PIC object is never linked, so copy the PIC one (halves the nvcc time, the bulk of the
#     build). Also: it asks `libtool --version` for a comment, and there is no system libtool.
CUDALT=$S/modules/yaksa/src/backend/cuda/cudalt.sh
if ! grep -q '^CMD="cp $PIC_FILEPATH' "$CUDALT"; then
  sed -i -e 's|^CMD="${@} -o $NPIC_FILEPATH"$|CMD="cp $PIC_FILEPATH $NPIC_FILEPATH"|' \
         -e 's|^LIBTOOL_VERSION=$(libtool --version \| head -n 1)$|LIBTOOL_VERSION="libtool (cudalt.sh)"|' "$CUDALT"
  grep -q '^CMD="cp $PIC_FILEPATH' "$CUDALT" || { echo "patch (a) did not apply to $CUDALT" >&2; exit 1; }
fi
# (b) MPL's cudaFree/cuMemFree wrappers (meant to drop cached IPC handles of freed buffers; being
#     hidden symbols of libmpich they see only MPICH's own calls, never the application's):
#     - MPI_Init (GPU on) dlopens "libcuda.so" and "libcudart.so", the -dev symlinks, which a
#       runtime-only image lacks, and dies on an assert: open the SONAMEs first (libcuda.so.1,
#       libcudart.so.$CUDA_MAJOR), the bare names after.
#     - it dlsyms "cuMemFree", the CUDA 2 entry point taking a 32-bit pointer, while cuda.h makes
#       the wrapper's own name cuMemFree_v2: forward to cuMemFree_v2.
#     - the wrappers jump through pointers set in MPI_Init only with a GPU and
#       MPIR_CVAR_ENABLE_GPU=1: set them on first use instead of calling NULL.
MPLC=$S/src/mpl/src/gpu/mpl_gpu_cuda.c
if ! grep -q 'libcuda.so.1' "$MPLC"; then
  perl -0pi -e '
    s{libcuda_handle = dlopen\("libcuda.so", RTLD_LAZY \| RTLD_GLOBAL\);}{libcuda_handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_GLOBAL);\n    if (!libcuda_handle)\n        libcuda_handle = dlopen("libcuda.so", RTLD_LAZY | RTLD_GLOBAL);};
    s{libcudart_handle = dlopen\("libcudart.so", RTLD_LAZY \| RTLD_GLOBAL\);}{libcudart_handle = dlopen("libcudart.so.'"$CUDA_MAJOR"'", RTLD_LAZY | RTLD_GLOBAL);\n    if (!libcudart_handle)\n        libcudart_handle = dlopen("libcudart.so", RTLD_LAZY | RTLD_GLOBAL);};
    s{dlsym\(libcuda_handle, "cuMemFree"\)}{dlsym(libcuda_handle, "cuMemFree_v2")};
    s{(\n( *)result = sys_(cuMemFree|cudaFree)\(dptr\);)}{\n$2if (!sys_$3)\n$2    gpu_mem_hook_init();$1}g;
  ' "$MPLC"
  grep -q 'dlopen("libcuda.so.1"' "$MPLC" && grep -q 'dlopen("libcudart.so.'"$CUDA_MAJOR"'"' "$MPLC" &&
    grep -q '"cuMemFree_v2"' "$MPLC" && [ "$(grep -c 'if (!sys_' "$MPLC")" = 2 ] ||
    { echo "patch (b) did not apply to $MPLC" >&2; exit 1; }
fi
# (c) CUDA 13 removed cudaDeviceProp::computeMode (yaksa checks for exclusive-mode GPUs with it):
#     ask cudaDeviceGetAttribute(cudaDevAttrComputeMode) instead.
YH=$S/modules/yaksa/src/backend/cuda/hooks/yaksuri_cuda_init_hooks.c
if grep -q 'prop.computeMode' "$YH"; then
  perl -0pi -e 's{struct cudaDeviceProp prop;(\s*)cerr = cudaGetDeviceProperties\(&prop, i\);}{int compute_mode;$1cerr = cudaDeviceGetAttribute(&compute_mode, cudaDevAttrComputeMode, i);};
                s{prop\.computeMode}{compute_mode}' "$YH"
  grep -q 'cudaDevAttrComputeMode' "$YH" && ! grep -q 'prop\.' "$YH" || { echo "patch (c) did not apply to $YH" >&2; exit 1; }
fi

if [ $REUSE = 0 ]; then
  # ---- 3. configure ------------------------------------------------------------------------------
  say "configure ${CONFIG[*]}"
  (cd "$S" && ./configure "${CONFIG[@]}") > "$LOGS/configure.log" 2>&1 ||
    { tail -30 "$LOGS/configure.log" >&2; echo "configure failed: $LOGS/configure.log" >&2; exit 1; }
  echo "${CONFIG[*]}" > "$STAMP"
fi
T1=$(date +%s)
grep -q '^#define MPL_HAVE_CUDA 1' "$S/src/mpl/include/mplconfig.h" ||
  { echo "configure did not enable CUDA in MPL (see $LOGS/configure.log)" >&2; exit 1; }
grep -q '^CUDA_GENCODE = .*sm_' "$S/modules/yaksa/Makefile" ||
  { echo "configure did not enable yaksa's CUDA backend (see $LOGS/configure.log)" >&2; exit 1; }

# ---- 4. build + install ---------------------------------------------------------------------------
say "make -j$JOBS (log: $LOGS/make.log)"
make -C "$S" -j"$JOBS" > "$LOGS/make.log" 2>&1 ||
  { grep -n -m20 -i 'error' "$LOGS/make.log" >&2 || true; tail -20 "$LOGS/make.log" >&2; echo "make failed: $LOGS/make.log" >&2; exit 1; }
T2=$(date +%s)
make -C "$S" install > "$LOGS/install.log" 2>&1 || { tail -20 "$LOGS/install.log" >&2; exit 1; }
rm -f "$PREFIX"/lib/*.la

# ---- 5. relocatable: the wrappers and mpich.pc find the prefix from where they lie ------------------
# (configure writes PREFIX into exec_prefix, includedir, libdir, -L...: all become ${prefix})
for w in mpicc mpicxx; do
  perl -pi -e 'BEGIN { $p = shift @ARGV } if (/^prefix=/) { $_ = q{prefix=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)} . "\n" } else { s/\Q$p\E/\${prefix}/g }' \
    "$PREFIX" "$PREFIX/bin/$w"
done
perl -pi -e 'BEGIN { $p = shift @ARGV } if (/^prefix=/) { $_ = "prefix=\${pcfiledir}/../..\n" } else { s/\Q$p\E/\${prefix}/g }' \
  "$PREFIX" "$PREFIX/lib/pkgconfig/mpich.pc"
if grep -Fqs -e "$PREFIX" -e "$WORK" "$PREFIX/bin/mpicc" "$PREFIX/bin/mpicxx" "$PREFIX/lib/pkgconfig/mpich.pc"; then
  echo "a wrapper or mpich.pc still names $PREFIX or $WORK" >&2; exit 1
fi
{ echo "MPICH $VERSION (Debian source package), CUDA $("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p'), sm_$CUDA_SM"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), -j$JOBS"
  echo "configure ${CONFIG[*]}"
  if [ $REUSE = 1 ]; then echo "rerun on a configured tree: make + install $((T2 - T1)) s"
  else echo "configure $((T1 - T0)) s, make $((T2 - T1)) s"; fi; } > "$PREFIX/share/build-cuda-aware-mpich.txt"

# ---- 6. checks that need no GPU ---------------------------------------------------------------------
grep -q 'int MPIX_GPU_query_support' "$PREFIX/include/mpi_proto.h" || { echo "mpi.h lacks MPIX_GPU_query_support" >&2; exit 1; }
readelf -d "$PREFIX/lib/libmpich.so" | grep -q 'NEEDED.*libcudart' || { echo "libmpich does not link libcudart" >&2; exit 1; }
if readelf -d "$PREFIX/lib/libmpich.so" | grep -E 'NEEDED.*(hsa|amdhip|ze_loader|ucp|hwloc|fabric)'; then
  echo "libmpich needs a library the device image may lack (above)" >&2; exit 1
fi
(cd "$PREFIX/bin" && ./mpicc -show | grep -q -- "-I$PREFIX/include") || { echo "mpicc relocation failed" >&2; exit 1; }
say "installed in $PREFIX ($(du -sh "$PREFIX" | cut -f1)); configure $((T1 - T0)) s, make $((T2 - T1)) s, total $(( $(date +%s) - T0 )) s, -j$JOBS"
