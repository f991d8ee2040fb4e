#pragma once
//! \file nn/layers/pooling.hpp
//! `kdist::layers::MaxPooling2D` and `AveragePooling2D`: Keras' pooling layers (channels_last;
//! pool_size, strides - None: the pool size - and padding "valid" or "same", and kdist's
//! "periodic") on distributed NHWC tensors. Keras' "same" pads so that the output has ceil(extent /
//! stride) positions and leaves the padding out: a maximum skips it, a mean does not count it.
//!
//! Pooling is computed in the input's layout: examples on the batch axes, channels on theirs (a
//! Conv2D's filters), and the height and width on the axes that shard them (issue 38). A process
//! holding a block of a spatially sharded image pools the block of outputs the layout gives it; a
//! window that spans two blocks reads its neighbour's edge by a halo exchange
//! (kdist/nn/layers/spatial_halos.hpp), and in the backward pass the gradient of that edge goes
//! back to its owner. A rule on "<name>/output" lays the output out as it says (a redistribute).

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
#include <kdist/ops/pooling.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

//! Keras' pooling arguments beyond pool_size: strides (0 in both: the pool size, Keras' None)
//! and padding.
struct PoolingOptions {
  std::array<std::size_t, 2> strides{0, 0};
  Padding padding = Padding::valid;
};

template <class T, ops::PoolingKind Kind>
class BasicPooling2D {
 public:
  using value_type = T;
  using Images = DistributedTensor<T****>;

  //! Errors: ValueError for a 0 pool extent or one stride 0 and the other not.
  explicit BasicPooling2D(std::array<std::size_t, 2> pool_size = {2, 2},
                          std::string name = std::string(default_name), PoolingOptions options = {})
      : pool_size_(pool_size), name_(std::move(name)), options_(options) {
    const std::string who = "kdist::layers::" + std::string(keras_class) + " '" + name_ + "': ";
    if (pool_size[0] == 0 || pool_size[1] == 0) {
      throw ValueError(who + "pool_size " + kdist::detail::shape_repr(pool_size) +
                       " must be >= 1 in both dimensions");
    }
    auto& st = options_.strides;
    if ((st[0] == 0) != (st[1] == 0)) {
      throw ValueError(who + "strides " + kdist::detail::shape_repr(st) +
                       " must be >= 1 in both dimensions, or (0, 0) for the pool size (Keras' "
                       "strides=None)");
    }
    if (st[0] == 0) st = pool_size;
  }

  static constexpr std::string_view keras_class =
      Kind == ops::PoolingKind::max ? "MaxPooling2D" : "AveragePooling2D";
  static constexpr std::string_view default_name =
      Kind == ops::PoolingKind::max ? "max_pooling2d" : "average_pooling2d";
  const std::string& name() const { return name_; }
  const std::array<std::size_t, 2>& pool_size() const { return pool_size_; }
  //! The options, strides resolved (the pool size where they were (0, 0)).
  const PoolingOptions& options() const { return options_; }

  //! Builds for examples (height, width, channels); returns (out_h, out_w, channels): Keras'
  //! extents, (extent - pool) / stride + 1 for "valid", ceil(extent / stride) otherwise.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t) {
    const std::string who = "kdist::layers::" + std::string(keras_class) + " '" + name_ + "': ";
    if (input_shape.size() != 3) {
      throw ValueError(who + "takes examples of shape (height, width, channels), not " +
                       kdist::detail::shape_repr(input_shape));
    }
    const auto axes = windows(input_shape[0], input_shape[1]);
    if (axes[0].output_extent() == 0 || axes[1].output_extent() == 0) {
      throw ValueError(who + "the pool " + kdist::detail::shape_repr(pool_size_) +
                       " does not fit examples of shape " + kdist::detail::shape_repr(input_shape) +
                       " (padding 'valid'; padding 'same' fits any image)");
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    return {axes[0].output_extent(), axes[1].output_extent(), input_shape[2]};
  }

  LayerTensor<T> forward(const LayerTensor<T>& in, const StepContext&) {
    const auto& x0 =
        kdist::detail::layer_input_as<Images>(in, std::string(keras_class) + " '" + name_ + "'",
                                              "give it (batch, height, width, channels) tensors");
    x_ = contiguous(x0, packed_);
    const auto& s = x_.shape();
    const auto axes = windows(s[1], s[2]);
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), axes);
    xe_ = halos_.gather(x_.local());
    const auto y = y_views_.get(name_ + "/y", x_.local().extent(0), halos_.output_block(0).extent,
                                halos_.output_block(1).extent, x_.local().extent(3));
    if (halos_.has_outputs()) ops::pool(Kind, xe_, y, window(axes));
    y_ = Images::from_local(y, {s[0], axes[0].output_extent(), axes[1].output_extent(), s[3]},
                            x_.layout(), {});
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
    if (halos_.has_outputs()) {
      const auto& s = x_.shape();
      ops::pool_backward(Kind, xe_, dy.local(), dxe, window(windows(s[1], s[2])));
    } else {
      Kokkos::deep_copy(dxe, T(0));
    }
    return LayerTensor<T>(Images::from_local(halos_.scatter_add(dxe), x_.shape(), x_.layout(), {}));
  }

  std::vector<VariableRef<T>> variables() { return {}; }

 private:
  std::array<WindowAxis, 2> windows(std::size_t height, std::size_t width) const {
    return {WindowAxis{height, pool_size_[0], options_.strides[0], 1, options_.padding},
            WindowAxis{width, pool_size_[1], options_.strides[1], 1, options_.padding}};
  }
  //! The pooling of this process's gathered positions: the padding beyond the field is marked.
  ops::PoolWindow<2> window(const std::array<WindowAxis, 2>& axes) const {
    ops::PoolWindow<2> w;
    for (std::size_t a = 0; a < 2; ++a) {
      w.pool_size[a] = pool_size_[a];
      w.strides[a] = options_.strides[a];
      if (options_.padding == Padding::periodic) continue;  // the gathered images: no padding
      const auto reads = halos_.reads(a);
      w.inside_begin[a] = -reads.begin;
      w.inside_end[a] = static_cast<std::int64_t>(axes[a].extent) - reads.begin;
    }
    return w;
  }

  std::array<std::size_t, 2> pool_size_;
  std::string name_;
  PoolingOptions options_;
  std::optional<RuntimeTensorLayout> output_layout_;
  Images x_, y_;
  typename Images::view_type xe_;  // the input positions this process's outputs read
  SpatialHalos<typename Images::view_type, 2> halos_;
  // A step's buffers, kept for the next steps (no allocation per step).
  ReusableViews<typename Images::view_type> y_views_, dx_views_, packed_, y_moved_, dy_moved_;
};

//! Keras' MaxPooling2D on float32.
using MaxPooling2D = BasicPooling2D<float, ops::PoolingKind::max>;
//! Keras' AveragePooling2D on float32.
using AveragePooling2D = BasicPooling2D<float, ops::PoolingKind::average>;

}  // namespace kdist::layers
