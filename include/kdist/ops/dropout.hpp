#pragma once
//! \file ops/dropout.hpp
//! Inverted dropout (Keras' `Dropout(rate)` in training): each element is kept with probability
//! `1 - rate` and scaled by `1 / (1 - rate)`, or set to 0. The mask is a function of (seed,
//! stream, step, GLOBAL element index) through kdist::dropout_keep, so a shard of an activation
//! (rows of the batch on a "data" axis, columns on a "model" axis) draws exactly the elements of
//! the full tensor's mask. The forward pass draws it (on the host 64 elements per vectorised
//! Philox call, all four words used) in the same pass that scales and writes `y`, and can keep
//! it as one byte per element (`mask`) for `dropout_backward(dy, dx, mask, rate)`, which then
//! reads it instead of drawing it again; `dropout_backward(dy, dx, params)` recomputes it.
//! `dropout` takes a matrix block; `dropout_block` a block of an activation of any rank (a
//! (batch, sequence, features) or NHWC one), keyed by the same row-major global flat index.

#include <Kokkos_Core.hpp>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/views.hpp>
#include <kdist/ops/random.hpp>
#include <string>
#include <type_traits>

namespace kdist::ops {

//! Which mask a dropout call draws. Element (i, j) of the local View is element
//! (row_offset + i, col_offset + j) of the global activation [global batch, global_cols], whose
//! flat index `(row_offset + i) * global_cols + col_offset + j` keys kdist::dropout_keep.
//! Example: `{.seed = 1337, .stream = kdist::stream_id("dropout"), .step = step, .rate = 0.4,
//!            .row_offset = first_global_row}`.
struct DropoutParams {
  std::uint64_t seed = 0;         //!< the model's seed
  std::uint64_t stream = 0;       //!< the layer's stream, `kdist::stream_id("<layer name>")`
  std::uint64_t step = 0;         //!< the training step (the optimizer's iterations)
  double rate = 0.0;              //!< fraction dropped, in [0, 1)
  std::uint64_t row_offset = 0;   //!< global row of the local row 0 (the shard's batch offset)
  std::uint64_t col_offset = 0;   //!< global column of the local column 0
  std::uint64_t global_cols = 0;  //!< columns of the global activation; 0: the local View's
  //! When set, the step is read here, in the memory of the Views, by the kernels themselves
  //! instead of `step`: a step captured as a device graph (kdist::detail::StepGraph) replays
  //! with each step's own mask. The model's step counter (kdist::detail::DeviceIterations).
  const std::int64_t* step_at = nullptr;
};

namespace detail {

//! The key of a dropout call: its step read on the host from `step_at` when that is host memory
//! (the CPU backends), else `step`; the device kernels read `step_at` themselves
//! (with_step_at), so that a replayed graph sees the step of its replay.
template <class Memory>
RandomKey dropout_key(std::uint64_t seed, std::uint64_t stream, std::uint64_t step,
                      const std::int64_t* step_at) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
    if (step_at != nullptr) step = static_cast<std::uint64_t>(*step_at);
  }
  return random_key(seed, stream, step);
}
//! In a kernel: `key` at the step `step_at` holds, when given.
KOKKOS_INLINE_FUNCTION RandomKey with_step_at(RandomKey key, const std::int64_t* step_at) {
  if (step_at != nullptr) key.step = static_cast<std::uint64_t>(*step_at);
  return key;
}

template <class V>
std::uint64_t checked_global_cols(const char* op, const V& x, const DropoutParams& p) {
  if (!(p.rate >= 0.0 && p.rate < 1.0)) {
    throw ValueError(std::string("kdist::ops::") + op + ": rate is " + std::to_string(p.rate) +
                     "; the dropout rate must be in [0, 1)");
  }
  const std::uint64_t cols = x.extent(1);
  std::uint64_t global_cols = p.global_cols;
  if (global_cols == 0) {
    if (p.col_offset != 0) {
      throw ValueError(std::string("kdist::ops::") + op + ": col_offset is " +
                       std::to_string(p.col_offset) +
                       " but global_cols is not given; a column shard must give the global "
                       "number of columns so that it draws the full tensor's mask");
    }
    global_cols = cols;
  }
  if (p.col_offset + cols > global_cols) {
    throw ValueError(std::string("kdist::ops::") + op + ": columns [" +
                     std::to_string(p.col_offset) + ", " + std::to_string(p.col_offset + cols) +
                     ") do not fit in global_cols = " + std::to_string(global_cols));
  }
  return global_cols;
}

