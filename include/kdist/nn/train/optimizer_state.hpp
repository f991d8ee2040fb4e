#pragma once
//! \file nn/train/optimizer_state.hpp
//! `detail::OptimizerState<T>`: the training step's optimizer state, each variable's slots as its
//! optimizer declares them (`slots()`), laid out like the variable's block, or with
//! GradientSyncOptions::shard_optimizer_state (ZeRO-1, kdist/nn/train/optimizer_state_shards.hpp)
//! only this process's part of it: which variables are sharded and how (plan), their slots'
//! memory, the whole-block views a checkpoint reads and writes (for_each_variable_with_slots),
//! and the change from one sharding to another keeping the values (reshard).

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/nn/autocast.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/train/gradient_sync.hpp>
#include <kdist/nn/train/optimizer_state_shards.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/gpu_aware.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::detail {

template <class T>
class OptimizerState {
 public:
  //! A contiguous block's elements as the optimizer sees them.
  template <class S, class View>
  static OptimizerView<S> flat(const View& view) {
    return OptimizerView<S>(view.data(), view.size());
  }

  //! Creates the slots `declared` names for every variable of `layers`, sharded as `shards`
  //! (plan's result) says; forgets the previous ones.
  void create(std::vector<AnyLayer<T>>& layers, const OptimizerSlots& declared,
              std::vector<std::optional<StateShard>> shards) {
    slots_.clear();
    shards_ = std::move(shards);
    std::size_t k = 0;
    for_each_variable(layers, [&](auto& v) {
      std::vector<SlotView> s;
      const auto& shard = shards_[k];
      for (const auto& name : declared.names) {
        const std::string label = v.path + "/" + name;
        s.push_back(new_storage(v.dtype, v.value.local(), label, shard));
      }
      slots_.push_back(std::move(s));
      ++k;
    });
    size_scratch();
  }

  //! Variable k's part when its state is sharded, else nullopt (k in variable order).
  const std::optional<StateShard>& shard(std::size_t k) const { return shards_.at(k); }

  //! Calls `update(begin, count, slots)` over the `n` elements of variable k's block (its part
  //! when its state is sharded), `slots` its slots' elements begin .. begin + count as the
  //! optimizer's update_step takes them (views kept: no allocation): once over all of them when
  //! its slots are of T; when they are 16 bits wide, in chunks of at most
  //! `sixteen_bit_chunk` elements widened (exactly) into the scratch blocks and rounded back after
  //! (optimizers are elementwise: a chunk's update is the whole update's on those elements).
  template <class F>
  void for_each_update_chunk(std::size_t k, std::size_t n, F&& update) {
    const auto& slots = slots_.at(k);
    const bool narrow = std::any_of(slots.begin(), slots.end(), is_narrow);
    const std::size_t chunk = narrow ? sixteen_bit_chunk : std::max<std::size_t>(n, 1);
    for (std::size_t begin = 0; begin < n || begin == 0; begin += chunk) {
      const std::size_t count = std::min(chunk, n - begin);
      slot_views_.clear();
      for (std::size_t i = 0; i < slots.size(); ++i) {
        slot_views_.push_back(std::visit(
            [&](const auto& view) {
              using V = std::decay_t<decltype(view)>;
              if constexpr (is_sixteen_bit_float_v<typename V::value_type>) {
                const OptimizerView<T> wide(scratch_.at(i).data(), count);
                convert_block(Kokkos::subview(view, std::pair{begin, begin + count}), wide);
                return wide;
              } else {
                return OptimizerView<T>(flat<T>(view).data() + begin, count);
              }
            },
            slots[i]));
      }
      update(begin, count, std::span<const OptimizerView<T>>(slot_views_));
      for (std::size_t i = 0; i < slots.size(); ++i) {
        std::visit(
            [&](const auto& view) {
              using V = std::decay_t<decltype(view)>;
              if constexpr (is_sixteen_bit_float_v<typename V::value_type>) {
                convert_block(slot_views_[i],
                              Kokkos::subview(view, std::pair{begin, begin + count}));
              }
            },
            slots[i]);
      }
      if (n == 0) break;
    }
  }
  //! The elements of a 16-bit slot widened at once for an update (a scratch block of float32 per
  //! slot: 128 KiB each, however large the variable; a chunk's update is still many elements per
  //! kernel launch).
  static constexpr std::size_t sixteen_bit_chunk = std::size_t{1} << 15;

