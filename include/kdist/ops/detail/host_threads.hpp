#pragma once
//! \file ops/detail/host_threads.hpp
//! Threads per rank for the host's elementwise and row kernels (Adam's update, dropout, GELU,
//! attention's heads, layer norm, cross-entropy) and Eigen's products: the same rule as the host
//! GEMMs (ops/detail/cblas.hpp). An MPI job runs a process per core, so a rank uses one thread
//! unless the user gives it more with `OMP_NUM_THREADS`; then, when kdist's target was compiled
//! with OpenMP (`_OPENMP`; kdist's CMake adds it where the compiler has it), long kernels split
//! into blocks that the threads share.
//! Every block does what the single thread did for those elements, so results do not depend on
//! the thread count. docs/ops.md, "Threads per rank".

#include <Eigen/Core>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kdist::ops::detail {

//! Whether the user gave this rank threads (`OMP_NUM_THREADS` in the environment, read once).
inline bool omp_threads_asked() {
  static const bool asked = std::getenv("OMP_NUM_THREADS") != nullptr;
  return asked;
}

//! The threads a rank's host elementwise kernels use: `omp_get_max_threads()` (which
//! `omp_set_num_threads` changes) when `OMP_NUM_THREADS` is set and kdist was compiled with
//! OpenMP, else 1.
inline int host_kernel_threads() {
#if defined(_OPENMP)
  return omp_threads_asked() ? omp_get_max_threads() : 1;
#else
  return 1;
#endif
}

//! Eigen parallelises its products with OpenMP when compiled with it, on omp_get_max_threads()
//! threads (every core) by default: held to one unless `OMP_NUM_THREADS` is set, so that an MPI
//! job's ranks do not each start a thread per core. Called before kdist's Eigen products; it sets
//! Eigen's global count, so the program's own Eigen products follow the same rule.
inline void limit_eigen_threads_once() {
#if defined(_OPENMP)
  static const bool limited = [] {
    if (!omp_threads_asked()) Eigen::setNbThreads(1);
    return true;
  }();
  (void)limited;
#endif
}

//! Calls `f(begin, count)` for consecutive blocks of `block` elements covering [0, n) (the last
//! may be shorter), spread over host_kernel_threads() threads when there are at least two blocks
//! per thread. Blocks keep each pass of a multi-statement kernel in cache, so n elements stream
//! from memory once. `block` must not be 0.
template <class F>
void for_host_blocks(std::uint64_t n, std::uint64_t block, const F& f) {
  const std::uint64_t blocks = (n + block - 1) / block;
  const auto run = [&](std::uint64_t b) { f(b * block, std::min(block, n - b * block)); };
#if defined(_OPENMP)
  const int threads = host_kernel_threads();
  if (threads > 1 && blocks >= 2 * static_cast<std::uint64_t>(threads) && !omp_in_parallel()) {
    const auto count = static_cast<std::int64_t>(blocks);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t b = 0; b < count; ++b) run(static_cast<std::uint64_t>(b));
    return;
  }
#endif
  for (std::uint64_t b = 0; b < blocks; ++b) run(b);
}

//! Rows per block for a kernel over rows of `cols` columns: about 16 K elements, and a multiple
//! of 16 elements, so that Eigen's SIMD packets (up to 16 floats) fall on the same elements as in
//! one pass over the whole matrix: the same bits for any block or thread count.
inline std::uint64_t rows_per_block(std::uint64_t cols) {
  cols = std::max<std::uint64_t>(1, cols);
  const std::uint64_t step = 16 / std::gcd<std::uint64_t>(cols, 16);
  const std::uint64_t rows = std::max<std::uint64_t>(1, 16384 / cols);
  return (rows + step - 1) / step * step;
}

//! Runs `f(i)` for every i in [0, n) where View type `V`'s kernels run: on the host, in blocks of
//! `block` indices that the rank's threads share (for_host_blocks); elsewhere as one Kokkos kernel
//! named `label`. `f` is a KOKKOS_LAMBDA that does the same work for an index either way, so the
//! results do not depend on the thread count. For the row kernels (layer norm, cross-entropy)
//! that a Kokkos Serial build would run on one thread.
template <class V, class F>
void for_each_index(const char* label, std::uint64_t n, std::uint64_t block, const F& f) {
  using Exec = typename V::execution_space;
  if constexpr (Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible &&
                Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                           typename V::memory_space>::accessible) {
    for_host_blocks(n, block, [&](std::uint64_t begin, std::uint64_t count) {
      const auto end = static_cast<std::int64_t>(begin + count);
      for (auto i = static_cast<std::int64_t>(begin); i < end; ++i) f(i);
    });
  } else {
    Kokkos::parallel_for(
        label,
        Kokkos::RangePolicy<Exec, Kokkos::IndexType<std::int64_t>>(0, static_cast<std::int64_t>(n)),
        f);
  }
}

}  // namespace kdist::ops::detail
