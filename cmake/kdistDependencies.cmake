# What kdist's headers need; shared by the build tree and by the installed kdistConfig.cmake.
# All come from Debian packages (see README.md): nothing is vendored or downloaded.
include_guard(GLOBAL)
find_package(MPI REQUIRED COMPONENTS CXX)
# KDIST_KOKKOS_DIR_HINT: set by the installed kdistConfig.cmake to the Kokkos kdist was built with.
find_package(Kokkos REQUIRED HINTS ${KDIST_KOKKOS_DIR_HINT})
kdist_repair_kokkos_target()
find_package(Eigen3 REQUIRED NO_MODULE)
find_package(PkgConfig REQUIRED)
pkg_check_modules(KDIST_RE2 REQUIRED IMPORTED_TARGET GLOBAL re2)
# Random123 (librandom123-dev) is header-only and ships no CMake config.
find_path(KDIST_RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED
          DOC "Random123 headers (Debian: librandom123-dev)")
# Host GEMMs: OpenBLAS (Debian: libopenblas-serial-dev, or any variant), found by pkg-config,
# else Eigen's GEMM (kdist/ops/detail/cblas.hpp). KDIST_ENABLE_BLAS=OFF keeps Eigen's.
option(KDIST_ENABLE_BLAS "host GEMMs through OpenBLAS when pkg-config finds it" ON)
if(KDIST_ENABLE_BLAS)
  pkg_check_modules(KDIST_OPENBLAS IMPORTED_TARGET GLOBAL openblas)
endif()
# Kokkos with CUDA: device GEMMs go to cuBLAS (kdist/ops/detail/cublas.hpp). The CUDA toolkit
# that built Kokkos has it.
if(Kokkos_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