  //! Which variables' optimizer state is sharded, and how (GradientSyncOptions::
  //! shard_optimizer_state): those replicated over the batch axis (in host memory, or in device
  //! memory that MPI's non-blocking collectives read, without bfloat16_sums); split in parts
  //! when of at least bucket_bytes (or bucket_bytes is 0), else owned whole by one process, the
  //! owners balancing the bytes among the processes of each communicator (their gradients share
  //! buckets; optimizer_state_shards.hpp). Errors: kdist::ValueError for the setting on device
  //! memory with an MPI whose non-blocking collectives cannot read it, or with bfloat16_sums.
  static std::vector<std::optional<StateShard>> plan(std::vector<AnyLayer<T>>& layers,
                                                     const Distribution& dist,
                                                     const GradientSyncOptions& o) {
    std::vector<std::optional<StateShard>> out;
    const auto& batch = dist.batch_dim_name();
    struct Small {  // a variable to be owned whole
      std::size_t k;
      std::size_t elements;
      MPI_Comm comm;
      std::size_t axis;
    };
    std::vector<Small> small;
    for_each_variable(layers, [&](auto& v) {
      std::optional<StateShard> shard;
      const RuntimeDeviceMesh& mesh = v.value.device_mesh();
      const auto axis = batch ? mesh.find_axis(*batch) : std::nullopt;
      const auto copies_along = v.value.layout().replicated_mesh_axes();
      const std::size_t n = v.value.local().size();
      if (o.shard_optimizer_state && axis && mesh.shape()[*axis] > 1 &&
          std::find(copies_along.begin(), copies_along.end(), *axis) != copies_along.end()) {
        using VariableMemory = typename std::decay_t<decltype(v.value)>::view_type::memory_space;
        check_state_sharding_memory(
            !Kokkos::SpaceAccessibility<Kokkos::HostSpace, VariableMemory>::accessible,
            mpi::gpu_aware_non_blocking(), o.bfloat16_sums, v.path);
        const MPI_Comm comm = communicators(mesh).comm(*batch).get();
        if (o.bucket_bytes == 0 || n * sizeof(T) >= o.bucket_bytes) {
          shard = make_state_shard(n, sizeof(T), comm, {*axis});
        } else {
          small.push_back({out.size(), n, comm, *axis});
        }
      }
      out.push_back(std::move(shard));
    });
    // The owners of the small ones, per communicator: the same sizes in the same order on each
    // of its processes (they hold the same blocks), so the same owners.
    std::vector<bool> done(small.size(), false);
    for (std::size_t i = 0; i < small.size(); ++i) {
      if (done[i]) continue;
      std::vector<std::size_t> members, bytes;
      for (std::size_t j = i; j < small.size(); ++j) {
        if (small[j].comm != small[i].comm) continue;
        members.push_back(j);
        bytes.push_back(small[j].elements * sizeof(T));
        done[j] = true;
      }
      const int processes = mpi::Communicator::borrow(small[i].comm).size();
      const std::vector<int> owners = assign_owners(bytes, processes);
      for (std::size_t m = 0; m < members.size(); ++m) {
        const Small& s = small[members[m]];
        out[s.k] = make_owned_state_shard(s.elements, owners[m], s.comm, {s.axis});
      }
    }
    return out;
  }

  //! The gradient sync's copy of the shards, keyed by each gradient block's address.
  std::vector<std::pair<const void*, StateShard>> registry(std::vector<AnyLayer<T>>& layers) {
    std::vector<std::pair<const void*, StateShard>> out;
    std::size_t k = 0;
    for_each_variable(layers, [&](auto& v) {
      if (const auto& shard = shards_[k]) out.emplace_back(v.grad.local().data(), *shard);
      ++k;
    });
    return out;
  }

