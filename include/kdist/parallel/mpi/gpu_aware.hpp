#pragma once
//! \file parallel/mpi/gpu_aware.hpp
//! `kdist::mpi::gpu_aware()`: whether the running MPI library takes device pointers (CUDA-aware
//! or ROCm-aware MPI), asked once at run time. kdist's collectives hand device Views to MPI
//! directly when it does, and stage them through host copies when it does not.
//!
//! The answer, in this order:
//!  1. the environment variable `KDIST_MPI_GPU_AWARE`: `1` (trust MPI with device pointers) or
//!     `0` (always stage); anything else is a kdist::ValueError naming the value;
//!  2. the MPI library's own query: Open MPI's `MPIX_Query_cuda_support()` /
//!     `MPIX_Query_rocm_support()` (from `<mpi-ext.h>`, where Open MPI was built with them),
//!     MPICH's `MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA or _HIP, ...)`;
//!  3. otherwise false (stage: always correct, one host copy each way).
//! With no GPU backend in Kokkos there are no device pointers and the answer is false.
//! The macro `KDIST_MPI_GPU_AWARE`, defined at compile time, makes every View go to MPI directly
//! without asking (kdist/parallel/collectives.hpp).

#include <mpi.h>
#if defined(OMPI_MAJOR_VERSION) && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_CUDA_AWARE_SUPPORT / MPIX_ROCM_AWARE_SUPPORT
#endif

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <kdist/core/error.hpp>
#include <string>

namespace kdist::mpi {

namespace detail {

//! What the MPI library says of the GPU backend Kokkos was built with (step 2 above).
inline bool library_gpu_aware() {
#if defined(KOKKOS_ENABLE_CUDA)
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#elif defined(MPICH_NUMVERSION) && defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported;
#else
  return false;
#endif
#elif defined(KOKKOS_ENABLE_HIP)
#if defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
  return MPIX_Query_rocm_support() == 1;
#elif defined(MPICH_NUMVERSION) && defined(MPIX_GPU_SUPPORT_HIP)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_HIP, &supported) == MPI_SUCCESS && supported;
#else
  return false;
#endif
#else
  return false;  // no device memory to hand over
#endif
}

//! Steps 1 to 3 for a value of KDIST_MPI_GPU_AWARE (nullptr when unset).
inline bool gpu_aware_from(const char* env) {
  if (env == nullptr || *env == '\0') return library_gpu_aware();
  const std::string v(env);
  if (v == "1") return true;
  if (v == "0") return false;
  throw ValueError("kdist: KDIST_MPI_GPU_AWARE is '" + v +
                   "'; set it to 1 (MPI takes device pointers) or 0 (stage through the host), "
                   "or unset it to ask the MPI library");
}

}  // namespace detail

//! Whether MPI takes device pointers; asked once per process (the first call decides).
//! Errors: kdist::ValueError for a KDIST_MPI_GPU_AWARE other than 0 or 1.
inline bool gpu_aware() {
  static const bool aware = detail::gpu_aware_from(std::getenv("KDIST_MPI_GPU_AWARE"));
  return aware;
}

}  // namespace kdist::mpi
