# cmake -DMPIEXEC=... -DTRAINER=... -P run_guide_meshes.cmake
# The guide's promise, at 8 processes: the ModelParallel trainer on the guide's mesh shapes
# (2,4), (8,1), (4,2), (1,8) prints the same training loss and accuracy (results do not depend on
# the mesh; only the mesh string changes, no code).
set(_meshes 2x4 8x1 4x2 1x8)
set(_first "")
foreach(_m IN LISTS _meshes)
  execute_process(COMMAND ${MPIEXEC} -n 8 ${TRAINER} --mesh ${_m} --epochs 1 --steps 5
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 300)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "mesh ${_m}: the trainer failed (${_rc}):\n${_out}\n${_err}")
  endif()
  string(REGEX MATCH "5/5 [^\n]*- loss: ([0-9.]+) - accuracy: ([0-9.]+)" _line "${_out}")
  if(NOT _line)
    message(FATAL_ERROR "mesh ${_m}: no 5/5 progress line in:\n${_out}")
  endif()
  set(_metrics "loss ${CMAKE_MATCH_1} accuracy ${CMAKE_MATCH_2}")
  message(STATUS "mesh ${_m}: ${_metrics}")
  if(_first STREQUAL "")
    set(_first "${_metrics}")
  elseif(NOT _metrics STREQUAL _first)
    message(FATAL_ERROR "mesh ${_m} gives ${_metrics}, mesh 2x4 gave ${_first}")
  endif()
endforeach()
message(STATUS "guide meshes agree")
