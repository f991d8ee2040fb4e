#pragma once
//! \file nn/layers/upsampling.hpp
//! `kdist::layers::UpSampling2D`: Keras' UpSampling2D with interpolation "nearest"
//! (channels_last): each row is repeated size[0] times and each column size[1] times, (batch,
//! height, width, channels) -> (batch, height * size[0], width * size[1], channels). A U-Net's way
//! back up (followed by a Concatenate with the skip, kdist/nn/layers/concatenate.hpp).
//!
//! Computed in the input's layout, as pooling is (kdist/nn/layers/pooling.hpp): on a spatially
//! sharded image each process computes its block of the output rows and columns; where a block's
//! first output repeats an input position its neighbour holds (the blocks of the input and of the
//! output do not line up when the extents do not divide), that position comes by a halo exchange,
//! and its gradient goes back. A rule on "<name>/output" lays the output out as it says.
//! Keras' other interpolations ("bilinear", "bicubic", "lanczos") are not provided.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

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

template <class T>
class BasicUpSampling2D {
 public:
  using value_type = T;
  using Images = DistributedTensor<T****>;

  //! Errors: ValueError for a 0 size.
  explicit BasicUpSampling2D(std::array<std::size_t, 2> size = {2, 2},
                             std::string name = "up_sampling2d")
      : size_(size), name_(std::move(name)) {
    if (size[0] == 0 || size[1] == 0) {
      throw ValueError("kdist::layers::UpSampling2D '" + name_ + "': size " +
                       kdist::detail::shape_repr(size) + " must be >= 1 in both dimensions");
    }
  }

  static constexpr std::string_view keras_class = "UpSampling2D";
  const std::string& name() const { return name_; }
  const std::array<std::size_t, 2>& size() const { return size_; }

  //! Builds for examples (height, width, channels); returns (height * size[0], width * size[1],
  //! channels).
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t) {
    if (input_shape.size() != 3) {
      throw ValueError("kdist::layers::UpSampling2D '" + name_ +
                       "': takes examples of shape (height, width, channels), not " +
                       kdist::detail::shape_repr(input_shape));
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    return {input_shape[0] * size_[0], input_shape[1] * size_[1], input_shape[2]};
  }

  LayerTensor<T> forward(const LayerTensor<T>& in, const StepContext&) {
    const auto& x0 = kdist::detail::layer_input_as<Images>(
        in, "UpSampling2D '" + name_ + "'", "give it (batch, height, width, channels) tensors");
    x_ = contiguous(x0, packed_);
    const auto& s = x_.shape();
    const std::array<UpsamplingAxis, 2> axes{UpsamplingAxis{s[1], size_[0]},
                                             UpsamplingAxis{s[2], size_[1]}};
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), axes);
    xe_ = halos_.gather(x_.local());
    const auto y = y_views_.get(name_ + "/y", x_.local().extent(0), halos_.output_block(0).extent,
                                halos_.output_block(1).extent, x_.local().extent(3));
    ops::upsample_nearest(xe_, y, window());
    y_ = Images::from_local(y, {s[0], s[1] * size_[0], s[2] * size_[1], s[3]}, x_.layout(), {});
    if (output_layout_) return redistribute(y_, *output_layout_, y_moved_);
    return y_;
  }

  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy_in, bool need_input_grad,
                                         Gradients<T>& /*no variables*/) {
    if (!need_input_grad) return std::nullopt;
    const auto& dy0 = kdist::detail::layer_input_as<Images>(dy_in, "UpSampling2D '" + name_ + "'",
                                                            "its gradient has its output's rank");
    const Images dy = contiguous(redistribute(dy0, y_.layout(), dy_moved_), packed_);
    const auto dxe = dx_views_.get_like(name_ + "/dx", xe_);
    ops::upsample_nearest_backward(dy.local(), dxe, window());
    return LayerTensor<T>(Images::from_local(halos_.scatter_add(dxe), x_.shape(), x_.layout(), {}));
  }

  std::vector<VariableRef<T>> variables() { return {}; }

 private:
  //! Where this process's gathered input positions and its block of outputs start.
  ops::UpsamplingWindow<2> window() const {
    ops::UpsamplingWindow<2> w;
    for (std::size_t a = 0; a < 2; ++a) {
      w.size[a] = size_[a];
      w.input_begin[a] = halos_.reads(a).begin;
      w.output_begin[a] = static_cast<std::int64_t>(halos_.output_block(a).offset);
    }
    return w;
  }

  std::array<std::size_t, 2> size_;
  std::string name_;
  std::optional<RuntimeTensorLayout> output_layout_;
  Images x_, y_;
  typename Images::view_type xe_;  // the input positions this process's outputs read
  SpatialHalos<typename Images::view_type, 2> halos_;
  // A step's buffers, kept for the next steps (no allocation per step).
  ReusableViews<typename Images::view_type> y_views_, dx_views_, packed_, y_moved_, dy_moved_;
};

//! Keras' UpSampling2D on float32.
using UpSampling2D = BasicUpSampling2D<float>;

}  // namespace kdist::layers
