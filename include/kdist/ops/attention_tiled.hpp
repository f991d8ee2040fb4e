#pragma once
//! \file ops/attention_tiled.hpp
//! Scaled dot-product attention in tiles, in the manner of FlashAttention-2 (Dao, 2023): the same
//! results as ops/attention.hpp's kernels without their (batch, heads, seq, seq) probabilities,
//! so memory is linear in the sequence length.
//!
//! Forward: a Kokkos team per (batch, head, block of query rows) walks the keys in tiles held in
//! team scratch memory (K and V tiles, the rows' scores), keeping per row the running maximum m,
//! the running sum l of exp(score - m) and the unnormalised output (the online softmax); it
//! writes `out` and, per row, the log-sum-exp `lse = m + log(l)` of its scores. Backward
//! recomputes the probabilities from `lse` instead of keeping them: `delta_i = dout_i . out_i`,
//! then a team per block of query rows accumulates dq over key tiles, and a team per block of
//! keys accumulates dk and dv over query tiles (no atomics: each output has one team).
//!
//!   p(i, j)  = exp(scale q_i . k_j - lse_i)           (0 where the causal mask hides j > i)
//!   dv_j     = sum_i p(i, j) dout_i
//!   ds(i, j) = p(i, j) (dout_i . v_j - delta_i)
//!   dq_i     = scale sum_j ds(i, j) k_j,   dk_j = scale sum_i ds(i, j) q_i
//!
//! Views: q, k, v, out, dout, dq, dk, dv as ops/attention.hpp's, rank-4 LayoutRight (batch, seq,
//! heads, head_dim); lse and delta rank-3 LayoutRight (batch, heads, seq). Any execution space
//! (the tiles' size follows head_dim, to fit 40 KiB of team scratch); on host memory
//! ops/attention.hpp's Eigen GEMMs are faster, and layers use those there.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include <kdist/core/error.hpp>
#include <kdist/ops/attention.hpp>
#include <kdist/ops/detail/kokkos_math.hpp>
#include <kdist/ops/detail/views.hpp>

namespace kdist::ops {

//! Which kernels a layer computes attention with (MultiHeadAttention::set_attention_kernel).
enum class AttentionKernel {
  automatic,  //!< `matrices`, but `tiled` off the host when the probabilities are large
  matrices,   //!< ops/attention.hpp: the (batch, heads, seq, seq) probabilities, kept for backward
              //!< (Eigen GEMMs on the host, strided batched GEMMs on a GPU)
  tiled,      //!< this file: memory linear in seq, the probabilities recomputed in backward
};

//! Off the host, `automatic` keeps the matrix kernels while a layer's probabilities (batch x heads
//! x seq x seq scalars of a process) take at most this many bytes (256 MiB: the default GPT's are
//! 4 MiB, GPT-2 small's at batch 8 and seq 1024 are 384 MiB).
inline constexpr std::size_t attention_matrices_max_bytes = std::size_t{256} << 20;

//! KDIST_ATTENTION_KERNEL: "matrices", "tiled", or unset / "automatic". Errors: kdist::ValueError
//! for another value.
inline AttentionKernel attention_kernel_from_environment() {
  const char* v = std::getenv("KDIST_ATTENTION_KERNEL");
  if (v == nullptr || *v == '\0') return AttentionKernel::automatic;
  const std::string s(v);
  if (s == "automatic") return AttentionKernel::automatic;
  if (s == "matrices") return AttentionKernel::matrices;
  if (s == "tiled") return AttentionKernel::tiled;
  throw ValueError("KDIST_ATTENTION_KERNEL is '" + s +
                   "', not matrices, tiled or automatic (the attention kernels of "
                   "MultiHeadAttention; ops/attention_tiled.hpp)");
}

namespace detail {

//! Checks (at compile time) that `V` is a rank-3 LayoutRight View of float or double.
template <class V>
constexpr bool check_rank3_rows() {
  static_assert(Kokkos::is_view<V>::value, "kdist::ops: expected a Kokkos::View");
  static_assert(static_cast<int>(V::rank) == 3,
                "kdist::ops tiled attention: lse and delta are rank-3 Views (batch, heads, seq)");
  static_assert(std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
                "kdist::ops: expected a Kokkos::LayoutRight View");
  return true;
}

template <class V>
void require_rows(const char* op, const char* what, const V& v, std::size_t b, std::size_t h,
                  std::size_t s) {
  if (v.extent(0) != b || v.extent(1) != h || v.extent(2) != s) {
    throw ValueError(std::string("kdist::ops::") + op + ": " + what + " is " + shape_string(v) +
                     ", expected " + std::to_string(b) + "x" + std::to_string(h) + "x" +
                     std::to_string(s) + " (batch, heads, seq)");
  }
}

//! Team scratch budget of one tiled-attention team, and the tile size (query rows, and keys, per
//! tile) that fits it: the largest power of two up to 64 for which a tile row's `vectors` vectors
//! of head_dim `D`, its row of `t` scores (when `scores`) and two per-row values fit.
inline constexpr std::size_t attention_scratch_bytes = 40 * 1024;
inline std::size_t attention_tile(std::size_t D, std::size_t value_bytes, std::size_t vectors,
                                  bool scores) {
  std::size_t t = 64;
  while (t > 1 &&
         t * (vectors * D + (scores ? t : 0) + 2) * value_bytes > attention_scratch_bytes) {
    t /= 2;
  }
  return t;
}

//! A league or scratch size as the int Kokkos' TeamPolicy takes; kdist::ValueError when it does
//! not fit (a batch x heads x tiles count beyond 2^31 - 1: split the batch).
inline int team_int(std::size_t n, const char* who) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw ValueError(std::string("kdist::ops::") + who + ": " + std::to_string(n) +
                     " teams or scratch bytes are more than Kokkos' int allows; split the batch");
  }
  return static_cast<int>(n);
}

}  // namespace detail

