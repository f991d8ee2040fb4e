#!/usr/bin/env bash
# The test command: installs what is missing, builds everything, runs every test with CTest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS"
cd "$KDIST_BUILD"
ctest --output-on-failure -j "$KDIST_JOBS" "$@"
