#pragma once
//! \file nn/train/gradient_sync.hpp
//! How the training step sums the gradients of data-parallel replicas while the backward pass goes
//! on (PyTorch DDP's buckets, llm.c's backward-and-reduce): each layer hands its variables'
//! gradients back from its backward (kdist::Gradients, often pending sums over the batch axes),
//! and `GradientSync::resolve` takes them as soon as that layer's backward returns; and the
//! `kdist::GradientSyncOptions` of kdist::Sequential (`set_gradient_sync`).
//!
//! A pending sum that resolves into the gradient by a plain all-reduce is not reduced on the spot
//! (on host memory; on device memory when MPI's non-blocking collectives take device pointers,
//! kdist::mpi::gpu_aware_non_blocking(), the buckets then in device memory and MPI handed device
//! pointers: nothing goes through the host):
//! - a gradient of at least `bucket_bytes` starts its own non-blocking all-reduce
//!   (kdist::start_all_reduce), from the summand into the gradient's block;
//! - smaller ones are copied into a bucket (one per communicator and type), and the bucket's
//!   all-reduce starts once it holds `bucket_bytes` (the rest at the end of the backward pass);
//! - after each layer MPI is given a chance to progress (MPI_Test);
//! - the optimizer waits for each variable's gradient just before updating it, in the order
//!   the gradients became ready (the last layer's first), so it updates the first variables while
//!   the last all-reduces are still under way.
//! With `shard_optimizer_state` (ZeRO-1, kdist/nn/train/optimizer_state_shards.hpp) a gradient
//! whose optimizer state is split in parts is reduce-scattered instead (never bucketed), and the
//! optimizer all-gathers the variable's updated parts (all_gather_parts); a small variable owned
//! whole by one process keeps its place in a bucket, and its owner's update reaches the other
//! processes in one all-gather of every owned variable (gather_owned, start_owned_gathers). Both
//! are waited for at the step's end.
//! A pending sum that resolves into a sharded gradient on host memory (an FSDP variable's
//! reduce-scatter) is started like the all-reduces (MPI_Ireduce_scatter; with `bfloat16_sums`
//! moving bfloat16: kdist/tensor/detail/started_reduce_scatter.hpp). With `overlap` off every
//! collective starts after the backward pass (the same buckets). Any other case is the blocking
//! kdist::redistribute_into (which hands device Views to a GPU-aware MPI directly): device memory
//! with an MPI whose non-blocking collectives cannot read it, `bfloat16_sums` on device memory
//! (its rounding runs on the host), an FSDP gradient on device memory, a gradient already in the
//! variable's layout. The sums are those of the blocking path bit for bit on 2 processes; on more,
//! MPI may add the summands in another order for another message size. The settings must be the
//! same on every process (checked when Sequential compiles).

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <kdist/core/error.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/train/optimizer_state_shards.hpp>
#include <kdist/nn/variable.hpp>
#include <kdist/parallel/bfloat16_all_reduce.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/detail/collective_split.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <kdist/parallel/mpi/gpu_aware.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/tensor/detail/started_reduce_scatter.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

//! How kdist::Sequential sums data-parallel gradients (gradient_sync.hpp). Defaults: the
//! environment's (from_environment), else overlap on and 256 KiB buckets.
struct GradientSyncOptions {
  //! Start each all-reduce as soon as its gradients are ready, during the backward pass; false:
  //! start them all after it (`KDIST_GRADIENT_OVERLAP=0`).
  bool overlap = true;
  //! Gradients under this many bytes share buckets of about this size; larger ones are reduced
  //! on their own, in place. 0: every gradient on its own (`KDIST_GRADIENT_BUCKET_KB`, KiB).
  std::size_t bucket_bytes = std::size_t{256} << 10;
  //! ZeRO stage 1 (kdist/nn/train/optimizer_state_shards.hpp): the P processes along the batch axis
  //! share the optimizer state of every replicated variable. One of at least `bucket_bytes` (all
  //! of them when that is 0) is split in P parts: its gradient reduce-scattered, each part
  //! updated by its process, the parts all-gathered. A smaller one is owned whole by one process
  //! (the owners balance the bytes): its gradient bucketed and all-reduced as without sharding,
  //! its owner alone updating it, every owner's variables all-gathered together
  //! (`KDIST_SHARD_OPTIMIZER_STATE=0|1|off|on`). Host memory, or device memory when MPI's
  //! non-blocking collectives take device pointers (kdist::mpi::gpu_aware_non_blocking()) and
  //! bfloat16_sums is off.
  bool shard_optimizer_state = false;
  //! Sum float32 gradients moving bfloat16 (kdist::start_all_reduce_in_bfloat16: half the bytes,
  //! each contribution and each sum rounded once to bfloat16, summed in float32, overlapped with
  //! the backward pass like the float32 all-reduces), for slow links
  //! (`KDIST_GRADIENT_BFLOAT16=0|1|off|on`). With shard_optimizer_state the reduce-scatters of
  //! split variables move bfloat16 too (an all-to-all of the rounded parts, each part summed in
  //! float32 at its owner and kept float32: one rounding per contribution), and so do the
  //! reduce-scatters of FSDP gradients (a variable sharded over the batch axis: the same
  //! all-to-all, one rounding per contribution; kdist/tensor/detail/started_reduce_scatter.hpp).
  //! float64 gradients stay float64; the all-gathers of updated variables stay exact.
  bool bfloat16_sums = false;
  //! All-gather float32 FSDP weights (a kernel or table sharded over the batch axes) moving
  //! bfloat16 for each step's compute (kdist::WeightGather, kdist/nn/weight_gather.hpp: half the
  //! bytes; the layers then compute with the weights rounded to bfloat16, relative error at most
  //! 2^-9, as Keras' "mixed_bfloat16" casts them; variables, gradients and optimizer stay
  //! float32), for slow links (`KDIST_GATHER_BFLOAT16=0|1|off|on`).
  bool bfloat16_gathers = false;

