#pragma once
//! \file nn/autocast.hpp
//! How a layer computes under a 16-bit dtype policy ("mixed_bfloat16", "mixed_float16";
//! kdist/nn/dtype_policy.hpp): what kdist::AnyLayer runs around the layer it holds.
//!
//! Keras casts a layer's inputs to its compute dtype (autocast), computes in it, returns outputs
//! in it, and so keeps every activation its backward pass needs in 16 bits. kdist does the same at
//! each layer's boundary and in what it keeps:
//! - the input, whatever its dtype, is rounded to the compute dtype (bfloat16 or float16: exact if
//!   it was already); the layer's output is rounded to it and flows to the next layer in 16 bits
//!   (kdist::ActivationTensor); the gradient flowing back is rounded likewise;
//! - inside, the layer computes in float32 on those 16-bit values, which is Keras' "float32
//!   accumulation in GEMMs, reductions, softmax and normalisation" carried through the whole layer
//!   (one rounding per output instead of one per op); on the host this is also the fastest way:
//!   this CPU has no bf16 arithmetic and OpenBLAS 0.3.21 no sbgemm, so a bf16 GEMM would convert
//!   to float32 anyway (docs/benchmarks.md);
//! - the float32 buffers the layer computes with come from one pool per thread
//!   (kdist::detail::ViewArena, handed out while nothing holds them), and what the layer keeps for
//!   its backward pass - the tensors it lists with `for_each_kept_activation(f)` - is rounded to
//!   16 bits after its forward pass and widened back (exactly) just before its backward pass. So a
//!   model's activation memory is 16 bits per kept value plus one layer's float32 working set. A
//!   kept tensor that is the layer's input or output is not copied: the 16-bit block that flows
//!   between the layers is kept once.
//! Variables and their gradients stay in the variable dtype (float32): a GEMM's weight operand is
//! the float32 variable, and weight gradients are summed in float32. On a GPU the layer's passes
//! run inside an ops::GemmInputsScope: cuBLAS takes every float32 product's inputs in H with
//! float32 accumulation (tensor cores), the kernel operand rounded to H as Keras' autocast does.
//!
//! A layer that lists nothing still computes under the policy (16-bit inputs and outputs, its
//! working buffers from the pool); the tensors it keeps stay float32. A rematerialised layer
//! (kdist::RematScope) keeps nothing to shrink: only its boundary is converted, and the tensors its
//! recomputed forward pass keeps are rounded to 16 bits in place before its backward pass, so that
//! it computes with the values a kept tensor would have had (the same gradients, bit for bit).

#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/layer_tensor.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>
#include <kdist/tensor/view_arena.hpp>

