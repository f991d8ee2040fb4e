# Checkpoints and Keras weights files (issue 11, docs/checkpoints.md). tests/mpi/test_checkpoint.cpp
# and test_keras_weights.cpp are registered with the other MPI tests; here: the HDF5 tools they
# compare the file's tree with, the Keras-written file in tests/data, and the crash-safety test.
# The definitions go to the program that holds each file (tests/bundles.cmake).
find_program(KDIST_H5LS h5ls DOC "HDF5's h5ls (Debian: hdf5-tools), for the checkpoint tests")
get_property(_checkpoint_program GLOBAL PROPERTY KDIST_TEST_PROGRAM_mpi_test_checkpoint)
get_property(_keras_program GLOBAL PROPERTY KDIST_TEST_PROGRAM_mpi_test_keras_weights)
if(KDIST_H5LS)
  if(_checkpoint_program)  # not in CI's sanitizer job (KDIST_TEST_KERNEL_REFERENCES)
    target_compile_definitions(${_checkpoint_program} PRIVATE KDIST_TEST_H5LS="${KDIST_H5LS}")
  endif()
  if(_keras_program AND NOT _keras_program STREQUAL _checkpoint_program)
    target_compile_definitions(${_keras_program} PRIVATE KDIST_TEST_H5LS="${KDIST_H5LS}")
  endif()