  //! The largest bucket_bytes accepted (1 GiB).
  static constexpr std::size_t max_bucket_bytes = std::size_t{1} << 30;

  //! The defaults with `KDIST_GRADIENT_OVERLAP`, `KDIST_SHARD_OPTIMIZER_STATE`,
  //! `KDIST_GRADIENT_BFLOAT16`, `KDIST_GATHER_BFLOAT16` (0/1, off/on) and
  //! `KDIST_GRADIENT_BUCKET_KB` (0 to 1048576) applied. Errors: kdist::ValueError for a value
  //! that is not one of those.
  static GradientSyncOptions from_environment() {
    GradientSyncOptions o;
    switch_from_environment("KDIST_GRADIENT_OVERLAP",
                            "whether data-parallel gradient all-reduces overlap the backward pass",
                            o.overlap);
    switch_from_environment("KDIST_SHARD_OPTIMIZER_STATE",
                            "whether the optimizer state is sharded over the data-parallel "
                            "processes, ZeRO stage 1",
                            o.shard_optimizer_state);
    switch_from_environment("KDIST_GRADIENT_BFLOAT16",
                            "whether data-parallel gradients are summed moving bfloat16",
                            o.bfloat16_sums);
    switch_from_environment("KDIST_GATHER_BFLOAT16",
                            "whether FSDP weights are all-gathered moving bfloat16",
                            o.bfloat16_gathers);
    if (const char* v = std::getenv("KDIST_GRADIENT_BUCKET_KB"); v != nullptr && *v != '\0') {
      const std::string s(v);
      char* end = nullptr;
      const unsigned long long kb = std::strtoull(v, &end, 10);
      if (end == v || *end != '\0' || s.find('-') != std::string::npos ||
          kb > (max_bucket_bytes >> 10)) {
        throw ValueError("KDIST_GRADIENT_BUCKET_KB is '" + s +
                         "', not a whole number of KiB from 0 to " +
                         std::to_string(max_bucket_bytes >> 10) +
                         " (the size of a data-parallel gradient bucket; 0: no buckets)");
      }
      o.bucket_bytes = static_cast<std::size_t>(kb) << 10;
    }
    return o;
  }

 private:
  //! `value` from the environment variable `name` when set: 0/off or 1/on.
  static void switch_from_environment(const char* name, const char* what, bool& value) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return;
    const std::string s(v);
    if (s == "1" || s == "on") {
      value = true;
    } else if (s == "0" || s == "off") {
      value = false;
    } else {
      throw ValueError(std::string(name) + " is '" + s + "', not 0, 1, off or on (" + what + ")");
    }
  }
};

//! What kdist::Sequential's gradient sync started since its last reset (for tests and
//! benchmarks: Sequential::gradient_sync_counts).
struct GradientSyncCounts {
  std::size_t all_reduces = 0;         //!< non-blocking all-reduces started
  std::size_t bucketed_gradients = 0;  //!< gradients that went through a bucket
  std::size_t bytes = 0;               //!< bytes all-reduced
  //! of gradients whose optimizer state is sharded (ZeRO-1), and into sharded (FSDP) gradients
  std::size_t reduce_scatters = 0;
  std::size_t all_gathers = 0;  //!< of the variables they update
};

