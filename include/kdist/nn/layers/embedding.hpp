#pragma once
//! \file nn/layers/embedding.hpp
//! `kdist::layers::Embedding`: Keras' Embedding on distributed tensors. Token ids (batch, seq),
//! held as values of T (Keras casts them to int), look up rows of the table "<name>/embeddings"
//! (input_dim, output_dim), created with the layout the distribution gives it and Keras'
//! uniform(-0.05, 0.05) initialiser, each element drawn where it lives (the same table on every
//! mesh). The table's layout decides the communication:
//! - (None, None): every process looks up its tokens' rows, no communication;
//! - (None, "model"): each process looks up its columns; the output's features are sharded;
//! - ("model", None): vocabulary parallel (Megatron's VocabParallelEmbedding): each process looks
//!   up the tokens its rows hold, zeros for the others, and the sum over "model" (an all-reduce,
//!   or a reduce-scatter when the output layout shards the sequence over "model") completes it;
//! - an axis that also shards the tokens (FSDP: ("data", "model") with tokens on "data") is
//!   gathered for the lookup, and the gradient reduce-scattered back.
//! The output is (batch, seq, output_dim), its rows laid out as the tokens, or in the
//! distribution's layout for "<name>/output". Tokens have no gradient (as in Keras).

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/device_checks.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/weight_gather.hpp>
#include <kdist/ops/embedding.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::layers {

//! Embedding on scalars `T` (float or double): the table and the token ids are of type T.
template <class T>
class BasicEmbedding {
 public:
  using value_type = T;
  using Tokens = DistributedTensor<T**>;
  using Table = DistributedTensor<T**>;
  using Sequence = DistributedTensor<T***>;

  //! A vocabulary of `input_dim` ids embedded in `output_dim` features.
  //! Errors: ValueError when either is 0.
  BasicEmbedding(std::size_t input_dim, std::size_t output_dim, std::string name = "embedding")
      : input_dim_(input_dim), output_dim_(output_dim), name_(std::move(name)) {
    if (input_dim == 0 || output_dim == 0) {
      throw ValueError(who() +
                       "input_dim (the vocabulary size) and output_dim (the features) must "
                       "be >= 1, got input_dim=" +
                       std::to_string(input_dim) + ", output_dim=" + std::to_string(output_dim));
    }
  }

  const std::string& name() const { return name_; }
  //! The Keras class this layer mirrors (its group in a Keras `.weights.h5` file).
  static constexpr std::string_view keras_class = "Embedding";
  //! Token ids are not activations: a 16-bit dtype policy does not round them (Keras casts them
  //! to int32 instead; kdist/nn/autocast.hpp).
  static constexpr bool autocast = false;
  std::size_t input_dim() const { return input_dim_; }
  std::size_t output_dim() const { return output_dim_; }

  // ---- kdist::Layer -----------------------------------------------------------------------------
  //! Builds for examples of shape (seq,) (token ids); returns (seq, output_dim).
  //! Errors: ValueError for examples of another rank.
  Shape build(const Shape& input_shape, const Distribution& dist, std::uint64_t seed) {
    if (input_shape.size() != 1) {
      throw ValueError(who() +
                       "takes token ids of shape (sequence,) per example, (batch, "
                       "sequence) in all, but the input is " +
                       kdist::detail::shape_repr(input_shape) + " per example");
    }
    build(dist, seed);
    return {input_shape[0], output_dim_};
  }
  LayerTensor<T> forward(const LayerTensor<T>& x, const StepContext& context) {
    bfloat16_gathers_ = context.bfloat16_gathers;
    return forward(
        kdist::detail::layer_input_as<Tokens>(x, "Embedding '" + name_ + "'",
                                              "give it token ids of shape (batch, sequence)"),
        context.checks, context.step_at);
  }
  //! Hands the table's gradient to `grads`; tokens have none (std::nullopt, as in Keras).
  std::optional<LayerTensor<T>> backward(const LayerTensor<T>& dy, bool /*need_input_grad*/,
                                         Gradients<T>& grads) {
    backward(kdist::detail::layer_input_as<Sequence>(dy, "Embedding '" + name_ + "'",
                                                     "its gradient has its output's rank"),
             grads);
    return std::nullopt;
  }
  std::vector<VariableRef<T>> variables() { return {&table_}; }
  // -----------------------------------------------------------------------------------------------

  //! Creates the table "<name>/embeddings" (input_dim, output_dim) with the distribution's layout:
  //! uniform(-0.05, 0.05) keyed by (seed, stream_id("<name>/embeddings"), i * output_dim + j).
  void build(const Distribution& dist, std::uint64_t seed) {
    const std::string path = name_ + "/embeddings";
    auto layout = dist.get_variable_layout(VariableInfo(path, {input_dim_, output_dim_}));
    const RandomKey key = random_key(seed, stream_id(path), 0);
    const std::size_t d = output_dim_;
    table_.path = path;
    table_.value = distribute_tensor<T**>(
        KOKKOS_LAMBDA(std::size_t i, std::size_t j) {
          return static_cast<T>(-0.05 + 0.1 * static_cast<double>(uniform01(key, i * d + j)));
        },
        {input_dim_, output_dim_}, layout);
    table_.grad = Table::zeros({input_dim_, output_dim_}, layout, path + "/grad");
    output_layout_ = dist.get_tensor_layout(name_ + "/output");
  }