//! Forward: writes `out` (batch, seq, heads, head_dim) = softmax(scale q k^T) v per (batch, head)
//! and `lse` (batch, heads, seq), each row's log-sum-exp of its (unmasked) scores, which
//! attention_backward_tiled reads. Errors: kdist::ValueError when extents differ.
template <class QV, class KV, class VV, class OV, class LV>
void attention_forward_tiled(const QV& q, const KV& k, const VV& v, const OV& out, const LV& lse,
                             detail::scalar_t<OV> scale, bool causal) {
  static_assert(detail::check_rank4<QV>() && detail::check_rank4<KV>() &&
                detail::check_rank4<VV>() && detail::check_rank4<OV>() &&
                detail::check_rank3_rows<LV>());
  static_assert(detail::check_same_scalar<QV, OV>() && detail::check_same_scalar<KV, OV>() &&
                detail::check_same_scalar<VV, OV>() && detail::check_same_scalar<LV, OV>());
  using T = detail::scalar_t<OV>;
  using Exec = detail::exec_t<OV>;
  using Policy = Kokkos::TeamPolicy<Exec, Kokkos::IndexType<std::int64_t>>;
  using Member = typename Policy::member_type;
  using Scratch2 = Kokkos::View<T**, typename Exec::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Scratch1 = Kokkos::View<T*, typename Exec::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2), D = q.extent(3);
  detail::check_attention_views("attention_forward_tiled", q, k, v, out);
  detail::require_rows("attention_forward_tiled", "lse", lse, B, H, S);
  if (B * H * S == 0) return;
  // per tile row: q, k, v and the output accumulator (D each), a row of scores, m and l
  const std::size_t tile = detail::attention_tile(D, sizeof(T), 4, true);
  const auto tl = static_cast<std::int64_t>(tile);
  const auto seq = static_cast<std::int64_t>(S), heads = static_cast<std::int64_t>(H),
             dim = static_cast<std::int64_t>(D);
  const std::int64_t blocks = (seq + tl - 1) / tl;
  const std::size_t bytes = Scratch2::shmem_size(tile, D) * 4 + Scratch2::shmem_size(tile, tile) +
                            Scratch1::shmem_size(tile) * 2;
  const char* who = "attention_forward_tiled";
  Policy policy(detail::team_int(B * H * static_cast<std::size_t>(blocks), who), Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(detail::team_int(bytes, who)));
  Kokkos::parallel_for(
      "kdist::ops::attention_forward_tiled", policy, KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t id = team.league_rank();
        const std::int64_t blk = id % blocks, h = (id / blocks) % heads, b = id / (blocks * heads);
        const std::int64_t i0 = blk * tl;
        const std::int64_t rows = seq - i0 < tl ? seq - i0 : tl;
        Scratch2 qt(team.team_scratch(0), tl, dim), kt(team.team_scratch(0), tl, dim),
            vt(team.team_scratch(0), tl, dim), acc(team.team_scratch(0), tl, dim),
            st(team.team_scratch(0), tl, tl);
        Scratch1 m(team.team_scratch(0), tl), l(team.team_scratch(0), tl);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * dim), [&](std::int64_t x) {
          const std::int64_t r = x / dim, d = x % dim;
          qt(r, d) = q(b, i0 + r, h, d) * scale;
          acc(r, d) = T(0);
          if (d == 0) l(r) = T(0);
        });
        // keys past the block's last row are masked for every row of it
        const std::int64_t keys = causal ? i0 + rows : seq;
        for (std::int64_t j0 = 0; j0 < keys; j0 += tl) {
          const std::int64_t cols = keys - j0 < tl ? keys - j0 : tl;
          team.team_barrier();  // the previous tile is consumed
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols * dim), [&](std::int64_t x) {
            const std::int64_t c = x / dim, d = x % dim;
            kt(c, d) = k(b, j0 + c, h, d);
            vt(c, d) = v(b, j0 + c, h, d);
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
            const std::int64_t i = i0 + r;
            const std::int64_t cend = causal ? (i - j0 + 1 < cols ? i - j0 + 1 : cols) : cols;
            if (cend <= 0) return;
            T mx = l(r) > T(0) ? m(r) : T(0);
            for (std::int64_t c = 0; c < cend; ++c) {
              T s = T(0);
              for (std::int64_t d = 0; d < dim; ++d) s += qt(r, d) * kt(c, d);
              st(r, c) = s;
              if ((c == 0 && !(l(r) > T(0))) || s > mx) mx = s;
            }
            const T corr = l(r) > T(0) ? kdist::detail::kmath::exp(m(r) - mx) : T(0);
            T sum = l(r) * corr;
            for (std::int64_t d = 0; d < dim; ++d) acc(r, d) *= corr;
            for (std::int64_t c = 0; c < cend; ++c) {
              const T p = kdist::detail::kmath::exp(st(r, c) - mx);
              sum += p;
              for (std::int64_t d = 0; d < dim; ++d) acc(r, d) += p * vt(c, d);
            }
            m(r) = mx;
            l(r) = sum;
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * dim), [&](std::int64_t x) {
          const std::int64_t r = x / dim, d = x % dim;
          out(b, i0 + r, h, d) = acc(r, d) / l(r);
          if (d == 0) lse(b, h, i0 + r) = m(r) + kdist::detail::kmath::log(l(r));
        });
      });
}

