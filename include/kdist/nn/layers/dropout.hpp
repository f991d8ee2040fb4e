#pragma once
//! \file nn/layers/dropout.hpp
//! `kdist::layers::Dropout(rate)`: inverted dropout whose mask is keyed by (seed, layer, step,
//! global element index), so every mesh drops the same elements.

#include <cstdint>
#include <string>
#include <string_view>

#include <kdist/nn/layer.hpp>
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

  // ---- kdist::Layer: (batch, features) tensors; the identity outside training ----------------
  Shape build(const Shape& input_shape, const Distribution&, std::uint64_t) { return input_shape; }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    active_ = context.training && rate_ > 0.0;
    const auto& m = kdist::detail::layer_input_as<Matrix>(x, "Dropout '" + name_ + "'",
                                                          "put it after a kdist::layers::Flatten");
    if (!active_) return m;
    return forward(m, context.seed, context.step);
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad) {
    if (!need_input_grad) return std::nullopt;
    const auto& m = kdist::detail::layer_input_as<Matrix>(dy, "Dropout '" + name_ + "'",
                                                          "its gradient has its output's rank");
    if (!active_) return m;
    return backward(m);
  }
  std::vector<VariableRef<T>> variables() { return {}; }
  // -----------------------------------------------------------------------------------------------

  //! Training: drops with probability rate and scales the rest by 1/(1-rate). `step` is the
  //! optimizer's iteration count.
  Matrix forward(const Matrix& x, std::uint64_t seed, std::uint64_t step) {
    params_ = ops::DropoutParams{seed,           stream_id(name_), step,        rate_,
                                 x.offsets()[0], x.offsets()[1],   x.shape()[1]};
    typename Matrix::view_type y(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_),
                                 x.local().extent(0), x.local().extent(1));
    ops::dropout(x.local(), y, params_);
    return Matrix::from_local(y, x.shape(), x.layout());
  }
  Matrix backward(const Matrix& dy) {
    typename Matrix::view_type dx(Kokkos::view_alloc(Kokkos::WithoutInitializing, name_ + "/grad"),
                                  dy.local().extent(0), dy.local().extent(1));
    ops::dropout_backward(dy.local(), dx, params_);
    return Matrix::from_local(dx, dy.shape(), dy.layout());
  }

 private:
  double rate_;
  std::string name_;
  ops::DropoutParams params_{};
  bool active_ = false;
};

using Dropout = BasicDropout<float>;

}  // namespace kdist::layers
