#pragma once
//! \file nn/layers/multi_head_attention.hpp
//! `kdist::layers::MultiHeadAttention`: Keras' MultiHeadAttention as self-attention (query = key =
//! value = the input), by default with a causal mask (`use_causal_mask=True`), value_dim =
//! key_dim, output dim = the input's feature dim, no dropout. Inputs and outputs are
//! (batch, sequence, features) tensors.
//!
//! Variables, with Keras' paths, shapes and initialisers (glorot_uniform kernels with Keras'
//! compute_fans for rank 3: receptive field = prod(shape[:-2]); zero biases):
//!   <name>/query/kernel (d_model, heads, key_dim)   <name>/query/bias (heads, key_dim)
//!   <name>/key/...  <name>/value/...  (the same)
//!   <name>/attention_output/kernel (heads, key_dim, d_model)   <name>/attention_output/bias
//!   (d_model,)
//!
//! Distribution (Megatron tensor parallelism over the heads): the layouts come from the
//! distribution. The heads are sharded over the axes that shard the heads dimension of the query
//! kernel (dimension 1), less the axes that shard the batch of the input. Every variable is
//! brought to that compute layout, (None, heads, None) for the projections, (heads, None, None)
//! for the output kernel: a no-op for the Megatron rules (q/k/v kernels (None, "model", None),
//! biases ("model", None), output kernel ("model", None, None)), an all-gather for FSDP kernels
//! (also sharded on the batch axis; their gradients are reduce-scattered back) or for a rule that
//! shards d_model (correct, not fast). The input is gathered to (batch_axes, None, None) (an
//! all-gather over the sequence when it arrives sequence-sharded), each process attends with its
//! own heads, and the output projection leaves a pending sum over the heads' axes that is
//! resolved into the output layout: the distribution's layout for "<name>/output" when it has one
//! (a reduce-scatter to ("data", "model", None) for sequence parallelism), else (batch_axes,
//! None, None) (an all-reduce). Gradients: every variable's gradient lands in its own layout
//! (pending sums over the batch axes resolved), the input's gradient in the input's layout.
//!
//! Attention kernels: the matrix kernels (ops/attention.hpp, the probabilities kept for backward;
//! Eigen GEMMs on host memory, strided batched cuBLAS GEMMs on a GPU), on a GPU the tiled ones
//! (ops/attention_tiled.hpp, memory linear in the sequence) for long sequences;
//! set_attention_kernel or KDIST_ATTENTION_KERNEL chooses.
//!
//! Errors (kdist::ValueError, on every process alike): num_heads or key_dim 0; inputs of another
//! rank than (sequence, features); a layout sharding the heads dimension of a variable over axes
//! whose extent does not divide the number of heads (keras-hub#1613); an input whose feature dim
//! differs from the one built for; forward or backward before build, backward before forward.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/attention.hpp>
#include <kdist/ops/attention_tiled.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::detail {
//! The values of a rank-3 glorot_uniform kernel. A free function: nvcc does not allow a device
//! lambda in a private member function, and the lambda must not capture `this`.
template <class T>
DistributedTensor<T***> mha_glorot_values(std::uint64_t seed, std::uint64_t stream, std::size_t n1,
                                          std::size_t n2, std::size_t fan_in, std::size_t fan_out,
                                          const std::array<std::size_t, 3>& shape,
                                          const RuntimeTensorLayout& layout) {
  return distribute_tensor<T***>(
      KOKKOS_LAMBDA(std::size_t i, std::size_t j, std::size_t l) {
        return static_cast<T>(glorot_uniform(seed, stream, fan_in, fan_out, (i * n1 + j) * n2 + l));
      },
      shape, layout);
}
}  // namespace kdist::detail

namespace kdist::layers {

//! MultiHeadAttention on scalars `T` (float or double).
template <class T>
class BasicMultiHeadAttention {
 public:
  using value_type = T;
  using Tensor3 = DistributedTensor<T***>;
  using Tensor2 = DistributedTensor<T**>;
  using Tensor1 = DistributedTensor<T*>;

