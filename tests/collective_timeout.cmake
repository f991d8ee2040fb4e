# The stuck-collective watchdog (docs/reliability.md): a collective that does not complete within
# KDIST_COLLECTIVE_TIMEOUT (here 2 s) ends the job, naming the collective, the step, the mesh axis
# and the processes that did not arrive. Each job must END within LIMIT seconds (the timeout, the
# watchdog's 1 s listening window, the failure path's 0.3 s and MPI's start-up): a hang fails.
add_executable(reliability_collective_timeout
               ${CMAKE_CURRENT_SOURCE_DIR}/reliability/collective_timeout.cpp)
target_link_libraries(reliability_collective_timeout PRIVATE kdist_test_instances kdist::io kdist_warnings
                      kdist_test_optimization)
target_include_directories(reliability_collective_timeout PRIVATE ${PROJECT_SOURCE_DIR}/examples)
set(_wd_prog $<TARGET_FILE:reliability_collective_timeout>)
set(_wd_ends ${CMAKE_CURRENT_SOURCE_DIR}/reliability/expect_job_ends.cmake)

# name; environment ('|'-separated words, e.g. KDIST_COLLECTIVE_TIMEOUT=2); ranks; limit (s);
# program arguments ('|'-separated); expected output; [output forbidden]
function(kdist_watchdog_test name env np limit args expect)
  add_test(NAME reliability.watchdog.${name}.np${np}
           COMMAND ${CMAKE_COMMAND}
                   "-DCMD=env|${env}|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|${np}|${_wd_prog}|${args}"
                   -DLIMIT=${limit} "-DEXPECT=${expect}" "-DFORBID=${ARGN}" -P ${_wd_ends})
  set_tests_properties(reliability.watchdog.${name}.np${np} PROPERTIES
                       PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS ${np}
                       RESOURCE_LOCK mpi TIMEOUT 120)
endfunction()

set(_wd_env KDIST_COLLECTIVE_TIMEOUT=2)
foreach(_np 2 3)
  math(EXPR _last "${_np} - 1")
  kdist_watchdog_test(all_reduce ${_wd_env} ${_np} 10 "stuck|all_reduce"
    "error: process 0 of ${_np} failed: kdist::all_reduce on mesh axis 'data' \\(${_np} processes\\) did not complete within 2 s \\(collective #1 on it\\), during fit, epoch 1, step 3: process ${_last} did not arrive.*MPI_Abort"
    "the collective completed")
endforeach()
foreach(_c all_gather reduce_scatter broadcast all_to_all)
  kdist_watchdog_test(${_c} ${_wd_env} 2 10 "stuck|${_c}"
    "failed: kdist::${_c} on mesh axis 'data' \\(2 processes\\) did not complete within 2 s.*during fit, epoch 1, step 3: process 1 did not arrive"
    "the collective completed")
endforeach()
kdist_watchdog_test(agree ${_wd_env} 3 10 "stuck|agree|outside"
  "failed: kdist::mpi::agree on mesh axis 'data' \\(3 processes\\).*outside a training step: process 2 did not arrive")
# A halo exchange's point-to-point messages (issue 38): process 1 waits for its neighbour, 2.
kdist_watchdog_test(halo_gather ${_wd_env} 3 10 "stuck|halo_gather"
  "process 1 of 3 failed: kdist::halo_gather along dimension 0 on mesh axis 'data' did not complete within 2 s, during fit, epoch 1, step 3: no message from or to process\\(es\\) 2 of it")
# A process that returns from its main while another is stuck: kdist::run's end does not wait in
# MPI_Finalize forever; process 0 names the one that did not arrive.
foreach(_np 2 3)
  math(EXPR _last "${_np} - 1")
  kdist_watchdog_test(end ${_wd_env} ${_np} 10 "end"
    "error: process 0 of ${_np} failed: kdist::run: this process returned from its main, and process ${_last} did not within 2 s \\(stopped, or still working\\): the job ends.*MPI_Abort")
endforeach()
# A producer of streamed training data that stops without close() (issue 38): the trainer,
# waiting for a batch, names it.
kdist_watchdog_test(stream ${_wd_env} 3 10 "stream"
  "process 0 of 3 failed: kdist::StreamingDataset on communicator 'MPI_COMM_WORLD' waited 2 s for 4 examples before a batch \\(it holds 3\\): no message from producer process\\(es\\) 2 of it, which did not close their streams"
  "a batch came")
# The API setting, with the default (10 min) in the environment.
kdist_watchdog_test(api KDIST_WATCHDOG_TEST=api 2 10 "stuck|all_reduce|api"
  "failed: kdist::all_reduce on mesh axis 'data' \\(2 processes\\) did not complete within 2 s")
