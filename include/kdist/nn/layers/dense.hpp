#pragma once
//! \file nn/layers/dense.hpp
//! `kdist::layers::Dense`: Keras' Dense on distributed tensors. The kernel and bias are created
//! sharded from the start, with the layouts the distribution gives ("<name>/kernel",
//! "<name>/bias"), each element drawn where it lives from a counter-based generator (the same
//! weights on every mesh). The forward and backward passes communicate what the layouts call for
//! (kdist::matmul): kernel (None, "model") is column-parallel, ("model", None) row-parallel with
//! a pending sum, a replicated kernel local. The output is moved to the distribution's layout for
//! "<name>/output" when it has one (the guide sets "d2/output" to ("data", None)).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/layer.hpp>
#include <kdist/nn/layers/activation.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/matmul.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

//! Dense on scalars `T` (float or double). A class template so that including this header costs
//! only its parsing: a TU pays for the matmul, redistribute and ops machinery only when it uses a
//! layer (kdist.hpp's compile-time budget, benchmarks/compile_cost.sh).
template <class T>
class BasicDense {
 public:
  using value_type = T;
  using Matrix = DistributedTensor<T**>;
  using Vector = DistributedTensor<T*>;

  BasicDense(std::size_t units, Activation activation, bool use_bias, std::string name)
      : units_(units), activation_(activation), use_bias_(use_bias), name_(std::move(name)) {
    if (units == 0) throw ValueError("kdist::layers::Dense '" + name_ + "': units must be >= 1");
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Dense";
  std::size_t units() const { return units_; }
  Activation activation() const { return activation_; }
  bool ends_in_softmax() const { return activation_ == Activation::softmax; }

  // ---- kdist::Layer -----------------------------------------------------------------------------
  //! Builds for inputs of shape (features,); returns (units,). Errors: ValueError for inputs of
  //! another rank (put a Flatten before the Dense).
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    if (input_shape.size() != 1) {
      throw ValueError("kdist::layers::Dense '" + name_ +
                       "' takes inputs of shape (features,) "
                       "but the layer before it gives " +
                       kdist::detail::shape_repr(input_shape) +
                       "; put a kdist::layers::Flatten before it");
    }
    build(input_shape[0], dist, seed);
    return {units_};
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    return forward(kdist::detail::layer_input_as<Matrix>(x, "Dense '" + name_ + "'",
                                                         "put a kdist::layers::Flatten before it"),
                   context.output_logits);
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad) {
    auto dx = backward(kdist::detail::layer_input_as<Matrix>(dy, "Dense '" + name_ + "'",
                                                             "its gradient has its output's rank"),
                       need_input_grad);
    if (!dx) return std::nullopt;
    return LayerTensor<T>(std::move(*dx));
  }
  std::vector<VariableRef<T>> variables() {
    std::vector<VariableRef<T>> out{&kernel_};
    if (bias_) out.push_back(&*bias_);
    return out;
  }
  // -----------------------------------------------------------------------------------------------

  //! Creates the variables for `input_dim` features: kernel glorot_uniform keyed by
  //! (seed, stream_id("<name>/kernel"), global index), bias zeros.
  void build(std::size_t input_dim, const Distribution& dist, std::uint64_t seed) {
    const std::string kpath = name_ + "/kernel";
    auto klayout = dist.get_variable_layout(VariableInfo(kpath, {input_dim, units_}));
    const std::uint64_t stream = stream_id(kpath);
    const std::size_t fan_out = units_;
    const std::size_t fan_in = input_dim;
    kernel_.path = kpath;
    // A device lambda: each block is drawn where it lives (on a GPU, in place).
    kernel_.value = distribute_tensor<T**>(
        KOKKOS_LAMBDA(std::size_t i, std::size_t j) {
          return static_cast<T>(glorot_uniform(seed, stream, fan_in, fan_out, i * fan_out + j));
        },
        {input_dim, units_}, klayout);
    kernel_.grad = Matrix::zeros({input_dim, units_}, klayout, kpath + "/grad");
    if (use_bias_) {
      const std::string bpath = name_ + "/bias";
      auto blayout = dist.get_variable_layout(VariableInfo(bpath, {units_}));
      bias_ = Variable<T*>{bpath, Vector::zeros({units_}, blayout, bpath),
                           Vector::zeros({units_}, blayout, bpath + "/grad")};
    }
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
  }