//! Host: elements `j < n` of a run of global elements `g .. g + n`:
//! `y[j] = keep ? x[j] / keep_prob : 0` and, with `Mask`, `mask[j] = keep`; one
//! kdist::dropout_keep_lanes per 64-element group, applied in the same pass.
template <bool Mask, class T>
void dropout_run_host(const RandomKey& key, std::uint32_t threshold, T keep_prob, std::uint64_t g,
                      std::uint64_t n, const T* x, T* y, std::uint8_t* mask) {
  alignas(64) std::uint8_t keep[64];
  const std::uint64_t end = g + n;
  std::uint64_t e = g;
  while (e < end) {
    const std::uint64_t group = e >> 6;
    const std::uint64_t base = group << 6;
    dropout_keep_lanes(key, group, threshold, keep);
    const std::uint64_t lo = e - base;
    const std::uint64_t hi = end - base < 64 ? end - base : 64;
    const T* xs = x + (e - g);
    T* ys = y + (e - g);
    const std::uint8_t* ks = keep + lo;
    const std::uint64_t m = hi - lo;
    for (std::uint64_t r = 0; r < m; ++r) ys[r] = ks[r] ? xs[r] / keep_prob : T(0);
    if constexpr (Mask) std::memcpy(mask + (e - g), ks, m);
    e = base + hi;
  }
}

//! Host: `dx[j] = mask[j] ? dy[j] / keep_prob : 0` for `j < n`.
template <class T>
void dropout_masked_host(T keep_prob, std::uint64_t n, const T* dy, T* dx,
                         const std::uint8_t* mask) {
  for (std::uint64_t j = 0; j < n; ++j) dx[j] = mask[j] ? dy[j] / keep_prob : T(0);
}

template <class MV>
constexpr bool check_mask() {
  static_assert(Kokkos::is_view<MV>::value && static_cast<int>(MV::rank) == 1 &&
                    std::is_same_v<typename MV::value_type, std::uint8_t>,
                "kdist::ops::dropout: the mask is a rank-1 View of std::uint8_t with one element "
                "per element of x, in x's row-major order");
  return true;
}

template <class XV, class MV>
void check_mask_size(const char* op, const XV& x, const MV& mask) {
  if (mask.extent(0) != x.size()) {
    throw ValueError(std::string("kdist::ops::") + op + ": the mask has " +
                     std::to_string(mask.extent(0)) + " elements, expected " +
                     std::to_string(x.size()) + " (one per element of x, " + shape_string(x) + ")");
  }
}

