#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every test with CTest.
# It builds in build-tests/ with the examples and benchmarks "checked" (compiled at the tests'
# flags on the tests' model classes: cmake/kdistProjectOptions.cmake), which saves CI most of a
# cold build; build/ (the main job's, and every benchmark figure's) stays optimised.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KDIST_BUILD="${KDIST_BUILD:-$root/build-tests}"
export KDIST_CMAKE_ARGS="-DKDIST_PROGRAMS=checked ${KDIST_CMAKE_ARGS:-}"
source "$root/scripts/setup.sh"
start=$SECONDS
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS"
built=$SECONDS
cd "$KDIST_BUILD"
status=0
ctest --output-on-failure -j "$KDIST_JOBS" "$@" || status=$?
echo "kdist tests: build $((built - start)) s, tests $((SECONDS - built)) s"
exit $status
