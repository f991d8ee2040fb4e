#pragma once
//! \file parallel/mpi/gpu_aware.hpp
//! `kdist::mpi::gpu_aware()`: whether the running MPI library takes device pointers (CUDA-aware
//! or ROCm-aware MPI) in its blocking calls, and `kdist::mpi::gpu_aware_non_blocking()`: whether
//! its non-blocking collectives (MPI_Iallreduce, MPI_Ireduce_scatter, MPI_Iallgatherv) take them
//! too. Asked once at run time. kdist's collectives hand device Views to MPI directly when it
//! does, and stage them through host copies when it does not; the training step's overlapped
//! gradient sync and ZeRO-1 run on device memory only with the second.
//!
//! The answer, in this order:
//!  1. the environment variable `KDIST_MPI_GPU_AWARE`: `1` (trust MPI with device pointers in
//!     every call), `blocking` (in blocking calls only) or `0` (always stage); anything else is a
//!     kdist::ValueError naming the value;
//!  2. the MPI library's own query: MPICH's `MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA or
//!     _HIP, ...)` (every call: its non-blocking collectives run on GPU buffers through yaksa),
//!     Open MPI's `MPIX_Query_cuda_support()` / `MPIX_Query_rocm_support()` (from
//!     `<mpi-ext.h>`, where Open MPI was built with them: blocking calls only, as its FAQ says
//!     "neither the nonblocking collective APIs ..." take device pointers);
//!  3. otherwise none (stage: always correct, one host copy each way).
//! With no GPU backend in Kokkos there are no device pointers and the answer is none.
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

//! Which MPI calls take device pointers.
enum class GpuSupport {
  none,      //!< none: every device View is staged through host memory
  blocking,  //!< blocking calls (collectives, point-to-point); non-blocking collectives staged
  all,       //!< every call, the non-blocking collectives included
};

namespace detail {

//! What the MPI library says of the GPU backend Kokkos was built with (step 2 above).
inline GpuSupport library_gpu_support() {
#if defined(KOKKOS_ENABLE_CUDA)
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1 ? GpuSupport::blocking : GpuSupport::none;
#elif defined(MPICH_NUMVERSION) && defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS && supported
             ? GpuSupport::all
             : GpuSupport::none;
#else
  return GpuSupport::none;
#endif
#elif defined(KOKKOS_ENABLE_HIP)
#if defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
  return MPIX_Query_rocm_support() == 1 ? GpuSupport::blocking : GpuSupport::none;
#elif defined(MPICH_NUMVERSION) && defined(MPIX_GPU_SUPPORT_HIP)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_HIP, &supported) == MPI_SUCCESS && supported
             ? GpuSupport::all
             : GpuSupport::none;
#else
  return GpuSupport::none;
#endif
#else
  return GpuSupport::none;  // no device memory to hand over
#endif
}

//! Steps 1 to 3 for a value of KDIST_MPI_GPU_AWARE (nullptr when unset).
inline GpuSupport gpu_support_from(const char* env) {
  if (env == nullptr || *env == '\0') return library_gpu_support();
  const std::string v(env);
  if (v == "1") return GpuSupport::all;
  if (v == "blocking") return GpuSupport::blocking;
  if (v == "0") return GpuSupport::none;
  throw ValueError("kdist: KDIST_MPI_GPU_AWARE is '" + v +
                   "'; set it to 1 (MPI takes device pointers in every call), blocking (in its "
                   "blocking calls only) or 0 (stage through the host), or unset it to ask the MPI "
                   "library");
}

}  // namespace detail

//! Which MPI calls take device pointers; asked once per process (the first call decides).
//! Errors: kdist::ValueError for a KDIST_MPI_GPU_AWARE other than 0, 1 or blocking.
inline GpuSupport gpu_support() {
  static const GpuSupport support = detail::gpu_support_from(std::getenv("KDIST_MPI_GPU_AWARE"));
  return support;
}

//! Whether MPI's blocking calls take device pointers (gpu_support() is blocking or all).
inline bool gpu_aware() {
  return gpu_support() != GpuSupport::none;
}

//! Whether MPI's non-blocking collectives take device pointers too (gpu_support() is all): the
//! training step then overlaps its gradient sums on device memory (kdist/nn/train/gradient_sync.hpp).
inline bool gpu_aware_non_blocking() {
  return gpu_support() == GpuSupport::all;
}

}  // namespace kdist::mpi