//! Matrix dropout, optionally keeping the mask (`Mask`; row-major, `mask(i * cols + j)`).
template <bool Mask, class XV, class YV, class MV, class Backend>
void dropout_matrix(const XV& x, const YV& y, const MV& mask, const DropoutParams& params) {
  static_assert(check_matrix<XV>() && check_matrix<YV>() && check_same_scalar<XV, YV>());
  constexpr bool host = check_backend<Backend, XV, YV>();
  using T = scalar_t<YV>;
  require_shape("dropout", "y", y, x.extent(0), x.extent(1));
  const std::uint64_t global_cols = checked_global_cols("dropout", x, params);
  if constexpr (Mask) check_mask_size("dropout", x, mask);
  const RandomKey key = dropout_key<typename YV::memory_space>(params.seed, params.stream,
                                                               params.step, params.step_at);
  const std::int64_t* const step_at = params.step_at;
  (void)step_at;  // read by the device kernels only
  const std::uint32_t threshold = dropout_threshold(static_cast<float>(params.rate));
  const T keep_prob = T(1) - static_cast<T>(params.rate);
  const std::uint64_t row0 = params.row_offset;
  const std::uint64_t col0 = params.col_offset;
  const std::uint64_t rows = x.extent(0), cols = x.extent(1);
  if (rows == 0 || cols == 0) return;
  std::uint8_t* mask_data = nullptr;
  if constexpr (Mask) mask_data = mask.data();
  if constexpr (host) {
    const bool flat = cols == global_cols && x.span_is_contiguous() && y.span_is_contiguous();
    if (flat) {
      // Every element's draw depends on its global index alone: blocks (shared by the rank's
      // threads, ops/detail/host_threads.hpp) give the same bits as one run.
      const T* xd = x.data();
      T* yd = y.data();
      for_host_blocks(rows * cols, 16384, [&](std::uint64_t begin, std::uint64_t count) {
        dropout_run_host<Mask>(key, threshold, keep_prob, row0 * global_cols + begin, count,
                               xd + begin, yd + begin, Mask ? mask_data + begin : nullptr);
      });
    } else {
      for (std::uint64_t i = 0; i < rows; ++i) {
        dropout_run_host<Mask>(key, threshold, keep_prob, (row0 + i) * global_cols + col0, cols,
                               &x(i, 0), &y(i, 0), Mask ? mask_data + i * cols : nullptr);
      }
    }
  } else {
    if (cols == global_cols) {
      // Whole rows: the block is one run of the global flat index. One thread per Philox counter
      // of the groups of 64 elements that meet it.
      const std::uint64_t g = row0 * global_cols;
      const std::uint64_t n = rows * cols;
      const std::uint64_t slots = ((n + 63) / 64 + 1) * 16;
      Kokkos::parallel_for(
          "kdist::ops::dropout", range<YV>(slots), KOKKOS_LAMBDA(const std::int64_t t) {
            const std::uint64_t group = (g >> 6) + static_cast<std::uint64_t>(t) / 16;
            const std::uint64_t l = static_cast<std::uint64_t>(t) % 16;
            auto* const kept = mask_data;  // captured outside `if constexpr` (nvcc)
            const RandomBits b = kdist::random_bits(with_step_at(key, step_at), (group << 4) | l);
            for (int w = 0; w < 4; ++w) {
              const std::uint64_t e = (group << 6) + 16 * static_cast<std::uint64_t>(w) + l;
              if (e < g || e >= g + n) continue;
              const std::uint64_t f = e - g;
              const std::uint64_t i = f / cols, j = f % cols;
              const bool keep = (b.word[w] >> 8) < threshold;
              y(i, j) = keep ? x(i, j) / keep_prob : T(0);
              if constexpr (Mask) kept[f] = keep;
            }
          });
      return;
    }
    // One thread per Philox counter: the groups of 64 elements that meet row i's run.
    const std::uint64_t slots = ((cols + 63) / 64 + 1) * 16;
    Kokkos::parallel_for(
        "kdist::ops::dropout", md_range<YV>(rows, slots),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t t) {
          const std::uint64_t g = (row0 + static_cast<std::uint64_t>(i)) * global_cols + col0;
          const std::uint64_t group = (g >> 6) + static_cast<std::uint64_t>(t) / 16;
          const std::uint64_t l = static_cast<std::uint64_t>(t) % 16;
          auto* const kept = mask_data;  // captured outside `if constexpr` (nvcc)
          const RandomBits b = kdist::random_bits(with_step_at(key, step_at), (group << 4) | l);
          for (int w = 0; w < 4; ++w) {
            const std::uint64_t e = (group << 6) + 16 * static_cast<std::uint64_t>(w) + l;
            if (e < g || e >= g + cols) continue;
            const std::uint64_t j = e - g;
            const bool keep = (b.word[w] >> 8) < threshold;
            y(i, j) = keep ? x(i, j) / keep_prob : T(0);
            if constexpr (Mask) kept[static_cast<std::uint64_t>(i) * cols + j] = keep;
          }
        });
  }
}

}  // namespace detail

//! `y = dropout(x)`: `y(i, j) = x(i, j) / (1 - rate)` where kdist::dropout_keep keeps the global
//! element, else 0. `y` may be `x` (in place). `rate == 0` copies.
//! Errors: kdist::ValueError for a rate outside [0, 1), a column shard without `global_cols`, a
//! shard that does not fit in `global_cols`, or mismatched shapes.
template <class XV, class YV, class Backend = AutoBackend>
void dropout(const XV& x, const YV& y, const DropoutParams& params, Backend = {}) {
  using Mask = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, typename YV::memory_space,
                            Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  detail::dropout_matrix<false, XV, YV, Mask, Backend>(x, y, Mask(), params);
}

