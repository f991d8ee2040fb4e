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
# Parallel HDF5 (kdist/io/checkpoint.hpp): the MPI build, never the serial one, which Debian installs
# beside it (hdf5-tools pulls its run-time library). A prefix HDF5_ROOT, else the pkg-config module
# KDIST_HDF5_PKG_CONFIG (Debian's MPICH flavour by default, libhdf5-mpich-dev: headers in
# /usr/include/hdf5/mpich, library in /usr/lib/<triplet>/hdf5/mpich; hdf5-openmpi with Open MPI),
# says where. Only its headers and libhdf5 are taken (MPI comes from MPI::MPI_CXX), and the headers
# must define H5_HAVE_PARALLEL.
set(KDIST_HDF5_PKG_CONFIG "hdf5-mpich" CACHE STRING
    "pkg-config module of the parallel HDF5 kdist's checkpoints use (hdf5-mpich, hdf5-openmpi)")
pkg_check_modules(KDIST_HDF5_PC QUIET ${KDIST_HDF5_PKG_CONFIG})
set(_kdist_hdf5_roots ${HDF5_ROOT} $ENV{HDF5_ROOT})
find_path(KDIST_HDF5_INCLUDE_DIR H5FDmpio.h NO_DEFAULT_PATH PATH_SUFFIXES include
          HINTS ${_kdist_hdf5_roots} ${KDIST_HDF5_PC_INCLUDE_DIRS} ${KDIST_HDF5_PC_INCLUDEDIR}
          DOC "parallel HDF5 headers (Debian: libhdf5-mpich-dev)")
find_library(KDIST_HDF5_LIBRARY hdf5 NO_DEFAULT_PATH PATH_SUFFIXES lib lib64
             HINTS ${_kdist_hdf5_roots} ${KDIST_HDF5_PC_LIBRARY_DIRS} ${KDIST_HDF5_PC_LIBDIR}
             DOC "parallel HDF5 library (Debian: libhdf5-mpich-dev)")
if(NOT KDIST_HDF5_INCLUDE_DIR OR NOT KDIST_HDF5_LIBRARY)
  message(FATAL_ERROR "kdist: parallel HDF5 not found (pkg-config module '${KDIST_HDF5_PKG_CONFIG}'"
          " and HDF5_ROOT '${_kdist_hdf5_roots}' give no H5FDmpio.h and libhdf5). Install "
          "libhdf5-mpich-dev (Debian), or set KDIST_HDF5_PKG_CONFIG to your MPI's HDF5 module "
          "(hdf5-openmpi) or HDF5_ROOT to a parallel HDF5 prefix")
endif()
file(STRINGS "${KDIST_HDF5_INCLUDE_DIR}/H5pubconf.h" _kdist_hdf5_parallel
     REGEX "^#define H5_HAVE_PARALLEL 1")
if(NOT _kdist_hdf5_parallel)
  message(FATAL_ERROR "kdist: the HDF5 in ${KDIST_HDF5_INCLUDE_DIR} is a serial build (its "
          "H5pubconf.h does not define H5_HAVE_PARALLEL); checkpoints need the MPI build: install "
          "libhdf5-mpich-dev (Debian) or point KDIST_HDF5_PKG_CONFIG / HDF5_ROOT at a parallel "
          "HDF5")
endif()
if(NOT TARGET kdist::hdf5)
  add_library(kdist::hdf5 INTERFACE IMPORTED GLOBAL)
  set_target_properties(kdist::hdf5 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${KDIST_HDF5_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${KDIST_HDF5_LIBRARY}")
endif()
# Random123 (librandom123-dev) is header-only and ships no CMake config.
find_path(KDIST_RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED
          DOC "Random123 headers (Debian: librandom123-dev)")
# Kokkos with CUDA: device GEMMs go to cuBLAS (kdist/ops/detail/cublas.hpp). The CUDA toolkit
# that built Kokkos has it.
if(Kokkos_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
