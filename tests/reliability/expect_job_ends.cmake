# Runs CMD ('|'-separated words) and checks that the job ENDS within LIMIT seconds with a non-zero
# exit status and output matching EXPECT (and not FORBID, when given). Prints the output and the
# time taken. Used by tests/reliability.cmake.
string(REPLACE "|" ";" _cmd "${CMD}")
string(TIMESTAMP _t0 "%s")
execute_process(COMMAND ${_cmd} TIMEOUT ${LIMIT} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                ERROR_VARIABLE _err)
string(TIMESTAMP _t1 "%s")
math(EXPR _dt "${_t1} - ${_t0}")
message("${_out}${_err}")
message("-- exit status '${_rc}' after ${_dt} s (limit ${LIMIT} s)")
if(NOT _rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end within ${LIMIT} s (${_rc})")
endif()
if(_rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; a failure must end it non-zero")
endif()
if(NOT "${_out}${_err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match: ${EXPECT}")
endif()
if(FORBID AND "${_out}${_err}" MATCHES "${FORBID}")
  message(FATAL_ERROR "output matches what it must not: ${FORBID}")
endif()
message("job ended as expected")