# Communicator ranks that are not process ids: process 3 is rank 1 of both of its axes.
kdist_watchdog_test(grid ${_wd_env} 4 10 "grid"
  "kdist::all_reduce on mesh axis '(model|data)' \\(2 processes\\) did not complete within 2 s \\(collective #[0-9]+ on it\\), during evaluate, epoch 1, step 1: process 3 \\(rank 1 of the communicator\\) did not arrive")
# Bad values: one error, printed once, on every process alike (no MPI_Abort).
foreach(_bad soon -1 1e99)
  string(MAKE_C_IDENTIFIER "${_bad}" _id)
  kdist_watchdog_test(bad_value_${_id} KDIST_COLLECTIVE_TIMEOUT=${_bad} 2 10 "stuck|all_reduce"
    "error: KDIST_COLLECTIVE_TIMEOUT is '${_bad}', not a number of seconds from 0 to 10000000 or 'off'"
    "MPI_Abort|process [0-9] of|stops")
endforeach()

# A bad value on one process only (MPMD launch): the same error on every process, printed once.
# Each program's variable is set with `env` (MPICH's -env and Open MPI's -x differ).
add_test(NAME reliability.watchdog.bad_value_on_one_process.np2
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD=${MPIEXEC_EXECUTABLE}|-n|1|env|KDIST_COLLECTIVE_TIMEOUT=2|${_wd_prog}|stuck|all_reduce|:|-n|1|env|KDIST_COLLECTIVE_TIMEOUT=2x|${_wd_prog}|stuck|all_reduce"
                 -DLIMIT=10 "-DEXPECT=error: KDIST_COLLECTIVE_TIMEOUT is '2x', not a number"
                 "-DFORBID=MPI_Abort|process [0-9] of|stops" -P ${_wd_ends})
set_tests_properties(reliability.watchdog.bad_value_on_one_process.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 2
                     RESOURCE_LOCK mpi TIMEOUT 120)

# The watchdog off on one process and on on the other: their collectives would not match.
add_test(NAME reliability.watchdog.off_on_one_process.np2
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD=${MPIEXEC_EXECUTABLE}|-n|1|env|KDIST_COLLECTIVE_TIMEOUT=2|${_wd_prog}|stuck|all_reduce|:|-n|1|env|KDIST_COLLECTIVE_TIMEOUT=off|${_wd_prog}|stuck|all_reduce"
                 -DLIMIT=10 "-DEXPECT=error: the stuck-collective watchdog is off on some processes and on on others"
                 "-DFORBID=MPI_Abort|process [0-9] of|stops" -P ${_wd_ends})
set_tests_properties(reliability.watchdog.off_on_one_process.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 2
                     RESOURCE_LOCK mpi TIMEOUT 120)

# With the watchdog off the collectives are MPI's blocking calls: the collective tests again.
foreach(_np 2 3)
  foreach(_t mpi_test_collectives mpi_test_collectives_checked)
    string(REGEX REPLACE "^mpi_" "" _file ${_t})
    kdist_test_program(${_t} ${CMAKE_CURRENT_SOURCE_DIR}/mpi/${_file}.cpp _program _filter)
    add_test(NAME reliability.watchdog.off.${_t}.np${_np}
             COMMAND env KDIST_COLLECTIVE_TIMEOUT=off ${MPIEXEC_EXECUTABLE}
                     ${MPIEXEC_NUMPROC_FLAG} ${_np} $<TARGET_FILE:${_program}> ${_filter})
    set_tests_properties(reliability.watchdog.off.${_t}.np${_np} PROPERTIES
                         PROCESSORS ${_np} RESOURCE_LOCK mpi TIMEOUT 300)
  endforeach()
endforeach()

# Training stopped in the middle: the job ends within the timeout plus seconds, naming the step,
# and the last checkpoint (epoch 2) loads in a fresh run.
set(_wd_dir ${CMAKE_CURRENT_BINARY_DIR}/watchdog_train)
kdist_watchdog_test(train ${_wd_env} 2 30 "train|${_wd_dir}"
  "checkpoint of epoch 2 saved.*did not complete within 2 s \\(collective #[0-9]+ on it\\), during fit, epoch 3, step 1: process 1 did not arrive"
  "checkpoint of epoch 3 saved|training ended")
set_tests_properties(reliability.watchdog.train.np2 PROPERTIES FIXTURES_SETUP watchdog_train)
add_test(NAME reliability.watchdog.train_checkpoint_loads.np2
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${_wd_prog} check ${_wd_dir})
set_tests_properties(reliability.watchdog.train_checkpoint_loads.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "the last checkpoint loads"
                     FIXTURES_REQUIRED watchdog_train PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
