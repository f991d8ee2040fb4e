#pragma once
//! \file nn/layers/flatten.hpp
//! `kdist::layers::Flatten`: Keras' Flatten, (batch, height, width, channels) -> (batch,
//! height * width * channels) in row-major order (and (batch, depth, height, width, channels) the
//! same way); the identity on (batch, features). The batch
//! dimension keeps its sharding; the others are gathered first (a Conv2D's output sharded on its
//! channels over "model" is all-gathered over "model"), because a flattened row is the
//! concatenation of whole examples.
//!
//! A (batch, sequence, features) tensor given to forward (a user's block) flattens to (batch,
//! sequence * features) the same way. `build` still takes examples of shape (features,) or
//! (height, width, channels) only: a Sequential of (sequence, features) examples is refused
//! before it starts.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T>
class BasicFlatten {
 public:
  using value_type = T;
  using Matrix = DistributedTensor<T**>;
  using Images = DistributedTensor<T****>;
  using Tensor3 = DistributedTensor<T***>;
  using Volumes = DistributedTensor<T*****>;

  explicit BasicFlatten(std::string name = "flatten") : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Flatten";

  Shape build(const Shape& input_shape, const Distribution&, std::uint64_t) {
    if (input_shape.size() != 1 && input_shape.size() != 3 && input_shape.size() != 4) {
      throw ValueError("kdist::layers::Flatten '" + name_ +
                       "' takes examples of shape (features,), (height, width, channels) or "
                       "(depth, height, width, channels), not " +
                       kdist::detail::shape_repr(input_shape));
    }
    std::size_t n = 1;
    for (auto e : input_shape) n *= e;
    return {n};
  }

  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext&) {
    if (const auto* images = std::get_if<Images>(&x)) return flatten(*images);
    if (const auto* volumes = std::get_if<Volumes>(&x)) return flatten(*volumes);
    if (const auto* seq = std::get_if<Tensor3>(&x)) return flatten(*seq);
    gathered_layout_.reset();
    return x;  // already (batch, features)
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& /*no variables*/) {
    if (!need_input_grad) return std::nullopt;
    if (!gathered_layout_) return dy;  // the identity on (batch, features)
    const auto& m = kdist::detail::layer_input_as<Matrix>(dy, "Flatten '" + name_ + "'",
                                                          "its gradient has its output's rank");
    if (input_rank_ == 3) return LayerTensor<T>(unflatten<Tensor3>(m));
    if (input_rank_ == 5) return LayerTensor<T>(unflatten<Volumes>(m));
    return LayerTensor<T>(unflatten<Images>(m));
  }

  std::vector<VariableRef<T>> variables() { return {}; }

 private:
  //! (batch, d1, ..., dk) -> (batch, d1 * ... * dk): the batch keeps its sharding, the rest is
  //! gathered first.
  template <class Tensor>
  Matrix flatten(const Tensor& x) {
    constexpr std::size_t R = Tensor::rank;
    input_layout_ = x.layout();
    input_rank_ = R;
    const auto rows = x.layout().axes()[0];
    std::vector<DimAxes> whole_axes(R);
    whole_axes[0] = rows;
    gathered_layout_ = RuntimeTensorLayout(whole_axes, x.layout().device_mesh());
    Tensor whole = redistribute(x, *gathered_layout_, gathered_);
    const auto& s = x.shape();
    std::size_t features = 1;
    for (std::size_t d = 1; d < R; ++d) {
      input_shape_[d] = s[d];
      features *= s[d];
    }
    input_shape_[0] = s[0];
    const auto flat = flat_views_.get(name_, whole.local().extent(0), features);
    copy_flat(whole.local(), flat);
    return Matrix::from_local(flat, {s[0], features},
                              RuntimeTensorLayout({rows, DimAxes()}, x.layout().device_mesh()), {});
  }
  //! The inverse of flatten for dy in this layer's output layout (batch axes, None).
  template <class Tensor>
  Tensor unflatten(const Matrix& m) {
    typename Tensor::shape_type s{};
    for (std::size_t d = 0; d < Tensor::rank; ++d) s[d] = input_shape_[d];
    typename Tensor::view_type v;
    auto& views = gradients_.template of_rank<Tensor::rank>();
    if constexpr (Tensor::rank == 3) {
      v = views.get(name_ + "/grad", m.local().extent(0), s[1], s[2]);
    } else if constexpr (Tensor::rank == 4) {
      v = views.get(name_ + "/grad", m.local().extent(0), s[1], s[2], s[3]);
    } else {
      v = views.get(name_ + "/grad", m.local().extent(0), s[1], s[2], s[3], s[4]);
    }
    copy_flat(m.local(), v);
    Tensor whole = Tensor::from_local(v, s, *gathered_layout_, {});
    return redistribute(whole, *input_layout_, moved_back_);
  }

  //! Copies every element of `from` into `to` (same number of elements, both contiguous
  //! LayoutRight): a reshape, as rank-1 Views of the same memory space.
  template <class From, class To>
  static void copy_flat(const From& from, const To& to) {
    using Flat =
        Kokkos::View<T*, typename To::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    using ConstFlat = Kokkos::View<const T*, typename From::memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    if (!from.span_is_contiguous()) {
      typename From::non_const_type packed(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "packed"), from.layout());
      Kokkos::deep_copy(packed, from);
      Kokkos::deep_copy(Flat(to.data(), to.size()), ConstFlat(packed.data(), packed.size()));
      return;
    }
    // Stream-ordered, not fenced (a captured step may not wait for the device).
    Kokkos::deep_copy(typename To::execution_space(), Flat(to.data(), to.size()),
                      ConstFlat(from.data(), from.size()));
  }
  std::string name_;
  std::optional<RuntimeTensorLayout> input_layout_, gathered_layout_;
  std::array<std::size_t, 5> input_shape_{};  //!< the global shape of the last input
  std::size_t input_rank_ = 0;                //!< its rank (3, 4 or 5)
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step): the
  // gathered input, the flattened output, the unflattened gradient and its move back.
  LayerBuffers<T> gathered_, gradients_, moved_back_;
  ReusableViews<typename Matrix::view_type> flat_views_;
};

using Flatten = BasicFlatten<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicFlatten)