namespace detail {

//! The all-reduces of one backward pass (see the file's comment). Copying one copies only its
//! options: what it tracks lives within a step.
class GradientSync {
 public:
  GradientSync() = default;
  GradientSync(const GradientSync& other) : options_(other.options_), shards_(other.shards_) {}
  GradientSync& operator=(const GradientSync& other) {
    if (this != &other) {
      wait_all();
      options_ = other.options_;
      shards_ = other.shards_;
    }
    return *this;
  }
  ~GradientSync() = default;  // each CollectiveRequest still running waits for itself

  const GradientSyncOptions& options() const noexcept { return options_; }

  //! Sets the options: `by_program`, else the environment's (GradientSyncOptions::
  //! from_environment). Collective over kdist's communicator: a bad value on any process, or
  //! options that differ between processes (their all-reduces would not match), are the same
  //! kdist::ValueError on every process.
  void configure(const std::optional<GradientSyncOptions>& by_program) {
    wait_all();
    GradientSyncOptions o;
    std::string problem;
    if (by_program) {
      o = *by_program;
    } else {
      try {
        o = GradientSyncOptions::from_environment();
      } catch (const ValueError& e) {
        problem = e.what();
      }
    }
    if (problem.empty() && o.bucket_bytes > GradientSyncOptions::max_bucket_bytes) {
      problem = "kdist::GradientSyncOptions: bucket_bytes is " + std::to_string(o.bucket_bytes) +
                ", more than the limit of 1 GiB";
    }
    mpi::agree(kdist::communicator(), problem.empty(), problem);
    constexpr int k = 5;  // the options, then their negations: one all-reduce finds min and max
    long long v[2 * k] = {static_cast<long long>(o.bucket_bytes), o.overlap ? 1 : 0,
                          o.shard_optimizer_state ? 1 : 0, o.bfloat16_sums ? 1 : 0,
                          o.bfloat16_gathers ? 1 : 0};
    for (int i = 0; i < k; ++i) v[k + i] = -v[i];
    kdist::all_reduce(
        Kokkos::DefaultHostExecutionSpace(),
        Kokkos::View<long long*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v,
                                                                                             2 * k),
        kdist::ReduceOp::min, kdist::communicator());
    const auto on_off = [&](int i) {
      return v[i] == -v[k + i] ? std::string(v[i] ? "on" : "off") : std::string("on and off");
    };
    bool alike = true;
    for (int i = 0; i < k; ++i) alike = alike && v[i] == -v[k + i];
    if (!alike) {
      throw ValueError(
          "kdist::GradientSyncOptions differ between processes (bucket_bytes from " +
          std::to_string(v[0]) + " to " + std::to_string(-v[k]) + ", overlap " + on_off(1) +
          ", shard_optimizer_state " + on_off(2) + ", bfloat16_sums " + on_off(3) +
          ", bfloat16_gathers " + on_off(4) +
          "): set KDIST_GRADIENT_BUCKET_KB, KDIST_GRADIENT_OVERLAP, KDIST_SHARD_OPTIMIZER_STATE, "
          "KDIST_GRADIENT_BFLOAT16, KDIST_GATHER_BFLOAT16 or Sequential::set_gradient_sync alike "
          "on every process, or their collectives would not match");
    }
    options_ = o;
  }

  //! The gradients whose optimizer state is sharded (Sequential's, from compile): each one's
  //! block address and its part. Replaces the previous ones.
  void set_state_shards(std::vector<std::pair<const void*, StateShard>> shards) {
    wait_all();
    shards_ = std::move(shards);
    owned_.clear();
  }
  //! The part of the gradient at `gradient` when its optimizer state is sharded, else null.
  const StateShard* state_shard(const void* gradient) const {
    for (const auto& [g, s] : shards_) {
      if (g == gradient) return &s;
    }
    return nullptr;
  }

