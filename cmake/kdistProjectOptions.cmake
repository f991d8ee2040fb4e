# Flags for kdist's own targets (tests, examples, benchmarks); never put on the kdist interface.
include_guard(GLOBAL)
include(kdistInstances)
include(kdistBundles)
include(kdistCompileOnly)

add_library(kdist_warnings INTERFACE)
target_compile_options(kdist_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                       -Wno-sign-conversion)
# Under Kokkos CUDA, a host function called from device code (#20013: std::array::operator[] in a
# KOKKOS_INLINE_FUNCTION) is only a warning, and the kernel then silently computes nothing: the
# trainers' kernels were all zeros on an H200 until this was fixed. Make it an error here.
if(Kokkos_ENABLE_CUDA)
  target_compile_options(kdist_warnings INTERFACE "SHELL:-Xcudafe --diag_error=20013")
endif()

# How the examples and benchmarks are compiled:
# - "optimised" (the default): the build type's flags (Release: -O3) and -march=native (Eigen is
#   3-4x faster with it; -DKDIST_NATIVE=OFF builds portable binaries), with model classes of their
#   own compiled likewise. What the main job runs and every figure of docs/benchmarks.md comes from.
# - "checked" (the test command's build, scripts/run-tests.sh): at the flags of the tests' model
#   classes (-O1), linking those same classes. They are compiled, linked and run by their tests
#   exactly as optimised ones, only slower; their six optimised instance files alone cost ~45
#   minutes of CPU cold (~450 s each at -O3), which CI cannot afford (docs/benchmarks.md, "CI time").
set(KDIST_PROGRAMS "optimised" CACHE STRING
    "How examples and benchmarks are compiled: optimised (-O3, native) or checked (the tests' flags)")
set_property(CACHE KDIST_PROGRAMS PROPERTY STRINGS optimised checked)
if(NOT KDIST_PROGRAMS MATCHES "^(optimised|checked)$")
  message(FATAL_ERROR "KDIST_PROGRAMS is '${KDIST_PROGRAMS}': give optimised or checked")
endif()
if(KDIST_PROGRAMS STREQUAL "checked" AND (KDIST_ENABLE_EXAMPLES OR KDIST_ENABLE_BENCHMARKS)
   AND NOT KDIST_ENABLE_TESTS)
  message(FATAL_ERROR "KDIST_PROGRAMS=checked compiles the examples and benchmarks at the tests' "
                      "flags and needs the tests (KDIST_ENABLE_TESTS=ON), or use optimised")
endif()
add_library(kdist_native INTERFACE)
if(KDIST_NATIVE AND KDIST_PROGRAMS STREQUAL "optimised")
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native KDIST_HAVE_MARCH_NATIVE)
  if(KDIST_HAVE_MARCH_NATIVE)
    target_compile_options(kdist_native INTERFACE -march=native)
  endif()
endif()

# kdist's model classes compiled once for the examples and benchmarks, optimised as they are
# (cmake/kdistInstances.cmake; float only: they train float models); checked: the tests' own
# (kdist_test_instances, tests/CMakeLists.txt, whose flags come with them).
if(KDIST_ENABLE_EXAMPLES OR KDIST_ENABLE_BENCHMARKS)
  if(KDIST_PROGRAMS STREQUAL "checked")
    add_library(kdist_native_instances INTERFACE)
    target_link_libraries(kdist_native_instances INTERFACE kdist_test_instances)
  else()
    kdist_add_instances(kdist_native_instances FLOAT_ONLY LIBRARIES kdist::io kdist_native
                        kdist_warnings)
  endif()
endif()

# MPI launch used by tests and scripts.
set(KDIST_MPIEXEC "${MPIEXEC_EXECUTABLE}" CACHE STRING "mpiexec used by tests")

# Sanitizers for kdist's own targets: -DKDIST_SANITIZE=address,undefined (scripts/run-sanitizers.sh).
# Every error is fatal (no recovery), so a test that trips one fails. The tests that only compile
# (static asserts, headers alone, compile-fail, consumers, nvcc) are left out of such a build:
# the normal build runs them, and instrumenting them checks nothing more.
set(KDIST_SANITIZE "" CACHE STRING "Sanitizers for tests and examples, e.g. address,undefined")
if(KDIST_SANITIZE)
  add_compile_options(-fsanitize=${KDIST_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KDIST_SANITIZE})
endif()
# Debug information for such a build, appended after the build type's flags so that it wins:
# run-sanitizers.sh asks for line tables only (-gline-tables-only with clang, -g1 with GCC), which
# is all a sanitizer report needs (file:line) and cuts a quarter of that build's compile time.
set(KDIST_SANITIZE_DEBUG_INFO "" CACHE STRING "Debug-info flag for a sanitizer build, e.g. -g1")
if(KDIST_SANITIZE AND KDIST_SANITIZE_DEBUG_INFO)
  add_compile_options(${KDIST_SANITIZE_DEBUG_INFO})
endif()
