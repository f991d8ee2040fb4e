# Runs across a network (docs/multihost.md): several hosts made of network namespaces on this
# machine by scripts/netns/cluster.sh, MPI over TCP between them. Skipped (exit 77) where hosts
# cannot be made: not root, or a container without CAP_NET_ADMIN. Hydra (MPICH's mpiexec)
# launches on the hosts, so Open MPI builds leave these out, as do builds without the example
# trainers (-DKDIST_ENABLE_EXAMPLES=OFF), which they run.
if(NOT KDIST_MPI_FLAVOUR STREQUAL "mpich" OR NOT KDIST_ENABLE_EXAMPLES)
  return()
endif()
foreach(_case data_parallel model_parallel_resume link_cut)
  add_test(NAME multihost.${_case}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_case.sh ${_case}
                   ${PROJECT_SOURCE_DIR}/scripts/netns/cluster.sh
                   $<TARGET_FILE:data_parallel_trainer> $<TARGET_FILE:model_parallel_trainer>
                   ${CMAKE_CURRENT_BINARY_DIR}/multihost_${_case})
  set_tests_properties(multihost.${_case} PROPERTIES
    PASS_REGULAR_EXPRESSION "multihost ${_case} passed" SKIP_RETURN_CODE 77
    PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
endforeach()
