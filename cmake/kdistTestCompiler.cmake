# The test programs compiled by another compiler than the build's: KDIST_TEST_PROGRAM_COMPILER
# (scripts/run-tests.sh, the test command, gives clang++) with KDIST_TEST_PROGRAM_FLAGS (-O0) in
# place of the build's optimisation level, through a compiler launcher (cmake/kdist-other-compiler.sh),
# since CMake has one C++ compiler per build. Why: GCC at -O1 spends most of a test program's compile
# in code generation, and clang at -O0 compiles one in 40% of that time (unit_tests_1: 54 s against
# 131 s of CPU; GCC at -O0: 94 s), which is most of CI's budget. What stays on GCC: kdist's model
# classes the programs link (kdist_test_instances, at -O1, so training in the tests stays fast), the
# example trainers, the compile-fail cases (GCC's diagnostics are checked; their precompiled header
# is GCC's), the compile-only checks (headers alone, static asserts, good twins, benchmarks). The
# sanitizer job checks clang's compile-fail diagnostics. Both compilers use libstdc++, so the objects
# link; clang's OpenMP objects need its runtime (libomp, which also takes the GOMP_ calls of GCC's).
# Host builds with GCC only: not under Kokkos CUDA/HIP, nor in a sanitizer build (clang already).
include_guard(GLOBAL)

set(KDIST_TEST_PROGRAM_COMPILER "" CACHE STRING
    "Compile the test programs with this compiler (e.g. clang++) instead of the build's; empty: the build's")
set(KDIST_TEST_PROGRAM_FLAGS "-O0" CACHE STRING
    "Flags for the test programs when KDIST_TEST_PROGRAM_COMPILER is set (replace the -O level)")
set(_kdist_test_launcher "")
if(KDIST_TEST_PROGRAM_COMPILER)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR Kokkos_ENABLE_CUDA OR Kokkos_ENABLE_HIP
     OR KDIST_SANITIZE)
    message(STATUS "kdist: KDIST_TEST_PROGRAM_COMPILER ignored (a GCC host build only): the test "
                   "programs are compiled by ${CMAKE_CXX_COMPILER}")
  else()
    find_program(KDIST_TEST_PROGRAM_COMPILER_PATH ${KDIST_TEST_PROGRAM_COMPILER})
    if(NOT KDIST_TEST_PROGRAM_COMPILER_PATH)
      message(FATAL_ERROR "kdist: KDIST_TEST_PROGRAM_COMPILER is '${KDIST_TEST_PROGRAM_COMPILER}', "
                          "which is not on PATH: install it (Debian: apt-get install clang "
                          "libomp-dev), or configure with -DKDIST_TEST_PROGRAM_COMPILER= to compile "
                          "the tests with ${CMAKE_CXX_COMPILER}")
    endif()
    set(KDIST_TEST_PROGRAM_OPENMP "")
    if(TARGET OpenMP::OpenMP_CXX)
      execute_process(COMMAND ${KDIST_TEST_PROGRAM_COMPILER_PATH} -print-resource-dir
                      OUTPUT_VARIABLE _kdist_resource OUTPUT_STRIP_TRAILING_WHITESPACE
                      RESULT_VARIABLE _kdist_rc)
      if(_kdist_rc EQUAL 0 AND _kdist_resource)
        find_library(KDIST_TEST_PROGRAM_LIBOMP NAMES omp NO_DEFAULT_PATH
                     PATHS ${_kdist_resource}/../.. ${_kdist_resource}/../../..)
      endif()
      if(NOT KDIST_TEST_PROGRAM_LIBOMP)
        message(FATAL_ERROR "kdist: ${KDIST_TEST_PROGRAM_COMPILER} compiles the test programs with "
                            "OpenMP, but its runtime (libomp.so) was not found beside it: install it "
                            "(Debian: apt-get install libomp-dev), or configure with "
                            "-DKDIST_TEST_PROGRAM_COMPILER= to compile the tests with "
                            "${CMAKE_CXX_COMPILER}")
      endif()
      set(KDIST_TEST_PROGRAM_OPENMP ${KDIST_TEST_PROGRAM_LIBOMP})
    endif()
    # ccache stays in front when the build compiles through it (CMakeLists.txt)
    set(_kdist_env "")
    set(_kdist_cache "-")
    if(CMAKE_CXX_COMPILER_LAUNCHER AND KDIST_CCACHE_PROGRAM)
      list(GET CMAKE_CXX_COMPILER_LAUNCHER -1 _kdist_last)
      if(_kdist_last STREQUAL KDIST_CCACHE_PROGRAM)
        set(_kdist_env ${CMAKE_CXX_COMPILER_LAUNCHER})
        list(POP_BACK _kdist_env)
        set(_kdist_cache ${KDIST_CCACHE_PROGRAM})
      endif()
    endif()
    separate_arguments(_kdist_flags UNIX_COMMAND "${KDIST_TEST_PROGRAM_FLAGS}")
    set(_kdist_test_launcher ${_kdist_env} ${PROJECT_SOURCE_DIR}/cmake/kdist-other-compiler.sh
                             ${_kdist_cache} ${KDIST_TEST_PROGRAM_COMPILER_PATH} ${_kdist_flags} --)
    message(STATUS "kdist: test programs compiled by ${KDIST_TEST_PROGRAM_COMPILER_PATH} "
                   "${KDIST_TEST_PROGRAM_FLAGS} (KDIST_TEST_PROGRAM_COMPILER; the rest by "
                   "${CMAKE_CXX_COMPILER})")
  endif()
