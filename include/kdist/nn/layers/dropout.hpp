#pragma once
//! \file nn/layers/dropout.hpp
//! `kdist::layers::Dropout(rate)`: inverted dropout whose mask is keyed by (seed, layer, step,
//! global element index), so every mesh drops the same elements. Any activation: (batch,
//! features), (batch, sequence, features) or NHWC images, each element keyed by its row-major
//! flat index in the global tensor.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <Kokkos_Core.hpp>

#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/ops/dropout.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

//! Dropout on scalars `T` (float or double); a template for the reason BasicDense is one.
template <class T>
class BasicDropout {
 public:
  using value_type = T;
  using Matrix = DistributedTensor<T**>;

  BasicDropout(double rate, std::string name) : rate_(rate), name_(std::move(name)) {
    if (!(rate >= 0.0 && rate < 1.0)) {
      throw ValueError("kdist::layers::Dropout '" + name_ + "': rate is " + std::to_string(rate) +
                       "; it must be in [0, 1)");
    }
  }
  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Dropout";
  double rate() const { return rate_; }

  // ---- kdist::Layer: tensors of any rank; the identity outside training -------------------------
  Shape build(const Shape& input_shape, const Distribution&, std::uint64_t) { return input_shape; }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    active_ = context.training && rate_ > 0.0;
    if (!active_) return x;
    return std::visit(
        [&](const auto& t) -> LayerTensor<T> {
          return forward(t, context.seed, context.step, context.step_at);
        },
        x);
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& /*no variables*/) {
    if (!need_input_grad) return std::nullopt;
    if (!active_) return dy;
    return std::visit([&](const auto& t) -> LayerTensor<T> { return backward(t); }, dy);
  }
  std::vector<VariableRef<T>> variables() { return {}; }
  // -----------------------------------------------------------------------------------------------

  //! Training: drops with probability rate and scales the rest by 1/(1-rate). `step` is the
  //! optimizer's iteration count (read by the kernels from `step_at` when given: the model's
  //! device copy of it, StepContext::step_at). The mask is drawn once, here, and kept (one byte per local
  //! element, a buffer reused across steps) for `backward`.
  Matrix forward(const Matrix& x, std::uint64_t seed, std::uint64_t step,
                 const std::int64_t* step_at = nullptr) {
    step_at_ = step_at;
    params_ = ops::DropoutParams{seed,           stream_id(name_), step,         rate_,
                                 x.offsets()[0], x.offsets()[1],   x.shape()[1], step_at_};
    const auto y = outputs_.get_like(name_, x.local());
    remember(x);
    ops::dropout(x.local(), y, mask_, params_);
    return Matrix::from_local(y, x.shape(), x.layout());
  }
  //! The backward of the last forward: the kept mask when dy's block is the forward's, else the
  //! mask drawn again for dy's block (the same global elements either way).
  Matrix backward(const Matrix& dy) {
    const auto dx = gradients_.get_like(name_ + "/grad", dy.local());
    if (matches(dy)) {
      ops::dropout_backward(dy.local(), dx, mask_, rate_);
    } else {
      ops::DropoutParams p = params_;
      p.row_offset = dy.offsets()[0];
      p.col_offset = dy.offsets()[1];
      p.global_cols = dy.shape()[1];
      ops::dropout_backward(dy.local(), dx, p);
    }
    return Matrix::from_local(dx, dy.shape(), dy.layout());
  }

  //! Training on a (batch, sequence, features) or NHWC tensor in any layout: element (i, ...) of
  //! the global tensor is dropped by its row-major flat index, on every mesh alike.
  template <class DataType>
  requires(DistributedTensor<DataType>::rank >=
           3) DistributedTensor<DataType> forward(const DistributedTensor<DataType>& x,
                                                  std::uint64_t seed, std::uint64_t step,
                                                  const std::int64_t* step_at = nullptr) {
    step_at_ = step_at;
    constexpr std::size_t R = DistributedTensor<DataType>::rank;
    ops::DropoutBlockParams<R> p;
    p.seed = seed;
    p.stream = stream_id(name_);
    p.step = step;
    p.step_at = step_at_;
    p.rate = rate_;
    block_seed_ = seed;
    block_step_ = step;
    remember(x);
    return apply_block(x, p, name_, true);
  }
  //! The backward of the last forward of this rank (dy laid out as its output): the kept mask,
  //! or the mask drawn again for dy's block if dy's block differs from the forward's.
  template <class DataType>
  requires(DistributedTensor<DataType>::rank >=
           3) DistributedTensor<DataType> backward(const DistributedTensor<DataType>& dy) {
    constexpr std::size_t R = DistributedTensor<DataType>::rank;
    ops::DropoutBlockParams<R> p;
    p.seed = block_seed_;
    p.stream = stream_id(name_);
    p.step = block_step_;
    p.step_at = step_at_;
    p.rate = rate_;
    return apply_block(dy, p, name_ + "/grad", false);
  }

 private:
  using MaskView = Kokkos::View<std::uint8_t*, Kokkos::LayoutRight,
                                typename DistributedTensor<T**>::view_type::memory_space>;

  //! Notes the forward's block (global shape, offsets, local extents) and sizes the mask buffer
  //! for it; the buffer is reallocated only when the local size changes.
  template <class Tensor>
  void remember(const Tensor& x) {
    constexpr std::size_t R = Tensor::rank;
    fwd_rank_ = R;
    for (std::size_t d = 0; d < R; ++d) {
      fwd_shape_[d] = x.shape()[d];
      fwd_offsets_[d] = x.offsets()[d];
      fwd_extents_[d] = x.local().extent(d);
    }
    const std::size_t n = x.local().size();
    if (mask_.extent(0) != n) {
      mask_ = MaskView(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_ + "/mask"), n);
    }
  }
  //! Whether dy's block is the block of the last forward (so the kept mask applies).
  template <class Tensor>
  bool matches(const Tensor& dy) const {
    constexpr std::size_t R = Tensor::rank;
    if (fwd_rank_ != R) return false;
    for (std::size_t d = 0; d < R; ++d) {
      if (fwd_shape_[d] != dy.shape()[d] || fwd_offsets_[d] != dy.offsets()[d] ||
          fwd_extents_[d] != dy.local().extent(d)) {
        return false;
      }
    }
    return true;
  }

  template <class DataType, std::size_t R>
  DistributedTensor<DataType> apply_block(const DistributedTensor<DataType>& x,
                                          ops::DropoutBlockParams<R> p, const std::string& label,
                                          bool forward) {
    using Tensor = DistributedTensor<DataType>;
    for (std::size_t d = 0; d < R; ++d) {
      p.offsets[d] = x.offsets()[d];
      p.global_extents[d] = x.shape()[d];
    }
    const auto& in = x.local();
    typename Tensor::view_type packed = in;
    if (!in.span_is_contiguous()) {
      packed = typename Tensor::view_type(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "/packed"), in.layout());
      Kokkos::deep_copy(packed, in);
    }
    const auto y = (forward ? outputs_ : gradients_).get_like(label, in);
    if (forward) {
      ops::dropout_block(packed, y, mask_, p);
    } else if (matches(x)) {
      ops::dropout_backward(packed, y, mask_, rate_);
    } else {
      ops::dropout_block(packed, y, p);
    }
    return Tensor::from_local(y, x.shape(), x.layout());
  }

  double rate_;
  std::string name_;
  ops::DropoutParams params_{};
  std::uint64_t block_seed_ = 0, block_step_ = 0;
  bool active_ = false;
  //! The step counter the last forward read (StepContext::step_at), for backward's redraws.
  const std::int64_t* step_at_ = nullptr;
  MaskView mask_;  //!< the last training forward's mask, row-major over its local block
  std::size_t fwd_rank_ = 0;
  std::array<std::uint64_t, 8> fwd_shape_{}, fwd_offsets_{}, fwd_extents_{};
  LayerBuffers<T> outputs_, gradients_;  //!< kept across steps: no allocation per step
};

using Dropout = BasicDropout<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicDropout)
