# Explicit instantiation (include/kdist/nn/explicit_instantiation.hpp): kdist's layers, AnyLayer's
# holders of them, Sequential, its train step, optimizer state and loss on float and double,
# compiled once into a static library per set of flags (instances/*.cpp) instead of in every test,
# example and benchmark program (a test program compiles in about half the time). Its users get
# KDIST_EXTERN_TEMPLATES, which declares those instances `extern template`. Host compilers only,
# as the precompiled headers: the device builds (nvcc_wrapper, hipcc) compile everything per
# program, as a program of a user does.
include_guard(GLOBAL)
include(kdistBundles)  # kdist_write_unit

set(_kdist_eti_default ON)
if(Kokkos_ENABLE_CUDA OR Kokkos_ENABLE_HIP)
  set(_kdist_eti_default OFF)
endif()
option(KDIST_EXPLICIT_INSTANTIATION
       "Compile kdist's model classes once for the tests, examples and benchmarks" ${_kdist_eti_default})

# kdist_add_instances(<target> [FLOAT_ONLY] [ONE_UNIT] LIBRARIES <libraries...>): the instances
# compiled with the flags of <libraries...> (e.g. the tests' optimisation level, or -march=native),
# linked by whatever links <target>; FLOAT_ONLY: no double instances (KDIST_INSTANCES_OF_DOUBLE=0);
# ONE_UNIT: the instance files compiled as one translation unit. The six files instantiate the
# same tensor, kernel and collective templates (8.4 MB of code in six objects, 4.0 MB different):
# one unit compiled in 616 s where the six took 1093 s of a 2-core build, which is what a build on
# few cores (CI's) wants; on many cores six units finish sooner. Without
# KDIST_EXPLICIT_INSTANTIATION, <target> is an interface library of <libraries...>.
function(kdist_add_instances target)
  cmake_parse_arguments(PARSE_ARGV 1 _eti "FLOAT_ONLY;ONE_UNIT" "" "LIBRARIES")
  if(NOT KDIST_EXPLICIT_INSTANTIATION)
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${_eti_LIBRARIES})
    return()
  endif()
  file(GLOB _sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/instances/*.cpp)
  if(_eti_ONE_UNIT)
    set(_unit ${CMAKE_CURRENT_BINARY_DIR}/${target}_one_unit.cpp)
    kdist_write_unit(${_unit} "every instance file in one unit (cmake/kdistInstances.cmake)"
                     ${_sources})
    set(_sources ${_unit})
  endif()
  add_library(${target} STATIC ${_sources})
  target_link_libraries(${target} PUBLIC ${_eti_LIBRARIES})
  target_compile_definitions(${target} PUBLIC KDIST_EXTERN_TEMPLATES)
  if(_eti_FLOAT_ONLY)
    target_compile_definitions(${target} PUBLIC KDIST_INSTANCES_OF_DOUBLE=0)
  endif()
endfunction()
