# One failing process ends the whole job, fast, with its message (docs/reliability.md). Each test
# bounds the job's wall time: a hang is a failure, not a CTest timeout.
add_executable(reliability_rank_fails ${CMAKE_CURRENT_SOURCE_DIR}/reliability/rank_fails.cpp)
target_link_libraries(reliability_rank_fails PRIVATE kdist::kdist kdist_warnings
                      kdist_test_optimization)
set(_ends ${CMAKE_CURRENT_SOURCE_DIR}/reliability/expect_job_ends.cmake)
set(_prog $<TARGET_FILE:reliability_rank_fails>)

# name; ranks; mode; expected output
function(kdist_rank_fails name np mode expect)
  add_test(NAME reliability.${name}.np${np}
           COMMAND ${CMAKE_COMMAND} "-DCMD=${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|${np}|${_prog}|${mode}"
                   -DLIMIT=10 "-DEXPECT=${expect}" "-DFORBID=${ARGN}" -P ${_ends})
  set_tests_properties(reliability.${name}.np${np} PROPERTIES PASS_REGULAR_EXPRESSION "job ended as expected"
                       PROCESSORS ${np} RESOURCE_LOCK mpi TIMEOUT 60)
endfunction()
foreach(_np 2 4)
  kdist_rank_fails(collective ${_np} collective
    "error: process 1 of ${_np} failed: kdist::all_reduce: send has 4 elements but recv has 5.*MPI_Abort")
  kdist_rank_fails(redistribute ${_np} redistribute
    "error: process 1 of ${_np} failed: kdist::redistribute: .*which is on another mesh.*MPI_Abort")
  kdist_rank_fails(uncaught ${_np} uncaught
    "error: process 1 of ${_np} failed: uncaught exception: thrown out of main on process 1.*MPI_Abort")
  kdist_rank_fails(sigkill_in_collective ${_np} kill ".")
endforeach()
# A grace period that is not a number of seconds: a warning, and the job still ends.
add_test(NAME reliability.bad_grace_seconds.np2
         COMMAND ${CMAKE_COMMAND} "-DCMD=env|KDIST_FAILURE_GRACE_SECONDS=soon|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|2|${_prog}|collective"
                 -DLIMIT=10 "-DEXPECT=KDIST_FAILURE_GRACE_SECONDS is 'soon', not a number of seconds from 0 to 600; using 2.*error: process 1 of 2 failed"
                 -P ${_ends})
set_tests_properties(reliability.bad_grace_seconds.np2 PROPERTIES PASS_REGULAR_EXPRESSION "job ended as expected"
                     PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 60)
# An error every process shares is printed once, and the job ends without MPI_Abort.
kdist_rank_fails(everyone 4 everyone "error: every process fails alike" "MPI_Abort|process [0-9] of")

if(KDIST_ENABLE_EXAMPLES)
  # The trainer with the dataset missing on process 1 only (MPMD launch: one environment per rank).
  set(_mp $<TARGET_FILE:model_parallel_trainer>)
  set(_data "$ENV{KDIST_FASHION_MNIST_DIR}")
  if(NOT _data)
    set(_data /usr/share/datasets/fashion-mnist)
  endif()
  add_test(NAME reliability.trainer_dataset_missing_on_one_rank.np2
           COMMAND ${CMAKE_COMMAND}
                   "-DCMD=${MPIEXEC_EXECUTABLE}|-n|1|env|KDIST_FASHION_MNIST_DIR=${_data}|${_mp}|--mesh|1x2|--epochs|1|:|-n|1|env|KDIST_FASHION_MNIST_DIR=/nonexistent/on-rank-1|${_mp}|--mesh|1x2|--epochs|1"
                   -DLIMIT=10 "-DEXPECT=error: process 1 of 2 failed: .*/nonexistent/on-rank-1.*MPI_Abort"
                   -P ${_ends})
  set_tests_properties(reliability.trainer_dataset_missing_on_one_rank.np2 PROPERTIES
                       PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 2
                       RESOURCE_LOCK mpi TIMEOUT 60)
  # Fault injection: SIGKILL one process mid-training; the job ends within seconds, non-zero.
  add_test(NAME reliability.trainer_sigkill_one_rank.np2
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/reliability/kill_one_rank.sh 10 "Epoch 1/"
                   ${MPIEXEC_EXECUTABLE} 2 ${_mp} --mesh 1x2 --epochs 50)
  set_tests_properties(reliability.trainer_sigkill_one_rank.np2 PROPERTIES
                       PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 2
                       RESOURCE_LOCK mpi TIMEOUT 120)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/collective_timeout.cmake)
