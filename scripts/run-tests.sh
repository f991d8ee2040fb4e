#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every test with CTest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
start=$SECONDS
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS"
built=$SECONDS
cd "$KDIST_BUILD"
status=0
ctest --output-on-failure -j "$KDIST_JOBS" "$@" || status=$?
echo "kdist tests: build $((built - start)) s, tests $((SECONDS - built)) s"
exit $status