//! Dropout that also keeps its mask for the backward pass: as `dropout(x, y, params)`, and
//! `mask(i * cols + j) = 1` where element (i, j) is kept, else 0 (a rank-1 std::uint8_t View of
//! `x.size()` elements in y's memory space, allocated once and reused across steps).
//! Errors: as dropout, and a mask of the wrong size.
template <class XV, class YV, class MV, class Backend = AutoBackend>
void dropout(const XV& x, const YV& y, const MV& mask, const DropoutParams& params, Backend = {}) {
  static_assert(detail::check_mask<MV>());
  detail::dropout_matrix<true, XV, YV, MV, Backend>(x, y, mask, params);
}

//! Dropout in place.
template <class V, class Backend = AutoBackend>
void dropout_inplace(const V& x, const DropoutParams& params, Backend b = {}) {
  dropout(x, x, params, b);
}

//! Dropout backward with the forward call's `params`: `dx = dy / (1 - rate)` on kept elements,
//! else 0 (the same mask, drawn again). `dx` may be `dy`. Errors: as dropout.
template <class DYV, class DXV, class Backend = AutoBackend>
void dropout_backward(const DYV& dy, const DXV& dx, const DropoutParams& params, Backend b = {}) {
  dropout(dy, dx, params, b);
}

//! Dropout backward with the mask the forward kept (`dropout(x, y, mask, params)`):
//! `dx(i, j) = mask(i * cols + j) ? dy(i, j) / (1 - rate) : 0`; nothing is drawn. `dx` may be
//! `dy`; dy and dx may be matrices or contiguous blocks of any rank (the mask in their row-major
//! order). Errors: kdist::ValueError for a rate outside [0, 1), mismatched shapes, a mask of the
//! wrong size, or blocks of rank 1 or >= 3 that are not contiguous.
template <class DYV, class DXV, class MV, class Backend = AutoBackend>
void dropout_backward(const DYV& dy, const DXV& dx, const MV& mask, double rate, Backend = {}) {
  static_assert(detail::check_mask<MV>() && detail::check_same_scalar<DYV, DXV>() &&
                static_cast<int>(DYV::rank) == static_cast<int>(DXV::rank));
  static_assert(std::is_same_v<typename DYV::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename DXV::array_layout, Kokkos::LayoutRight>,
                "kdist::ops::dropout_backward: LayoutRight Views");
  constexpr bool host = detail::check_backend<Backend, DYV, DXV>();
  using T = detail::scalar_t<DXV>;
  const std::string op = "kdist::ops::dropout_backward: ";
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw ValueError(op + "rate is " + std::to_string(rate) +
                     "; the dropout rate must be in [0, 1)");
  }
  for (int d = 0; d < static_cast<int>(DYV::rank); ++d) {
    if (dx.extent(d) != dy.extent(d)) {
      throw ValueError(op + "dx is " + detail::shape_string(dx) + ", expected " +
                       detail::shape_string(dy));
    }
  }
  detail::check_mask_size("dropout_backward", dy, mask);
  const T keep_prob = T(1) - static_cast<T>(rate);
  const std::uint8_t* mp = mask.data();
  if constexpr (static_cast<int>(DYV::rank) == 2) {
    // Matrices may be row blocks of a larger View (strided rows).
    const std::uint64_t rows = dy.extent(0), cols = dy.extent(1);
    if (rows == 0 || cols == 0) return;
    if constexpr (host) {
      detail::for_host_blocks(
          rows, detail::rows_per_block(cols), [&](std::uint64_t r0, std::uint64_t count) {
            for (std::uint64_t i = r0; i < r0 + count; ++i) {
              detail::dropout_masked_host(keep_prob, cols, &dy(i, 0), &dx(i, 0), mp + i * cols);
            }
          });
    } else {
      Kokkos::parallel_for(
          "kdist::ops::dropout_backward", detail::md_range<DXV>(rows, cols),
          KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
            dx(i, j) = mp[static_cast<std::uint64_t>(i) * cols + static_cast<std::uint64_t>(j)]
                           ? dy(i, j) / keep_prob
                           : T(0);
          });
    }
  } else {
    if (!dy.span_is_contiguous() || !dx.span_is_contiguous()) {
      throw ValueError(op + "dy and dx must be contiguous Views");
    }
    const std::uint64_t n = dy.size();
    const T* dyp = dy.data();
    T* dxp = dx.data();
    if constexpr (host) {
      detail::for_host_blocks(n, 16384, [&](std::uint64_t begin, std::uint64_t count) {
        detail::dropout_masked_host(keep_prob, count, dyp + begin, dxp + begin, mp + begin);
      });
    } else {
      Kokkos::parallel_for(
          "kdist::ops::dropout_backward", detail::range<DXV>(n),
          KOKKOS_LAMBDA(const std::int64_t j) { dxp[j] = mp[j] ? dyp[j] / keep_prob : T(0); });
    }
  }
}