  //! Keras' `MultiHeadAttention(num_heads, key_dim, use_bias=use_bias, name=name)` called as
  //! `mha(x, x, use_causal_mask=causal)`. Errors: num_heads or key_dim 0.
  BasicMultiHeadAttention(std::size_t num_heads, std::size_t key_dim,
                          std::string name = "multi_head_attention", bool use_bias = true,
                          bool causal = true)
      : num_heads_(num_heads),
        key_dim_(key_dim),
        name_(std::move(name)),
        use_bias_(use_bias),
        causal_(causal) {
    if (num_heads == 0 || key_dim == 0) {
      throw ValueError("kdist::layers::MultiHeadAttention '" + name_ + "': num_heads (" +
                       std::to_string(num_heads) + ") and key_dim (" + std::to_string(key_dim) +
                       ") must both be >= 1");
    }
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "MultiHeadAttention";

  //! What the backward pass reads, for a 16-bit dtype policy to keep in 16 bits
  //! (kdist/nn/autocast.hpp): the input, the query, key and value projections, the attention
  //! output and the probabilities (unless recomputed); the gathered kernels are weights, and the
  //! tiled kernels' log-sum-exp stays float32.
  template <class F>
  void for_each_kept_activation(F&& f) {
    f(x_);
    for (auto& p : proj_) f(p);
    f(attn_);
    f(probs_);
  }
  std::size_t num_heads() const { return num_heads_; }
  std::size_t key_dim() const { return key_dim_; }
  bool causal() const { return causal_; }
  bool use_bias() const { return use_bias_; }
  //! The attention kernels: by default (automatic) the matrix kernels (ops/attention.hpp: the
  //! (seq, seq) probabilities kept for backward; Eigen GEMMs on host memory, strided batched
  //! cuBLAS GEMMs on a GPU), and on a GPU the tiled ones (FlashAttention-2's online softmax,
  //! memory linear in the sequence; ops/attention_tiled.hpp) once the probabilities would take
  //! more than ops::attention_matrices_max_bytes per layer. KDIST_ATTENTION_KERNEL (matrices,
  //! tiled) overrides `automatic`. Both give the same results (to rounding).
  void set_attention_kernel(ops::AttentionKernel kernel) { attention_kernel_ = kernel; }
  ops::AttentionKernel attention_kernel() const { return attention_kernel_; }
  //! The kernels the last forward ran (matrices or tiled; automatic before any forward).
  ops::AttentionKernel kernels_of_last_forward() const { return last_kernel_; }
  //! Megatron's selective recompute for the matrix kernels: the (batch, heads, seq, seq)
  //! probabilities are not kept from the forward pass but computed again (the QK^T GEMM and the
  //! softmax, from the kept projections) at the start of the backward pass, in buffers that every
  //! layer doing so shares (the thread's kdist::detail::ViewArena, reused once nothing holds them):
  //! one layer's probabilities and scratch in memory instead of every layer's. Gradients are
  //! bit-identical. (The tiled kernels never keep them.)
  void set_recompute_attention(bool recompute) { recompute_attention_ = recompute; }
  bool recompute_attention() const { return recompute_attention_; }

  // ---- kdist::Layer -----------------------------------------------------------------------------
  //! Builds for inputs of shape (sequence, features); returns the same shape.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    if (input_shape.size() != 2) {
      throw ValueError("kdist::layers::MultiHeadAttention '" + name_ +
                       "' takes inputs of shape (sequence, features) but the layer before it "
                       "gives " +
                       kdist::detail::shape_repr(input_shape) +
                       "; give it (batch, sequence, features) tensors (an Embedding before it)");
    }
    build(input_shape[1], dist, seed);
    return input_shape;
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    bfloat16_gathers_ = context.bfloat16_gathers;
    return forward(kdist::detail::layer_input_as<Tensor3>(
        x, "MultiHeadAttention '" + name_ + "'", "give it (batch, sequence, features) tensors"));
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& grads) {
    auto dx = backward(kdist::detail::layer_input_as<Tensor3>(
                           dy, "MultiHeadAttention '" + name_ + "'",
                           "its gradient has its output's rank, (batch, sequence, features)"),
                       need_input_grad, grads);
    if (!dx) return std::nullopt;
    return LayerTensor<T>(std::move(*dx));
  }
  //! Keras' order: query kernel, bias, key kernel, bias, value kernel, bias, output kernel, bias.
  std::vector<VariableRef<T>> variables() {
    std::vector<VariableRef<T>> out;
    for (std::size_t p = 0; p < 3; ++p) {
      out.push_back(&kernels_[p]);
      if (biases_[p]) out.push_back(&*biases_[p]);
    }
    out.push_back(&output_kernel_);
    if (output_bias_) out.push_back(&*output_bias_);
    return out;
  }
  // -----------------------------------------------------------------------------------------------

