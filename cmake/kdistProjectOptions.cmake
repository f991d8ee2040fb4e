# Flags for kdist's own targets (tests, examples, benchmarks); never put on the kdist interface.
include_guard(GLOBAL)

add_library(kdist_warnings INTERFACE)
target_compile_options(kdist_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                       -Wno-sign-conversion)

# Examples and benchmarks run optimised for this machine (Eigen is 3-4x faster with it);
# -DKDIST_NATIVE=OFF builds portable binaries.
add_library(kdist_native INTERFACE)
if(KDIST_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native KDIST_HAVE_MARCH_NATIVE)
  if(KDIST_HAVE_MARCH_NATIVE)
    target_compile_options(kdist_native INTERFACE -march=native)
  endif()
endif()

# MPI launch used by tests and scripts.
set(KDIST_MPIEXEC "${MPIEXEC_EXECUTABLE}" CACHE STRING "mpiexec used by tests")
