#pragma once
//! \file nn/layers/dense.hpp
//! `kdist::layers::Dense`: Keras' Dense on distributed tensors. The kernel and bias are created
//! sharded from the start, with the layouts the distribution gives ("<name>/kernel",
//! "<name>/bias"), each element drawn where it lives from a counter-based generator (the same
//! weights on every mesh). The forward and backward passes communicate what the layouts call for
//! (kdist::matmul): kernel (None, "model") is column-parallel, ("model", None) row-parallel with
//! a pending sum, a replicated kernel local. The output is moved to the distribution's layout for
//! "<name>/output" when it has one (the guide sets "d2/output" to ("data", None)).
//!
//! On (batch, sequence, features) inputs (a transformer's activations) the kernel contracts the
//! last dimension and the output is (batch, sequence, units). The product runs in a compute
//! layout: the kernel's layout without the axes that shard the batch (an FSDP kernel is gathered
//! for it), the input as (batch axes, sequence axes the kernel does not use, kernel dim-0 axes)
//! (a sequence sharded over the kernel's axis is all-gathered first, a last dimension sharded
//! otherwise than the kernel's rows is redistributed), the result (batch, sequence, kernel dim-1
//! axes) pending a sum over the kernel's dim-0 axes, which kdist::redistribute resolves into
//! "<name>/output" (a reduce-scatter for a row-parallel kernel and a sequence-sharded output:
//! Megatron's column -> row pairing with sequence parallelism). Backward: the kernel and bias
//! gradients are pending sums over the batch and sequence axes, resolved into the gradients'
//! layouts (an FSDP kernel's: a reduce-scatter); the input gradient goes back to the input's
//! layout.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layers/activation.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/matmul.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
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
  using Tensor3 = DistributedTensor<T***>;

  BasicDense(std::size_t units, Activation activation, bool use_bias, std::string name)
      : units_(units), activation_(activation), use_bias_(use_bias), name_(std::move(name)) {
    if (units == 0) throw ValueError("kdist::layers::Dense '" + name_ + "': units must be >= 1");
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Dense";
  std::size_t units() const { return units_; }
  Activation activation() const { return activation_; }
  bool use_bias() const { return use_bias_; }
  bool ends_in_softmax() const { return activation_ == Activation::softmax; }

  // ---- kdist::Layer -----------------------------------------------------------------------------
  //! Builds for inputs of shape (features,) or (sequence, features); returns (units,) or
  //! (sequence, units). Errors: ValueError for inputs of another rank (put a Flatten before the
  //! Dense).
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    if (input_shape.size() != 1 && input_shape.size() != 2) {
      throw ValueError("kdist::layers::Dense '" + name_ +
                       "' takes inputs of shape (features,) but the layer before it gives " +
                       kdist::detail::shape_repr(input_shape) +
                       "; put a kdist::layers::Flatten before it (a Dense also takes (sequence, "
                       "features) inputs)");
    }
    build(input_shape.back(), dist, seed);
    if (input_shape.size() == 1) return {units_};
    return {input_shape[0], units_};
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    bfloat16_gathers_ = context.bfloat16_gathers;
    if (const auto* t3 = std::get_if<Tensor3>(&x)) return forward(*t3, context.output_logits);
    return forward(kdist::detail::layer_input_as<Matrix>(
                       x, "Dense '" + name_ + "'",
                       "Dense takes (batch, features) or (batch, sequence, features); put a "
                       "kdist::layers::Flatten before it"),
                   context.output_logits);
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& grads) {
    if (const auto* t3 = std::get_if<Tensor3>(&dy)) {
      auto dx = backward(*t3, need_input_grad, grads);
      if (!dx) return std::nullopt;
      return LayerTensor<T>(std::move(*dx));
    }
    auto dx = backward(kdist::detail::layer_input_as<Matrix>(dy, "Dense '" + name_ + "'",
                                                             "its gradient has its output's rank"),
                       need_input_grad, grads);
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

  //! What the backward pass reads, for a 16-bit dtype policy to keep in 16 bits
  //! (kdist/nn/autocast.hpp): the input, the output and a gelu's pre-activation, of either rank.
  template <class F>
  void for_each_kept_activation(F&& f) {
    f(x_);
    f(y_);
    f(pre_);
    f(x3c_);
    f(y3_);
    f(pre3_);
  }
  std::optional<Variable<T*>>& bias() { return bias_; }

  //! y = activation(x W + b). Keeps what backward needs. `logits_only` skips a softmax
  //! activation (a loss fuses it, as Keras' from_logits cross-entropy).
  Matrix forward(const Matrix& x, bool logits_only = false) {
    x_ = x;
    skip_softmax_ = logits_only;
    Matrix z = matmul(x, kernel_for(x.layout().axes()[0]), ops::Op::none, ops::Op::none, z_views_);
    RuntimeTensorLayout target = output_layout_ ? *output_layout_ : z.layout();
    if (activation_ == Activation::softmax && !target.axes()[1].is_replicated()) {
      target = RuntimeTensorLayout({target.axes()[0], DimAxes()}, target.device_mesh());
    }
    z = redistribute(z, target, z_moved_);  // resolves a pending sum (all-reduce / reduce-scatter)
    if (use_bias_ && activation_ == Activation::relu) {
      ops::bias_add_relu(z.local(), bias_block(z));  // one pass over z instead of two
    } else {
      if (use_bias_) ops::bias_add(z.local(), bias_block(z));
      if (activation_ == Activation::relu) ops::relu_inplace(z.local());
    }
    if (activation_ == Activation::gelu) {
      pre_ = copy_of(z.local(), pre_views_);
      ops::gelu_inplace(z.local());
    }
    if (activation_ == Activation::softmax && !logits_only) ops::softmax_inplace(z.local());
    y_ = z;
    return z;
  }

  //! Given dL/dy (laid out as y), hands the kernel's and the bias' gradients to `grads` (pending
  //! sums over the batch axes when the batch is sharded) and returns dL/dx (laid out as x) when
  //! `need_input_grad`.
  std::optional<Matrix> backward(const Matrix& dy, bool need_input_grad, Gradients<T>& grads) {
    Matrix dz = dy;
    const bool fused = use_bias_ && activation_ == Activation::relu;  // as in forward
    std::optional<typename Vector::view_type> db;
    if (use_bias_) db.emplace(db_views_.get("kdist::Dense::db", dz.local().extent(1)));
    if (fused) {
      ops::relu_backward_bias_grad(y_.local(), dz.local(), *db);  // one pass over dz
    } else if (activation_ == Activation::relu) {
      ops::relu_backward_inplace(y_.local(), dz.local());
    } else if (activation_ == Activation::gelu) {
      auto d = dz_views_.get("kdist::Dense::dgelu", dz.local().extent(0), dz.local().extent(1));
      ops::gelu_backward(pre_, dz.local(), d);
      dz = Matrix::from_local(d, dz.shape(), dz.layout(), dz.partial_axes());
    } else if (activation_ == Activation::softmax && !skip_softmax_) {
      auto d = dz_views_.get("kdist::Dense::dsoftmax", dz.local().extent(0), dz.local().extent(1));
      ops::softmax_backward(y_.local(), dz.local(), d);
      dz = Matrix::from_local(d, dz.shape(), dz.layout(), dz.partial_axes());
    }
    // dW = x^T dz: the batch is the contraction, so data-sharded rows leave a pending sum over
    // the batch axes, which the step resolves into the kernel's layout (the data-parallel
    // all-reduce). The product goes straight into the gradient's block when it fits there (the
    // all-reduce then runs in place: no copy, no 600 KB allocation and page faults per step).
    auto dw = matmul(x_, dz, ops::Op::transpose, ops::Op::none, kernel_.grad.local());
    if (dw.local_summand().data() == kernel_.grad.local().data() &&
        !(dw.layout() == kernel_.grad.layout())) {
      // Not a plain all-reduce or the block itself (a reduce-scatter, say): the product moves
      // out of the way of what is written into the gradient.
      const auto summand = dw_views_.get_like("kdist::Dense::dw", dw.local_summand());
      Kokkos::deep_copy(summand, dw.local_summand());
      dw = Matrix::from_local(summand, dw.shape(), dw.layout(), dw.partial_axes());
    }
    grads.add(kernel_, dw);
    if (use_bias_) {
      if (!fused) ops::bias_grad(dz.local(), *db);
      RuntimeTensorLayout col_layout({dz.layout().axes()[1]}, dz.layout().device_mesh());
      auto partial = dz.layout().axes()[0].names();
      grads.add(*bias_, Vector::from_local(*db, {units_}, col_layout, partial));
    }
    if (!need_input_grad) return std::nullopt;
    auto dx =
        matmul(dz, kernel_for(x_.layout().axes()[0]), ops::Op::none, ops::Op::transpose, dx_views_);
    return redistribute(dx, x_.layout(), dx_moved_);
  }

  // ---- (batch, sequence, features) --------------------------------------------------------------

  //! y = activation(x W + b) on (batch, sequence, features) in any layout; returns (batch,
  //! sequence, units) in "<name>/output"'s layout when the distribution gives one (it must be of
  //! rank 3), else in the compute layout (batch axes, sequence axes, kernel dim-1 axes). Keeps what
  //! backward needs. Errors: ValueError for an input whose last dimension is not the kernel's
  //! input dimension, or an output layout of another rank.
  Tensor3 forward(const Tensor3& x, bool logits_only = false) {
    const std::size_t in = kernel_.value.shape()[0];
    if (x.shape()[2] != in) {
      throw ValueError("kdist::layers::Dense '" + name_ + "': the input has shape " +
                       kdist::detail::shape_repr(x.shape()) + " but the layer was built for " +
                       std::to_string(in) + " features (its last dimension)");
    }
    skip_softmax_ = logits_only;
    const RuntimeDeviceMesh& mesh = x.device_mesh();
    const auto& xa = x.layout().axes();
    const auto& ka = kernel_.value.layout().axes();
    const DimAxes& b = xa[0];
    const DimAxes k0 = without(ka[0], b.names());
    const DimAxes k1 = without(ka[1], b.names());
    const DimAxes s = without(without(xa[1], k0.names()), k1.names());
    x3_layout_ = x.layout();
    kc_layout_ = RuntimeTensorLayout({k0, k1}, mesh);
    zc_layout_ = RuntimeTensorLayout({b, s, k1}, mesh);
    x3c_ = redistribute(x, RuntimeTensorLayout({b, s, k0}, mesh), x3c_moved_);
    const Matrix kc = kc_moved_(kernel_.value, *kc_layout_, bfloat16_gathers_);
    const auto& xl = x3c_.local();
    const auto zv = z3_views_.get(name_ + "/z", xl.extent(0), xl.extent(1), kc.local().extent(1));
    const auto xcl = contiguous(xl);
    ops::matmul(rows_of(xcl), kc.local(), rows_of(zv));
    Tensor3 z =
        Tensor3::from_local(zv, {x.shape()[0], x.shape()[1], units_}, *zc_layout_, k0.names());
    RuntimeTensorLayout target = output_layout_ ? *output_layout_ : *zc_layout_;
    if (target.rank() != 3) {
      throw ValueError("kdist::layers::Dense '" + name_ + "': the distribution lays out '" + name_ +
                       "/output' as " + target.axes_repr() + " (rank " +
                       std::to_string(target.rank()) +
                       ") but the output is (batch, sequence, units); give a layout of rank 3");
    }
    if (activation_ == Activation::softmax && !target.axes()[2].is_replicated()) {
      target = RuntimeTensorLayout({target.axes()[0], target.axes()[1], DimAxes()},
                                   target.device_mesh());
    }
    // resolves the pending sum (all-reduce / reduce-scatter)
    z = redistribute(z, target, z3_moved_);
    auto zm = rows_of(z.local());
    if (use_bias_) ops::bias_add(zm, bias_block(z.layout().axes()[2], mesh));
    if (activation_ == Activation::relu) ops::relu_inplace(zm);
    if (activation_ == Activation::gelu) {
      pre3_ = copy_of(z.local(), pre3_views_);
      ops::gelu_inplace(zm);
    }
    if (activation_ == Activation::softmax && !logits_only) ops::softmax_inplace(zm);
    y3_ = z;
    return z;
  }

  //! Given dL/dy of the last rank-3 forward (any layout; moved to y's), hands the kernel and bias
  //! gradients to `grads` (pending sums over the rows' axes) and returns dL/dx laid out as x was,
  //! when `need_input_grad`.
  std::optional<Tensor3> backward(const Tensor3& dy_in, bool need_input_grad, Gradients<T>& grads) {
    const RuntimeDeviceMesh& mesh = y3_.device_mesh();
    const Tensor3 dy = redistribute(dy_in, y3_.layout(), dy3_moved_);
    Tensor3 dz = dy;
    const bool softmax = activation_ == Activation::softmax && !skip_softmax_;
    if (activation_ == Activation::relu || activation_ == Activation::gelu || softmax) {
      const auto& dl = dy.local();
      const auto d = dz3_views_.get(name_ + "/dz", dl.extent(0), dl.extent(1), dl.extent(2));
      const auto dyc = contiguous(dl);
      const auto dym = rows_of(dyc);
      if (activation_ == Activation::relu)
        ops::relu_backward(rows_of(y3_.local()), dym, rows_of(d));
      if (activation_ == Activation::gelu) ops::gelu_backward(rows_of(pre3_), dym, rows_of(d));
      if (softmax) ops::softmax_backward(rows_of(y3_.local()), dym, rows_of(d));
      dz = Tensor3::from_local(d, dy.shape(), dy.layout());
    }
    const Tensor3 dzc = redistribute(dz, *zc_layout_, dzc_moved_);
    const auto dzcl = contiguous(dzc.local());
    const auto dzm = rows_of(dzcl);
    const Matrix kc = kc_moved_(kernel_.value, *kc_layout_, bfloat16_gathers_);
    // Pending over the rows' axes: each process summed its own (batch, sequence) rows.
    std::vector<std::string> row_axes = zc_layout_->axes()[0].names();
    for (const auto& a : zc_layout_->axes()[1].names()) row_axes.push_back(a);
    const auto dw = dw_views_.get(name_ + "/dw", kc.local().extent(0), kc.local().extent(1));
    const auto xcl = contiguous(x3c_.local());
    ops::matmul(rows_of(xcl), dzm, dw, ops::Op::transpose, ops::Op::none);
    grads.add(kernel_, Matrix::from_local(dw, kernel_.value.shape(), *kc_layout_, row_axes));
    if (use_bias_) {
      const auto db = db_views_.get(name_ + "/db", dzm.extent(1));
      ops::bias_grad(dzm, db);
      grads.add(*bias_,
                Vector::from_local(db, {units_}, RuntimeTensorLayout({kc_layout_->axes()[1]}, mesh),
                                   row_axes));
    }
    if (!need_input_grad) return std::nullopt;
    const auto& xl = x3c_.local();
    const auto dxv = dx3_views_.get(name_ + "/dx", xl.extent(0), xl.extent(1), xl.extent(2));
    ops::matmul(dzm, kc.local(), rows_of(dxv), ops::Op::none, ops::Op::transpose);
    const Tensor3 dx =
        Tensor3::from_local(dxv, x3c_.shape(), x3c_.layout(), kc_layout_->axes()[1].names());
    return redistribute(dx, *x3_layout_, dx3_moved_);
  }

 private:
  //! The kernel as the (batch, features) product takes it: itself (kdist::matmul gathers an FSDP
  //! kernel's batch axes in float32), or with bfloat16 gathers on, gathered over the batch axes
  //! `batch` moving bfloat16 (kdist/nn/weight_gather.hpp).
  Matrix kernel_for(const DimAxes& batch) {
    if (!bfloat16_gathers_) return kernel_.value;
    const auto& ka = kernel_.value.layout().axes();
    const RuntimeTensorLayout compute(
        {without(ka[0], batch.names()), without(ka[1], batch.names())},
        kernel_.value.device_mesh());
    return kc_moved_(kernel_.value, compute, true);
  }

  //! The bias entries matching z's column block, as a local View.
  typename Vector::view_type bias_block(const Matrix& z) {
    return bias_block(z.layout().axes()[1], z.device_mesh());
  }
  //! The bias entries of a last dimension laid out over `cols`, as a local View.
  typename Vector::view_type bias_block(const DimAxes& cols, const RuntimeDeviceMesh& mesh) {
    RuntimeTensorLayout col_layout({cols}, mesh);
    if (bias_->value.layout().axes()[0] == cols) return bias_->value.local();
    return redistribute(bias_->value, col_layout, bias_moved_).local();
  }
  //! `a` without the mesh axes in `drop`.
  static DimAxes without(const DimAxes& a, const std::vector<std::string>& drop) {
    std::vector<std::string> keep;
    for (const auto& n : a.names()) {
      if (std::find(drop.begin(), drop.end(), n) == drop.end()) keep.push_back(n);
    }
    return DimAxes(std::move(keep));
  }
  //! A LayoutRight (a, b, c) block as the matrix (a * b, c) over the same memory (contiguous).
  template <class V>
  static Kokkos::View<typename V::value_type**, Kokkos::LayoutRight, typename V::memory_space,
                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>
  rows_of(const V& v) {
    using R = Kokkos::View<typename V::value_type**, Kokkos::LayoutRight, typename V::memory_space,
                           Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    return R(v.data(), v.extent(0) * v.extent(1), v.extent(2));
  }
  //! `v` when its elements are contiguous, else a packed copy.
  template <class V>
  static V contiguous(const V& v) {
    if (v.span_is_contiguous()) return v;
    typename V::non_const_type packed(Kokkos::view_alloc(Kokkos::WithoutInitializing, "packed"),
                                      v.layout());
    Kokkos::deep_copy(packed, v);
    return packed;
  }
  //! A copy of a block (the pre-activation GELU's backward needs), in a View from `views`.
  template <class V, class Views>
  static typename V::non_const_type copy_of(const V& v, Views& views) {
    typename V::non_const_type c = views.get_like("kdist::Dense::pre", v);
    Kokkos::deep_copy(c, v);
    return c;
  }

  std::size_t units_;
  Activation activation_;
  bool use_bias_;
  std::string name_;
  Variable<T**> kernel_;
  std::optional<Variable<T*>> bias_;
  std::optional<RuntimeTensorLayout> output_layout_;
  Matrix x_, y_;
  typename Matrix::view_type pre_;  //!< the pre-activation of a gelu (rank 2)
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  ReusableViews<typename Matrix::view_type> z_views_, dz_views_, dx_views_, pre_views_, dw_views_;
  ReusableViews<typename Vector::view_type> db_views_;
  ReusableViews<typename Tensor3::view_type> z3_views_, dz3_views_, dx3_views_, pre3_views_;
  // What the redistributions write (the resolved sums, the gathered kernel and bias, the moved
  // inputs and gradients), kept likewise; the forward's gathered kernel is free again by the
  // time the backward gathers it.
  ReusableViews<typename Matrix::view_type> z_moved_, dx_moved_;
  WeightGather<Matrix> kc_moved_;  // the kernel in its compute layout (an FSDP kernel gathered)
  bool bfloat16_gathers_ = false;  // StepContext::bfloat16_gathers of the last forward pass
  ReusableViews<typename Vector::view_type> bias_moved_;
  ReusableViews<typename Tensor3::view_type> x3c_moved_, z3_moved_, dy3_moved_, dzc_moved_,
      dx3_moved_;
  // Rank-3 forward state: the input's layout, the input and kernel in the compute layout, the
  // product's layout (before the output layout), the output and a gelu's pre-activation.
  std::optional<RuntimeTensorLayout> x3_layout_, kc_layout_, zc_layout_;
  Tensor3 x3c_, y3_;
  typename Tensor3::view_type pre3_;
  bool skip_softmax_ = false;
};

//! Keras' Dense on float32, the default dtype.
using Dense = BasicDense<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicDense)