  //! Creates the variables for inputs of `d_model` features.
  void build(std::size_t d_model, const Distribution& dist, std::uint64_t seed) {
    d_model_ = d_model;
    const std::size_t h = num_heads_, k = key_dim_;
    static constexpr std::array<const char*, 3> names{"query", "key", "value"};
    for (std::size_t p = 0; p < 3; ++p) {
      const std::string base = name_ + "/" + names[p];
      kernels_[p] = glorot(base + "/kernel", {d_model, h, k}, 1, dist, seed);
      if (use_bias_) biases_[p] = zeros<T**>(base + "/bias", {h, k}, 0, dist);
    }
    output_kernel_ = glorot(name_ + "/attention_output/kernel", {h, k, d_model}, 0, dist, seed);
    if (use_bias_) output_bias_ = zeros<T*>(name_ + "/attention_output/bias", {d_model}, -1, dist);
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    built_ = true;
  }

  Variable<T***>& query_kernel() { return kernels_[0]; }
  Variable<T***>& key_kernel() { return kernels_[1]; }
  Variable<T***>& value_kernel() { return kernels_[2]; }
  Variable<T***>& output_kernel() { return output_kernel_; }
  std::optional<Variable<T**>>& query_bias() { return biases_[0]; }
  std::optional<Variable<T**>>& key_bias() { return biases_[1]; }
  std::optional<Variable<T**>>& value_bias() { return biases_[2]; }
  std::optional<Variable<T*>>& output_bias() { return output_bias_; }

