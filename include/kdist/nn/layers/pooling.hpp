#pragma once
//! \file nn/layers/pooling.hpp
//! `kdist::layers::MaxPooling2D`, `AveragePooling2D`, `MaxPooling3D` and `AveragePooling3D`: Keras'
//! pooling layers, one class template over the kind and the S spatial axes (channels_last;
//! pool_size, strides - None: the pool size - and padding "valid" or "same", and kdist's
//! "periodic") on distributed NHWC and NDHWC tensors. Keras' "same" pads so that the output has
//! ceil(extent / stride) positions and leaves the padding out: a maximum skips it, a mean does not
//! count it.
//!
//! Pooling is computed in the input's layout: examples on the batch axes, channels on theirs (a
//! convolution's filters), and the spatial dimensions on the axes that shard them (issue 38). A
//! process holding a block of a spatially sharded image pools the block of outputs the layout
//! gives it; a window that spans two blocks reads its neighbour's edge by a halo exchange
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

#include <kdist/core/detail/data_type_extents.hpp>
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

//! Keras' pooling arguments beyond pool_size: strides (all 0: the pool size, Keras' None) and
//! padding.
template <std::size_t S>
struct PoolingOptions {
  std::array<std::size_t, S> strides{};
  Padding padding = Padding::valid;
};
using Pooling2DOptions = PoolingOptions<2>;
using Pooling3DOptions = PoolingOptions<3>;

template <class T, ops::PoolingKind Kind, std::size_t S>
class BasicPooling {
  static_assert(S == 2 || S == 3, "kdist::layers::BasicPooling: 2 or 3 spatial axes");

 public:
  using value_type = T;
  //! (batch, spatial..., channels): rank S + 2.
  using Images = DistributedTensor<typename kdist::detail::dynamic_data_type<T, S + 2>::type>;
  using Extents = std::array<std::size_t, S>;

  //! Errors: ValueError for a 0 pool extent, or strides with a 0 but not all 0.
  explicit BasicPooling(Extents pool_size = filled(2), std::string name = std::string(default_name),
                        PoolingOptions<S> options = {})
      : pool_size_(pool_size), name_(std::move(name)), options_(options) {
    const char* every =
        S == 2 ? " must be >= 1 in both dimensions" : " must be >= 1 in every dimension";
    if (zeros(pool_size) > 0) {
      throw ValueError(prefix() + "pool_size " + kdist::detail::shape_repr(pool_size) + every);
    }
    auto& st = options_.strides;
    if (zeros(st) != 0 && zeros(st) != S) {
      throw ValueError(prefix() + "strides " + kdist::detail::shape_repr(st) + every + ", or " +
                       kdist::detail::shape_repr(Extents{}) +
                       " for the pool size (Keras' strides=None)");
    }
    if (zeros(st) == S) st = pool_size;
  }

  static constexpr std::string_view keras_class =
      Kind == ops::PoolingKind::max ? (S == 2 ? "MaxPooling2D" : "MaxPooling3D")
                                    : (S == 2 ? "AveragePooling2D" : "AveragePooling3D");
  static constexpr std::string_view default_name =
      Kind == ops::PoolingKind::max ? (S == 2 ? "max_pooling2d" : "max_pooling3d")
                                    : (S == 2 ? "average_pooling2d" : "average_pooling3d");
  const std::string& name() const { return name_; }
  const Extents& pool_size() const { return pool_size_; }
  //! The options, strides resolved (the pool size where they were all 0).
  const PoolingOptions<S>& options() const { return options_; }

