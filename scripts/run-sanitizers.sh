#!/usr/bin/env bash
# The standing ASan+UBSan guard (docs/reliability.md): the unit, MPI, trainer, reliability and
# fuzz-corpus tests built with -fsanitize=address,undefined in build-sanitize/, plus each libFuzzer
# target fuzzing for KDIST_FUZZ_SECONDS (default 15) when the compiler has libFuzzer. Uses clang
# (installing clang and libclang-rt-14-dev when missing); KDIST_SANITIZE_CXX=g++ uses GCC's
# sanitizers instead, without the fuzzers. .ci/run runs it after the test command. CI's job runs
# the sanitizers on the tests of run-time paths (CI's budget: 45 minutes for all of it). It leaves
# out the kernel-against-reference tests (-DKDIST_TEST_KERNEL_REFERENCES=OFF, tests/CMakeLists.txt),
# whose kernels the MPI and GPT tests run here too, the tests of compile-time types and plans and
# the MPI tests whose paths the kept ones run too (-DKDIST_TEST_RUNTIME_PATHS_ONLY=ON), the guide's
# example programs (-DKDIST_TEST_GUIDE_EXAMPLES=OFF; the GCC job builds and runs them) and the
# example trainers with their tests (-DKDIST_ENABLE_EXAMPLES=OFF; the trainers' flag parsing is
# still fuzzed); KDIST_SANITIZE_ALL=1 builds them all (about three times the build time).
set -euo pipefail
KDIST_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KDIST_EXTRA_PACKAGES="clang libclang-rt-14-dev"
export KDIST_BUILD="${KDIST_SANITIZE_BUILD:-$KDIST_ROOT/build-sanitize}"
cxx="${KDIST_SANITIZE_CXX:-clang++}"
case "$cxx" in *clang*) lines=-gline-tables-only cc=clang ;; *) lines=-g1 cc=gcc ;; esac
all=OFF
only=ON
[ "${KDIST_SANITIZE_ALL:-0}" = 1 ] && all=ON && only=OFF
# The C API's test (tests/bindings) runs here too, compiled by the C compiler of the same family
# (one sanitizer runtime); the Fortran module does not (gfortran's runtime is GCC's).
export KDIST_CMAKE_ARGS="-DCMAKE_CXX_COMPILER=$cxx -DCMAKE_C_COMPILER=$cc -DKDIST_ENABLE_FORTRAN=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKDIST_SANITIZE=address,undefined -DKDIST_SANITIZE_DEBUG_INFO=$lines \
  -DKDIST_ENABLE_BENCHMARKS=OFF -DKDIST_TEST_KERNEL_REFERENCES=$all -DKDIST_ENABLE_EXAMPLES=$all \
  -DKDIST_TEST_GUIDE_EXAMPLES=$all -DKDIST_TEST_RUNTIME_PATHS_ONLY=$only \
  -DKDIST_FUZZ_SECONDS=${KDIST_FUZZ_SECONDS:-15}"
source "$KDIST_ROOT/scripts/setup.sh"
# setup.sh configures a new build directory only; an existing one follows KDIST_SANITIZE_ALL too.
cmake "$KDIST_BUILD" -DKDIST_TEST_KERNEL_REFERENCES=$all -DKDIST_ENABLE_EXAMPLES=$all \
  -DCMAKE_C_COMPILER=$cc -DKDIST_ENABLE_FORTRAN=OFF \
  -DKDIST_TEST_GUIDE_EXAMPLES=$all -DKDIST_TEST_RUNTIME_PATHS_ONLY=$only > /dev/null

# Every sanitizer report ends the process with an error; MPICH's own allocations at exit are not
# kdist's leaks (tests/sanitizers/lsan.supp says which).
supp="$KDIST_ROOT/tests/sanitizers"
export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=1:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
# hwloc (under MPICH) dlopens its plugins where libhwloc-plugins is installed (Open MPI pulls it
# in) and unloads them; the PCI plugin's allocations then have no module LSan can name, so no
# suppression matches. kdist needs none of them: an empty plugin directory keeps them out.
export HWLOC_PLUGINS_PATH="$KDIST_BUILD/no-hwloc-plugins"
mkdir -p "$HWLOC_PLUGINS_PATH"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"

start=$(date +%s)
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS"
built=$(date +%s)
cd "$KDIST_BUILD"
status=0
ctest --output-on-failure -j "$KDIST_JOBS" "$@" || status=$?
end=$(date +%s)
echo "kdist sanitizers: build $((built - start)) s, tests $((end - built)) s"
exit $status