  //! y = MultiHeadAttention(x, x), laid out by "<name>/output" or (batch_axes, None, None).
  //! Keeps what backward needs.
  Tensor3 forward(const Tensor3& x) {
    require_built("forward");
    if (x.shape()[2] != d_model_) {
      throw ValueError("kdist::layers::MultiHeadAttention '" + name_ + "' was built for " +
                       std::to_string(d_model_) + " features but was given a tensor of shape " +
                       kdist::detail::shape_repr(x.shape()) + "; build it for " +
                       std::to_string(x.shape()[2]));
    }
    const RuntimeDeviceMesh& mesh = x.device_mesh();
    const std::size_t batch = x.shape()[0], seq = x.shape()[1], d = d_model_, k = key_dim_;
    batch_axes_ = x.layout().axes()[0];
    std::vector<std::string> heads;
    for (const auto& a : kernels_[0].value.layout().axes()[1].names()) {
      bool in_batch = false;
      for (const auto& b : batch_axes_.names()) in_batch = in_batch || a == b;
      if (!in_batch) heads.push_back(a);
    }
    head_axes_ = DimAxes(heads);
    x_layout_ = x.layout();
    shape_ = x.shape();
    x_ = redistribute(x, rows_layout(mesh), x_moved_);
    const std::size_t bl = x_.local_extents()[0];
    const std::size_t rows = bl * seq;
    auto xm = matrix(x_.local(), rows, d);
    for (std::size_t p = 0; p < 3; ++p) {
      w_c_[p] = kernel_moved_[p](kernels_[p].value,
                                 RuntimeTensorLayout({DimAxes(), head_axes_, DimAxes()}, mesh),
                                 bfloat16_gathers_);
      hl_ = w_c_[p].local_extents()[1];
      proj_[p] = proj_views_[p].get("kdist::MHA::projection", bl, seq, hl_, k);
      auto pm = matrix(proj_[p], rows, hl_ * k);
      ops::matmul(xm, matrix(w_c_[p].local(), d, hl_ * k), pm);
      if (use_bias_) {
        auto b = redistribute(biases_[p]->value, RuntimeTensorLayout({head_axes_, DimAxes()}, mesh),
                              bias_moved_);
        ops::bias_add(pm, vector(b.local(), hl_ * k));
      }
    }
    attn_ = attn_views_.get("kdist::MHA::attention", bl, seq, hl_, k);
    tiled_ = tiled(bl, seq);
    last_kernel_ = tiled_ ? ops::AttentionKernel::tiled : ops::AttentionKernel::matrices;
    if (tiled_) {
      lse_ = lse_views_.get("kdist::MHA::lse", bl, hl_, seq);
      ops::attention_forward_tiled(proj_[0], proj_[1], proj_[2], attn_, lse_, scale(), causal_);
    } else if (recompute_attention_) {
      const View4 probs = shared_probabilities("kdist::MHA::probs", bl, seq);
      ops::attention_forward(proj_[0], proj_[1], proj_[2], probs, attn_, scale(), causal_);
      probs_ = View4();  // the next layer's, until the backward pass computes it again
    } else {
      probs_ = probs_views_.get("kdist::MHA::probs", bl, hl_, seq, seq);
      ops::attention_forward(proj_[0], proj_[1], proj_[2], probs_, attn_, scale(), causal_);
    }
    wo_c_ = output_kernel_moved_(output_kernel_.value,
                                 RuntimeTensorLayout({head_axes_, DimAxes(), DimAxes()}, mesh),
                                 bfloat16_gathers_);
    const auto y = y_views_.get("kdist::MHA::output", bl, seq, d);
    ops::matmul(matrix(attn_, rows, hl_ * k), matrix(wo_c_.local(), hl_ * k, d),
                matrix(y, rows, d));
    // A pending sum over the heads' axes, resolved into the output layout.
    auto pending = Tensor3::from_local(y, {batch, seq, d}, rows_layout(mesh), head_axes_.names());
    const RuntimeTensorLayout target =
        output_layout_ ? output_layout_->with_device_mesh(mesh) : rows_layout(mesh);
    Tensor3 out = redistribute(pending, target, y_moved_);
    if (use_bias_) {
      auto b = redistribute(output_bias_->value, RuntimeTensorLayout({target.axes()[2]}, mesh),
                            output_bias_moved_);
      const auto& e = out.local_extents();
      ops::bias_add(matrix(out.local(), e[0] * e[1], e[2]), b.local());
    }
    forwarded_ = true;
    return out;
  }

