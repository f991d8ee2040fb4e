#pragma once
//! \file strategy/data_sharding.hpp
//! Sharding of input data among processes: from a source of examples (anything with a size and
//! `operator[]`, e.g. a `std::vector`) and a global batch size, each process reads its slice of
//! every global batch, chosen by its data shard id (`Distribution::data_shard_id`).
//!
//! Rules:
//!  - Global batch `s` of an epoch holds the examples at positions [s*B, s*B + B) of the epoch's
//!    order (the identity, or a shuffle keyed by (seed, epoch) that every process computes alike).
//!  - With S data shards, shard k reads rows [k*B/S, (k+1)*B/S) of each global batch: contiguous,
//!    in shard order, so the shards' slices laid end to end are the global batch (as the data
//!    layout (batch, None, ...) places them on the mesh). Processes of the same model replica
//!    have the same shard id, so they read identical rows.
//!  - B must be a multiple of S: otherwise setup fails (ValueError naming both numbers).
//!  - Every process has the same number of steps per epoch (it depends on the source size, B
//!    and the rule below only, never on the process).
//!  - The last, shorter batch of an epoch (N mod B examples): by default (`drop_remainder =
//!    false`, as Keras' `distribute_dataset` and `fit` do: 469 steps for Fashion-MNIST's 60000
//!    examples at B = 128) it is one more step, split among the shards by the ceil rule of
//!    kdist's layouts (Division::chunk, torch.chunk): every shard reads ceil(r/S) rows, the
//!    trailing shards fewer, possibly none. A source smaller than one global batch is that one
//!    partial step. With `drop_remainder = true` it is dropped, so every step has the same shapes
//!    on every process (and a source smaller than one batch is an error, not an empty epoch).
//!  - Where kdist differs from Keras 3.15 on purpose (docs/guide/03-layoutmap-and-distributions.md,
//!    "Data sharding"): a DataParallel mesh of several axes has as many data shards as its first
//!    axis' extent (Keras counts every device), and a batch axis that is not the mesh's first gives
//!    each process the shard of its own device coordinate (Keras' formula assumes the first).
//!
//! \code
//! std::vector<Example> examples = load();
//! auto dataset = kdist::distribute_dataset(examples, 64, *kdist::distribution(),
//!                                          {.shuffle = true, .seed = 42});
//! for (std::size_t epoch = 0; epoch < 3; ++epoch) {
//!   auto batches = dataset.epoch(epoch);
//!   for (std::size_t step = 0; step < batches.steps(); ++step) {
//!     std::vector<Example> local = batches.batch(step);   // this process's rows
//!   }
//! }
//! \endcode

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <kdist/core/detail/shard_math.hpp>
#include <kdist/core/error.hpp>
#include <kdist/strategy/distribution.hpp>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

//! How `distribute_dataset` batches and orders the examples.
struct DataShardingOptions {
  //! Make the last, shorter batch of each epoch one more step split by the ceil rule (false, the
  //! default, as Keras) or drop it (true).
  bool drop_remainder = false;
  //! Visit the examples in a new order each epoch, the same on every process.
  bool shuffle = false;
  //! Key of the shuffle (with the epoch number).
  std::uint64_t seed = 0;
};

