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

#include <kdist/core/error.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/train/gradient_sync.hpp>
#include <kdist/nn/train/optimizer_state_shards.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
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
      for (const auto& name : declared.names) {
        const std::string label = v.path + "/" + name;
        if (const auto& shard = shards_[k]) {
          s.push_back(typename DistributedTensor<T*>::view_type(label, shard->size()));
        } else {
          s.push_back(make_slot(v.value.local(), label));
        }
      }
      slots_.push_back(std::move(s));
      ++k;
    });
  }

  //! Variable k's part when its state is sharded, else nullopt (k in variable order).
  const std::optional<StateShard>& shard(std::size_t k) const { return shards_.at(k); }

  //! Variable k's slots as the optimizer's update_step takes them (views kept: no allocation).
  std::span<const OptimizerView<T>> slot_views(std::size_t k) {
    slot_views_.clear();
    for (const auto& s : slots_.at(k)) {
      slot_views_.push_back(std::visit([](const auto& view) { return flat<T>(view); }, s));
    }
    return slot_views_;
  }

  //! Which variables' optimizer state is sharded, and how (GradientSyncOptions::
  //! shard_optimizer_state): those replicated over the batch axis, in host memory; split in parts
  //! when of at least bucket_bytes (or bucket_bytes is 0), else owned whole by one process, the
  //! owners balancing the bytes among the processes of each communicator (their gradients share
  //! buckets; optimizer_state_shards.hpp). Errors: kdist::ValueError for the setting on device
  //! memory.
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
        using Memory = typename std::decay_t<decltype(v.value)>::view_type::memory_space;
        if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible) {
          const MPI_Comm comm = communicators(mesh).comm(*batch).get();
          if (o.bucket_bytes == 0 || n * sizeof(T) >= o.bucket_bytes) {
            shard = make_state_shard(n, sizeof(T), comm, {*axis});
          } else {
            small.push_back({out.size(), n, comm, *axis});
          }
        } else {
          throw ValueError(
              "kdist::GradientSyncOptions::shard_optimizer_state (KDIST_SHARD_OPTIMIZER_STATE) "
              "is not available for variables in device memory yet (" +
              v.path + "); turn it off");
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
          if (then) {
            typename DistributedTensor<T*>::view_type part(std::string(whole.label()),
                                                           then->size());
            copy_part(flat<T>(whole), flat<T>(part), *then, true);
            slots_[k][i] = part;
          } else {
            slots_[k][i] = whole;
          }
        }
      }
      ++k;
    });
    shards_ = std::move(next);
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
      if (shards_[k]) {
        for (std::size_t i = 0; i < slots.size(); ++i) {
          copy_part(flat<T>(slots[i].local()), slot_part(k, i), *shards_[k], true);
        }
      }
      ++k;
    });
  }

 private:
  using SlotView = std::variant<
      typename DistributedTensor<T*>::view_type, typename DistributedTensor<T**>::view_type,
      typename DistributedTensor<T***>::view_type, typename DistributedTensor<T****>::view_type>;

  //! Slot `i` of variable `k` when its state is sharded: its part.
  OptimizerView<T> slot_part(std::size_t k, std::size_t i) {
    return std::visit([](const auto& view) { return flat<T>(view); }, slots_[k][i]);
  }
  //! Copies the part `shard` says between a whole block and a part: into the part (to_part), or
  //! out of it into its place in the block.
  static void copy_part(const OptimizerView<T>& block, const OptimizerView<T>& part,
                        const StateShard& shard, bool to_part) {
    const auto range = std::pair{shard.begin(), shard.begin() + shard.size()};
    if (to_part) {
      Kokkos::deep_copy(part, Kokkos::subview(block, range));
    } else {
      Kokkos::deep_copy(Kokkos::subview(block, range), part);
    }
  }
  //! Slot `i` of variable `k` (block `local`) as a whole block: the slot itself, or when its
  //! state is sharded a new block gathered from every process's part (collective).
  template <class View>
  View whole_slot(const View& local, std::size_t k, std::size_t i) {
    const auto& shard = shards_[k];
    if (!shard) return std::get<View>(slots_[k][i]);
    View whole = make_slot(local, std::string(local.label()) + "/slot");
    copy_part(flat<T>(whole), slot_part(k, i), *shard, false);
    start_all_gather_parts(whole.data(), *shard).wait();
    return whole;
  }

  //! Each variable's slots (as its optimizer declares them), shaped like its block, or rank-1
  //! Views of its part where shards_ has one.
  std::vector<std::vector<SlotView>> slots_;
  //! Each variable's part when its optimizer state is sharded (ZeRO-1), in variable order.
  std::vector<std::optional<StateShard>> shards_;
  std::vector<OptimizerView<T>> slot_views_;
};

}  // namespace kdist::detail

KDIST_EXTERN_CLASS(kdist::detail::OptimizerState)
