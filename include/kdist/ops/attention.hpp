#pragma once
//! \file ops/attention.hpp
//! Local kernels of scaled dot-product attention on the heads a process holds (Keras'
//! MultiHeadAttention `_compute_attention`, without dropout):
//!
//!   scores(b, h, i, j) = scale * sum_d q(b, i, h, d) k(b, j, h, d)
//!   probs(b, h, i, :)  = softmax over j of scores(b, h, i, :)     (row max subtracted)
//!   out(b, i, h, d)    = sum_j probs(b, h, i, j) v(b, j, h, d)
//!
//! With `causal`, position i attends to positions j <= i only (Keras `use_causal_mask=True`): the
//! masked probabilities are exactly 0 (Keras adds a large negative number to their scores, which
//! underflows to the same 0). `scale` is Keras' `1 / sqrt(key_dim)`, applied to the query.
//!
//! Layouts: q, k, v, out, dq, dk, dv are rank-4 LayoutRight Views (batch, seq, heads, head_dim),
//! the layout a projection `x (batch*seq, d_model) * W (d_model, heads*head_dim)` writes; probs
//! (and the backward's scratch) are (batch, heads, seq, seq). On host memory (backend::automatic)
//! each (batch, head) is three Eigen GEMMs over strided maps of the Views (QK^T, softmax, PV;
//! the backward five): the work of attention is matrix products, and Eigen's blocked GEMM runs
//! them some 25x faster than a loop per row. Elsewhere (a GPU, or backend::kokkos) the same
//! products are strided batched GEMMs over the heads of each batch row (cuBLAS on CUDA memory,
//! ops/detail/batched_gemm.hpp) and the softmax (and its backward) one kernel over the rows.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <Eigen/Core>
#include <kdist/core/error.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/detail/batched_gemm.hpp>
#include <kdist/ops/detail/host_threads.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>

namespace kdist::ops {

namespace detail {

//! Checks (at compile time) that `V` is a rank-4 LayoutRight View of float or double.
template <class V>
constexpr bool check_rank4() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == 4,
                "kdist::ops attention: expected a rank-4 View (batch, seq, heads, head_dim) or "
                "(batch, heads, seq, seq)");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "kdist::ops: expected a Kokkos::LayoutRight View");
  static_assert(std::is_same_v<scalar_t<V>, float> || std::is_same_v<scalar_t<V>, double>,
                "kdist::ops: expected a View of float or double");
  return true;
}

template <class V>
void require_extents4(const char* op, const char* what, const V& v, std::size_t e0, std::size_t e1,
                      std::size_t e2, std::size_t e3) {
  if (v.extent(0) != e0 || v.extent(1) != e1 || v.extent(2) != e2 || v.extent(3) != e3) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what + " is " + shape_string(v) +
                     ", expected " + std::to_string(e0) + "x" + std::to_string(e1) + "x" +
                     std::to_string(e2) + "x" + std::to_string(e3));
  }
}

template <class V>
auto md_range3(std::size_t n0, std::size_t n1, std::size_t n2) {
  using Policy = Kokkos::MDRangePolicy<exec_t<V>, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
  using P = typename Policy::point_type;
  P lower;
  P upper;
  lower[0] = 0;
  lower[1] = 0;
  lower[2] = 0;
  upper[0] = static_cast<std::int64_t>(n0);
  upper[1] = static_cast<std::int64_t>(n1);
  upper[2] = static_cast<std::int64_t>(n2);
  return Policy(lower, upper);
}

