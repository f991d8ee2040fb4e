#pragma once
//! \file nn/layers/flatten.hpp
//! `kdist::layers::Flatten`: Keras' Flatten, (batch, height, width, channels) -> (batch,
//! height * width * channels) in row-major order; the identity on (batch, features). The batch
//! dimension keeps its sharding; the others are gathered first (a Conv2D's output sharded on its
//! channels over "model" is all-gathered over "model"), because a flattened row is the
//! concatenation of whole examples.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <Kokkos_Core.hpp>

#include <kdist/nn/layer.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T>
class BasicFlatten {
 public:
  using value_type = T;
  using Matrix = DistributedTensor<T**>;
  using Images = DistributedTensor<T****>;

  explicit BasicFlatten(std::string name = "flatten") : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Flatten";

  Shape build(const Shape& input_shape, const Distribution&, std::uint64_t) {
    if (input_shape.size() != 1 && input_shape.size() != 3) {
      throw ValueError("kdist::layers::Flatten '" + name_ +
                       "' takes examples of shape (features,) "
                       "or (height, width, channels), not " +
                       kdist::detail::shape_repr(input_shape));
    }
    std::size_t n = 1;
    for (auto e : input_shape) n *= e;
    return {n};
  }

  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext&) {
    const auto* images = std::get_if<Images>(&x);
    if (images == nullptr) return x;  // already (batch, features)
    input_layout_ = images->layout();
    // (batch axes, None, None, None): whole examples on each process.
    const auto rows = images->layout().axes()[0];
    gathered_layout_ = RuntimeTensorLayout({rows, DimAxes(), DimAxes(), DimAxes()},
                                           images->layout().device_mesh());
    Images whole = redistribute(*images, *gathered_layout_);
    const auto& s = images->shape();
    input_shape_ = s;
    const std::size_t features = s[1] * s[2] * s[3];
    typename Matrix::view_type flat(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_),
                                    whole.local().extent(0), features);
    copy_flat(whole.local(), flat);
    return Matrix::from_local(
        flat, {s[0], features},
        RuntimeTensorLayout({rows, DimAxes()}, images->layout().device_mesh()), {});
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad) {
    if (!need_input_grad) return std::nullopt;
    if (!gathered_layout_) return dy;  // the identity on (batch, features)
    const auto& m = kdist::detail::layer_input_as<Matrix>(dy, "Flatten '" + name_ + "'",
                                                          "its gradient has its output's rank");
    // dy arrives in this layer's output layout: (batch axes, None).
    const auto& s = input_shape_;
    typename Images::view_type images(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_),
                                      m.local().extent(0), s[1], s[2], s[3]);
    copy_flat(m.local(), images);
    Images whole = Images::from_local(images, s, *gathered_layout_, {});
    return LayerTensor<T>(redistribute(whole, *input_layout_));
  }

  std::vector<VariableRef<T>> variables() { return {}; }

 private:
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
    Kokkos::deep_copy(Flat(to.data(), to.size()), ConstFlat(from.data(), from.size()));
  }
  std::string name_;
  std::optional<RuntimeTensorLayout> input_layout_, gathered_layout_;
  std::array<std::size_t, 4> input_shape_{};  //!< the global shape of the last input
};

using Flatten = BasicFlatten<float>;

}  // namespace kdist::layers
