#!/usr/bin/env bash
# The main job: installs what is missing, builds the quickstart example and runs it on 8 ranks.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS" --target quickstart
mpiexec -n 8 "$KDIST_BUILD/examples/quickstart" "$@"
