#!/usr/bin/env bash
# The main job: installs what is missing, builds the ModelParallel trainer and trains the seeds'
# model on Fashion-MNIST on a 2-D (data, model) mesh of 2 processes, 5 epochs, Adam +
# cross-entropy. Extra arguments go to the trainer (e.g. --epochs 1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS" --target model_parallel_trainer
# The launcher of the MPI the build uses (Debian may have several: mpiexec.mpich, mpiexec.openmpi).
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$KDIST_BUILD/CMakeCache.txt")
exec "${mpiexec:-mpiexec}" -n "${KDIST_RANKS:-2}" "$KDIST_BUILD/examples/model_parallel_trainer" \
  --mesh "${KDIST_MESH:-1x2}" --epochs 5 "$@"