  //! Changes which variables' optimizer state is sharded (set_gradient_sync after compile),
  //! keeping its values. Collective.
  void reshard(std::vector<AnyLayer<T>>& layers, std::vector<std::optional<StateShard>> next) {
    std::size_t k = 0;
    for_each_variable(layers, [&](auto& v) {
      const auto& now = shards_[k];
      const auto& then = next[k];
      const bool same =
          (!now && !then) || (now && then && now->counts == then->counts &&
                              now->comm == then->comm && now->owned_whole == then->owned_whole);
      if (!same) {
        using View = typename std::decay_t<decltype(v.value)>::view_type;
        for (std::size_t i = 0; i < slots_[k].size(); ++i) {
          View whole = whole_slot(v.value.local(), k, i);
          if (!then && !is_narrow(slots_[k][i])) {
            slots_[k][i] = whole;
            continue;
          }
          slots_[k][i] = new_storage(v.dtype, v.value.local(), std::string(whole.label()), then);
          const auto values = flat<T>(whole);
          write_storage(
              slots_[k][i],
              then ? OptimizerView<T>(values.data() + then->begin(), then->size()) : values);
        }
      }
      ++k;
    });
    shards_ = std::move(next);
    size_scratch();
  }

  //! Calls f(variable, slots) for every variable, in layer order, its slots as distributed tensors
  //! laid out like the variable: the model's blocks, or with the state sharded whole-block copies
  //! gathered from the processes' parts, what f writes going back into this process's part (then
  //! collective). See Sequential::for_each_variable_with_slots.
  template <class F>
  void for_each_variable_with_slots(std::vector<AnyLayer<T>>& layers, F&& f) {
    std::size_t k = 0;
    for_each_variable(layers, [&](auto& v) {
      using Tensor = std::decay_t<decltype(v.value)>;
      std::vector<Tensor> slots;
      for (std::size_t i = 0; i < slots_.at(k).size(); ++i) {
        slots.push_back(Tensor::from_local(whole_slot(v.value.local(), k, i), v.value.shape(),
                                           v.value.layout()));
      }
      f(v, slots);
      for (std::size_t i = 0; i < slots.size(); ++i) {  // a copy goes back
        const auto values = flat<T>(slots[i].local());
        if (const auto& shard = shards_[k]) {
          write_part(k, i, OptimizerView<T>(values.data() + shard->begin(), shard->size()));
        } else if (is_narrow(slots_[k][i])) {
          write_part(k, i, values);
        }
      }
      ++k;
    });
  }

 private:
  using Memory = typename DistributedTensor<T*>::view_type::memory_space;
  using SlotView = std::variant<
      typename DistributedTensor<T*>::view_type, typename DistributedTensor<T**>::view_type,
      typename DistributedTensor<T***>::view_type, typename DistributedTensor<T****>::view_type,
      typename DistributedTensor<T*****>::view_type,
      Kokkos::View<bfloat16*, Kokkos::LayoutRight, Memory>,
      Kokkos::View<float16*, Kokkos::LayoutRight, Memory>>;

  //! Whether slot storage `s` is 16 bits wide (a variable of the "bfloat16" or "float16" policy).
  static bool is_narrow(const SlotView& s) { return s.index() >= 5; }

  //! New storage for a slot of a variable of `dtype` with block `local`: 16-bit elements for a
  //! 16-bit variable, else the block's shape; `shard`'s part only when given.
  template <class View>
  static SlotView new_storage(DType dtype, const View& local, const std::string& label,
                              const std::optional<StateShard>& shard) {
    const std::size_t n = shard ? shard->size() : local.size();
    if constexpr (std::is_same_v<T, float>) {
      if (dtype == DType::bfloat16) {
        return Kokkos::View<bfloat16*, Kokkos::LayoutRight, Memory>(label, n);
      }
      if (dtype == DType::float16) {
        return Kokkos::View<float16*, Kokkos::LayoutRight, Memory>(label, n);
      }
    }
    if (shard) return typename DistributedTensor<T*>::view_type(label, n);
    return make_slot(local, label);
  }