  //! Given dL/dy (laid out as y), hands every variable's gradient to `grads` (pending sums over
  //! the batch axes) and returns dL/dx (laid out as x) when `need_input_grad`.
  std::optional<Tensor3> backward(const Tensor3& dy, bool need_input_grad, Gradients<T>& grads) {
    require_built("backward");
    if (!forwarded_) {
      throw ValueError("kdist::layers::MultiHeadAttention '" + name_ +
                       "': backward before forward; call forward first");
    }
    const RuntimeDeviceMesh& mesh = x_.device_mesh();
    const std::size_t seq = shape_[1], d = d_model_, k = key_dim_, h = num_heads_;
    const std::size_t bl = x_.local_extents()[0];
    const std::size_t rows = bl * seq;
    const std::vector<std::string>& batch = batch_axes_.names();
    Tensor3 dyc = redistribute(dy, rows_layout(mesh), dy_moved_);
    auto dym = matrix(dyc.local(), rows, d);
    if (use_bias_) {
      const auto db = dbias_out_views_.get("kdist::MHA::dbias_out", d);
      ops::bias_grad(dym, db);
      grads.add(*output_bias_,
                Tensor1::from_local(db, {d}, RuntimeTensorLayout({DimAxes()}, mesh), batch));
    }
    const RuntimeTensorLayout heads_first({head_axes_, DimAxes(), DimAxes()}, mesh);
    const auto dwo = dkernel_out_views_.get("kdist::MHA::dkernel_out", hl_, k, d);
    ops::matmul(matrix(attn_, rows, hl_ * k), dym, matrix(dwo, hl_ * k, d), ops::Op::transpose,
                ops::Op::none);
    grads.add(output_kernel_, Tensor3::from_local(dwo, {h, k, d}, heads_first, batch));

    const View4 dattn = dattn_views_.get("kdist::MHA::dattention", bl, seq, hl_, k);
    ops::matmul(dym, matrix(wo_c_.local(), hl_ * k, d), matrix(dattn, rows, hl_ * k), ops::Op::none,
                ops::Op::transpose);
    std::array<View4, 3> dproj;
    for (auto& g : dproj) g = dproj_views_.get("kdist::MHA::dprojection", bl, seq, hl_, k);
    if (tiled_) {
      ops::attention_backward_tiled(proj_[0], proj_[1], proj_[2], attn_, lse_, dattn,
                                    delta_views_.get_like("kdist::MHA::delta", lse_), dproj[0],
                                    dproj[1], dproj[2], scale(), causal_);
    } else if (recompute_attention_) {
      // the forward's probabilities again (its output too: the same values into attn_)
      const View4 probs = shared_probabilities("kdist::MHA::probs", bl, seq);
      ops::attention_forward(proj_[0], proj_[1], proj_[2], probs, attn_, scale(), causal_);
      ops::attention_backward(proj_[0], proj_[1], proj_[2], probs, dattn,
                              shared_probabilities("kdist::MHA::scratch", bl, seq), dproj[0],
                              dproj[1], dproj[2], scale(), causal_);
    } else {
      ops::attention_backward(proj_[0], proj_[1], proj_[2], probs_, dattn,
                              scratch_views_.get_like("kdist::MHA::scratch", probs_), dproj[0],
                              dproj[1], dproj[2], scale(), causal_);
    }

    typename Tensor3::view_type dx;
    if (need_input_grad) {
      dx = dx_views_.get("kdist::MHA::dx", bl, seq, d);
    }
    auto xm = matrix(x_.local(), rows, d);
    const RuntimeTensorLayout kernel_c({DimAxes(), head_axes_, DimAxes()}, mesh);
    const RuntimeTensorLayout bias_c({head_axes_, DimAxes()}, mesh);
    for (std::size_t p = 0; p < 3; ++p) {
      auto gm = matrix(dproj[p], rows, hl_ * k);
      const auto dw = dkernel_views_.get("kdist::MHA::dkernel", d, hl_, k);
      ops::matmul(xm, gm, matrix(dw, d, hl_ * k), ops::Op::transpose, ops::Op::none);
      grads.add(kernels_[p], Tensor3::from_local(dw, {d, h, k}, kernel_c, batch));
      if (use_bias_) {
        const auto db = dbias_views_.get("kdist::MHA::dbias", hl_, k);
        ops::bias_grad(gm, vector(db, hl_ * k));
        grads.add(*biases_[p], Tensor2::from_local(db, {h, k}, bias_c, batch));
      }
      if (need_input_grad) {
        ops::matmul(gm, matrix(w_c_[p].local(), d, hl_ * k), matrix(dx, rows, d), ops::Op::none,
                    ops::Op::transpose, T(1), p == 0 ? T(0) : T(1));
      }
    }
    if (!need_input_grad) return std::nullopt;
    // A pending sum over the heads' axes (the three projections' contributions), resolved into
    // the input's layout (a reduce-scatter over the sequence for sequence parallelism).
    auto pending = Tensor3::from_local(dx, shape_, rows_layout(mesh), head_axes_.names());
    return redistribute(pending, *x_layout_, dx_moved_);
  }