endif()
get_property(_model_file_program GLOBAL PROPERTY KDIST_TEST_PROGRAM_mpi_test_keras_model_file)
if(_model_file_program AND NOT _model_file_program STREQUAL _keras_program)
  target_compile_definitions(${_model_file_program}
                             PRIVATE KDIST_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
endif()
if(_keras_program)  # not in CI's sanitizer job (KDIST_TEST_RUNTIME_PATHS_ONLY)
  target_compile_definitions(${_keras_program}
                             PRIVATE KDIST_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
endif()

# Crash safety: a save killed midway (SIGKILL of one process during its MPI-IO writes) leaves the
# previous checkpoint intact and loadable. The first test kills the job and must see it end
# (non-zero, within its limit); the second, a fresh run, loads what is left.
add_executable(reliability_checkpoint_kill ${CMAKE_CURRENT_SOURCE_DIR}/reliability/checkpoint_kill.cpp)
target_link_libraries(reliability_checkpoint_kill PRIVATE kdist_test_instances kdist::io kdist_warnings
                      kdist_test_optimization)
target_include_directories(reliability_checkpoint_kill PRIVATE ${PROJECT_SOURCE_DIR}/examples)
# its MPI_File_write_at[_all] wrappers must be what libhdf5 calls
set_target_properties(reliability_checkpoint_kill PROPERTIES ENABLE_EXPORTS ON)
set(_kdist_job_ends ${CMAKE_CURRENT_SOURCE_DIR}/reliability/expect_job_ends.cmake)
foreach(_np 2 4)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_kill_np${_np})
  add_test(NAME reliability.checkpoint_kill_during_save.np${_np}
           COMMAND ${CMAKE_COMMAND}
                   "-DCMD=env|KDIST_TEST_KILL_DURING_SAVE=2|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|${_np}|$<TARGET_FILE:reliability_checkpoint_kill>|save|${_dir}"
                   -DLIMIT=60 "-DEXPECT=first checkpoint saved.*SIGKILLs itself in the middle of a save"
                   "-DFORBID=second checkpoint saved" -P ${_kdist_job_ends})
  set_tests_properties(reliability.checkpoint_kill_during_save.np${_np} PROPERTIES
                       PASS_REGULAR_EXPRESSION "job ended as expected"
                       FIXTURES_SETUP checkpoint_killed_np${_np} PROCESSORS ${_np}
                       RESOURCE_LOCK mpi TIMEOUT 120)
  add_test(NAME reliability.checkpoint_intact_after_kill.np${_np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_np}
                   $<TARGET_FILE:reliability_checkpoint_kill> check ${_dir})
  set_tests_properties(reliability.checkpoint_intact_after_kill.np${_np} PROPERTIES
                       PASS_REGULAR_EXPRESSION "checkpoint intact"
                       FIXTURES_REQUIRED checkpoint_killed_np${_np} PROCESSORS ${_np}
                       RESOURCE_LOCK mpi TIMEOUT 120)
endforeach()

# No blocking operation without a deadline (issue 35): a process STOPPED during a save (SIGSTOP: a
# hung host or file system; it stays, silent) at the save's MPI_File_open, in the middle of the data
# (its 2nd MPI-IO write) or, process 0, at the rename that publishes the file. The I/O watchdog
# (include/kdist/io/detail/io_watch.hpp) or the collective watchdog must end the job within the
# timeout (2 s) plus 10 s after the stop (LIMIT adds the run's first epoch and save), naming the
# file, the operation and the process that did not arrive; the previous checkpoint stays intact.
set(_stops open "2" publish)
set(_stop_names at_open in_the_data at_publish)
foreach(_np 2 4)
  math(EXPR _last "${_np} - 1")
  foreach(_i RANGE 2)
    list(GET _stops ${_i} _at)
    list(GET _stop_names ${_i} _name)
    if(_at STREQUAL "publish")
      set(_expect "SIGSTOPs itself as it publishes the save.*kdist::mpi::agree on [^\n]* did not complete within 2 s[^\n]*process 0 did not arrive")
    elseif(_at STREQUAL "open")
      set(_expect "SIGSTOPs itself as the save opens its file.*kdist::save_checkpoint: creating '[^']*ckpt.h5.tmp-[0-9]+' \\(H5Fcreate, MPI-IO\\) of '[^']*ckpt.h5' did not complete within 2 s, outside a training step: process ${_last} did not arrive.*is as it was: the save writes")
    else()
      set(_expect "SIGSTOPs itself in the middle of a save.*kdist::save_checkpoint: [^\n]* of '[^']*ckpt.h5' did not complete within 2 s[^\n]*process ${_last} did not arrive")
    endif()
    set(_dir ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_stop_${_name}_np${_np})
    set(_test reliability.checkpoint_stop_${_name}.np${_np})
    add_test(NAME ${_test}
             COMMAND ${CMAKE_COMMAND}
                     "-DCMD=env|KDIST_COLLECTIVE_TIMEOUT=2|KDIST_TEST_STOP_DURING_SAVE=${_at}|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|${_np}|$<TARGET_FILE:reliability_checkpoint_kill>|save|${_dir}"
                     -DLIMIT=40 "-DEXPECT=first checkpoint saved.*${_expect}"
                     "-DFORBID=second checkpoint saved" -P ${_kdist_job_ends})
    set_tests_properties(${_test} PROPERTIES PASS_REGULAR_EXPRESSION "job ended as expected"
                         FIXTURES_SETUP checkpoint_stop_${_name}_np${_np} PROCESSORS ${_np}
                         RESOURCE_LOCK mpi TIMEOUT 120)
    add_test(NAME reliability.checkpoint_intact_after_stop_${_name}.np${_np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_np}
                     $<TARGET_FILE:reliability_checkpoint_kill> check ${_dir} any)
    set_tests_properties(reliability.checkpoint_intact_after_stop_${_name}.np${_np} PROPERTIES
                         PASS_REGULAR_EXPRESSION "checkpoint intact"
                         FIXTURES_REQUIRED checkpoint_stop_${_name}_np${_np} PROCESSORS ${_np}
                         RESOURCE_LOCK mpi TIMEOUT 120)
  endforeach()
endforeach()
# The I/O watchdog alone (the collective watchdog off, KDIST_IO_TIMEOUT set), and a FIRST save
# stopped midway: the job ends and nothing is published under the checkpoint's name.
set(_dir ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_stop_first_save)
add_test(NAME reliability.checkpoint_stop_first_save_io_timeout_only.np2
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD=env|KDIST_COLLECTIVE_TIMEOUT=off|KDIST_IO_TIMEOUT=2|KDIST_TEST_STOP_FIRST_SAVE=1|KDIST_TEST_STOP_DURING_SAVE=2|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|2|$<TARGET_FILE:reliability_checkpoint_kill>|save|${_dir}"
                 -DLIMIT=30 "-DEXPECT=SIGSTOPs itself in the middle of a save.*kdist::save_checkpoint: [^\n]* of '[^']*ckpt.h5' did not complete within 2 s[^\n]*process 1 did not arrive[^\n]*The timeout is KDIST_IO_TIMEOUT"
                 "-DFORBID=first checkpoint saved" -P ${_kdist_job_ends})
set_tests_properties(reliability.checkpoint_stop_first_save_io_timeout_only.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "job ended as expected"
                     FIXTURES_SETUP checkpoint_stop_first_save PROCESSORS 2
                     RESOURCE_LOCK mpi TIMEOUT 120)
add_test(NAME reliability.checkpoint_none_after_first_save_stopped.np2
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                 $<TARGET_FILE:reliability_checkpoint_kill> check_none ${_dir})
set_tests_properties(reliability.checkpoint_none_after_first_save_stopped.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "no checkpoint published"
                     FIXTURES_REQUIRED checkpoint_stop_first_save PROCESSORS 2
                     RESOURCE_LOCK mpi TIMEOUT 120)
# Asynchronous saves (kdist::AsyncCheckpointer): the second save is written in the background while
# a third epoch trains. Whole, it holds the second epoch's state bit for bit; killed or stopped in
# the middle of its data, the job ends (the stop: within the timeout, by the I/O watchdog of the
# writer's thread or the collective watchdog of the training) and the first checkpoint is intact;
# its error never waited for ends the job from the checkpointer's destructor.
set(_async_cases "ok" "kill" "stop")
set(_async_env "" "KDIST_TEST_KILL_DURING_SAVE=2|" "KDIST_COLLECTIVE_TIMEOUT=2|KDIST_TEST_STOP_DURING_SAVE=2|")
set(_async_expect "second checkpoint saved"
    "job ended as expected"
    "job ended as expected")
set(_async_check check_second check check)
set(_async_check_tail "" "" any)
foreach(_i RANGE 2)
  list(GET _async_cases ${_i} _case)
  list(GET _async_env ${_i} _env)
  list(GET _async_check ${_i} _check)
  list(GET _async_check_tail ${_i} _check_tail)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/async_checkpoint_${_case})
  set(_cmd env ${_env}KDIST_TEST_ASYNC_SAVE=1 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
      $<TARGET_FILE:reliability_checkpoint_kill> save ${_dir})
  if(_case STREQUAL "ok")
    string(REPLACE "|" ";" _cmd "${_cmd}")
    add_test(NAME reliability.async_checkpoint.np2 COMMAND ${_cmd})
    set(_test reliability.async_checkpoint.np2)
    set(_pass "second checkpoint saved")
  else()
    if(_case STREQUAL "kill")
      set(_expect "SIGKILLs itself in the middle of a save")
    else()
      set(_expect "SIGSTOPs itself in the middle of a save.*did not complete within 2 s[^\n]*process 1[^\n]* did not arrive")
    endif()
    string(REPLACE ";" "|" _cmd "${_cmd}")
    set(_test reliability.async_checkpoint_${_case}_during_save.np2)
    add_test(NAME ${_test}
             COMMAND ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DLIMIT=40
                     "-DEXPECT=first checkpoint saved.*${_expect}"
                     "-DFORBID=second checkpoint saved" -P ${_kdist_job_ends})
    set(_pass "job ended as expected")
  endif()
  set_tests_properties(${_test} PROPERTIES PASS_REGULAR_EXPRESSION "${_pass}"
                       FIXTURES_SETUP async_checkpoint_${_case} PROCESSORS 2
                       RESOURCE_LOCK mpi TIMEOUT 120)
  add_test(NAME reliability.async_checkpoint_intact_after_${_case}.np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                   $<TARGET_FILE:reliability_checkpoint_kill> ${_check} ${_dir} ${_check_tail})
  set_tests_properties(reliability.async_checkpoint_intact_after_${_case}.np2 PROPERTIES
                       PASS_REGULAR_EXPRESSION "checkpoint intact"
                       FIXTURES_REQUIRED async_checkpoint_${_case} PROCESSORS 2
                       RESOURCE_LOCK mpi TIMEOUT 120)
