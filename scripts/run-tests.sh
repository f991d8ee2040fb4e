#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every test with CTest.
# It builds in build-tests/ with the examples and benchmarks "checked" (compiled at the tests'
# flags on the tests' model classes: cmake/kdistProjectOptions.cmake), which saves CI most of a
# cold build; build/ (the main job's, and every benchmark figure's) stays optimised. The test
# programs themselves are compiled by clang++ at -O0 (cmake/kdistTestCompiler.cmake: 2.4x less
# compile than GCC's -O1), the rest by GCC; KDIST_TEST_PROGRAM_COMPILER= (empty) keeps them on GCC.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KDIST_BUILD="${KDIST_BUILD:-$root/build-tests}"
test_compiler="${KDIST_TEST_PROGRAM_COMPILER-clang++}"
if [ -n "$test_compiler" ]; then
  export KDIST_EXTRA_PACKAGES="clang libomp-dev ${KDIST_EXTRA_PACKAGES:-}"
fi
# hipcc (Debian's, ROCm 5.2) and libstdc++ 11's headers, which its clang 15 needs in C++20: the
# plain-hipcc header checks (tests/hipcc.cmake, ~25 s); nvcc's come with the CUDA toolkit.
export KDIST_EXTRA_PACKAGES="hipcc libstdc++-11-dev ${KDIST_EXTRA_PACKAGES:-}"
export KDIST_CMAKE_ARGS="-DKDIST_PROGRAMS=checked -DKDIST_TEST_PROGRAM_COMPILER=$test_compiler ${KDIST_CMAKE_ARGS:-}"
source "$root/scripts/setup.sh"
start=$SECONDS
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS"
built=$SECONDS
cd "$KDIST_BUILD"
status=0
ctest --output-on-failure -j "$KDIST_JOBS" "$@" || status=$?
echo "kdist tests: build $((built - start)) s, tests $((SECONDS - built)) s"
exit $status