 private:
  using View4 = Kokkos::View<T****, Kokkos::LayoutRight, typename Tensor3::memory_space>;
  using View3 = Kokkos::View<T***, Kokkos::LayoutRight, typename Tensor3::memory_space>;
  using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, typename Tensor3::memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Vec = Kokkos::View<T*, Kokkos::LayoutRight, typename Tensor3::memory_space,
                           Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  //! A contiguous View seen as a (rows, cols) matrix over the same memory (no copy).
  template <class V>
  static Matrix matrix(const V& v, std::size_t rows, std::size_t cols) {
    if (v.size() != rows * cols || !v.span_is_contiguous()) {
      throw ValueError("kdist::layers::MultiHeadAttention: internal: a block of " +
                       std::to_string(v.size()) + " elements seen as " + std::to_string(rows) +
                       "x" + std::to_string(cols) + " (or not contiguous)");
    }
    return Matrix(v.data(), rows, cols);
  }
  template <class V>
  static Vec vector(const V& v, std::size_t n) {
    (void)matrix(v, 1, n);
    return Vec(v.data(), n);
  }

  T scale() const { return T(1) / std::sqrt(T(key_dim_)); }
  //! Whether this forward (rows of `seq` positions, hl_ heads) runs the tiled kernels: as set, or
  //! with `automatic` (and no KDIST_ATTENTION_KERNEL) on host memory never, elsewhere when the
  //! probabilities would take more than ops::attention_matrices_max_bytes.
  //! A (rows, heads, seq, seq) buffer from the thread's shared arena (selective recompute).
  View4 shared_probabilities(const char* label, std::size_t rows, std::size_t seq) {
    const kdist::detail::ViewArena::Use use(kdist::detail::ViewArena::for_this_thread().get(),
                                            kdist::detail::ViewArena::Mode::shared);
    return probs_views_.get(label, rows, hl_, seq, seq);
  }

