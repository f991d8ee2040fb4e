#pragma once
//! \file nn/layers/spatial_halos.hpp
//! `kdist::layers::SpatialHalos<View, S>`: what a windowed layer (a convolution, a pooling) does to
//! read across the blocks of a spatially sharded input. The input (batch, spatial..., channels) is
//! in a layout whose spatial dimensions may be sharded over mesh axes (several at once: a 2-D or
//! 3-D process grid; uneven blocks); the output is sharded the same way. For this process's block of
//! outputs, gather() returns the input positions its windows read - its own block, its neighbours'
//! edges (halos, by point-to-point messages on the communicator of each spatial dimension's mesh
//! axes), zeros or periodic images for the padding - one spatial dimension after the other (so the
//! corners come along): first those the process pads by itself, then those it exchanges with
//! neighbours, the last exchange left in flight by start_gather() so that a layer computes the
//! outputs that read only its own block meanwhile (kdist::layers::halo_overlap()). scatter_add() is
//! its adjoint for the backward pass: the gradient of those positions goes back to their owners and
//! is summed there. Along a dimension that is neither sharded nor padded and read whole, nothing is
//! copied.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/halo_plan.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/nn/layers/spatial_window.hpp>
#include <kdist/parallel/halo_exchange.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/tensor/reusable_views.hpp>

namespace kdist::detail {
inline bool& halo_overlap_setting() {
  static bool on = true;
  return on;
}
}  // namespace kdist::detail

namespace kdist::layers {

//! Whether spatially sharded layers compute the outputs that read only their own block while the
//! halos travel (default: yes). Set it alike on every process; `false` waits for the halos first
//! (to measure what the overlap hides: benchmarks/bench_spatial_conv.cpp).
inline bool halo_overlap() {
  return detail::halo_overlap_setting();
}
inline void set_halo_overlap(bool on) {
  detail::halo_overlap_setting() = on;
}

template <class View, std::size_t S>
class SpatialHalos {
 public:
  //! Plans the exchanges for inputs of global `shape` in `layout` (a (batch, spatial...,
  //! channels) layout) and what each spatial dimension's outputs read, `axes` (a WindowAxis, an
  //! UpsamplingAxis: kdist/nn/layers/spatial_window.hpp). Kept until the shape, the layout or what
  //! the outputs read change.
  template <class Axis>
  void plan(const std::vector<std::size_t>& shape, const RuntimeTensorLayout& layout,
            const std::array<Axis, S>& axes) {
    const auto& mesh = layout.device_mesh();
    std::array<std::vector<HaloRange>, S> wanted;
    std::array<Boundary, S> boundaries{};
    for (std::size_t a = 0; a < S; ++a) {
      const std::size_t parts = mesh ? layout.shards(a + 1) : 1;
      const std::size_t out = axes[a].output_extent();
      for (std::size_t q = 0; q < parts; ++q) {
        wanted[a].push_back(axes[a].input_range(detail::chunk_block(out, parts, q)));
      }
      boundaries[a] = axes[a].boundary();
    }
    if (layout_ && shape == shape_ && layout == *layout_ && wanted == wanted_ &&
        boundaries == boundaries_) {
      return;
    }
    shape_ = shape;
    layout_ = layout;
    wanted_ = wanted;
    boundaries_ = boundaries;
    std::vector<std::size_t> coords;
    if (mesh) coords = mesh->coords_of(static_cast<std::size_t>(kdist::process_id()));
    for (std::size_t a = 0; a < S; ++a) {
      const std::size_t d = a + 1;
      const std::size_t parts = wanted[a].size();
      const std::size_t me = mesh ? layout.shard_index(d, coords) : 0;
      output_blocks_[a] = detail::chunk_block(axes[a].output_extent(), parts, me);
      plans_[a].emplace(axes[a].extent, parts, me, std::move(wanted[a]), boundaries[a]);
      const auto blk = plans_[a]->block();
      const auto& w = plans_[a]->wanted();
      identity_[a] = parts == 1 && w.begin == 0 && w.size() == blk.extent;
      comms_[a] = nullptr;
      if (parts > 1) {
        const auto& names = layout.axes()[d].names();
        comms_[a] = &communicators(*mesh).comm(std::span<const std::string>(names));
      }
    }
    // The axes padded here first, those exchanged with neighbours last, the first spatial axis
    // last of all (the one a layer overlaps: its rows are contiguous). The same on every process.
    std::size_t k = 0;
    for (std::size_t a = 0; a < S; ++a) {
      if (plans_[a]->parts() == 1) order_[k++] = a;
    }
    for (std::size_t a = S; a-- > 0;) {
      if (plans_[a]->parts() > 1) order_[k++] = a;
    }
  }

  //! This process's block of the outputs along spatial axis `a`.
  Block output_block(std::size_t a) const { return output_blocks_[a]; }
  //! The field positions this process's outputs read along spatial axis `a` (what gather
  //! returns; outside [0, extent) where they are padding).
  HaloRange reads(std::size_t a) const { return plans_[a]->wanted(); }
  //! Whether this process has outputs (every spatial block non-empty).
  bool has_outputs() const {
    for (const auto& b : output_blocks_) {
      if (b.extent == 0) return false;
    }
    return true;
  }