  //! Sums `summand` over `comm` into `gradient` (same size and rank, contiguous, in the model's
  //! memory: host memory, or device memory that MPI's non-blocking collectives read), now or
  //! later (see the file's comment). wait_for(gradient.data()) waits for it.
  template <class SummandView, class GradientView>
  void submit(const SummandView& summand, const GradientView& gradient, MPI_Comm comm) {
    using T = typename GradientView::non_const_value_type;
    static_assert(std::is_same_v<typename GradientView::memory_space, Memory>,
                  "kdist: the gradient sync sums gradients in the model's memory");
    wait_for(gradient.data());  // the same gradient twice in a step: the first sum lands first
    const std::size_t bytes = gradient.size() * sizeof(T);
    if (const StateShard* shard = state_shard(gradient.data());
        shard != nullptr && !shard->owned_whole && shard->comm == comm) {
      Launch launch;
      launch.kind = Launch::Kind::reduce_scatter;
      if (static_cast<const void*>(summand.data()) != static_cast<const void*>(gradient.data())) {
        launch.start = [s = summand, g = gradient, shard] {
          return start_reduce_scatter_part(s.data(), g.data() + shard->begin(), *shard);
        };
      } else {  // MPI may not write where it reads: the part lands in kept memory, then moves
        const std::size_t part = take_storage(shard->size() * sizeof(T));
        launch.start = [this, s = summand, shard, part] {
          return start_reduce_scatter_part(s.data(), reinterpret_cast<T*>(pool_[part].data()),
                                           *shard);
        };
        launch.finish = [this, g = gradient, shard, part] {
          copy_bytes(g.data() + shard->begin(), pool_[part].data(), shard->size() * sizeof(T));
        };
      }
      if constexpr (std::is_same_v<T, float> && host_memory) {
        if (options_.bfloat16_sums) {  // half the bytes; the part summed in float32
          const std::span<std::uint16_t> scratch = bfloat16_scratch(bfloat16_part_scratch(*shard));
          launch.start = [s = summand, shard, scratch] {
            return start_reduce_scatter_part_in_bfloat16(s.data(), *shard, scratch);
          };
          launch.finish = [g = gradient, shard, scratch] {
            add_bfloat16_part(g.data(), *shard, scratch);
          };
        }
      }
      launches_.push_back(std::move(launch));
      targets_.push_back({gradient.data(), launches_.size() - 1, 0, 0});
      if (options_.overlap) start(launches_.back());
      return;
    }
    if (options_.bucket_bytes == 0 || bytes >= options_.bucket_bytes) {
      Launch launch;
      launch.bytes = bytes;
      // The Views hold references: the summand and the gradient live until the step ends.
      launch.start = [s = summand, g = gradient, comm] {
        return start_all_reduce(Exec(), s, g, ReduceOp::sum, comm);
      };
      if constexpr (std::is_same_v<T, float> && host_memory) {
        if (options_.bfloat16_sums) {  // in place in the gradient
          launch.start = nullptr;
          launch.bfloat16 = [this, s = summand, g = gradient, comm] {
            if (static_cast<const void*>(s.data()) != static_cast<const void*>(g.data())) {
              std::memcpy(g.data(), s.data(), g.size() * sizeof(T));
            }
            return start_bfloat16_sum(g.data(), g.size(), comm);
          };
        }
      }
      launches_.push_back(std::move(launch));
      targets_.push_back({gradient.data(), launches_.size() - 1, 0, 0});
      if (options_.overlap) start(launches_.back());
      return;
    }
    const std::size_t b = open_bucket<T>(comm);
    Bucket& bucket = buckets_[b];
    const std::size_t offset = bucket.used;
    Storage& storage = pool_[bucket.storage];
    if (storage.size() < offset + bytes) storage.grow(std::max(offset + bytes, 2 * storage.size()));
    copy_bytes(storage.data() + offset, summand.data(), bytes);
    bucket.used = offset + bytes;
    targets_.push_back({gradient.data(), kOpen, offset, bytes});
    bucket.targets.push_back(targets_.size() - 1);
    if (bucket.used >= options_.bucket_bytes) close_bucket(b);
  }

  //! Takes the gradients one layer's backward handed back (then forgets them): each is summed
  //! into its variable's `grad` now or later (see the file's comment); wait_for(grad's block)
  //! waits for it. Errors: those of kdist::redistribute_into.
  template <class T>
  void resolve(Gradients<T>& gradients) {
    gradients.for_each(
        [this](const auto& gradient, auto& variable) { this->resolve_into(gradient, variable); });
    gradients.clear();
  }

  //! Starts gathering the updated parts of the variable block `value` (its optimizer state
  //! sharded as `shard` says) into every process's block; wait_all() completes it.
  template <class T>
  void all_gather_parts(T* value, const StateShard& shard) {
    Launch launch;
    launch.kind = Launch::Kind::all_gather;
    launch.start = [value, &shard] { return start_all_gather_parts(value, shard); };
    launches_.push_back(std::move(launch));
    start(launches_.back());
  }

  //! Records the variable block `value`, owned whole by one process as `shard` says and updated
  //! there this step, for start_owned_gathers. Every process records the same blocks in the same
  //! order.
  template <class T>
  void gather_owned(T* value, const StateShard& shard) {
    const MPI_Datatype type = mpi::datatype<T>();
    const int owner = shard.owner();
    const std::size_t elements = static_cast<std::size_t>(shard.counts.at(owner));
    auto group = std::find_if(owned_.begin(), owned_.end(), [&](const OwnedGather& g) {
      return !g.started && g.comm == shard.comm && g.type == type;
    });
    if (group == owned_.end()) {
      OwnedGather g;
      g.comm = shard.comm;
      g.type = type;
      g.element_bytes = sizeof(T);
      g.me = shard.part;
      g.counts.assign(shard.counts.size(), 0);
      owned_.push_back(std::move(g));
      group = owned_.end() - 1;
    }
    group->blocks.push_back({reinterpret_cast<std::byte*>(value), elements * sizeof(T), owner});
    group->counts.at(static_cast<std::size_t>(owner)) += static_cast<int>(elements);
  }