endforeach()
add_test(NAME reliability.async_checkpoint_error_never_waited_for.np2
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD=${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|2|$<TARGET_FILE:reliability_checkpoint_kill>|unwaited|${CMAKE_CURRENT_BINARY_DIR}/async_checkpoint_unwaited"
                 -DLIMIT=30 "-DEXPECT=kdist::AsyncCheckpointer::save: cannot create '[^']*no/such/dir/ckpt.h5.tmp-[0-9]+'[^\n]* \\(the error of an asynchronous save that nothing waited for: call kdist::AsyncCheckpointer::wait\\(\\) to have it raised\\)"
                 "-DFORBID=the job went on" -P ${_kdist_job_ends})
set_tests_properties(reliability.async_checkpoint_error_never_waited_for.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 2
                     RESOURCE_LOCK mpi TIMEOUT 120)
# A bad KDIST_IO_TIMEOUT: one clear error on every process, at the first save.
add_test(NAME reliability.io_timeout_bad_value.np2
         COMMAND ${CMAKE_COMMAND}
                 "-DCMD=env|KDIST_IO_TIMEOUT=soon|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|2|$<TARGET_FILE:reliability_checkpoint_kill>|save|${CMAKE_CURRENT_BINARY_DIR}/checkpoint_bad_io_timeout"
                 -DLIMIT=30 "-DEXPECT=error: KDIST_IO_TIMEOUT is 'soon', not a number of seconds"
                 "-DFORBID=first checkpoint saved" -P ${_kdist_job_ends})
set_tests_properties(reliability.io_timeout_bad_value.np2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 2
                     RESOURCE_LOCK mpi TIMEOUT 120)