//! Head h of batch b of a (batch, seq, heads, head_dim) View as a row-major (seq, head_dim)
//! matrix (rows head_dim * heads apart), for Eigen.
template <class V>
auto head_map(const V& v, std::size_t b, std::size_t h) {
  using T = typename V::value_type;
  using M = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Target = std::conditional_t<std::is_const_v<T>, const M, M>;
  return Eigen::Map<Target, Eigen::Unaligned, Eigen::OuterStride<>>(
      v.data() + (b * v.extent(1) * v.extent(2) + h) * v.extent(3),
      static_cast<Eigen::Index>(v.extent(1)), static_cast<Eigen::Index>(v.extent(3)),
      Eigen::OuterStride<>(static_cast<Eigen::Index>(v.extent(2) * v.extent(3))));
}
//! Block (b, h) of a (batch, heads, seq, seq) View as a row-major (seq, seq) matrix.
template <class V>
auto square_map(const V& v, std::size_t b, std::size_t h) {
  using T = typename V::value_type;
  using M = Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Target = std::conditional_t<std::is_const_v<T>, const M, M>;
  return Eigen::Map<Target>(v.data() + (b * v.extent(1) + h) * v.extent(2) * v.extent(3),
                            static_cast<Eigen::Index>(v.extent(2)),
                            static_cast<Eigen::Index>(v.extent(3)));
}

template <class QV, class... Vs>
void check_attention_views(const char* op, const QV& q, const Vs&... vs) {
  (require_extents4(op, "a (batch, seq, heads, head_dim) operand", vs, q.extent(0), q.extent(1),
                    q.extent(2), q.extent(3)),
   ...);
}

//! Whether every View is packed (the Eigen maps index their memory directly).
template <class... Vs>
bool all_packed(const Vs&... vs) {
  return (vs.span_is_contiguous() && ...);
}

//! The batched GEMMs index the Views' memory directly. Errors: kdist::ValueError for a padded View.
template <class... Vs>
void require_packed(const char* op, const Vs&... vs) {
  if (!all_packed(vs...)) {
    throw ValueError(std::string("kdist::ops::") + op +
                     ": a View is padded (not contiguous); the attention kernels off the host "
                     "need unpadded LayoutRight Views (allocate without Kokkos::AllowPadding)");
  }
}

//! attention_forward on host memory: per (batch, head) P = softmax(scale Q K^T), O = P V.
template <class QV, class KV, class VV, class PV, class OV>
void attention_forward_eigen(const QV& q, const KV& k, const VV& v, const PV& probs, const OV& out,
                             scalar_t<OV> scale, bool causal) {
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2);
  Kokkos::fence();  // the Views' producers have finished
  limit_eigen_threads_once();
  // Every (batch, head) writes its own slices: the rank's threads share them.
  for_host_blocks(B * H, 1, [&](std::uint64_t bh, std::uint64_t) {
    const std::size_t b = bh / H, h = bh % H;
    auto p = square_map(probs, b, h);
    p.noalias() = (head_map(q, b, h) * scale) * head_map(k, b, h).transpose();
    for (std::size_t i = 0; i < S; ++i) {
      const std::size_t n = causal ? i + 1 : S;
      auto row = p.row(static_cast<Eigen::Index>(i));
      auto live = row.head(static_cast<Eigen::Index>(n));
      live = (live.array() - live.maxCoeff()).exp().matrix();
      live /= live.sum();
      row.tail(static_cast<Eigen::Index>(S - n)).setZero();
    }
    head_map(out, b, h).noalias() = p * head_map(v, b, h);
  });
}

//! attention_backward on host memory: per (batch, head) dP = dO V^T, dS = P o (dP - rowsum(P o
//! dP)) scale, dQ = dS K, dK = dS^T Q, dV = P^T dO.
template <class QV, class KV, class VV, class PV, class DOV, class SV, class DQV, class DKV,
          class DVV>
void attention_backward_eigen(const QV& q, const KV& k, const VV& v, const PV& probs,
                              const DOV& dout, const SV& scratch, const DQV& dq, const DKV& dk,
                              const DVV& dv, scalar_t<DQV> scale, bool) {
  const std::size_t B = q.extent(0), H = q.extent(2);
  Kokkos::fence();
  limit_eigen_threads_once();
  for_host_blocks(B * H, 1, [&](std::uint64_t bh, std::uint64_t) {
    const std::size_t b = bh / H, h = bh % H;
    const auto p = square_map(probs, b, h);
    const auto d_out = head_map(dout, b, h);
    auto ds = square_map(scratch, b, h);
    ds.noalias() = d_out * head_map(v, b, h).transpose();  // dP
    // dS = P o (dP - rowsum(P o dP)) * scale; masked entries have P = 0, so dS = 0
    const auto rows = (p.array() * ds.array()).rowwise().sum().eval();
    ds = (p.array() * (ds.array().colwise() - rows) * scale).matrix();
    head_map(dq, b, h).noalias() = ds * head_map(k, b, h);
    head_map(dk, b, h).noalias() = ds.transpose() * head_map(q, b, h);
    head_map(dv, b, h).noalias() = p.transpose() * d_out;
  });
}