  Variable<T**>& embeddings() { return table_; }

  //! The embeddings (batch, seq, output_dim) of `tokens` (batch, seq), ids in [0, input_dim) held
  //! as T, in any layout. Collective. Errors (ValueError, on every process alike): ids that are
  //! not integers in [0, input_dim) (how many, the first and where), a layer not built.
  //! With `checks` (a step kept on the device: StepContext::checks) the ids are checked there,
  //! without waiting, and a failure is read with the step's metrics (kdist::DeviceChecks; the
  //! lookup skips an id outside the table meanwhile).
  Sequence forward(const Tokens& tokens, DeviceChecks* checks = nullptr,
                   const std::int64_t* step_at = nullptr) {
    if (!table_.value.layout().device_mesh()) {
      throw ValueError(who() + "is not built; call build(distribution, seed) first");
    }
    if (checks != nullptr) {
      if (!first_bad_.is_allocated()) {
        first_bad_ = Kokkos::View<std::int64_t, Kokkos::LayoutRight>("kdist::Embedding::first_bad");
      }
      ops::first_invalid_token_into(tokens.local(), input_dim_, first_bad_);
      checks->record_first("kdist::layers::Embedding '" + name_ + "': the token id", input_dim_,
                           first_bad_, ops::FlatTokens(tokens.local()), step_at);
    } else {
      check_tokens(tokens);
    }
    const auto& mesh = tokens.layout().device_mesh();
    const auto& t = table_.value.layout().axes();
    const DimAxes b = tokens.layout().axes()[0], s = tokens.layout().axes()[1];
    // The table as the lookup needs it: without the axes that shard the batch (FSDP), which are
    // gathered. The tokens without the sequence axes that shard the table, which are gathered
    // instead (ids are small, a table is not).
    const DimAxes vocab = without(t[0], b, {}), features = without(t[1], b, {});
    const DimAxes seq = without(s, t[0], t[1]);
    compute_layout_ = RuntimeTensorLayout({vocab, features}, mesh);
    const Table table = table_.value.layout() == *compute_layout_
                            ? table_.value
                            : table_moved_(table_.value, *compute_layout_, bfloat16_gathers_);
    tokens_ = seq == s ? tokens
                       : redistribute(tokens, RuntimeTensorLayout({b, seq}, mesh), tokens_moved_);
    row_offset_ = table.offsets()[0];
    const auto& x = tokens_.local();
    const auto y = y_views_.get(name_ + "/y", x.extent(0), x.extent(1), table.local().extent(1));
    ops::embedding_lookup(x, table.local(), row_offset_, y);
    rows_layout_ = RuntimeTensorLayout({b, seq, features}, mesh);
    const std::array<std::size_t, 3> shape{tokens.shape()[0], tokens.shape()[1], output_dim_};
    // Tokens outside this block's vocabulary rows looked up zeros: a pending sum over the vocab
    // axes, resolved (all-reduce, or reduce-scatter onto a sharded sequence) into the output's
    // layout: the distribution's, else the tokens' rows with the table's features (less the
    // tokens' sequence axes).
    auto pending = Sequence::from_local(y, shape, *rows_layout_, vocab.names());
    RuntimeTensorLayout target({b, s, without(features, s, {})}, mesh);
    return redistribute(pending, output_layout_ ? *output_layout_ : target, y_moved_);
  }

  //! Given dL/dy (batch, seq, output_dim) in any layout, hands the table's gradient to `grads`
  //! (a pending sum over the axes sharding the tokens). Collective.
  void backward(const Sequence& dy_in, Gradients<T>& grads) {
    const Sequence dy = redistribute(dy_in, *rows_layout_, dy_moved_);
    const auto& g = table_.grad;
    const auto extents = compute_layout_->local_extents(g.shape(), g.device());
    const auto dt = dtable_views_.get(name_ + "/dtable", extents[0], extents[1]);
    Kokkos::deep_copy(dt, T(0));  // the rows of this block's tokens are added into it
    ops::embedding_backward(tokens_.local(), dy.local(), row_offset_, dt);
    // Each process scattered its tokens' rows: a pending sum over the axes that shard them.
    std::vector<std::string> partial = rows_layout_->axes()[0].names();
    for (const auto& a : rows_layout_->axes()[1].names()) partial.push_back(a);
    grads.add(table_, Table::from_local(dt, g.shape(), *compute_layout_, partial));
  }

 private:
  std::string who() const { return "kdist::layers::Embedding '" + name_ + "': "; }