  //! One scratch block per slot for the updates of 16-bit slots: sixteen_bit_chunk elements, or
  //! the most a 16-bit slot holds when fewer (none without one).
  void size_scratch() {
    std::vector<std::size_t> most;
    for (const auto& s : slots_) {
      if (most.size() < s.size()) most.resize(s.size(), 0);
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (is_narrow(s[i])) {
          const std::size_t n = std::visit([](const auto& v) { return v.size(); }, s[i]);
          most[i] = std::max(most[i], std::min(n, sixteen_bit_chunk));
        }
      }
    }
    scratch_.resize(most.size());
    for (std::size_t i = 0; i < most.size(); ++i) {
      if (scratch_[i].size() != most[i]) {
        scratch_[i] = typename DistributedTensor<T*>::view_type(
            "kdist::optimizer/16-bit slot " + std::to_string(i) + " widened", most[i]);
      }
    }
  }

  //! Copies the values of slot `i` of variable `k` (its part when its state is sharded) into
  //! `out`, widened (exactly) when the slot is 16 bits wide.
  void read_part(std::size_t k, std::size_t i, const OptimizerView<T>& out) {
    std::visit(
        [&](const auto& view) {
          using V = std::decay_t<decltype(view)>;
          if constexpr (is_sixteen_bit_float_v<typename V::value_type>) {
            convert_block(view, out);
          } else {
            Kokkos::deep_copy(out, flat<T>(view));
          }
        },
        slots_[k][i]);
  }
  //! Writes `values` into the storage of slot `i` of variable `k` (its part when sharded),
  //! rounded when it is 16 bits wide.
  void write_part(std::size_t k, std::size_t i, const OptimizerView<T>& values) {
    write_storage(slots_[k][i], values);
  }
  static void write_storage(const SlotView& storage, const OptimizerView<T>& values) {
    std::visit(
        [&](const auto& view) {
          using V = std::decay_t<decltype(view)>;
          if constexpr (is_sixteen_bit_float_v<typename V::value_type>) {
            convert_block(values, view);
          } else {
            const auto to = flat<T>(view);
            if (to.data() != values.data()) Kokkos::deep_copy(to, values);
          }
        },
        storage);
  }
  //! Slot `i` of variable `k` (block `local`) as a whole block of T: the slot itself, or a new
  //! block of its values: widened from 16 bits, or when its state is sharded gathered from every
  //! process's part (collective).
  template <class View>
  View whole_slot(const View& local, std::size_t k, std::size_t i) {
    const auto& shard = shards_[k];
    if (!shard && !is_narrow(slots_[k][i])) return std::get<View>(slots_[k][i]);
    View whole = make_slot(local, std::string(local.label()) + "/slot");
    const auto values = flat<T>(whole);
    if (!shard) {
      read_part(k, i, values);
      return whole;
    }
    read_part(k, i, OptimizerView<T>(values.data() + shard->begin(), shard->size()));
    start_all_gather_parts(whole.data(), *shard).wait();
    return whole;
  }

  //! Each variable's slots (as its optimizer declares them), shaped like its block, or rank-1
  //! Views of its part where shards_ has one.
  std::vector<std::vector<SlotView>> slots_;
  //! Each variable's part when its optimizer state is sharded (ZeRO-1), in variable order.
  std::vector<std::optional<StateShard>> shards_;
  std::vector<OptimizerView<T>> slot_views_;
  //! Where 16-bit slots are widened for an update (size_scratch).
  std::vector<typename DistributedTensor<T*>::view_type> scratch_;
};

}  // namespace kdist::detail

KDIST_EXTERN_CLASS(kdist::detail::OptimizerState)