  //! The input positions this process's outputs read, from its block `x` (contiguous).
  View gather(const View& x) {
    View cur = start_gather(x);
    finish_gather();
    return cur;
  }
  //! gather() in two halves: the returned View holds this process's own positions (and every
  //! dimension's but the last exchanged one's halos) at once, the halos of pending_axis() after
  //! finish_gather(); `x` must stay unwritten and the halos unread until then.
  View start_gather(const View& x) {
    gather_pending_.wait();
    pending_axis_ = S;
    View cur = x;
    for (std::size_t k = 0; k < S; ++k) {
      const std::size_t a = order_[k];
      if (identity_[a]) continue;
      auto extents = extents_of(cur);
      extents[a + 1] = plans_[a]->wanted().size();
      View next = get(gathered_[a], "kdist::halo/gathered", extents);
      gather_pending_.wait();  // the exchange before fills `cur`
      gather_pending_.request = start_halo_gather(execution_space(), *plans_[a], a + 1, cur, next,
                                                  comms_[a], &gather_messages_[a]);
      pending_axis_ = comms_[a] != nullptr ? a : S;
      cur = next;
    }
    return cur;
  }
  void finish_gather() {
    gather_pending_.wait();
    pending_axis_ = S;
  }
  //! The spatial axis whose halos are in flight between start_gather and finish_gather (S: none).
  std::size_t pending_axis() const { return pending_axis_; }
  //! Where this process's own positions of spatial axis `a` lie in what gather returns.
  HaloRange own_positions(std::size_t a) const {
    const auto blk = plans_[a]->block();
    const auto begin = static_cast<std::int64_t>(blk.offset) - plans_[a]->wanted().begin;
    const auto end = begin + static_cast<std::int64_t>(blk.extent);
    const auto size = static_cast<std::int64_t>(plans_[a]->wanted().size());
    return {begin < 0 ? 0 : begin, end > size ? size : end};
  }

  //! The adjoint of gather: the gradient `dextended` of the positions gather returned, summed into
  //! a block shaped like this process's input block.
  View scatter_add(const View& dextended) {
    start_scatter_add(dextended);
    return finish_scatter_add();
  }
  //! scatter_add in two halves: the last exchange's messages travel between them (the caller's
  //! work in between overlaps them); `dextended` must stay unwritten until finish_scatter_add.
  void start_scatter_add(const View& dextended) {
    View cur = dextended;
    pending_.wait();
    for (std::size_t k = S; k-- > 0;) {  // gather's order, reversed
      const std::size_t a = order_[k];
      if (identity_[a]) continue;
      auto extents = extents_of(cur);
      extents[a + 1] = plans_[a]->block().extent;
      View next = get(scattered_[a], "kdist::halo/scattered", extents);
      pending_.wait();  // the exchange before (along a later axis) fills `cur`
      pending_.request = start_halo_scatter_add(execution_space(), *plans_[a], a + 1, cur, next,
                                                comms_[a], &scatter_messages_[a]);
      cur = next;
    }
    scattered_block_ = cur;
  }
  View finish_scatter_add() {
    pending_.wait();
    return std::exchange(scattered_block_, View());
  }

 private:
  using execution_space = typename View::execution_space;
  static constexpr std::size_t rank = View::rank;

  static constexpr std::array<std::size_t, S> identity_order() {
    std::array<std::size_t, S> o{};
    for (std::size_t a = 0; a < S; ++a) o[a] = a;
    return o;
  }
  static std::array<std::size_t, rank> extents_of(const View& v) {
    std::array<std::size_t, rank> e{};
    for (std::size_t d = 0; d < rank; ++d) e[d] = v.extent(d);
    return e;
  }
  static View get(ReusableViews<View>& views, const std::string& label,
                  const std::array<std::size_t, rank>& e) {
    if constexpr (rank == 3) return views.get(label, e[0], e[1], e[2]);
    if constexpr (rank == 4) return views.get(label, e[0], e[1], e[2], e[3]);
    if constexpr (rank == 5) return views.get(label, e[0], e[1], e[2], e[3], e[4]);
  }

  std::vector<std::size_t> shape_;
  std::optional<RuntimeTensorLayout> layout_;
  std::array<std::vector<HaloRange>, S> wanted_;  // the ranges every process's outputs read
  std::array<Boundary, S> boundaries_{};
  std::array<std::optional<HaloPlan>, S> plans_;
  std::array<Block, S> output_blocks_{};
  std::array<bool, S> identity_{};
  std::array<const mpi::Communicator*, S> comms_{};
  std::array<ReusableViews<View>, S> gathered_, scattered_;
  std::array<HaloMessages<View>, S> gather_messages_, scatter_messages_;  // kept message buffers
  //! A scatter_add's last exchange, between start and finish; a copied layer starts without one.
  struct Pending {
    HaloRequest request;
    Pending() = default;
    Pending(const Pending&) {}
    Pending& operator=(const Pending&) {
      request = HaloRequest();
      return *this;
    }
    Pending(Pending&&) noexcept = default;
    Pending& operator=(Pending&&) noexcept = default;
    void wait() { request.wait(); }
  };
  Pending pending_, gather_pending_;
  std::array<std::size_t, S> order_ = identity_order();  // the order of gather's dimensions
  std::size_t pending_axis_ = S;
  View scattered_block_;  // what finish_scatter_add returns
};

}  // namespace kdist::layers