endif()

# kdist_test_program_source(<target> <source>): what <source> says of how its program <target> is
# compiled, as properties kdist_test_program_compiler reads: KDIST_OWN_MACROS when it defines or
# undefines a macro (KDIST_CHECK_COLLECTIVES, NDEBUG) that changes what kdist's headers compile:
# such a program keeps its own copies of kdist's inline code and never gets the instances first;
# KDIST_BUILD_COMPILER when it has a line "// kdist-build-compiler: <why>": it stays on the build's
# compiler, flags and precompiled header (its own code runs too long unoptimised:
# test_reference_mlp's Eigen reference trained for 7 minutes at -O0).
function(kdist_test_program_source target src)
  file(STRINGS ${src} _macros REGEX "^#(define|undef) ")
  kdist_test_keeps_build_compiler(${src} _keeps)
  set(_own FALSE)
  if(_macros)
    set(_own TRUE)
  endif()
  set_target_properties(${target} PROPERTIES KDIST_OWN_MACROS ${_own} KDIST_BUILD_COMPILER ${_keeps})
endfunction()

# kdist_test_keeps_build_compiler(<source> <out>): TRUE when <source> has a line
# "// kdist-build-compiler: <why>" and the test programs are compiled by another compiler.
function(kdist_test_keeps_build_compiler src out)
  set(${out} FALSE PARENT_SCOPE)
  if(_kdist_test_launcher)
    file(STRINGS ${src} _line REGEX "^// kdist-build-compiler: ")
    if(_line)
      set(${out} TRUE PARENT_SCOPE)
    endif()
  endif()
endfunction()

# kdist_test_program_compiler(<instances> <target>...): these targets (test programs, and object
# libraries only they link) compiled by KDIST_TEST_PROGRAM_COMPILER when it is set; nothing
# otherwise. A program that links <instances> (kdist's model classes, a static library of the
# build's compiler: cmake/kdistInstances.cmake) gets them ahead of its own objects, because the
# linker keeps the first copy of each inline function and template instance it meets, and the
# program's own -O0 copies of the kernels both call would otherwise win: the MPI tests ran 7.2x
# longer than at GCC's -O1 so (193 s against 27 s for one process), 1.5x with the library first.
# Not for a program of KDIST_OWN_MACROS (kdist_test_program_source): the library's copies would replace its own (with the
# library first, mpi_test_collectives_checked lost its checks on one process and hung).
function(kdist_test_program_compiler instances)
  if(NOT _kdist_test_launcher)
    return()
  endif()
  set(_first "")
  if(TARGET ${instances})
    get_target_property(_type ${instances} TYPE)
    if(_type STREQUAL "STATIC_LIBRARY")
      set(_first "LINKER:--whole-archive" "$<TARGET_FILE:${instances}>" "LINKER:--no-whole-archive")
    endif()
  endif()
  foreach(_target IN LISTS ARGN)
    get_target_property(_keeps ${_target} KDIST_BUILD_COMPILER)
    if(_keeps)
      continue()
    endif()
    set_target_properties(${_target} PROPERTIES CXX_COMPILER_LAUNCHER "${_kdist_test_launcher}")
    get_target_property(_type ${_target} TYPE)
    if(NOT _type STREQUAL "EXECUTABLE")
      continue()
    endif()
    if(KDIST_TEST_PROGRAM_OPENMP)
      target_link_libraries(${_target} PRIVATE ${KDIST_TEST_PROGRAM_OPENMP})
    endif()
    # the link options come before the objects on the link line
    get_target_property(_links ${_target} LINK_LIBRARIES)
    get_target_property(_own_macros ${_target} KDIST_OWN_MACROS)
    if(_first AND NOT _own_macros AND _links MATCHES "(^|;)(${instances}|kdist_test_deps|kdist_mpi_test_main)(;|$)")
      target_link_options(${_target} PRIVATE ${_first})
    endif()
  endforeach()
endfunction()