//! The (batch, head) products of attention as strided batched GEMMs: head h of batch b of a
//! (batch, seq, heads, head_dim) View is a (seq, head_dim) matrix at b * seq * heads * head_dim +
//! h * head_dim, rows heads * head_dim apart; of a (batch, heads, seq, seq) View a (seq, seq)
//! matrix at (b * heads + h) * seq * seq. Both index pairs are strided, so one call covers all the
//! batch rows of one head or all the heads of one batch row: the loop runs over the fewer.
template <class V, class T>
void per_head_gemm(std::size_t B, std::size_t S, std::size_t H, std::size_t D, bool trans_a,
                   bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                   const T* a, bool a_square, const T* b, bool b_square, T* c, bool c_square) {
  const auto s = static_cast<std::int64_t>(S), h = static_cast<std::int64_t>(H),
             d = static_cast<std::int64_t>(D), nb = static_cast<std::int64_t>(B);
  const bool over_heads = H >= B;  // each call: every head of one batch row
  // (offset of batch row i / head i, stride between the products of one call, leading dimension)
  const auto operand = [&](bool square, std::int64_t i) {
    const std::int64_t batch_stride = square ? h * s * s : s * h * d;
    const std::int64_t head_stride = square ? s * s : d;
    const std::int64_t ld = square ? s : h * d;
    return over_heads ? std::pair{i * batch_stride, BatchedOperand{ld, head_stride}}
                      : std::pair{i * head_stride, BatchedOperand{ld, batch_stride}};
  };
  const std::int64_t calls = over_heads ? nb : h, count = over_heads ? h : nb;
  for (std::int64_t i = 0; i < calls; ++i) {
    const auto [oa, sa] = operand(a_square, i);
    const auto [ob, sb] = operand(b_square, i);
    const auto [oc, sc] = operand(c_square, i);
    batched_gemm<V>(trans_a, trans_b, m, n, k, alpha, a + oa, sa, b + ob, sb, T(0), c + oc, sc,
                    count);
  }
}

//! Row i of each (batch, head) of scores -> softmax over j (j <= i when causal; the rest 0).
template <class PV>
void masked_softmax_rows(const PV& probs, bool causal) {
  using T = scalar_t<PV>;
  const auto seq = static_cast<std::int64_t>(probs.extent(2));
  Kokkos::parallel_for(
      "kdist::ops::attention softmax", md_range3<PV>(probs.extent(0), probs.extent(1), seq),
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t h, const std::int64_t i) {
        const std::int64_t jend = causal ? i + 1 : seq;
        T mx = probs(b, h, i, 0);
        for (std::int64_t j = 1; j < jend; ++j)
          mx = probs(b, h, i, j) > mx ? probs(b, h, i, j) : mx;
        T sum = T(0);
        for (std::int64_t j = 0; j < jend; ++j) {
          const T e = kdist::detail::kmath::exp(probs(b, h, i, j) - mx);
          probs(b, h, i, j) = e;
          sum += e;
        }
        const T inv = T(1) / sum;
        for (std::int64_t j = 0; j < jend; ++j) probs(b, h, i, j) *= inv;
        for (std::int64_t j = jend; j < seq; ++j) probs(b, h, i, j) = T(0);
      });
}

