#!/usr/bin/env bash
# kdist with Open MPI (issue 22): installs Debian's Open MPI and its parallel HDF5 when missing,
# builds the MPI, checkpoint, reliability and runtime tests against them in build-openmpi/ and runs
# them (a few minutes). .ci/run runs it after the MPICH jobs. Installing Open MPI may make it
# Debian's default mpicxx/mpiexec; kdist's builds name their MPI (-DKDIST_MPI), so the MPICH builds
# are not affected.
set -euo pipefail
KDIST_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KDIST_MPI=openmpi
export KDIST_BUILD="${KDIST_OPENMPI_BUILD:-$KDIST_ROOT/build-openmpi}"
# One program per test file (KDIST_TEST_BUNDLE_SIZE=1 and KDIST_MPI_TEST_BUNDLE_SIZE=1,
# tests/bundles.cmake): this job builds seven of the MPI test files, and a bundle would bring the
# others.
export KDIST_CMAKE_ARGS="-DKDIST_ENABLE_BENCHMARKS=OFF -DKDIST_ENABLE_EXAMPLES=OFF -DKDIST_TEST_BUNDLE_SIZE=1 -DKDIST_MPI_TEST_BUNDLE_SIZE=1"
source "$KDIST_ROOT/scripts/setup.sh"
cmake "$KDIST_BUILD" -DKDIST_TEST_BUNDLE_SIZE=1 -DKDIST_MPI_TEST_BUNDLE_SIZE=1 > /dev/null  # also in a directory configured before
# Parallel HDF5 through mpi_test_checkpoint_checksums and the kill-during-save tests; training
# through the reliability tests. mpi_test_checkpoint and mpi_test_model (the longest compiles, the
# same calls) are left to the MPICH build for CI's time. mpi_test_gradient_sync: the non-blocking
# all-reduces, reduce-scatters and in-place all-gathers of the data-parallel gradient sync.
targets=(mpi_test_collectives mpi_test_collectives_checked mpi_test_checkpoint_checksums
         mpi_test_gradient_sync
         mpi_test_runtime mpi_test_mpi_communicator mpi_test_mesh_communicators
         reliability_rank_fails reliability_collective_timeout reliability_checkpoint_kill
         runtime_communicator_groups runtime_guard_lifecycle)
start=$(date +%s)
cmake --build "$KDIST_BUILD" -j "$KDIST_JOBS" --target "${targets[@]}"
built=$(date +%s)
cd "$KDIST_BUILD"
status=0
ctest --output-on-failure -j "$KDIST_JOBS" -R '^(mpi_test_(collectives|collectives_checked|checkpoint_checksums|gradient_sync|runtime|mpi_communicator|mesh_communicators)\.np|reliability\.|runtime\.(communicator_groups|guard_lifecycle))' "$@" || status=$?
end=$(date +%s)
echo "kdist with Open MPI: build $((built - start)) s, tests $((end - built)) s"
exit $status