  //! Builds for examples (spatial..., channels); returns (out..., channels): Keras' extents,
  //! (extent - pool) / stride + 1 for "valid", ceil(extent / stride) otherwise.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t) {
    if (input_shape.size() != S + 1) {
      throw ValueError(prefix() + "takes examples of shape " +
                       (S == 2 ? "(height, width, channels)" : "(depth, height, width, channels)") +
                       ", not " + kdist::detail::shape_repr(input_shape));
    }
    Shape out;
    for (const auto& a : windows(input_shape)) {
      if (a.output_extent() == 0) {
        throw ValueError(prefix() + "the pool " + kdist::detail::shape_repr(pool_size_) +
                         " does not fit examples of shape " +
                         kdist::detail::shape_repr(input_shape) +
                         " (padding 'valid'; padding 'same' fits any image)");
      }
      out.push_back(a.output_extent());
    }
    out.push_back(input_shape[S]);
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    return out;
  }

  LayerTensor<T> forward(const LayerTensor<T>& in, const StepContext&) {
    const auto& x0 = kdist::detail::layer_input_as<Images>(
        in, std::string(keras_class) + " '" + name_ + "'",
        S == 2 ? "give it (batch, height, width, channels) tensors"
               : "give it (batch, depth, height, width, channels) tensors");
    x_ = contiguous(x0, packed_);
    const auto& s = x_.shape();
    const auto axes = windows(Shape(s.begin() + 1, s.begin() + 1 + S));
    halos_.plan(std::vector<std::size_t>(s.begin(), s.end()), x_.layout(), axes);
    xe_ = halos_.gather(x_.local());
    auto yshape = s, yblock = s;
    yblock[0] = x_.local().extent(0);
    yblock[S + 1] = x_.local().extent(S + 1);
    for (std::size_t a = 0; a < S; ++a) {
      yshape[a + 1] = axes[a].output_extent();
      yblock[a + 1] = halos_.output_block(a).extent;
    }
    const auto y = get_block(y_views_, name_ + "/y", yblock);
    if (halos_.has_outputs()) ops::pool(Kind, xe_, y, window(axes));
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
    if (halos_.has_outputs()) {
      const auto& s = x_.shape();
      ops::pool_backward(Kind, xe_, dy.local(), dxe,
                         window(windows(Shape(s.begin() + 1, s.begin() + 1 + S))));
    } else {
      Kokkos::deep_copy(dxe, T(0));
    }
    return LayerTensor<T>(Images::from_local(halos_.scatter_add(dxe), x_.shape(), x_.layout(), {}));
  }

  std::vector<VariableRef<T>> variables() { return {}; }

 private:
  static constexpr Extents filled(std::size_t v) {
    Extents e{};
    for (auto& x : e) x = v;
    return e;
  }
  static std::size_t zeros(const Extents& e) {
    std::size_t n = 0;
    for (const auto x : e) n += x == 0 ? 1 : 0;
    return n;
  }
  std::string prefix() const {
    return "kdist::layers::" + std::string(keras_class) + " '" + name_ + "': ";
  }
  //! The windows over spatial extents `extents`.
  std::array<WindowAxis, S> windows(const Shape& extents) const {
    std::array<WindowAxis, S> w;
    for (std::size_t a = 0; a < S; ++a) {
      w[a] = WindowAxis{extents[a], pool_size_[a], options_.strides[a], 1, options_.padding};
    }
    return w;
  }
  //! The pooling of this process's gathered positions: the padding beyond the field is marked.
  ops::PoolWindow<S> window(const std::array<WindowAxis, S>& axes) const {
    ops::PoolWindow<S> w;
    for (std::size_t a = 0; a < S; ++a) {
      w.pool_size[a] = pool_size_[a];
      w.strides[a] = options_.strides[a];
      if (options_.padding == Padding::periodic) continue;  // the gathered images: no padding
      const auto reads = halos_.reads(a);
      w.inside_begin[a] = -reads.begin;
      w.inside_end[a] = static_cast<std::int64_t>(axes[a].extent) - reads.begin;
    }
    return w;
  }

  Extents pool_size_;
  std::string name_;
  PoolingOptions<S> options_;
  std::optional<RuntimeTensorLayout> output_layout_;
  Images x_, y_;
  typename Images::view_type xe_;  // the input positions this process's outputs read
  SpatialHalos<typename Images::view_type, S> halos_;
  // A step's buffers, kept for the next steps (no allocation per step).
  ReusableViews<typename Images::view_type> y_views_, dx_views_, packed_, y_moved_, dy_moved_;
};

//! Keras' MaxPooling2D/3D and AveragePooling2D/3D on scalars T, and on float32.
template <class T>
using BasicMaxPooling2D = BasicPooling<T, ops::PoolingKind::max, 2>;
template <class T>
using BasicAveragePooling2D = BasicPooling<T, ops::PoolingKind::average, 2>;
template <class T>
using BasicMaxPooling3D = BasicPooling<T, ops::PoolingKind::max, 3>;
template <class T>
using BasicAveragePooling3D = BasicPooling<T, ops::PoolingKind::average, 3>;
using MaxPooling2D = BasicMaxPooling2D<float>;
using AveragePooling2D = BasicAveragePooling2D<float>;
using MaxPooling3D = BasicMaxPooling3D<float>;
using AveragePooling3D = BasicAveragePooling3D<float>;

}  // namespace kdist::layers