//! dS = P o (dP - rowsum(P o dP)) scale, in place over dP in `scratch` (masked entries have P = 0).
template <class PV, class SV>
void softmax_backward_rows(const PV& probs, const SV& scratch, scalar_t<SV> scale) {
  using T = scalar_t<SV>;
  const auto seq = static_cast<std::int64_t>(probs.extent(2));
  Kokkos::parallel_for(
      "kdist::ops::attention dscores", md_range3<SV>(probs.extent(0), probs.extent(1), seq),
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t h, const std::int64_t i) {
        T row = T(0);
        for (std::int64_t j = 0; j < seq; ++j) row += probs(b, h, i, j) * scratch(b, h, i, j);
        for (std::int64_t j = 0; j < seq; ++j) {
          scratch(b, h, i, j) = probs(b, h, i, j) * (scratch(b, h, i, j) - row) * scale;
        }
      });
}

//! attention_forward off the host (a GPU; backend::kokkos): P = softmax(scale Q K^T) as batched
//! GEMMs and a row kernel, O = P V a batched GEMM. The causal mask is applied in the softmax (the
//! products are computed whole, as in the matrix form on the host).
template <class QV, class KV, class VV, class PV, class OV>
void attention_forward_batched(const QV& q, const KV& k, const VV& v, const PV& probs,
                               const OV& out, scalar_t<OV> scale, bool causal) {
  using T = scalar_t<OV>;
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2), D = q.extent(3);
  const auto s = static_cast<std::int64_t>(S), d = static_cast<std::int64_t>(D);
  if (S == 0) return;
  per_head_gemm<OV, T>(B, S, H, D, false, true, s, s, d, scale, q.data(), false, k.data(), false,
                       probs.data(), true);
  masked_softmax_rows(probs, causal);
  per_head_gemm<OV, T>(B, S, H, D, false, false, s, d, s, T(1), probs.data(), true, v.data(), false,
                       out.data(), false);
}

//! attention_backward off the host: dP = dO V^T, dS (row kernel), dQ = dS K, dK = dS^T Q,
//! dV = P^T dO, each a batched GEMM.
template <class QV, class KV, class VV, class PV, class DOV, class SV, class DQV, class DKV,
          class DVV>
void attention_backward_batched(const QV& q, const KV& k, const VV& v, const PV& probs,
                                const DOV& dout, const SV& scratch, const DQV& dq, const DKV& dk,
                                const DVV& dv, scalar_t<DQV> scale, bool) {
  using T = scalar_t<DQV>;
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2), D = q.extent(3);
  const auto s = static_cast<std::int64_t>(S), d = static_cast<std::int64_t>(D);
  if (S == 0) return;
  per_head_gemm<DQV, T>(B, S, H, D, false, true, s, s, d, T(1), dout.data(), false, v.data(), false,
                        scratch.data(), true);
  softmax_backward_rows(probs, scratch, scale);
  per_head_gemm<DQV, T>(B, S, H, D, false, false, s, d, s, T(1), scratch.data(), true, k.data(),
                        false, dq.data(), false);
  per_head_gemm<DQV, T>(B, S, H, D, true, false, s, d, s, T(1), scratch.data(), true, q.data(),
                        false, dk.data(), false);
  per_head_gemm<DQV, T>(B, S, H, D, true, false, s, d, s, T(1), probs.data(), true, dout.data(),
                        false, dv.data(), false);
}

}  // namespace detail