namespace detail {
//! splitmix64's finaliser: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace detail

//! The order of an epoch's examples: a Fisher-Yates shuffle whose i-th draw is
//! `mix64(mix64(mix64(seed) ^ epoch) ^ i) % (i + 1)` (stateless, counter-based, identical on every
//! platform and process). The modulo's bias is below n / 2^64.
inline std::vector<std::size_t> shuffled_order(std::size_t n, std::uint64_t seed,
                                               std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const std::uint64_t key = detail::mix64(detail::mix64(seed) ^ epoch);
  for (std::size_t i = n; i-- > 1;) {
    const std::uint64_t r = detail::mix64(key ^ static_cast<std::uint64_t>(i));
    const auto j = static_cast<std::size_t>(r % (static_cast<std::uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

//! The arithmetic of sharded batching, independent of the data: which examples this process
//! reads at each step of each epoch (rules in the file comment).
//!
//! Errors (ValueError): a source without examples; a global batch size of 0; a global batch size
//! the data shards cannot divide; with drop_remainder, a source smaller than one global batch
//! (every example would be dropped); a shard id not below the shard count.
class BatchPlan {
 public:
  BatchPlan(std::size_t num_examples, std::size_t global_batch_size, std::size_t num_data_shards,
            std::size_t data_shard_id, DataShardingOptions options = {})
      : n_(num_examples),
        batch_(global_batch_size),
        shards_(num_data_shards),
        shard_(data_shard_id),
        options_(options) {
    validate();
  }
  //! With the shards of `distribution` (one shard when its auto_shard_dataset is off).
  BatchPlan(std::size_t num_examples, std::size_t global_batch_size,
            const Distribution& distribution, DataShardingOptions options = {})
      : BatchPlan(num_examples, global_batch_size,
                  distribution.auto_shard_dataset() ? distribution.num_data_shards() : 1,
                  distribution.auto_shard_dataset() ? distribution.data_shard_id() : 0, options) {}

  std::size_t num_examples() const { return n_; }
  std::size_t global_batch_size() const { return batch_; }
  std::size_t num_data_shards() const { return shards_; }
  std::size_t data_shard_id() const { return shard_; }
  const DataShardingOptions& options() const { return options_; }
  //! Rows this process reads from a full global batch: global_batch_size / num_data_shards.
  std::size_t local_batch_size() const { return batch_ / shards_; }
  //! Steps per epoch, the same on every process: N / B, plus one for a partial last batch when
  //! drop_remainder is false.
  std::size_t steps_per_epoch() const {
    return n_ / batch_ + ((!options_.drop_remainder && n_ % batch_ != 0) ? 1 : 0);
  }
  //! Size of global batch `step` (B, or N mod B for a partial last batch).
  std::size_t global_batch_size_at(std::size_t step) const {
    check_step(step);
    return std::min(batch_, n_ - step * batch_);
  }
  //! Positions, within global batch `step`, of the rows this process reads.
  Block local_block(std::size_t step) const {
    const std::size_t size = global_batch_size_at(step);
    if (size == batch_) return {shard_ * local_batch_size(), local_batch_size()};
    return detail::chunk_block(size, shards_, shard_);
  }
  //! The order of epoch `epoch`'s examples (identity without shuffle).
  std::vector<std::size_t> order(std::size_t epoch) const {
    if (!options_.shuffle) {
      std::vector<std::size_t> o(n_);
      std::iota(o.begin(), o.end(), std::size_t{0});
      return o;
    }
    return shuffled_order(n_, options_.seed, epoch);
  }
  //! Indices into the source of the examples this process reads at `step`, given the epoch's
  //! `order`.
  std::vector<std::size_t> local_indices(const std::vector<std::size_t>& order,
                                         std::size_t step) const {
    const Block b = local_block(step);
    const std::size_t start = step * batch_ + b.offset;
    return std::vector<std::size_t>(order.begin() + static_cast<std::ptrdiff_t>(start),
                                    order.begin() + static_cast<std::ptrdiff_t>(start + b.extent));
  }
  //! Indices into the source of every example of global batch `step` (all shards).
  std::vector<std::size_t> global_indices(const std::vector<std::size_t>& order,
                                          std::size_t step) const {
    const std::size_t start = step * batch_;
    const std::size_t size = global_batch_size_at(step);
    return std::vector<std::size_t>(order.begin() + static_cast<std::ptrdiff_t>(start),
                                    order.begin() + static_cast<std::ptrdiff_t>(start + size));
  }

 private:
  void validate() const {
    if (n_ == 0) {
      throw ValueError("kdist::distribute_dataset: the source holds no examples");
    }
    if (batch_ == 0) {
      throw ValueError(
          "kdist::distribute_dataset: the global batch size must be at least 1, got 0");
    }
    if (shards_ == 0 || shard_ >= shards_) {
      throw ValueError("kdist::distribute_dataset: data shard id " + std::to_string(shard_) +
                       " is out of range for " + std::to_string(shards_) + " data shards");
    }
    if (batch_ % shards_ != 0) {
      throw ValueError("kdist::distribute_dataset: the global batch size " +
                       std::to_string(batch_) + " cannot be divided among the " +
                       std::to_string(shards_) + " data shards (" + std::to_string(batch_) + " % " +
                       std::to_string(shards_) + " = " + std::to_string(batch_ % shards_) +
                       "); use a global batch size that is a multiple of " +
                       std::to_string(shards_));
    }
    if (options_.drop_remainder && n_ < batch_) {
      throw ValueError("kdist::distribute_dataset: the source holds " + std::to_string(n_) +
                       " examples, fewer than one global batch of " + std::to_string(batch_) +
                       ", and drop_remainder would drop them all; use a smaller global batch or "
                       "drop_remainder = false");
    }
  }
  void check_step(std::size_t step) const {
    if (step >= steps_per_epoch()) {
      throw ValueError("kdist::distribute_dataset: step " + std::to_string(step) +
                       " is out of range; an epoch has " + std::to_string(steps_per_epoch()) +
                       " steps");
    }
  }

  std::size_t n_;
  std::size_t batch_;
  std::size_t shards_;
  std::size_t shard_;
  DataShardingOptions options_;
};

//! What `distribute_dataset` reads from: `std::size(source)` and `source[i]`.
template <class S>
concept ExampleSource = requires(const S& s, std::size_t i) {
  { std::size(s) } -> std::convertible_to<std::size_t>;
  s[i];
};

//! A source of examples sharded among processes: `epoch(e)` gives the batches of epoch e.
//! Holds a reference to the source, which must outlive it.
template <ExampleSource Source>
class DistributedDataset {
 public:
  using value_type = std::remove_cvref_t<decltype(std::declval<const Source&>()[std::size_t{}])>;

  DistributedDataset(const Source& source, BatchPlan plan) : source_(&source), plan_(plan) {}

  const BatchPlan& plan() const { return plan_; }
  std::size_t steps_per_epoch() const { return plan_.steps_per_epoch(); }

  //! One epoch: its order is computed once. It holds its own copy of the plan and a pointer to
  //! the source (not to the dataset), so `distribute_dataset(src, ...).epoch(e)` on a temporary
  //! dataset stays valid while `src` lives.
  class Epoch {
   public:
    Epoch(const DistributedDataset& dataset, std::size_t epoch)
        : source_(dataset.source_), plan_(dataset.plan_), order_(plan_.order(epoch)) {}
    std::size_t steps() const { return plan_.steps_per_epoch(); }
    //! Source indices of this process's rows at `step`.
    std::vector<std::size_t> batch_indices(std::size_t step) const {
      return plan_.local_indices(order_, step);
    }
    //! Copies of this process's rows at `step`.
    std::vector<value_type> batch(std::size_t step) const {
      const Block b = plan_.local_block(step);
      const std::size_t start = step * plan_.global_batch_size() + b.offset;
      std::vector<value_type> out;
      out.reserve(b.extent);
      for (std::size_t k = 0; k < b.extent; ++k) out.push_back((*source_)[order_[start + k]]);
      return out;
    }
    //! Source indices of the whole global batch `step` (every shard's rows, in shard order).
    std::vector<std::size_t> global_batch_indices(std::size_t step) const {
      return plan_.global_indices(order_, step);
    }

   private:
    const Source* source_;
    BatchPlan plan_;
    std::vector<std::size_t> order_;
  };
  Epoch epoch(std::size_t e) const { return Epoch(*this, e); }

 private:
  const Source* source_;
  BatchPlan plan_;
};

//! Shards `source` among the processes of `distribution` (Keras' `distribute_dataset`): each
//! process reads its slice of every global batch of `global_batch_size` examples. With
//! `auto_shard_dataset()` off, every process reads whole global batches.
template <ExampleSource Source>
DistributedDataset<Source> distribute_dataset(const Source& source, std::size_t global_batch_size,
                                              const Distribution& distribution,
                                              DataShardingOptions options = {}) {
  return DistributedDataset<Source>(
      source, BatchPlan(std::size(source), global_batch_size, distribution, options));
}
//! With explicit shards (e.g. a test simulating process `data_shard_id` of `num_data_shards`).
template <ExampleSource Source>
DistributedDataset<Source> distribute_dataset(const Source& source, std::size_t global_batch_size,
                                              std::size_t num_data_shards,
                                              std::size_t data_shard_id,
                                              DataShardingOptions options = {}) {
  return DistributedDataset<Source>(source, BatchPlan(std::size(source), global_batch_size,
                                                      num_data_shards, data_shard_id, options));
}
//! With the global distribution (`kdist::distribution()`), or unsharded when none is set.
template <ExampleSource Source>
DistributedDataset<Source> distribute_dataset(const Source& source, std::size_t global_batch_size,
                                              DataShardingOptions options = {}) {
  if (auto d = kdist::distribution())
    return distribute_dataset(source, global_batch_size, *d, options);
  return distribute_dataset(source, global_batch_size, 1, 0, options);
}

//! A temporary source would dangle: keep the examples in a variable that outlives the dataset.
template <ExampleSource Source>
void distribute_dataset(const Source&& source, std::size_t global_batch_size,
                        const Distribution& distribution,
                        DataShardingOptions options = {}) = delete;
template <ExampleSource Source>
void distribute_dataset(const Source&& source, std::size_t global_batch_size,
                        std::size_t num_data_shards, std::size_t data_shard_id,
                        DataShardingOptions options = {}) = delete;
template <ExampleSource Source>
void distribute_dataset(const Source&& source, std::size_t global_batch_size,
                        DataShardingOptions options = {}) = delete;

}  // namespace kdist
