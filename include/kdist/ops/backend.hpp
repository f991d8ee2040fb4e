#pragma once
//! \file ops/backend.hpp
//! Which implementation a local kernel (`kdist::ops::*`) runs: Eigen over the View's data (host
//! memory) or plain Kokkos kernels (any memory space). The default, `backend::automatic`, picks
//! Eigen when every View lives in memory the host can read and the Views' execution space runs on
//! the host; otherwise Kokkos (matmul: the vendor BLAS in both cases when kdist has one, OpenBLAS
//! on the host, cuBLAS on CUDA). Pass `backend::kokkos` to force the portable kernels (tests do,
//! to check them on the host), `backend::eigen` to insist on Eigen (a compile error for Views the
//! host cannot read).

#include <Kokkos_Core.hpp>
#include <type_traits>

namespace kdist::ops {

//! Tag: choose Eigen on host memory, Kokkos elsewhere.
struct AutoBackend {};
//! Tag: Eigen over the Views' data (host-accessible memory only).
struct EigenBackend {};
//! Tag: portable Kokkos kernels in the Views' execution space.
struct KokkosBackend {};

namespace backend {
inline constexpr AutoBackend automatic{};  //!< the default
inline constexpr EigenBackend eigen{};     //!< force Eigen
inline constexpr KokkosBackend kokkos{};   //!< force Kokkos kernels
}  // namespace backend

//! True when the host can dereference View `V`'s memory and `V`'s execution space runs on the
//! host (HostSpace under Serial/OpenMP/Threads; not CUDA UVM, whose kernels run on the GPU).
template <class V>
inline constexpr bool runs_on_host_v =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename V::memory_space>::accessible&&
        Kokkos::SpaceAccessibility<typename V::execution_space, Kokkos::HostSpace>::accessible;

//! Whether a call with backend tag `Backend` on Views `Vs...` goes through Eigen.
template <class Backend, class... Vs>
inline constexpr bool uses_eigen_v = std::is_same_v<Backend, EigenBackend> ||
                                     (std::is_same_v<Backend, AutoBackend> &&
                                      (runs_on_host_v<Vs> && ...));

}  // namespace kdist::ops

namespace kdist::ops::detail {

template <class Backend, class... Vs>
constexpr bool check_backend() {
  static_assert(std::is_same_v<Backend, AutoBackend> || std::is_same_v<Backend, EigenBackend> ||
                    std::is_same_v<Backend, KokkosBackend>,
                "kdist::ops: the backend argument must be kdist::ops::backend::automatic, "
                "backend::eigen or backend::kokkos");
  static_assert(
      !std::is_same_v<Backend, EigenBackend> ||
          (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Vs::memory_space>::accessible &&
           ...),
      "kdist::ops: backend::eigen needs Views in host-accessible memory; use "
      "backend::automatic or backend::kokkos for device memory");
  return uses_eigen_v<Backend, Vs...>;
}

}  // namespace kdist::ops::detail
