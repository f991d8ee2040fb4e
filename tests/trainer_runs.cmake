# Included by the cmake -P scripts that run a trainer twice and compare (run_resume.cmake,
# run_keras_weights.cmake): MPIEXEC and TRAINER are given with -D.

# run_trainer(<out> <flags>...): the trainer on 2 processes; its output in <out>; fails the test
# if it fails.
function(run_trainer out)
  execute_process(COMMAND ${MPIEXEC} -n 2 ${TRAINER} ${ARGN}
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 300)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${ARGN}: the trainer failed (${_rc}):\n${_out}\n${_err}")
  endif()
  set(${out} "${_out}" PARENT_SCOPE)
endfunction()

# expect_same_test_metrics(<what> <name_a> <output_a> <name_b> <output_b>): the two runs print the
# same "Test loss: ... - Test accuracy: ..." line.
function(expect_same_test_metrics what name_a out_a name_b out_b)
  string(REGEX MATCH "Test loss: [0-9.]+ - Test accuracy: [0-9.]+" _a "${out_a}")
  string(REGEX MATCH "Test loss: [0-9.]+ - Test accuracy: [0-9.]+" _b "${out_b}")
  message(STATUS "${name_a}: ${_a}; ${name_b}: ${_b}")
  if(NOT _a OR NOT _a STREQUAL _b)
    message(FATAL_ERROR "${what}:\n${out_a}\n---\n${out_b}")
  endif()
endfunction()