  //! Starts one all-gather per communicator and type of the blocks gather_owned recorded: each
  //! owner's blocks, one after the other, fill its part of a buffer kept from step to step, and
  //! the other owners' come out into this process's blocks when it completes (wait_all).
  void start_owned_gathers() {
    for (std::size_t i = 0; i < owned_.size(); ++i) {
      OwnedGather& g = owned_[i];
      if (g.started || g.blocks.empty()) continue;
      g.displs.assign(g.counts.size(), 0);
      for (std::size_t r = 1; r < g.counts.size(); ++r)
        g.displs[r] = g.displs[r - 1] + g.counts[r - 1];
      const std::size_t total =
          static_cast<std::size_t>(g.displs.back() + g.counts.back()) * g.element_bytes;
      g.storage = take_storage(total);
      Storage& storage = pool_[g.storage];
      std::size_t at =
          static_cast<std::size_t>(g.displs[static_cast<std::size_t>(g.me)]) * g.element_bytes;
      for (const OwnedBlock& b : g.blocks) {
        if (b.owner != g.me) continue;
        copy_bytes(storage.data() + at, b.value, b.bytes);
        at += b.bytes;
      }
      g.started = true;
      Launch launch;
      launch.kind = Launch::Kind::all_gather;
      launch.start = [this, i] {
        OwnedGather& o = owned_[i];
        return detail::start_all_gather_v_in_place(
            pool_[o.storage].data(), o.counts.data(), o.displs.data(), o.type, o.comm,
            "kdist: MPI_Iallgatherv (variables owned whole, optimizer state sharding)");
      };
      launch.finish = [this, i] {
        const OwnedGather& o = owned_[i];
        std::vector<std::size_t>& next = owned_cursor_;  // each owner's next block in the buffer
        next.assign(o.counts.size(), 0);
        for (std::size_t r = 0; r < next.size(); ++r) {
          next[r] = static_cast<std::size_t>(o.displs[r]) * o.element_bytes;
        }
        const std::byte* buffer = pool_[o.storage].data();
        for (const OwnedBlock& b : o.blocks) {
          std::size_t& from = next[static_cast<std::size_t>(b.owner)];
          if (b.owner != o.me) copy_bytes(b.value, buffer + from, b.bytes);
          from += b.bytes;
        }
      };
      launches_.push_back(std::move(launch));
      start(launches_.back());
    }
  }

  //! Lets MPI progress the started all-reduces (between layers of the backward pass).
  void progress() {
    start_gathers(launches_.size());
    for (auto& l : launches_) {
      if (l.started && !l.done && test(l)) finish(l);
    }
  }