  bool tiled(std::size_t rows, std::size_t seq) const {
    ops::AttentionKernel kernel = attention_kernel_;
    if (kernel == ops::AttentionKernel::automatic)
      kernel = ops::attention_kernel_from_environment();
    if (kernel != ops::AttentionKernel::automatic) return kernel == ops::AttentionKernel::tiled;
    if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Tensor3::memory_space>::accessible) {
      return false;
    }
    return rows * hl_ * seq * seq * sizeof(T) > ops::attention_matrices_max_bytes;
  }

  RuntimeTensorLayout rows_layout(const RuntimeDeviceMesh& mesh) const {
    return RuntimeTensorLayout({batch_axes_, DimAxes(), DimAxes()}, mesh);
  }

  void require_built(const char* what) const {
    if (!built_) {
      throw ValueError("kdist::layers::MultiHeadAttention '" + name_ + "': " + what +
                       " before build; call build(input_shape, distribution, seed) first (a "
                       "Sequential's compile does)");
    }
  }

  //! The layout of `path` from the distribution; ValueError when it shards dimension
  //! `heads_dim` (the heads) over axes whose extent does not divide the number of heads.
  RuntimeTensorLayout layout_of(const std::string& path, const std::vector<std::size_t>& shape,
                                int heads_dim, const Distribution& dist) const {
    RuntimeTensorLayout layout = dist.get_variable_layout(VariableInfo(path, shape));
    if (!layout.device_mesh()) layout.set_device_mesh(dist.device_mesh());
    layout.check_shape(shape);
    if (heads_dim >= 0) {
      const auto hd = static_cast<std::size_t>(heads_dim);
      const std::size_t n = layout.shards(hd);
      if (num_heads_ % n != 0) {
        throw ValueError("kdist::layers::MultiHeadAttention '" + name_ + "': variable '" + path +
                         "' of shape " + kdist::detail::shape_repr(shape) + " has layout " +
                         layout.axes_repr() + ", which shards its heads dimension (" +
                         std::to_string(num_heads_) + " heads) over mesh axis " +
                         layout.axes()[hd].repr() + " of extent " + std::to_string(n) +
                         ", which does not divide it (keras-hub#1613); use a number of heads "
                         "divisible by " +
                         std::to_string(n) + " or a layout that does not shard the heads");
      }
    }
    return layout;
  }

  //! A glorot_uniform kernel of rank 3 keyed by (seed, stream_id(path), global flat index), with
  //! Keras' fans: fan_in = shape[1] * shape[0], fan_out = shape[2] * shape[0].
  Variable<T***> glorot(const std::string& path, const std::vector<std::size_t>& shape,
                        int heads_dim, const Distribution& dist, std::uint64_t seed) const {
    auto layout = layout_of(path, shape, heads_dim, dist);
    const std::uint64_t stream = stream_id(path);
    const std::size_t n1 = shape[1], n2 = shape[2];
    const std::size_t fan_in = shape[1] * shape[0], fan_out = shape[2] * shape[0];
    Variable<T***> v;
    v.path = path;
    v.value = kdist::detail::mha_glorot_values<T>(seed, stream, n1, n2, fan_in, fan_out,
                                                  {shape[0], n1, n2}, layout);
    v.grad = Tensor3::zeros({shape[0], n1, n2}, layout, path + "/grad");
    return v;
  }
  template <class DataType>
  Variable<DataType> zeros(const std::string& path, const std::vector<std::size_t>& shape,
                           int heads_dim, const Distribution& dist) const {
    using Tensor = DistributedTensor<DataType>;
    auto layout = layout_of(path, shape, heads_dim, dist);
    typename Tensor::shape_type s{};
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = shape[i];
    return Variable<DataType>{path, Tensor::zeros(s, layout, path),
                              Tensor::zeros(s, layout, path + "/grad")};
  }

  std::size_t num_heads_, key_dim_;
  std::string name_;
  bool use_bias_, causal_;
  std::size_t d_model_ = 0;
  bool built_ = false, forwarded_ = false;
  std::array<Variable<T***>, 3> kernels_;
  std::array<std::optional<Variable<T**>>, 3> biases_;
  Variable<T***> output_kernel_;
  std::optional<Variable<T*>> output_bias_;
  std::optional<RuntimeTensorLayout> output_layout_;
  // What backward needs from the last forward.
  DimAxes batch_axes_, head_axes_;
  std::optional<RuntimeTensorLayout> x_layout_;
  typename Tensor3::shape_type shape_{};
  Tensor3 x_;
  std::array<Tensor3, 3> w_c_;
  Tensor3 wo_c_;
  std::array<View4, 3> proj_;
  View4 probs_, attn_;
  View3 lse_;  // the tiled kernels' per-row log-sum-exp, instead of probs_
  std::size_t hl_ = 0;
  ops::AttentionKernel attention_kernel_ = ops::AttentionKernel::automatic;
  bool tiled_ = false;  // the kernels of the last forward (its backward runs the same)
  bool recompute_attention_ = false;
  ops::AttentionKernel last_kernel_ = ops::AttentionKernel::automatic;
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  // Three slots where one step has three live at once (the projections' gradients).
  std::array<ReusableViews<View4>, 3> proj_views_;
  ReusableViews<View4> probs_views_, attn_views_, dattn_views_, scratch_views_;
  ReusableViews<View3> lse_views_, delta_views_;
  ReusableViews<View4, 3> dproj_views_;
  ReusableViews<typename Tensor3::view_type> y_views_, dkernel_out_views_, dx_views_;
  ReusableViews<typename Tensor3::view_type, 3> dkernel_views_;
  ReusableViews<typename Tensor2::view_type, 3> dbias_views_;
  ReusableViews<typename Tensor1::view_type> dbias_out_views_;
  // What each redistribution writes (the moved input and gradients, the resolved output, the
  // gathered kernels and biases), kept likewise.
  ReusableViews<typename Tensor3::view_type> x_moved_, y_moved_, dy_moved_, dx_moved_;
  WeightGather<Tensor3> output_kernel_moved_;
  std::array<WeightGather<Tensor3>, 3> kernel_moved_;
  bool bfloat16_gathers_ = false;  // StepContext::bfloat16_gathers of the last forward pass
  ReusableViews<typename Tensor2::view_type> bias_moved_;
  ReusableViews<typename Tensor1::view_type> output_bias_moved_;
};

//! Keras' MultiHeadAttention on float32, the default dtype.
using MultiHeadAttention = BasicMultiHeadAttention<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicMultiHeadAttention)
