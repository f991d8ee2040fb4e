# Parallel HDF5, what kdist::io (include/kdist/io/: checkpoints, Keras .weights.h5) needs and
# nothing else does: kdist::kdist links no HDF5. Included by the build when KDIST_ENABLE_IO is on,
# and by the installed kdistConfig.cmake for `find_package(kdist COMPONENTS io)`.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
# the MPI build, never the serial one, which Debian installs
# beside it (hdf5-tools pulls its run-time library). A prefix HDF5_ROOT, else the pkg-config module
# KDIST_HDF5_PKG_CONFIG (Debian's MPICH flavour by default, libhdf5-mpich-dev: headers in
# /usr/include/hdf5/mpich, library in /usr/lib/<triplet>/hdf5/mpich; hdf5-openmpi with Open MPI),
# says where. Only its headers and libhdf5 are taken (MPI comes from MPI::MPI_CXX), and the headers
# must define H5_HAVE_PARALLEL.
# The default follows the MPI found (KDIST_MPI_FLAVOUR, cmake/kdistDependencies.cmake).
if(NOT KDIST_MPI_FLAVOUR)
  set(KDIST_MPI_FLAVOUR mpich)
endif()
set(KDIST_HDF5_PKG_CONFIG "hdf5-${KDIST_MPI_FLAVOUR}" CACHE STRING
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
          "libhdf5-${KDIST_MPI_FLAVOUR}-dev (Debian), or set KDIST_HDF5_PKG_CONFIG to your MPI's "
          "HDF5 module (hdf5-mpich, hdf5-openmpi) or HDF5_ROOT to a parallel HDF5 prefix")
endif()
file(STRINGS "${KDIST_HDF5_INCLUDE_DIR}/H5pubconf.h" _kdist_hdf5_parallel
     REGEX "^#define H5_HAVE_PARALLEL 1")
if(NOT _kdist_hdf5_parallel)
  message(FATAL_ERROR "kdist: the HDF5 in ${KDIST_HDF5_INCLUDE_DIR} is a serial build (its "
          "H5pubconf.h does not define H5_HAVE_PARALLEL); kdist::io needs the MPI build: install "
          "libhdf5-mpich-dev (Debian) or point KDIST_HDF5_PKG_CONFIG / HDF5_ROOT at a parallel "
          "HDF5")
endif()
if(NOT TARGET kdist::hdf5)
  add_library(kdist::hdf5 INTERFACE IMPORTED GLOBAL)
  set_target_properties(kdist::hdf5 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${KDIST_HDF5_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${KDIST_HDF5_LIBRARY}")
endif()

# JSON (Debian: nlohmann-json3-dev, header-only): io/layout_map_file.hpp reads and writes
# LayoutMap rules as JSON files. Optional: without it kdist::io builds, that one header does not
# (the staged GPU machine has no nlohmann-json; the trainers' --layout-map then says so).
find_package(nlohmann_json 3 QUIET)
# libzip (Debian: libzip-dev): io/keras_model_file.hpp reads and writes Keras' model files (zip
# archives), with nlohmann-json; optional as it is.
pkg_check_modules(KDIST_LIBZIP QUIET IMPORTED_TARGET GLOBAL libzip)