  //! The end of the backward pass: every bucket closes, every all-reduce starts.
  void flush() {
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].open) close_bucket(b);
    }
    for (auto& l : launches_) {
      if (!l.started) start(l);
    }
  }

  //! Waits for the all-reduce that writes the gradient at `target`, if there is one.
  void wait_for(const void* target) {
    for (const auto& t : targets_) {
      if (t.gradient != target) continue;
      if (t.launch == kOpen) flush();
      Launch& l = launches_[t.launch];
      if (!l.started) start(l);
      if (!l.done) {
        wait(t.launch);
        finish(l);
      }
    }
  }

  //! Waits for every all-reduce and forgets them (the end of the step).
  void wait_all() {
    flush();
    for (std::size_t i = 0; i < launches_.size(); ++i) {
      if (!launches_[i].done) {
        wait(i);
        finish(launches_[i]);
      }
    }
    launches_.clear();
    targets_.clear();
    buckets_.clear();
    for (auto& g : owned_) {
      g.blocks.clear();
      std::fill(g.counts.begin(), g.counts.end(), 0);
      g.started = false;
    }
    pool_used_ = 0;
    bfloat16_used_ = 0;
    reduce_scatters_used_ = 0;
  }

  //! What the steps since the last reset_counts() started.
  const GradientSyncCounts& counts() const noexcept { return counts_; }
  void reset_counts() noexcept { counts_ = {}; }

 private:
  //! The model's memory (its variables' and gradients') and the execution space that orders the
  //! copies into and out of the buffers there.
  using Memory = typename DistributedTensor<float*>::view_type::memory_space;
  using Exec = typename Memory::execution_space;
  static constexpr bool host_memory =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible;
  //! Copies `bytes` from `from` to `to`, both in the model's memory: memcpy on host memory, else
  //! a copy ordered on Exec (start() fences before MPI reads them).
  static void copy_bytes(void* to, const void* from, std::size_t bytes) {
    using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    if (bytes == 0 || to == from) return;
    if constexpr (host_memory) {  // no Kokkos call: a step's copies stay out of its launch count
      std::memcpy(to, from, bytes);
      return;
    }
    Kokkos::deep_copy(
        Exec(),
        Kokkos::View<unsigned char*, Memory, Unmanaged>(static_cast<unsigned char*>(to), bytes),
        Kokkos::View<const unsigned char*, Memory, Unmanaged>(
            static_cast<const unsigned char*>(from), bytes));
  }

  static constexpr std::size_t kOpen = static_cast<std::size_t>(-1);  // Target: bucket filling
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);  // Launch: no bucket

  struct Launch {
    std::function<CollectiveRequest()> start;  // a gradient on its own; empty for a bucket
    std::function<void()> finish;              // after completion (a part moved into place)
    std::size_t bucket = kNone;                // a bucket: its index in buckets_
    std::size_t bytes = 0;
    enum class Kind { all_reduce, reduce_scatter, all_gather } kind = Kind::all_reduce;
    CollectiveRequest request;
    //! A float32 gradient on its own summed moving bfloat16 (instead of `start`).
    std::function<Bfloat16AllReduceRequest()> bfloat16;
    std::optional<Bfloat16AllReduceRequest> bfloat16_sum;  // a bfloat16 sum's, once started
    bool started = false;
    bool done = false;
  };
  struct Target {
    void* gradient;
    std::size_t launch;  // kOpen while its bucket fills
    std::size_t offset;  // in the bucket
    std::size_t bytes;
  };
  struct Bucket {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    //! Starts the all-reduce of `bytes` at `data` as elements of the bucket's type.
    CollectiveRequest (*start)(std::byte* data, std::size_t bytes, MPI_Comm comm) = nullptr;
    std::size_t storage = 0;  // its memory: pool_[storage], kept from step to step
    std::size_t used = 0;
    bool open = true;
    bool bfloat16 = false;             // a float32 bucket summed moving bfloat16
    std::vector<std::size_t> targets;  // indices into targets_
  };
  std::byte* memory(const Bucket& b) { return pool_[b.storage].data(); }
  //! The step's next kept memory (pool_'s index), of at least `bytes`: the i-th of a step is the
  //! i-th of the last step, grown if needed (no allocation once seen). Stable until wait_all.
  std::size_t take_storage(std::size_t bytes) {
    if (pool_used_ == pool_.size()) pool_.emplace_back();
    if (pool_[pool_used_].size() < bytes) pool_[pool_used_].grow(bytes);
    return pool_used_++;
  }
  //! Memory kept from step to step for a bucket or an all-gather, in the model's memory.
  class Storage {
   public:
    std::size_t size() const noexcept { return view_.size(); }
    std::byte* data() const noexcept { return reinterpret_cast<std::byte*>(view_.data()); }
    //! At least `bytes`, keeping what it holds (ordered on the model's execution space).
    void grow(std::size_t bytes) {
      if (view_.size() == 0) {
        view_ = Kokkos::View<unsigned char*, Memory>(
            Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::gradient_sync/buffer"), bytes);
      } else if (bytes > view_.size()) {
        Kokkos::resize(view_, bytes);
      }
    }

   private:
    Kokkos::View<unsigned char*, Memory> view_;
  };
  //! A variable block owned whole by one process (gather_owned).
  struct OwnedBlock {
    std::byte* value;
    std::size_t bytes;
    int owner;  // rank in the group's communicator
  };
  //! The owned blocks of one communicator and type: one all-gather.
  struct OwnedGather {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    std::size_t element_bytes = 0;
    int me = 0;               // this process's rank in comm
    std::vector<int> counts;  // elements each rank owns
    std::vector<int> displs;  // where each rank's blocks start in the buffer
    std::vector<OwnedBlock> blocks;
    std::size_t storage = 0;  // pool_[storage]
    bool started = false;
  };

  //! The open bucket of (comm, T), made when there is none.
  template <class T>
  std::size_t open_bucket(MPI_Comm comm) {
    const MPI_Datatype type = mpi::datatype<T>();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].open && buckets_[b].comm == comm && buckets_[b].type == type) return b;
    }
    Bucket bucket;
    bucket.comm = comm;
    bucket.type = type;
    bucket.start = &start_bucket<T>;
    if constexpr (std::is_same_v<T, float>) bucket.bfloat16 = options_.bfloat16_sums;
    bucket.storage = take_storage(0);
    buckets_.push_back(std::move(bucket));
    return buckets_.size() - 1;
  }

  void close_bucket(std::size_t b) {
    Launch launch;
    launch.bucket = b;
    launch.bytes = buckets_[b].used;
    launches_.push_back(std::move(launch));
    buckets_[b].open = false;
    for (auto t : buckets_[b].targets) targets_[t].launch = launches_.size() - 1;
    if (options_.overlap) start(launches_.back());
  }

  void start(Launch& l) {
    // MPI reads the memory now: the kernels and copies that write it are done first (device
    // memory handed to a GPU-aware MPI; a host execution space's copies may run asynchronously).
    Exec().fence();
    if (l.bfloat16) {
      l.bfloat16_sum = l.bfloat16();
    } else if (l.bucket == kNone) {
      l.request = l.start();
    } else {
      const Bucket& b = buckets_[l.bucket];
      if (b.bfloat16) {
        l.bfloat16_sum =
            start_bfloat16_sum(reinterpret_cast<float*>(memory(b)), b.used / sizeof(float), b.comm);
      } else {
        l.request = b.start(memory(b), b.used, b.comm);
      }
      counts_.bucketed_gradients += b.targets.size();
    }
    l.started = true;
    switch (l.kind) {
      case Launch::Kind::reduce_scatter:
        ++counts_.reduce_scatters;
        break;
      case Launch::Kind::all_gather:
        ++counts_.all_gathers;
        break;
      case Launch::Kind::all_reduce:
        ++counts_.all_reduces;
        counts_.bytes += l.bytes;
        break;
    }
    if (test(l)) finish(l);
  }
  //! Lets MPI progress l's collective; true once it is complete (a bfloat16 sum: once its
  //! all-gather is, which only start_gathers starts).
  bool test(Launch& l) { return l.bfloat16_sum ? l.bfloat16_sum->test() : l.request.test(); }
  //! Completes l's collective (a bfloat16 sum's all-gather started in order first).
  void wait(std::size_t i) {
    Launch& l = launches_[i];
    if (l.bfloat16_sum) {
      start_gathers(i + 1);
      l.bfloat16_sum->wait();
    } else {
      l.request.wait();
    }
  }
  //! Starts the all-gathers of the bfloat16 sums among the first `count` launches, in launch
  //! order: called only at points of the step every process reaches in the same order (after a
  //! layer, before the optimizer waits), so every process starts them in one order among its
  //! other collectives, whatever its MPI completed first.
  void start_gathers(std::size_t count) {
    for (std::size_t i = 0; i < std::min(count, launches_.size()); ++i) {
      if (launches_[i].bfloat16_sum) launches_[i].bfloat16_sum->start_gather();
    }
  }
  template <class T>
  static CollectiveRequest start_bucket(std::byte* data, std::size_t bytes, MPI_Comm comm) {
    const Kokkos::View<T*, Memory, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(
        reinterpret_cast<T*>(data), bytes / sizeof(T));
    return start_all_reduce(Exec(), v, ReduceOp::sum, comm);
  }

  //! The float32 sum of `n` values at `data` over `comm`, moving bfloat16
  //! (GradientSyncOptions::bfloat16_sums), without blocking; its scratch is kept for the next
  //! steps (the i-th such sum of a step takes the i-th scratch: no allocation once seen).
  Bfloat16AllReduceRequest start_bfloat16_sum(float* data, std::size_t n, MPI_Comm comm) {
    const int processes = detail::collectives::size_of(comm);
    const auto scratch =
        bfloat16_scratch(bfloat16_all_reduce_scratch(n, static_cast<std::size_t>(processes)));
    const Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> v(data,
                                                                                             n);
    return start_all_reduce_in_bfloat16(v, ReduceOp::sum, comm, scratch);
  }
  //! A pending sum `pending` resolved into a sharded gradient's block `gradient` by the
  //! reduce_scatter `step` (an FSDP variable's; kdist/tensor/detail/started_reduce_scatter.hpp),
  //! started now or with the others; a float32 one moving bfloat16 with bfloat16_sums.
  template <class Tensor, class GradientView>
  void submit_reduce_scatter(const RedistributeStep& step, const Tensor& pending,
                             const GradientView& gradient) {
    using T = typename Tensor::value_type;
    wait_for(gradient.data());
    auto& buffers = std::get<std::deque<StartedReduceScatter<T>>>(reduce_scatters_);
    while (buffers.size() <= reduce_scatters_used_) buffers.emplace_back();  // one count, 2 types
    StartedReduceScatter<T>* x = &buffers[reduce_scatters_used_++];  // kept from step to step
    Launch launch;
    launch.kind = Launch::Kind::reduce_scatter;
    // The pending sum (its View) is held until the step ends: MPI reads it until completion, or
    // (overlap off) it is read when the launch starts, at the end of the backward pass.
    launch.start = [step, pending, g = gradient, x] {
      return start_reduce_scatter(step, pending, g.data(), *x);
    };
    if constexpr (std::is_same_v<T, float>) {
      if (options_.bfloat16_sums) {
        launch.start = [step, pending, x] {
          return start_reduce_scatter_in_bfloat16(step, pending, *x);
        };
        launch.finish = [g = gradient, x] { finish_reduce_scatter_in_bfloat16(*x, g.data()); };
      }
    }
    launches_.push_back(std::move(launch));
    targets_.push_back({gradient.data(), launches_.size() - 1, 0, 0});
    if (options_.overlap) start(launches_.back());
  }

  //! The next bfloat16 scratch of the step, of at least `elements` (the i-th of a step is the
  //! i-th of the last step, grown if needed: no allocation once seen). Stable until wait_all.
  std::span<std::uint16_t> bfloat16_scratch(std::size_t elements) {
    if (bfloat16_used_ == bfloat16_scratch_.size()) bfloat16_scratch_.emplace_back();
    auto& scratch = bfloat16_scratch_[bfloat16_used_++];
    if (scratch.size() < elements) scratch.resize(elements);
    return {scratch.data(), elements};
  }

  //! A completed all-reduce: a bucket's sums go back to their gradients.
  void finish(Launch& l) {
    l.done = true;
    if (l.finish) l.finish();
    if (l.bucket == kNone) return;
    const Bucket& b = buckets_[l.bucket];
    for (auto t : b.targets) {
      const Target& target = targets_[t];
      copy_bytes(target.gradient, memory(b) + target.offset, target.bytes);
    }
  }

  //! One gradient: a plain all-reduce is submitted (on device memory when MPI's non-blocking
  //! collectives read it, no bfloat16 rounding is asked for and no device graph is recording),
  //! an FSDP reduce-scatter on host memory too, anything else resolved now.
  template <class DataType>
  void resolve_into(const DistributedTensor<DataType>& pending, TrainableVariable<DataType>& v) {
    using Tensor = DistributedTensor<DataType>;
    auto& gradient = v.grad;
    // A step recorded as a device graph (step_graph.hpp) keeps device gradients on the blocking
    // path, which its recording takes as host calls between pieces; a started one would end it.
    if (host_memory || (mpi::gpu_aware_non_blocking() && !options_.bfloat16_sums &&
                        CollectiveSplit::active() == nullptr)) {
      if (pending.is_partial() && !gradient.is_partial() && pending.shape() == gradient.shape()) {
        detail::check_same_mesh(pending, gradient.layout());
        const RedistributePlan plan = detail::plan_for(pending, gradient.layout());
        if (plan.steps.size() == 1 &&
            plan.steps.front().kind == RedistributeStep::Kind::all_reduce) {
          const auto& comm = communicators(pending.device_mesh())
                                 .comm(std::span<const std::string>(plan.steps.front().axes));
          submit(pending.local_summand(), gradient.local(), comm.get());
          return;
        }
        if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                                 typename Tensor::memory_space>::accessible) {
          if (plan.steps.size() == 1 &&
              plan.steps.front().kind == RedistributeStep::Kind::reduce_scatter &&
              gradient.local().span_is_contiguous()) {
            submit_reduce_scatter(plan.steps.front(), pending, gradient.local());
            return;
          }
        }
      }
    }
    wait_for(gradient.local().data());
    Gradients<typename Tensor::value_type>::resolve_into(pending, v);
  }

  GradientSyncOptions options_;
  std::vector<std::pair<const void*, StateShard>> shards_;
  std::vector<Launch> launches_;
  std::vector<Target> targets_;
  std::vector<Bucket> buckets_;
  std::vector<OwnedGather> owned_;  // kept from step to step (their vectors' memory with them)
  std::vector<std::size_t> owned_cursor_;
  std::vector<Storage> pool_;  // bucket memory, reused step after step
  std::size_t pool_used_ = 0;
  std::vector<std::vector<std::uint16_t>> bfloat16_scratch_;  // bfloat16_scratch()'s, by order
  std::size_t bfloat16_used_ = 0;
  //! The buffers of the step's reduce-scatters into sharded gradients, by order, per type
  //! (submit_reduce_scatter); deques, so that a running one's never move.
  std::tuple<std::deque<StartedReduceScatter<float>>, std::deque<StartedReduceScatter<double>>>
      reduce_scatters_;
  std::size_t reduce_scatters_used_ = 0;
  GradientSyncCounts counts_;
};

}  // namespace detail

}  // namespace kdist