namespace kdist::detail {

//! `x` as `To` (to a 16-bit float: rounded to nearest, ties to even; from one: exact).
template <class To, class From>
KOKKOS_INLINE_FUNCTION To convert_value(const From& x) {
  if constexpr (is_sixteen_bit_float_v<To>) {
    return To(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

//! `to[i] = convert(from[i])` over two contiguous blocks of the same extents; with `Through`
//! a 16-bit type, each value is rounded to it on the way (`to` may then be `from`).
template <class Through = void, class FromView, class ToView>
void convert_block(const FromView& from, const ToView& to) {
  using From = typename FromView::non_const_value_type;
  using To = typename ToView::non_const_value_type;
  using Space = typename ToView::execution_space;
  const From* src = from.data();
  To* dst = to.data();
  Kokkos::parallel_for(
      "kdist::autocast::convert", Kokkos::RangePolicy<Space>(0, from.span()),
      KOKKOS_LAMBDA(const std::size_t i) {
        // read before the constexpr-if: nvcc's extended lambdas may not first-capture inside one
        const From x = src[i];
        To& out = dst[i];
        if constexpr (std::is_void_v<Through>) {
          out = convert_value<To>(x);
        } else {
          out = convert_value<To>(convert_value<Through>(x));
        }
      });
}

//! A View of type `View` with `like`'s extents, from `get(label, extents...)`.
template <class View, class Like, class Get, std::size_t... D>
View view_like(const Like& like, Get&& get, std::index_sequence<D...>) {
  return get(like.extent(D)...);
}
template <class View, class Like, class Get>
View view_like(const Like& like, Get&& get) {
  return view_like<View>(like, std::forward<Get>(get),
                         std::make_index_sequence<static_cast<std::size_t>(Like::rank)>());
}

//! A layer that lists the tensors it keeps for its backward pass:
//! `template <class F> void for_each_kept_activation(F&& f)` calls f(member) on each (a
//! DistributedTensor or a Kokkos::View of the layer's scalars, of rank 2 to 4), in a fixed order.
struct KeptActivationProbe {
  template <class M>
  void operator()(M&) const {}
};
template <class L>
concept lists_kept_activations = requires(L& layer) {
  layer.for_each_kept_activation(KeptActivationProbe{});
};

//! Whether a layer's inputs are cast to its compute dtype: yes, unless the layer says
//! `static constexpr bool autocast = false` (Keras' `autocast=False`: an Embedding's token ids).
template <class L>
constexpr bool autocasts_inputs() {
  if constexpr (requires { L::autocast; }) {
    return L::autocast;
  } else {
    return true;
  }
}

template <class M>
concept distributed_member = requires(const M& m) {
  m.local();
  m.layout();
};

//! The View a kept member holds: its own type, or a DistributedTensor's block.
template <class M>
struct kept_view {
  using type = M;
};
template <distributed_member M>
struct kept_view<M> {
  using type = typename M::view_type;
};

//! A tensor of an ActivationTensor<T> as scalars T, in a View from `make(like)`: 16-bit values
//! widened (exact) and, when `Round` is a 16-bit type, every value rounded to it. A pending sum of
//! T is resolved first.
template <class Round, class T, class Make>
LayerTensor<T> to_compute_tensor(const ActivationTensor<T>& x, Make&& make) {
  return std::visit(
      [&](const auto& group) {
        return std::visit(
            [&](const auto& in) -> LayerTensor<T> {
              using In = std::remove_cvref_t<decltype(in)>;
              using S = typename In::value_type;
              using Out = DistributedTensor<typename dynamic_data_type<T, In::rank>::type>;
              const In t = in.is_partial() ? redistribute(in, in.layout()) : in;
              typename Out::view_type f = make(t.local());
              if constexpr (std::is_same_v<S, Round> || std::is_void_v<Round>) {
                convert_block(t.local(), f);  // exact
              } else {
                convert_block<Round>(t.local(), f);
              }
              return Out::from_local(f, t.shape(), t.layout());
            },
            group);
      },
      x);
}

//! The layer's tensors in compute dtype H: see the file's comment. One per kdist::AnyLayer whose
//! policy computes in H (kdist::bfloat16 or kdist::float16); T is the model's scalar type.
template <class T, class H>
class SixteenBitCompute {
  static_assert(is_sixteen_bit_float_v<H>, "kdist: a 16-bit compute dtype is bfloat16 or float16");
  //! What the layer's float32 products on a GPU take their inputs in (ops/matmul_precision.hpp).
  static constexpr ops::GemmInputs gemm_inputs =
      std::is_same_v<H, bfloat16> ? ops::GemmInputs::bfloat16 : ops::GemmInputs::float16;

  template <std::size_t R>
  using HView = typename DistributedTensor<typename dynamic_data_type<H, R>::type>::view_type;

 public:
  SixteenBitCompute() = default;
  //! A copy keeps nothing of the original's (as kdist::ReusableViews).
  SixteenBitCompute(const SixteenBitCompute&) {}
  SixteenBitCompute& operator=(const SixteenBitCompute&) {
    slots_.clear();
    return *this;
  }
  SixteenBitCompute(SixteenBitCompute&&) noexcept = default;
  SixteenBitCompute& operator=(SixteenBitCompute&&) noexcept = default;

  //! The forward pass of `layer`, whose own pass is `run(LayerTensor<T>) -> LayerTensor<T>`;
  //! `may_shrink` false (a rematerialised layer) converts the boundary only.
  template <class L, class Run>
  ActivationTensor<T> forward(L& layer, const ActivationTensor<T>& x, bool may_shrink, Run&& run) {
    // Not inside a rematerialised segment (whose arena replays); inside a pooled layer (a
    // Residual's inner layers), pooled as well.
    pooled_ = may_shrink && (ViewArena::current() == nullptr ||
                             (ViewArena::current() == arena_.get() &&
                              ViewArena::current_mode() == ViewArena::Mode::shared));
    std::optional<ViewArena::Use> use;
    if (pooled_) use.emplace(arena_.get(), ViewArena::Mode::shared);
    const LayerTensor<H>* input16 = std::get_if<LayerTensor<H>>(&x);
    const auto make = [&](const auto& like) { return compute_view(like, inputs_); };
    const LayerTensor<T> xf =
        autocasts_inputs<L>() ? to_compute_tensor<H>(x, make) : to_compute_tensor<void>(x, make);
    const LayerTensor<T> y = [&] {
      const ops::GemmInputsScope gemms(gemm_inputs);
      return run(xf);
    }();
    use.reset();
    const LayerTensor<H> y16 = std::visit(
        [&](const auto& t) -> LayerTensor<H> {
          using In = std::remove_cvref_t<decltype(t)>;
          using Out = DistributedTensor<typename dynamic_data_type<H, In::rank>::type>;
          const In r = t.is_partial() ? redistribute(t, t.layout()) : t;
          auto h =
              outputs_.template of_rank<In::rank>().get_like("kdist::autocast::output", r.local());
          convert_block(r.local(), h);
          return Out::from_local(h, r.shape(), r.layout());
        },
        y);
    if constexpr (lists_kept_activations<L>) {
      if (pooled_) {
        const void* in_data = data_of(xf);
        const void* out_data = data_of(y);
        std::size_t k = 0;
        layer.for_each_kept_activation(
            [&](auto& member) { shrink(member, k++, input16, in_data, y16, out_data); });
      }
    }
    return ActivationTensor<T>(y16);
  }

  //! The backward pass of `layer`, whose own pass is `run(LayerTensor<T>, prepare) ->
  //! std::optional<LayerTensor<T>>` (calling `prepare()` just before the layer's backward, after
  //! any recomputation): the kept tensors widened, the input gradient rounded to H.
  template <class L, class Run>
  std::optional<ActivationTensor<T>> backward(L& layer, const ActivationTensor<T>& dy, Run&& run) {
    std::optional<ViewArena::Use> use;
    if (pooled_) use.emplace(arena_.get(), ViewArena::Mode::shared);
    std::optional<LayerTensor<T>> dx;
    {
      const LayerTensor<T> dyf = to_compute_tensor<H>(
          dy, [&](const auto& like) { return compute_view(like, input_gradients_); });
      if constexpr (lists_kept_activations<L>) {
        if (pooled_) {
          std::size_t k = 0;
          layer.for_each_kept_activation([&](auto& member) { widen(member, k++); });
        }
      }
      // Not shrunk (a rematerialised layer, whose forward pass `run` recomputes first): the kept
      // tensors rounded as the shrunk ones are, just before the layer's own backward pass.
      const auto prepare = [&] {
        if constexpr (lists_kept_activations<L>) {
          if (!pooled_)
            layer.for_each_kept_activation([](auto& member) { round_in_place(member); });
        }
      };
      {
        const ops::GemmInputsScope gemms(gemm_inputs);
        dx = run(dyf, prepare);
      }
      if constexpr (lists_kept_activations<L>) {
        if (pooled_) {
          std::size_t k = 0;
          layer.for_each_kept_activation([&](auto& member) { release(member, k++); });
        }
      }
    }
    use.reset();
    if (!dx) return std::nullopt;
    return ActivationTensor<T>(std::visit(
        [&](const auto& t) -> LayerTensor<H> {
          using In = std::remove_cvref_t<decltype(t)>;
          using Out = DistributedTensor<typename dynamic_data_type<H, In::rank>::type>;
          const In r = t.is_partial() ? redistribute(t, t.layout()) : t;
          // from the pool: the layer before consumes it in its backward pass, then lets go
          auto h = pooled_ ? view_like<HView<In::rank>>(
                                 r.local(),
                                 [&](auto... e) {
                                   return arena_->template get_unused<HView<In::rank>>(
                                       "kdist::autocast::gradient", e...);
                                 })
                           : gradients_.template of_rank<In::rank>().get_like(
                                 "kdist::autocast::gradient", r.local());
          convert_block(r.local(), h);
          return Out::from_local(h, r.shape(), r.layout());
        },
        *dx));
  }

  //! How many tensors the last forward pass keeps in 16 bits (for tests).
  std::size_t kept() const {
    std::size_t n = 0;
    for (const auto& s : slots_) n += s.values.index() != 0 ? 1 : 0;
    return n;
  }

 private:
  //! A kept tensor while it is in 16 bits: its values, and a DistributedTensor's shape and layout.
  struct Slot {
    std::variant<std::monostate, HView<2>, HView<3>, HView<4>> values;
    std::vector<std::size_t> shape;
    std::optional<RuntimeTensorLayout> layout;
  };

  static const void* data_of(const LayerTensor<T>& t) {
    return std::visit([](const auto& v) -> const void* { return v.local().data(); }, t);
  }

  //! A float32 View like `like`: the pool's while the layer's passes draw from it, else one kept
  //! in `views` (a rematerialised layer's input, which its Rematerializer keeps).
  template <class Like>
  auto compute_view(const Like& like, LayerBuffers<T>& views) {
    constexpr std::size_t R = static_cast<std::size_t>(Like::rank);
    using V = typename DistributedTensor<typename dynamic_data_type<T, R>::type>::view_type;
    if (pooled_) {
      return view_like<V>(like, [&](auto... e) {
        return arena_->template get_unused<V>("kdist::autocast::compute", e...);
      });
    }
    return views.template of_rank<R>().get_like("kdist::autocast::compute", like);
  }

  //! The kept `member` in 16 bits; the layer lets go of its float32 block.
  template <class M>
  void shrink(M& member, std::size_t k, const LayerTensor<H>* input16, const void* in_data,
              const LayerTensor<H>& output16, const void* out_data) {
    if (slots_.size() <= k) {
      slots_.resize(k + 1);
      kept_.resize(k + 1);
    }
    Slot& s = slots_[k];
    s = Slot{};
    if constexpr (distributed_member<M>) {
      if (member.is_partial() || member.local().data() == nullptr ||
          !member.local().span_is_contiguous()) {
        return;  // kept as it is
      }
      s.values = sixteen_bits(member.local(), k, input16, in_data, output16, out_data);
      s.shape.assign(member.shape().begin(), member.shape().end());
      s.layout = member.layout();
    } else {
      if (member.data() == nullptr || !member.span_is_contiguous()) return;
      s.values = sixteen_bits(member, k, input16, in_data, output16, out_data);
    }
    member = M{};
  }

  //! `v`'s values in 16 bits: the block that flows in or out when `v` is its float32 twin, else a
  //! kept copy.
  template <class V>
  auto sixteen_bits(const V& v, std::size_t k, const LayerTensor<H>* input16, const void* in_data,
                    const LayerTensor<H>& output16, const void* out_data) {
    constexpr std::size_t R = static_cast<std::size_t>(V::rank);
    using Tensor16 = DistributedTensor<typename dynamic_data_type<H, R>::type>;
    const auto twin = [&](const LayerTensor<H>& t) -> const Tensor16* {
      const auto* p = std::get_if<Tensor16>(&t);
      if (p == nullptr || p->local().span() != v.span()) return nullptr;
      return p;
    };
    if (input16 != nullptr && v.data() == in_data) {
      if (const auto* t = twin(*input16)) return t->local();
    }
    if (v.data() == out_data) {
      if (const auto* t = twin(output16)) return t->local();
    }
    HView<R> h = kept_[k].template of_rank<R>().get_like("kdist::autocast::kept", v);
    convert_block(v, h);
    return h;
  }

  //! A kept `member` the layer recomputed (not shrunk): each value rounded to H in place, the
  //! values the shrunk and widened member would have; what shrink keeps as it is, likewise.
  template <class M>
  static void round_in_place(M& member) {
    if constexpr (distributed_member<M>) {
      if (member.is_partial() || member.local().data() == nullptr ||
          !member.local().span_is_contiguous()) {
        return;
      }
      convert_block<H>(member.local(), member.local());
    } else {
      if (member.data() == nullptr || !member.span_is_contiguous()) return;
      convert_block<H>(member, member);
    }
  }

  //! The kept `member` back in float32 (exact), in a View of the pool.
  template <class M>
  void widen(M& member, std::size_t k) {
    if (k >= slots_.size() || slots_[k].values.index() == 0) return;
    const Slot& s = slots_[k];
    using V = typename kept_view<M>::type;
    constexpr std::size_t R = static_cast<std::size_t>(V::rank);
    const HView<R>& h = std::get<HView<R>>(s.values);
    V f = view_like<V>(h, [&](auto... e) {
      return arena_->template get_unused<V>("kdist::autocast::widened", e...);
    });
    convert_block(h, f);
    if constexpr (distributed_member<M>) {
      typename M::shape_type shape{};
      for (std::size_t d = 0; d < R; ++d) shape[d] = s.shape[d];
      member = M::from_local(f, shape, *s.layout);
    } else {
      member = f;
    }
  }

  //! After the backward pass: the layer lets go of the widened block, the 16-bit one is let go.
  template <class M>
  void release(M& member, std::size_t k) {
    if (k >= slots_.size() || slots_[k].values.index() == 0) return;
    member = M{};
    slots_[k] = Slot{};
  }

  std::shared_ptr<ViewArena> arena_ = ViewArena::for_this_thread();
  bool pooled_ = false;
  std::vector<Slot> slots_;
  std::vector<LayerBuffers<H>> kept_;         // the kept copies, per slot
  LayerBuffers<H> outputs_, gradients_;       // what flows out, each way
  LayerBuffers<T> inputs_, input_gradients_;  // float32 when not from the pool (see compute_view)
};

//! A layer computing in T (a float32 policy) after layers computing in 16 bits: its input and the
//! gradient of its output widened (exactly) into T.
template <class T>
class WidenedInputs {
 public:
  //! `x` in T, a View of its own when it was 16-bit.
  LayerTensor<T> operator()(const ActivationTensor<T>& x) {
    if (const auto* t = std::get_if<LayerTensor<T>>(&x)) return *t;
    return to_compute_tensor<void>(x, [&](const auto& like) {
      return views_
          .template of_rank<static_cast<std::size_t>(std::remove_cvref_t<decltype(like)>::rank)>()
          .get_like("kdist::autocast::widened", like);
    });
  }

 private:
  LayerBuffers<T> views_;
};

}  // namespace kdist::detail