//! Which mask `dropout_block` draws for a block of a rank-R activation: local element (i_0, ...,
//! i_{R-1}) is global element (offsets[0] + i_0, ..., offsets[R-1] + i_{R-1}) of an activation of
//! `global_extents`, whose row-major flat index keys kdist::dropout_keep (for R = 2, the index
//! DropoutParams gives: the same masks).
template <std::size_t R>
struct DropoutBlockParams {
  std::uint64_t seed = 0;                         //!< the model's seed
  std::uint64_t stream = 0;                       //!< the layer's stream
  std::uint64_t step = 0;                         //!< the training step
  double rate = 0.0;                              //!< fraction dropped, in [0, 1)
  std::array<std::uint64_t, R> offsets{};         //!< global index of the local element 0
  std::array<std::uint64_t, R> global_extents{};  //!< the global activation's shape
  const std::int64_t* step_at = nullptr;          //!< as DropoutParams::step_at
};

namespace detail {

//! The global row-major flat index of local flat index `f` of a block at `lo` of extents `lext`
//! in a tensor of extents `gext`.
template <std::size_t R>
KOKKOS_INLINE_FUNCTION std::uint64_t block_global_index(
    std::uint64_t f, const Kokkos::Array<std::uint64_t, R>& lo,
    const Kokkos::Array<std::uint64_t, R>& lext, const Kokkos::Array<std::uint64_t, R>& gext) {
  std::uint64_t index = 0, mult = 1;
  for (std::size_t k = R; k-- > 0;) {
    const std::uint64_t c = f % lext[k];
    f /= lext[k];
    index += (lo[k] + c) * mult;
    mult *= gext[k];
  }
  return index;
}

template <bool Mask, class Backend, class XV, class YV, class MV>
void dropout_block_impl(const XV& x, const YV& y, const MV& mask,
                        const DropoutBlockParams<static_cast<std::size_t>(XV::rank)>& params) {
  constexpr std::size_t R = static_cast<std::size_t>(XV::rank);
  static_assert(static_cast<std::size_t>(YV::rank) == R && R >= 1 && R <= 8,
                "kdist::ops::dropout_block: x and y of the same rank, 1 to 8");
  static_assert(std::is_same_v<typename XV::array_layout, Kokkos::LayoutRight> &&
                    std::is_same_v<typename YV::array_layout, Kokkos::LayoutRight>,
                "kdist::ops::dropout_block: LayoutRight Views");
  static_assert(check_same_scalar<XV, YV>());
  using T = scalar_t<YV>;
  const std::string op = "kdist::ops::dropout_block: ";
  if (!(params.rate >= 0.0 && params.rate < 1.0)) {
    throw ValueError(op + "rate is " + std::to_string(params.rate) +
                     "; the dropout rate must be in [0, 1)");
  }
  Kokkos::Array<std::uint64_t, R> lo, gext, lext;
  for (std::size_t d = 0; d < R; ++d) {
    if (y.extent(d) != x.extent(d)) {
      throw ValueError(op + "y is " + shape_string(y) + ", expected " + shape_string(x));
    }
    if (params.offsets[d] + x.extent(d) > params.global_extents[d]) {
      throw ValueError(op + "dimension " + std::to_string(d) + ": elements [" +
                       std::to_string(params.offsets[d]) + ", " +
                       std::to_string(params.offsets[d] + x.extent(d)) +
                       ") do not fit in the global extent " +
                       std::to_string(params.global_extents[d]));
    }
    lo[d] = params.offsets[d];
    gext[d] = params.global_extents[d];
    lext[d] = x.extent(d);
  }
  if (!x.span_is_contiguous() || !y.span_is_contiguous()) {
    throw ValueError(op + "x and y must be contiguous Views");
  }
  if constexpr (Mask) check_mask_size("dropout_block", x, mask);
  const std::uint64_t size = x.size();
  if (size == 0) return;
  // Runs: local elements contiguous in the global flat index too (the last dimension, merged with
  // the ones before it while the inner dimensions are whole).
  std::uint64_t run = lext[R - 1];
  for (std::size_t k = R - 1; k > 0 && lext[k] == gext[k]; --k) run *= lext[k - 1];
  const std::uint64_t runs = size / run;
  const RandomKey key = dropout_key<typename YV::memory_space>(params.seed, params.stream,
                                                               params.step, params.step_at);
  const std::int64_t* const step_at = params.step_at;
  (void)step_at;  // read by the device kernels only
  const std::uint32_t threshold = dropout_threshold(static_cast<float>(params.rate));
  const T keep_prob = T(1) - static_cast<T>(params.rate);
  const T* xp = x.data();
  T* yp = y.data();
  std::uint8_t* mp = nullptr;
  if constexpr (Mask) mp = mask.data();
  if constexpr (check_backend<Backend, XV, YV>()) {
    for (std::uint64_t q = 0; q < runs; ++q) {
      dropout_run_host<Mask>(key, threshold, keep_prob,
                             block_global_index<R>(q * run, lo, lext, gext), run, xp + q * run,
                             yp + q * run, Mask ? mp + q * run : nullptr);
    }
  } else {
    const std::uint64_t slots = ((run + 63) / 64 + 1) * 16;
    Kokkos::parallel_for(
        "kdist::ops::dropout_block", md_range<YV>(runs, slots),
        KOKKOS_LAMBDA(const std::int64_t q, const std::int64_t t) {
          auto* const kept = mp;  // captured outside `if constexpr` (nvcc)
          const std::uint64_t f0 = static_cast<std::uint64_t>(q) * run;
          const std::uint64_t g = block_global_index<R>(f0, lo, lext, gext);
          const std::uint64_t group = (g >> 6) + static_cast<std::uint64_t>(t) / 16;
          const std::uint64_t l = static_cast<std::uint64_t>(t) % 16;
          const RandomBits b = kdist::random_bits(with_step_at(key, step_at), (group << 4) | l);
          for (int w = 0; w < 4; ++w) {
            const std::uint64_t e = (group << 6) + 16 * static_cast<std::uint64_t>(w) + l;
            if (e < g || e >= g + run) continue;
            const std::uint64_t f = f0 + (e - g);
            const bool keep = (b.word[w] >> 8) < threshold;
            yp[f] = keep ? xp[f] / keep_prob : T(0);
            if constexpr (Mask) kept[f] = keep;
          }
        });
  }
}

}  // namespace detail