//! Forward: fills `probs` (batch, heads, seq, seq) with the attention probabilities (masked
//! entries 0) and `out` (batch, seq, heads, head_dim) with their weighted sum of `v`.
//! q, k, v: (batch, seq, heads, head_dim). Errors: kdist::ValueError when extents differ.
template <class QV, class KV, class VV, class PV, class OV, class Backend = AutoBackend>
void attention_forward(const QV& q, const KV& k, const VV& v, const PV& probs, const OV& out,
                       detail::scalar_t<OV> scale, bool causal, Backend = {}) {
  static_assert(detail::check_rank4<QV>() && detail::check_rank4<KV>() &&
                detail::check_rank4<VV>() && detail::check_rank4<PV>() &&
                detail::check_rank4<OV>());
  static_assert(detail::check_same_scalar<QV, OV>() && detail::check_same_scalar<KV, OV>() &&
                detail::check_same_scalar<VV, OV>() && detail::check_same_scalar<PV, OV>());
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2);
  detail::check_attention_views("attention_forward", q, k, v, out);
  detail::require_extents4("attention_forward", "probs", probs, B, H, S, S);
  if constexpr (detail::check_backend<Backend, QV, KV, VV, PV, OV>()) {
    if (detail::all_packed(q, k, v, probs, out)) {
      detail::attention_forward_eigen(q, k, v, probs, out, scale, causal);
      return;
    }
  }
  detail::require_packed("attention_forward", q, k, v, probs, out);
  detail::attention_forward_batched(q, k, v, probs, out, scale, causal);
}

//! Backward: given `dout` = dL/d(out) and the forward's `probs`, writes dq, dk, dv (all
//! (batch, seq, heads, head_dim); overwritten). `scratch` (batch, heads, seq, seq) receives
//! dL/d(scores). Errors: kdist::ValueError when extents differ.
template <class QV, class KV, class VV, class PV, class DOV, class SV, class DQV, class DKV,
          class DVV, class Backend = AutoBackend>
void attention_backward(const QV& q, const KV& k, const VV& v, const PV& probs, const DOV& dout,
                        const SV& scratch, const DQV& dq, const DKV& dk, const DVV& dv,
                        detail::scalar_t<DQV> scale, bool causal, Backend = {}) {
  static_assert(
      detail::check_rank4<QV>() && detail::check_rank4<KV>() && detail::check_rank4<VV>() &&
      detail::check_rank4<PV>() && detail::check_rank4<DOV>() && detail::check_rank4<SV>() &&
      detail::check_rank4<DQV>() && detail::check_rank4<DKV>() && detail::check_rank4<DVV>());
  static_assert(detail::check_same_scalar<QV, DQV>() && detail::check_same_scalar<KV, DQV>() &&
                detail::check_same_scalar<VV, DQV>() && detail::check_same_scalar<PV, DQV>() &&
                detail::check_same_scalar<DOV, DQV>() && detail::check_same_scalar<SV, DQV>() &&
                detail::check_same_scalar<DKV, DQV>() && detail::check_same_scalar<DVV, DQV>());
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2);
  detail::check_attention_views("attention_backward", q, k, v, dout, dq, dk, dv);
  detail::require_extents4("attention_backward", "probs", probs, B, H, S, S);
  detail::require_extents4("attention_backward", "scratch", scratch, B, H, S, S);
  if constexpr (detail::check_backend<Backend, QV, KV, VV, PV, DOV, SV, DQV, DKV, DVV>()) {
    if (detail::all_packed(q, k, v, probs, dout, scratch, dq, dk, dv)) {
      detail::attention_backward_eigen(q, k, v, probs, dout, scratch, dq, dk, dv, scale, causal);
      return;
    }
  }
  detail::require_packed("attention_backward", q, k, v, probs, dout, scratch, dq, dk, dv);
  detail::attention_backward_batched(q, k, v, probs, dout, scratch, dq, dk, dv, scale, causal);
}

//! The same with a scratch View allocated here.
template <class QV, class KV, class VV, class PV, class DOV, class DQV, class DKV, class DVV,
          class Backend = AutoBackend>
void attention_backward(const QV& q, const KV& k, const VV& v, const PV& probs, const DOV& dout,
                        const DQV& dq, const DKV& dk, const DVV& dv, detail::scalar_t<DQV> scale,
                        bool causal, Backend backend = {}) {
  using T = detail::scalar_t<DQV>;
  Kokkos::View<T****, Kokkos::LayoutRight, typename DQV::memory_space> scratch(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::ops::attention_backward scratch"),
      probs.extent(0), probs.extent(1), probs.extent(2), probs.extent(3));
  attention_backward(q, k, v, probs, dout, scratch, dq, dk, dv, scale, causal, backend);
}

}  // namespace kdist::ops
