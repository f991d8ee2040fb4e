# What kdist's headers need; shared by the build tree and by the installed kdistConfig.cmake.
# All come from Debian packages (see README.md): nothing is vendored or downloaded.
include_guard(GLOBAL)
# MPI: KDIST_MPI picks the flavour where several are installed (Debian installs MPICH and Open MPI
# side by side: mpicxx.mpich / mpicxx.openmpi, mpiexec.mpich / mpiexec.openmpi); empty takes the
# MPI that CMake's FindMPI finds first (the `mpicxx` on PATH, Debian's alternatives). The parallel
# HDF5 of kdist::io follows the flavour (cmake/kdistHdf5.cmake). MPI_CXX_COMPILER and
# MPIEXEC_EXECUTABLE, when given, win.
set(KDIST_MPI "" CACHE STRING "MPI flavour: mpich, openmpi, or empty (the MPI found first)")
set_property(CACHE KDIST_MPI PROPERTY STRINGS "" mpich openmpi)
if(KDIST_MPI)
  if(NOT KDIST_MPI MATCHES "^(mpich|openmpi)$")
    message(FATAL_ERROR "kdist: KDIST_MPI is '${KDIST_MPI}'; give mpich, openmpi, or leave it "
            "empty for the MPI found first")
  endif()
  find_program(_kdist_mpicxx mpicxx.${KDIST_MPI} NO_CACHE)
  find_program(_kdist_mpiexec mpiexec.${KDIST_MPI} NO_CACHE)
  if(NOT _kdist_mpicxx OR NOT _kdist_mpiexec)
    set(_kdist_pkgs "mpich libmpich-dev")
    if(KDIST_MPI STREQUAL "openmpi")
      set(_kdist_pkgs "openmpi-bin libopenmpi-dev")
    endif()
    message(FATAL_ERROR "kdist: KDIST_MPI=${KDIST_MPI}, but mpicxx.${KDIST_MPI} or "
            "mpiexec.${KDIST_MPI} is not on PATH; install ${_kdist_pkgs} (Debian), or set "
            "MPI_CXX_COMPILER and MPIEXEC_EXECUTABLE")
  endif()
  if(NOT MPI_CXX_COMPILER)
    set(MPI_CXX_COMPILER "${_kdist_mpicxx}" CACHE FILEPATH "MPI C++ compiler wrapper (KDIST_MPI)")
  endif()
  # The C and Fortran wrappers of the same flavour (bindings/: the C API, the Fortran module)
  find_program(_kdist_mpicc mpicc.${KDIST_MPI} NO_CACHE)
  find_program(_kdist_mpif90 mpif90.${KDIST_MPI} NO_CACHE)
  if(NOT MPI_C_COMPILER AND _kdist_mpicc)
    set(MPI_C_COMPILER "${_kdist_mpicc}" CACHE FILEPATH "MPI C compiler wrapper (KDIST_MPI)")
  endif()
  if(NOT MPI_Fortran_COMPILER AND _kdist_mpif90)
    set(MPI_Fortran_COMPILER "${_kdist_mpif90}" CACHE FILEPATH
        "MPI Fortran compiler wrapper (KDIST_MPI)")
  endif()
  if(NOT MPIEXEC_EXECUTABLE)
    set(MPIEXEC_EXECUTABLE "${_kdist_mpiexec}" CACHE FILEPATH "MPI launcher (KDIST_MPI)")
  endif()
endif()
find_package(MPI REQUIRED COMPONENTS CXX)
# The flavour actually found (for HDF5 and the tests' launcher): Open MPI or MPICH-like.
if(KDIST_MPI)
  set(KDIST_MPI_FLAVOUR ${KDIST_MPI})
elseif("${MPI_CXX_LIBRARIES};${MPI_CXX_INCLUDE_DIRS};${MPI_CXX_COMPILER}" MATCHES "openmpi")
  set(KDIST_MPI_FLAVOUR openmpi)
else()
  set(KDIST_MPI_FLAVOUR mpich)
endif()
# KDIST_KOKKOS_DIR_HINT: set by the installed kdistConfig.cmake to the Kokkos kdist was built with.
find_package(Kokkos REQUIRED HINTS ${KDIST_KOKKOS_DIR_HINT})
kdist_repair_kokkos_target()
find_package(Eigen3 REQUIRED NO_MODULE)
find_package(PkgConfig REQUIRED)
pkg_check_modules(KDIST_RE2 REQUIRED IMPORTED_TARGET GLOBAL re2)
# Random123 (librandom123-dev) is header-only and ships no CMake config.
find_path(KDIST_RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED
          DOC "Random123 headers (Debian: librandom123-dev)")
# Host GEMMs: OpenBLAS (Debian: libopenblas-openmp-dev, or any variant), found by pkg-config,
# else Eigen's GEMM (kdist/ops/detail/cblas.hpp). KDIST_ENABLE_BLAS=OFF keeps Eigen's.
option(KDIST_ENABLE_BLAS "host GEMMs through OpenBLAS when pkg-config finds it" ON)
if(KDIST_ENABLE_BLAS)
  pkg_check_modules(KDIST_OPENBLAS IMPORTED_TARGET GLOBAL openblas)
endif()
# Threads per rank for the host's elementwise kernels (kdist/ops/detail/host_threads.hpp): OpenMP
# where the compiler has it (GCC; clang needs libomp-dev). Used only when OMP_NUM_THREADS is set.
# Not under Kokkos CUDA, whose host compiler flags go through nvcc.
option(KDIST_ENABLE_OPENMP "host elementwise kernels threaded by OpenMP (OMP_NUM_THREADS)" ON)
if(KDIST_ENABLE_OPENMP AND NOT Kokkos_ENABLE_CUDA)
  find_package(OpenMP COMPONENTS CXX QUIET)
endif()
# Kokkos with CUDA: device GEMMs go to cuBLAS (kdist/ops/detail/cublas.hpp). The CUDA toolkit
# that built Kokkos has it.
if(Kokkos_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
# Kokkos with HIP: no vendor BLAS (rocBLAS is no Debian 12 package); device GEMMs run kdist's Kokkos
# kernel. hipcc's clang before 16 crashes on libstdc++ 12's std::pair in C++20 HIP code (any
# std::map, <regex>; llvm-project#62017): say so before the first compile crashes.
if(Kokkos_ENABLE_HIP AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang"
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 16
   AND NOT CMAKE_CXX_FLAGS MATCHES "stdlib\\+\\+-isystem")
  message(WARNING "kdist: ${CMAKE_CXX_COMPILER} is clang ${CMAKE_CXX_COMPILER_VERSION}, which "
          "crashes on libstdc++ 12 or newer in C++20 HIP code; put libstdc++ 11's headers in "
          "CMAKE_CXX_FLAGS (what kdist's scripts/hip/hip-stdlib-flags.sh prints; Debian: "
          "libstdc++-11-dev)")
endif()