//! `y = dropout(x)` on a contiguous LayoutRight block of any rank: `y = x / (1 - rate)` where
//! kdist::dropout_keep keeps the global element, else 0. `y` may be `x`. Without a mask, used
//! forward and backward (the same params draw the mask again). Errors: kdist::ValueError for a
//! rate outside [0, 1), a block that does not fit in `global_extents`, mismatched shapes or a
//! View that is not contiguous.
template <class XV, class YV, class Backend = AutoBackend>
void dropout_block(const XV& x, const YV& y,
                   const DropoutBlockParams<static_cast<std::size_t>(XV::rank)>& params,
                   Backend = {}) {
  using Mask = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight, typename YV::memory_space,
                            Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  detail::dropout_block_impl<false, Backend>(x, y, Mask(), params);
}

//! As `dropout_block(x, y, params)`, keeping the mask: `mask(f) = 1` where local flat
//! (row-major) element f is kept, else 0, for `dropout_backward(dy, dx, mask, rate)`.
//! Errors: as dropout_block, and a mask of the wrong size.
template <class XV, class YV, class MV, class Backend = AutoBackend>
void dropout_block(const XV& x, const YV& y, const MV& mask,
                   const DropoutBlockParams<static_cast<std::size_t>(XV::rank)>& params,
                   Backend = {}) {
  static_assert(detail::check_mask<MV>());
  detail::dropout_block_impl<true, Backend>(x, y, mask, params);
}

}  // namespace kdist::ops
