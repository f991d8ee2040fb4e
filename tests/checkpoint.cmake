# Checkpoints and Keras weights files (issue 11, docs/checkpoints.md). tests/mpi/test_checkpoint.cpp
# and test_keras_weights.cpp are registered with the other MPI tests; here: the HDF5 tools they
# compare the file's tree with, the Keras-written file in tests/data, and the crash-safety test.
find_program(KDIST_H5LS h5ls DOC "HDF5's h5ls (Debian: hdf5-tools), for the checkpoint tests")
if(KDIST_H5LS)
  if(TARGET mpi_test_checkpoint)  # not in CI's sanitizer job (KDIST_TEST_KERNEL_REFERENCES)
    target_compile_definitions(mpi_test_checkpoint PRIVATE KDIST_TEST_H5LS="${KDIST_H5LS}")
  endif()
  target_compile_definitions(mpi_test_keras_weights PRIVATE KDIST_TEST_H5LS="${KDIST_H5LS}")
endif()
target_compile_definitions(mpi_test_keras_weights
                           PRIVATE KDIST_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")

# Crash safety: a save killed midway (SIGKILL of one process during its MPI-IO writes) leaves the
# previous checkpoint intact and loadable. The first test kills the job and must see it end
# (non-zero, within its limit); the second, a fresh run, loads what is left.
add_executable(reliability_checkpoint_kill ${CMAKE_CURRENT_SOURCE_DIR}/reliability/checkpoint_kill.cpp)
target_link_libraries(reliability_checkpoint_kill PRIVATE kdist::io kdist_warnings
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