  Variable<T**>& kernel() { return kernel_; }
  std::optional<Variable<T*>>& bias() { return bias_; }

  //! y = activation(x W + b). Keeps what backward needs. `logits_only` skips a softmax
  //! activation (a loss fuses it, as Keras' from_logits cross-entropy).
  Matrix forward(const Matrix& x, bool logits_only = false) {
    x_ = x;
    skip_softmax_ = logits_only;
    Matrix z = matmul(x, kernel_.value);
    RuntimeTensorLayout target = output_layout_ ? *output_layout_ : z.layout();
    if (activation_ == Activation::softmax && !target.axes()[1].is_replicated()) {
      target = RuntimeTensorLayout({target.axes()[0], DimAxes()}, target.device_mesh());
    }
    z = redistribute(z, target);  // resolves a pending sum (all-reduce / reduce-scatter)
    if (use_bias_) {
      auto b = bias_block(z);
      ops::bias_add(z.local(), b);
    }
    if (activation_ == Activation::relu) ops::relu_inplace(z.local());
    if (activation_ == Activation::softmax && !logits_only) ops::softmax_inplace(z.local());
    y_ = z;
    return z;
  }

  //! Given dL/dy (laid out as y), accumulates the variables' gradients and returns dL/dx (laid
  //! out as x) when `need_input_grad`.
  std::optional<Matrix> backward(const Matrix& dy, bool need_input_grad) {
    Matrix dz = dy;
    if (activation_ == Activation::relu) {
      ops::relu_backward_inplace(y_.local(), dz.local());
    } else if (activation_ == Activation::softmax && !skip_softmax_) {
      typename Matrix::view_type d("kdist::Dense::dsoftmax", dz.local().extent(0),
                                   dz.local().extent(1));
      ops::softmax_backward(y_.local(), dz.local(), d);
      dz = Matrix::from_local(d, dz.shape(), dz.layout(), dz.partial_axes());
    }
    // dW = x^T dz: the batch is the contraction, so data-sharded rows leave a pending sum over
    // the batch axes, resolved into the kernel's layout (the data-parallel all-reduce).
    // The product goes into a buffer kept from the last step and the all-reduce into the
    // gradient's own block: no 600 KB allocation (and page faults) per step.
    auto dw = matmul(x_, dz, ops::Op::transpose, ops::Op::none, dw_buffer_);
    dw_buffer_ = dw.local_summand();  // a pending sum over the batch axes, resolved below
    if (dw.is_partial()) {
      redistribute_into(dw, kernel_.grad);
    } else {
      kernel_.grad = redistribute(dw, kernel_.value.layout());
    }
    if (use_bias_) {
      typename Vector::view_type db("kdist::Dense::db", dz.local().extent(1));
      ops::bias_grad(dz.local(), db);
      RuntimeTensorLayout col_layout({dz.layout().axes()[1]}, dz.layout().device_mesh());
      auto partial = dz.layout().axes()[0].names();
      auto pending = Vector::from_local(db, {units_}, col_layout, partial);
      bias_->grad = redistribute(pending, bias_->value.layout());
    }
    if (!need_input_grad) return std::nullopt;
    auto dx = matmul(dz, kernel_.value, ops::Op::none, ops::Op::transpose);
    return redistribute(dx, x_.layout());
  }

 private:
  //! The bias entries matching z's column block, as a local View.
  typename Vector::view_type bias_block(const Matrix& z) {
    RuntimeTensorLayout col_layout({z.layout().axes()[1]}, z.layout().device_mesh());
    if (bias_->value.layout().axes()[0] == col_layout.axes()[0]) return bias_->value.local();
    return redistribute(bias_->value, col_layout).local();
  }

  std::size_t units_;
  Activation activation_;
  bool use_bias_;
  std::string name_;
  Variable<T**> kernel_;
  std::optional<Variable<T*>> bias_;
  std::optional<RuntimeTensorLayout> output_layout_;
  Matrix x_, y_;
  typename Matrix::view_type dw_buffer_;
  bool skip_softmax_ = false;
};

//! Keras' Dense on float32, the default dtype.
using Dense = BasicDense<float>;

}  // namespace kdist::layers