//! Backward: given `dout` = dL/d(out), the forward's `out` and `lse`, writes dq, dk, dv (all
//! (batch, seq, heads, head_dim); overwritten); `delta` (batch, heads, seq) is scratch (it
//! receives dout_i . out_i). Errors: kdist::ValueError when extents differ.
template <class QV, class KV, class VV, class OV, class LV, class DOV, class DLV, class DQV,
          class DKV, class DVV>
void attention_backward_tiled(const QV& q, const KV& k, const VV& v, const OV& out, const LV& lse,
                              const DOV& dout, const DLV& delta, const DQV& dq, const DKV& dk,
                              const DVV& dv, detail::scalar_t<DQV> scale, bool causal) {
  static_assert(detail::check_rank4<QV>() && detail::check_rank4<KV>() &&
                detail::check_rank4<VV>() && detail::check_rank4<OV>() &&
                detail::check_rank3_rows<LV>() && detail::check_rank4<DOV>() &&
                detail::check_rank3_rows<DLV>() && detail::check_rank4<DQV>() &&
                detail::check_rank4<DKV>() && detail::check_rank4<DVV>());
  static_assert(detail::check_same_scalar<QV, DQV>() && detail::check_same_scalar<KV, DQV>() &&
                detail::check_same_scalar<VV, DQV>() && detail::check_same_scalar<OV, DQV>() &&
                detail::check_same_scalar<LV, DQV>() && detail::check_same_scalar<DOV, DQV>() &&
                detail::check_same_scalar<DLV, DQV>() && detail::check_same_scalar<DKV, DQV>() &&
                detail::check_same_scalar<DVV, DQV>());
  using T = detail::scalar_t<DQV>;
  using Exec = detail::exec_t<DQV>;
  using Policy = Kokkos::TeamPolicy<Exec, Kokkos::IndexType<std::int64_t>>;
  using Member = typename Policy::member_type;
  using Scratch2 = Kokkos::View<T**, typename Exec::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Scratch1 = Kokkos::View<T*, typename Exec::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const std::size_t B = q.extent(0), S = q.extent(1), H = q.extent(2), D = q.extent(3);
  detail::check_attention_views("attention_backward_tiled", q, k, v, out, dout, dq, dk, dv);
  detail::require_rows("attention_backward_tiled", "lse", lse, B, H, S);
  detail::require_rows("attention_backward_tiled", "delta", delta, B, H, S);
  if (B * H * S == 0) return;
  const auto seq = static_cast<std::int64_t>(S), heads = static_cast<std::int64_t>(H),
             dim = static_cast<std::int64_t>(D);
  // delta_i = dout_i . out_i (the row sum of p(i, :) o dp(i, :))
  Kokkos::parallel_for(
      "kdist::ops::attention_backward_tiled delta", detail::md_range3<DQV>(B, H, S),
      KOKKOS_LAMBDA(const std::int64_t b, const std::int64_t h, const std::int64_t i) {
        T s = T(0);
        for (std::int64_t d = 0; d < dim; ++d) s += dout(b, i, h, d) * out(b, i, h, d);
        delta(b, h, i) = s;
      });
  // per tile row: q, dout, dq (or k, v, dk, dv) and the other side's tile (2 D) + lse, delta
  const std::size_t tile = detail::attention_tile(D, sizeof(T), 6, false);
  const auto tl = static_cast<std::int64_t>(tile);
  const std::int64_t blocks = (seq + tl - 1) / tl;
  const std::size_t bytes = Scratch2::shmem_size(tile, D) * 6 + Scratch1::shmem_size(tile) * 2;

  // dq: a team per block of query rows, over the key tiles
  const char* who = "attention_backward_tiled";
  Policy by_rows(detail::team_int(B * H * static_cast<std::size_t>(blocks), who), Kokkos::AUTO);
  by_rows.set_scratch_size(0, Kokkos::PerTeam(detail::team_int(bytes, who)));
  Kokkos::parallel_for(
      "kdist::ops::attention_backward_tiled dq", by_rows, KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t id = team.league_rank();
        const std::int64_t blk = id % blocks, h = (id / blocks) % heads, b = id / (blocks * heads);
        const std::int64_t i0 = blk * tl;
        const std::int64_t rows = seq - i0 < tl ? seq - i0 : tl;
        Scratch2 qt(team.team_scratch(0), tl, dim), dot(team.team_scratch(0), tl, dim),
            acc(team.team_scratch(0), tl, dim), kt(team.team_scratch(0), tl, dim),
            vt(team.team_scratch(0), tl, dim);
        Scratch1 lt(team.team_scratch(0), tl), dt(team.team_scratch(0), tl);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * dim), [&](std::int64_t x) {
          const std::int64_t r = x / dim, d = x % dim;
          qt(r, d) = q(b, i0 + r, h, d);
          dot(r, d) = dout(b, i0 + r, h, d);
          acc(r, d) = T(0);
          if (d == 0) {
            lt(r) = lse(b, h, i0 + r);
            dt(r) = delta(b, h, i0 + r);
          }
        });
        const std::int64_t keys = causal ? i0 + rows : seq;
        for (std::int64_t j0 = 0; j0 < keys; j0 += tl) {
          const std::int64_t cols = keys - j0 < tl ? keys - j0 : tl;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols * dim), [&](std::int64_t x) {
            const std::int64_t c = x / dim, d = x % dim;
            kt(c, d) = k(b, j0 + c, h, d);
            vt(c, d) = v(b, j0 + c, h, d);
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
            const std::int64_t i = i0 + r;
            const std::int64_t cend = causal ? (i - j0 + 1 < cols ? i - j0 + 1 : cols) : cols;
            for (std::int64_t c = 0; c < cend; ++c) {
              T s = T(0), dp = T(0);
              for (std::int64_t d = 0; d < dim; ++d) {
                s += qt(r, d) * kt(c, d);
                dp += dot(r, d) * vt(c, d);
              }
              const T p = kdist::detail::kmath::exp(s * scale - lt(r));
              const T ds = p * (dp - dt(r)) * scale;
              for (std::int64_t d = 0; d < dim; ++d) acc(r, d) += ds * kt(c, d);
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * dim), [&](std::int64_t x) {
          const std::int64_t r = x / dim, d = x % dim;
          dq(b, i0 + r, h, d) = acc(r, d);
        });
      });

  // dk, dv: a team per block of keys, over the query tiles (rows i >= j when causal)
  Policy by_keys(detail::team_int(B * H * static_cast<std::size_t>(blocks), who), Kokkos::AUTO);
  by_keys.set_scratch_size(0, Kokkos::PerTeam(detail::team_int(bytes, who)));
  Kokkos::parallel_for(
      "kdist::ops::attention_backward_tiled dk dv", by_keys, KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t id = team.league_rank();
        const std::int64_t blk = id % blocks, h = (id / blocks) % heads, b = id / (blocks * heads);
        const std::int64_t j0 = blk * tl;
        const std::int64_t cols = seq - j0 < tl ? seq - j0 : tl;
        Scratch2 kt(team.team_scratch(0), tl, dim), vt(team.team_scratch(0), tl, dim),
            dka(team.team_scratch(0), tl, dim), dva(team.team_scratch(0), tl, dim),
            qt(team.team_scratch(0), tl, dim), dot(team.team_scratch(0), tl, dim);
        Scratch1 lt(team.team_scratch(0), tl), dt(team.team_scratch(0), tl);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols * dim), [&](std::int64_t x) {
          const std::int64_t c = x / dim, d = x % dim;
          kt(c, d) = k(b, j0 + c, h, d);
          vt(c, d) = v(b, j0 + c, h, d);
          dka(c, d) = T(0);
          dva(c, d) = T(0);
        });
        for (std::int64_t q0 = causal ? j0 : 0; q0 < seq; q0 += tl) {
          const std::int64_t rows = seq - q0 < tl ? seq - q0 : tl;
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * dim), [&](std::int64_t x) {
            const std::int64_t r = x / dim, d = x % dim;
            qt(r, d) = q(b, q0 + r, h, d);
            dot(r, d) = dout(b, q0 + r, h, d);
            if (d == 0) {
              lt(r) = lse(b, h, q0 + r);
              dt(r) = delta(b, h, q0 + r);
            }
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols), [&](std::int64_t c) {
            const std::int64_t j = j0 + c;
            for (std::int64_t r = 0; r < rows; ++r) {
              if (causal && q0 + r < j) continue;
              T s = T(0), dp = T(0);
              for (std::int64_t d = 0; d < dim; ++d) {
                s += qt(r, d) * kt(c, d);
                dp += dot(r, d) * vt(c, d);
              }
              const T p = kdist::detail::kmath::exp(s * scale - lt(r));
              const T ds = p * (dp - dt(r)) * scale;
              for (std::int64_t d = 0; d < dim; ++d) {
                dva(c, d) += p * dot(r, d);
                dka(c, d) += ds * qt(r, d);
              }
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cols * dim), [&](std::int64_t x) {
          const std::int64_t c = x / dim, d = x % dim;
          dk(b, j0 + c, h, d) = dka(c, d);
          dv(b, j0 + c, h, d) = dva(c, d);
        });
      });
}

}  // namespace kdist::ops
