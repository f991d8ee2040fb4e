#pragma once
//! \file nn/layers/upsampling.hpp
//! `kdist::layers::UpSampling2D` and `UpSampling3D`: Keras' UpSampling2D/3D with interpolation
//! "nearest" (channels_last): each position along spatial axis a is repeated size[a] times, so
//! (batch, spatial..., channels) -> (batch, spatial * size..., channels). A U-Net's way back up
//! (followed by a Concatenate with the skip, kdist/nn/layers/concatenate.hpp).
//!
//! Computed in the input's layout, as pooling is (kdist/nn/layers/pooling.hpp): on a spatially
//! sharded image each process computes its block of the output; where a block's first output
//! repeats an input position its neighbour holds (the blocks of the input and of the output do not
//! line up when the extents do not divide), that position comes by a halo exchange, and its
//! gradient goes back. A rule on "<name>/output" lays the output out as it says. Keras' other
//! interpolations for UpSampling2D ("bilinear", "bicubic", "lanczos") are not provided.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/layers/spatial_halos.hpp>
#include <kdist/nn/layers/spatial_window.hpp>
#include <kdist/ops/upsampling.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T, std::size_t S>
class BasicUpSampling {
  static_assert(S == 2 || S == 3, "kdist::layers::BasicUpSampling: 2 or 3 spatial axes");

 public:
  using value_type = T;
  //! (batch, spatial..., channels): rank S + 2.
  using Images = DistributedTensor<typename kdist::detail::dynamic_data_type<T, S + 2>::type>;
  using Extents = std::array<std::size_t, S>;

  //! Errors: ValueError for a 0 size.
  explicit BasicUpSampling(Extents size = filled(2), std::string name = std::string(default_name))
      : size_(size), name_(std::move(name)) {
    for (const auto e : size) {
      if (e == 0) {
        throw ValueError(
            prefix() + "size " + kdist::detail::shape_repr(size) +
            (S == 2 ? " must be >= 1 in both dimensions" : " must be >= 1 in every dimension"));
      }
    }
  }

  static constexpr std::string_view keras_class = S == 2 ? "UpSampling2D" : "UpSampling3D";
  static constexpr std::string_view default_name = S == 2 ? "up_sampling2d" : "up_sampling3d";
  const std::string& name() const { return name_; }
  const Extents& size() const { return size_; }

  //! Builds for examples (spatial..., channels); returns (spatial * size..., channels).
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t) {
    if (input_shape.size() != S + 1) {
      throw ValueError(prefix() + "takes examples of shape " +
                       (S == 2 ? "(height, width, channels)" : "(depth, height, width, channels)") +
                       ", not " + kdist::detail::shape_repr(input_shape));
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    Shape out = input_shape;
    for (std::size_t a = 0; a < S; ++a) out[a] *= size_[a];
    return out;
  }

  LayerTensor<T> forward(const LayerTensor<T>& in, const StepContext&) {
    const auto& x0 = kdist::detail::layer_input_as<Images>(
        in, std::string(keras_class) + " '" + name_ + "'",
        S == 2 ? "give it (batch, height, width, channels) tensors"
               : "give it (batch, depth, height, width, channels) tensors");
    x_ = contiguous(x0, packed_);
    const auto& s = x_.shape();
    std::array<UpsamplingAxis, S> axes;
    for (std::size_t a = 0; a < S; ++a) axes[a] = UpsamplingAxis{s[a + 1], size_[a]};
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), axes);
    xe_ = halos_.gather(x_.local());
    auto yshape = s, yblock = s;
    yblock[0] = x_.local().extent(0);
    yblock[S + 1] = x_.local().extent(S + 1);
    for (std::size_t a = 0; a < S; ++a) {
      yshape[a + 1] = s[a + 1] * size_[a];
      yblock[a + 1] = halos_.output_block(a).extent;
    }
    const auto y = get_block(y_views_, name_ + "/y", yblock);
    ops::upsample_nearest(xe_, y, window());
    y_ = Images::from_local(y, yshape, x_.layout(), {});
    if (output_layout_) return redistribute(y_, *output_layout_, y_moved_);
    return y_;
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy_in, bool need_input_grad,
                                         Gradients<T>& /*no variables*/) {
    if (!need_input_grad) return std::nullopt;
    const auto& dy0 = kdist::detail::layer_input_as<Images>(
        dy_in, std::string(keras_class) + " '" + name_ + "'", "its gradient has its output's rank");
    const Images dy = contiguous(redistribute(dy0, y_.layout(), dy_moved_), packed_);
    const auto dxe = dx_views_.get_like(name_ + "/dx", xe_);
    ops::upsample_nearest_backward(dy.local(), dxe, window());
    return LayerTensor<T>(Images::from_local(halos_.scatter_add(dxe), x_.shape(), x_.layout(), {}));
  }

  std::vector<VariableRef<T>> variables() { return {}; }

 private:
  static constexpr Extents filled(std::size_t v) {
    Extents e{};
    for (auto& x : e) x = v;
    return e;
  }
  std::string prefix() const {
    return "kdist::layers::" + std::string(keras_class) + " '" + name_ + "': ";
  }
  //! Where this process's gathered input positions and its block of outputs start.
  ops::UpsamplingWindow<S> window() const {
    ops::UpsamplingWindow<S> w;
    for (std::size_t a = 0; a < S; ++a) {
      w.size[a] = size_[a];
      w.input_begin[a] = halos_.reads(a).begin;
      w.output_begin[a] = static_cast<std::int64_t>(halos_.output_block(a).offset);
    }
    return w;
  }

  Extents size_;
  std::string name_;
  std::optional<RuntimeTensorLayout> output_layout_;
  Images x_, y_;
  typename Images::view_type xe_;  // the input positions this process's outputs read
  SpatialHalos<typename Images::view_type, S> halos_;
  // A step's buffers, kept for the next steps (no allocation per step).
  ReusableViews<typename Images::view_type> y_views_, dx_views_, packed_, y_moved_, dy_moved_;
};

//! Keras' UpSampling2D and UpSampling3D on scalars T, and on float32.
template <class T>
using BasicUpSampling2D = BasicUpSampling<T, 2>;
template <class T>
using BasicUpSampling3D = BasicUpSampling<T, 3>;
using UpSampling2D = BasicUpSampling2D<float>;
using UpSampling3D = BasicUpSampling3D<float>;

}  // namespace kdist::layers
