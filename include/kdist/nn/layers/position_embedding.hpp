#pragma once
//! \file nn/layers/position_embedding.hpp
//! `kdist::layers::PositionEmbedding`: a learned (sequence_length, features) table added to every
//! example of a (batch, sequence, features) input, keras-hub's `PositionEmbedding` (variable
//! `<name>/embeddings`, glorot_uniform) as `TokenAndPositionEmbedding` uses it: keras-hub's layer
//! returns the broadcast table and its caller adds it; this one adds it, so it sits after an
//! Embedding in a Sequential.
//!
//! Distributed: the input may be sharded on any of its dimensions (sequence parallelism included);
//! the table is brought to the layout of the input's (sequence, features) dimensions for the add,
//! whatever the LayoutMap made of it (a rule may shard it, FSDP on the batch axis too), and its
//! gradient, a sum over this process's examples, is a pending sum over the batch axes that the
//! redistribution into the gradient's layout resolves.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/shape.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/ops/elementwise.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

template <class T>
class BasicPositionEmbedding {
 public:
  using value_type = T;
  using Table = DistributedTensor<T**>;
  using Tensor3 = DistributedTensor<T***>;
  static constexpr std::string_view keras_class = "PositionEmbedding";

  //! Errors: kdist::ValueError for a sequence length of 0.
  explicit BasicPositionEmbedding(std::size_t sequence_length,
                                  std::string name = "position_embedding")
      : sequence_length_(sequence_length), name_(std::move(name)) {
    if (sequence_length_ == 0) {
      throw ValueError("kdist::layers::PositionEmbedding '" + name_ +
                       "': sequence_length is 0; give the longest sequence it will see");
    }
  }
  const std::string& name() const { return name_; }
  std::size_t sequence_length() const { return sequence_length_; }
  TrainableVariable<T**>& embeddings() { return table_; }

  // ---- kdist::Layer: (batch, sequence, features) -> the same ----------------------------------
  //! Errors: kdist::ValueError for inputs that are not (sequence, features) or sequences longer
  //! than sequence_length.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    if (input_shape.size() != 2 || input_shape[0] > sequence_length_) {
      throw ValueError("kdist::layers::PositionEmbedding '" + name_ + "' (sequence_length " +
                       std::to_string(sequence_length_) + ") takes (sequence, features) inputs " +
                       "of at most that length but was given " +
                       kdist::detail::shape_repr(input_shape) +
                       "; put it after an Embedding, with sequence_length >= the sequence");
    }
    const std::size_t s = input_shape[0], f = input_shape[1];
    const std::string path = name_ + "/embeddings";
    auto layout = dist.get_variable_layout(VariableInfo(path, {s, f}));
    const std::uint64_t stream = stream_id(path);
    // glorot_uniform over the full (sequence_length, features) table; the first s rows are used
    const std::size_t fan_in = sequence_length_, fan_out = f;
    table_.path = path;
    table_.value = distribute_tensor<T**>(
        KOKKOS_LAMBDA(std::size_t i, std::size_t j) {
          return static_cast<T>(glorot_uniform(seed, stream, fan_in, fan_out, i * fan_out + j));
        },
        {s, f}, layout);
    table_.grad = Table::zeros({s, f}, layout, path + "/grad");
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
    return input_shape;
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    bfloat16_gathers_ = context.bfloat16_gathers;
    return forward(kdist::detail::layer_input_as<Tensor3>(x, "PositionEmbedding '" + name_ + "'",
                                                          "put it after an Embedding"));
  }
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool need_input_grad,
                                         Gradients<T>& grads) {
    auto dx =
        backward(kdist::detail::layer_input_as<Tensor3>(dy, "PositionEmbedding '" + name_ + "'",
                                                        "its gradient has its output's rank"),
                 need_input_grad, grads);
    if (!dx) return std::nullopt;
    return LayerTensor<T>(std::move(*dx));
  }
  std::vector<VariableRef<T>> variables() { return {&table_}; }
  // -----------------------------------------------------------------------------------------------

  //! x + the table, laid out like x (or like a `<name>/output` rule says).
  Tensor3 forward(const Tensor3& x) {
    const auto& axes = x.layout().axes();
    const RuntimeTensorLayout table_layout({axes[1], axes[2]}, x.layout().device_mesh());
    const Table p = table_moved_(table_.value, table_layout, bfloat16_gathers_);
    auto out =
        Tensor3::from_local(y_views_.get_like(name_ + "/y", x.local()), x.shape(), x.layout());
    ops::add_broadcast(x.local(), p.local(), out.local());
    layout_ = x.layout();
    if (output_layout_ && output_layout_->axes().size() == 3)
      return redistribute(out, *output_layout_, y_moved_);
    return out;
  }
  //! Hands the table's gradient (the sum of dy over the batch) to `grads`; returns dy in the
  //! input's layout.
  std::optional<Tensor3> backward(const Tensor3& dy_in, bool need_input_grad, Gradients<T>& grads) {
    if (!layout_) {
      throw ValueError("kdist::layers::PositionEmbedding '" + name_ + "': backward before forward");
    }
    const Tensor3 dy = redistribute(dy_in, *layout_, dy_moved_);
    const auto& axes = layout_->axes();
    const RuntimeTensorLayout table_layout({axes[1], axes[2]}, layout_->device_mesh());
    // the batch axes that do not also shard sequence or features: the sum runs over them
    std::vector<std::string> over;
    for (const auto& a : axes[0].names()) {
      const auto& s = axes[1].names();
      const auto& f = axes[2].names();
      if (std::find(s.begin(), s.end(), a) == s.end() &&
          std::find(f.begin(), f.end(), a) == f.end())
        over.push_back(a);
    }
    const auto dp = dp_views_.get(name_ + "/dp", dy.local().extent(1), dy.local().extent(2));
    ops::sum_over_batch(dy.local(), dp);
    grads.add(table_, Table::from_local(dp, table_.value.shape(), table_layout, over));
    if (!need_input_grad) return std::nullopt;
    return dy;
  }

 private:
  std::size_t sequence_length_;
  std::string name_;
  TrainableVariable<T**> table_;
  std::optional<RuntimeTensorLayout> output_layout_;
  std::optional<RuntimeTensorLayout> layout_;
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  ReusableViews<typename Tensor3::view_type> y_views_;
  ReusableViews<typename Table::view_type> dp_views_;
  // What the redistributions write (the table in x's layout, the output, the moved gradient).
  WeightGather<Table> table_moved_;  // the table laid out like the input's last two dimensions
  bool bfloat16_gathers_ = false;    // StepContext::bfloat16_gathers of the last forward pass
  ReusableViews<typename Tensor3::view_type> y_moved_, dy_moved_;
};

using PositionEmbedding = BasicPositionEmbedding<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicPositionEmbedding)
