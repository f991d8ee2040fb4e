# kdist's C API and Fortran module (bindings/; docs/guide/09-c-and-fortran.md), each tested from its own
# language under mpiexec at 1 and 2 processes: a C program (test_c_api.c) and a Fortran one
# (test_fortran.F90) that check the Keras fixtures' predictions, training, the files read back,
# ModelParallel/FSDP against DataParallel, and every error path's status and message. Their files
# go to a scratch directory of their own under the build directory.
add_executable(test_c_api ${CMAKE_CURRENT_SOURCE_DIR}/bindings/test_c_api.c)
target_link_libraries(test_c_api PRIVATE kdist::c MPI::MPI_C m)
target_compile_options(test_c_api PRIVATE -std=c11 -Wall -Wextra -Wpedantic -Werror)
if(KDIST_SANITIZE)  # clang's C driver leaves out UBSan's C++ runtime, which libkdist_c needs
  set_target_properties(test_c_api PROPERTIES LINKER_LANGUAGE CXX)
endif()
set(_kdist_binding_tests test_c_api)
if(KDIST_FORTRAN)
  add_executable(test_fortran ${CMAKE_CURRENT_SOURCE_DIR}/bindings/test_fortran.F90)
  target_link_libraries(test_fortran PRIVATE kdist::fortran MPI::MPI_Fortran)
  target_compile_options(test_fortran PRIVATE -std=f2018 -ffree-line-length-none -Wall)
  list(APPEND _kdist_binding_tests test_fortran)
endif()
foreach(_test IN LISTS _kdist_binding_tests)
  foreach(_n 1 2)
    set(_scratch ${CMAKE_CURRENT_BINARY_DIR}/bindings_scratch/${_test}.np${_n})
    file(MAKE_DIRECTORY ${_scratch})
    add_test(NAME bindings.${_test}.np${_n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_n} $<TARGET_FILE:${_test}>
                     ${CMAKE_CURRENT_SOURCE_DIR}/data ${_scratch})
    set_tests_properties(bindings.${_test}.np${_n} PROPERTIES
      PASS_REGULAR_EXPRESSION "${_test}: passed" FAIL_REGULAR_EXPRESSION "failed"
      PROCESSORS ${_n} RESOURCE_LOCK mpi TIMEOUT 300)
  endforeach()
endforeach()

# The examples (examples/c, examples/fortran): the C code trains, saves a Keras file, and a
# ModelParallel run loads it back; the Fortran heat-equation code trains its FSDP surrogate in situ,
# which must beat persistence on a held-out episode; a grid its processes do not divide is an error.
if(KDIST_ENABLE_EXAMPLES)  # examples/CMakeLists.txt (configured after the tests)
  set(_c_out ${CMAKE_CURRENT_BINARY_DIR}/bindings_scratch/c_regression)
  add_test(NAME example.c_regression.np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:c_regression>
                   --steps 300 --out ${_c_out})
  set_tests_properties(example.c_regression.np2 PROPERTIES
    PASS_REGULAR_EXPRESSION "DataParallel on 2 processes: loss first .*held-out mean squared error .*Saved "
    FAIL_REGULAR_EXPRESSION "(^|\n)error: " FIXTURES_SETUP c_regression_model
    PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
  add_test(NAME example.c_regression.model_parallel.np2
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:c_regression>
                   --model-parallel --model ${_c_out}.keras --steps 100)
  set_tests_properties(example.c_regression.model_parallel.np2 PROPERTIES
    PASS_REGULAR_EXPRESSION "ModelParallel on 2 processes: loss first 0\\.00"
    FAIL_REGULAR_EXPRESSION "(^|\n)error: " FIXTURES_REQUIRED c_regression_model
    PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
endif()
if(KDIST_ENABLE_EXAMPLES AND KDIST_FORTRAN)
  foreach(_n 1 2)
    add_test(NAME example.fortran_heat_surrogate.np${_n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${_n}
                     $<TARGET_FILE:fortran_heat_surrogate> --grid 16 --episodes 12
                     --out ${CMAKE_CURRENT_BINARY_DIR}/bindings_scratch/heat_np${_n})
    set_tests_properties(example.fortran_heat_surrogate.np${_n} PROPERTIES
      PASS_REGULAR_EXPRESSION "held-out mean squared error: surrogate .*x better.*Saved "
      FAIL_REGULAR_EXPRESSION "(^|\n)error: " PROCESSORS ${_n} RESOURCE_LOCK mpi TIMEOUT 120)
  endforeach()
  add_test(NAME example.fortran_heat_surrogate.error.grid
           COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh ${MPIEXEC_EXECUTABLE}
                   ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:fortran_heat_surrogate> --grid 15)
  set_tests_properties(example.fortran_heat_surrogate.error.grid PROPERTIES
    PASS_REGULAR_EXPRESSION "error: a grid of 15 columns does not split over 2 processes.*exit status [1-9]"
    PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 60)
endif()