  //! `axes` without those in `b` or `s`.
  static DimAxes without(const DimAxes& axes, const DimAxes& b, const DimAxes& s) {
    std::vector<std::string> out;
    for (const auto& a : axes.names()) {
      bool used = false;
      for (const auto& x : b.names()) used = used || x == a;
      for (const auto& x : s.names()) used = used || x == a;
      if (!used) out.push_back(a);
    }
    return DimAxes(std::move(out));
  }

  //! ValueError on every process alike unless every id is an integer in [0, input_dim): one
  //! parallel_reduce per process and one all-reduce of the count (each id is counted by each of
  //! its replicas, the same number for every id); when some are bad, two more all-reduces find
  //! the first (row-major) and its value.
  void check_tokens(const Tokens& tokens) {
    const auto& x = tokens.local();
    const auto bad = ops::count_invalid_tokens(x, input_dim_);
    const auto& layout = tokens.layout();
    const auto& mesh = tokens.device_mesh();
    std::size_t replicas = 1;
    for (auto a : layout.replicated_mesh_axes()) replicas *= mesh.extent(a);
    if (bad_count_.data() == nullptr) {
      bad_count_ = Kokkos::View<double*, Kokkos::HostSpace>("kdist::Embedding::bad", 1);
    }
    const auto& count = bad_count_;
    count(0) = static_cast<double>(bad.count);
    const Kokkos::DefaultHostExecutionSpace host;
    all_reduce(host, count, ReduceOp::sum, kdist::communicator());
    if (count(0) == 0) return;
    const std::size_t total = static_cast<std::size_t>(count(0)) / replicas;
    const std::size_t seq = tokens.shape()[1];
    const std::size_t local_seq = x.extent(1);
    const double none = static_cast<double>(tokens.global_size());
    Kokkos::View<double*, Kokkos::HostSpace> first("kdist::Embedding::first", 1);
    first(0) = none;
    if (bad.count > 0) {
      const std::size_t i = tokens.offsets()[0] + bad.first / local_seq;
      const std::size_t j = tokens.offsets()[1] + bad.first % local_seq;
      first(0) = static_cast<double>(i * seq + j);
    }
    all_reduce(host, first, ReduceOp::min, kdist::communicator());
    // The value from a process holding the first: (is NaN, value), others (0, -inf); max.
    Kokkos::View<double*, Kokkos::HostSpace> value("kdist::Embedding::value", 2);
    value(0) = 0;
    value(1) = -std::numeric_limits<double>::infinity();
    if (bad.count > 0) {
      const std::size_t i = tokens.offsets()[0] + bad.first / local_seq;
      const std::size_t j = tokens.offsets()[1] + bad.first % local_seq;
      if (static_cast<double>(i * seq + j) == first(0)) {
        if (bad.first_value != bad.first_value) {
          value(0) = 1;
        } else {
          value(1) = bad.first_value;
        }
      }
    }
    all_reduce(host, value, ReduceOp::max, kdist::communicator());
    const auto at = static_cast<std::size_t>(first(0));
    std::string shown = "nan";
    if (value(0) == 0) {
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, static_cast<T>(value(1)));
      shown.assign(buf, r.ptr);
    }
    throw ValueError(who() + std::to_string(total) + " of the " +
                     std::to_string(tokens.global_size()) + " token ids are not integers in [0, " +
                     std::to_string(input_dim_) + ") (input_dim); the first, at (batch " +
                     std::to_string(at / seq) + ", position " + std::to_string(at % seq) +
                     "), is " + shown +
                     ". Map the ids into [0, input_dim) or make input_dim the vocabulary's size");
  }

  std::size_t input_dim_;
  std::size_t output_dim_;
  std::string name_;
  Variable<T**> table_;
  std::optional<RuntimeTensorLayout> output_layout_, compute_layout_, rows_layout_;
  Tokens tokens_;
  std::size_t row_offset_ = 0;
  // A step's buffers, kept for the next steps (kdist::ReusableViews: no allocation per step).
  ReusableViews<typename Sequence::view_type> y_views_;
  ReusableViews<typename Table::view_type> dtable_views_;
  // What the redistributions write (the gathered table and tokens, the resolved output, the moved
  // gradient), kept likewise.
  WeightGather<Table> table_moved_;  // the table in its compute layout (FSDP: gathered)
  bool bfloat16_gathers_ = false;    // StepContext::bfloat16_gathers of the last forward pass
  ReusableViews<typename Tokens::view_type> tokens_moved_;
  ReusableViews<typename Sequence::view_type> y_moved_, dy_moved_;
  Kokkos::View<double*, Kokkos::HostSpace> bad_count_;  //!< check_tokens' count, all-reduced
  //! The first bad id's position when the checks are the step's (forward's `checks`).
  Kokkos::View<std::int64_t, Kokkos::LayoutRight> first_bad_;
};

//! Keras' Embedding on float32, the default dtype.
using Embedding = BasicEmbedding<float>;

}  // namespace kdist::layers

KDIST_EXTERN_LAYER(BasicEmbedding)
