#pragma once
//! \file nn/layers/spatial_halos.hpp
//! `kdist::layers::SpatialHalos<View, S>`: what a windowed layer (a convolution, a pooling) does to
//! read across the blocks of a spatially sharded input. The input (batch, spatial..., channels) is
//! in a layout whose spatial dimensions may be sharded over mesh axes (several at once: a 2-D or
//! 3-D process grid; uneven blocks); the output is sharded the same way. For this process's block of
//! outputs, gather() returns the input positions its windows read - its own block, its neighbours'
//! edges (halos, by point-to-point messages on the communicator of each spatial dimension's mesh
//! axes), zeros or periodic images for the padding - one spatial dimension after the other (so the
//! corners come along). scatter_add() is its adjoint for the backward pass: the gradient of those
//! positions goes back to their owners and is summed there. Along a dimension that is neither
//! sharded nor padded and read whole, nothing is copied.

#include <array>
#include <cstddef>
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

namespace kdist::layers {

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
    View cur = x;
    for (std::size_t a = 0; a < S; ++a) {
      if (identity_[a]) continue;
      auto extents = extents_of(cur);
      extents[a + 1] = plans_[a]->wanted().size();
      View next = get(gathered_[a], "kdist::halo/gathered", extents);
      exchange_gather(a, cur, next);
      cur = next;
    }
    return cur;
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
    for (std::size_t a = S; a-- > 0;) {
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
  void exchange_gather(std::size_t a, const View& from, const View& to) {
    start_halo_gather(execution_space(), *plans_[a], a + 1, from, to, comms_[a],
                      &gather_messages_[a])
        .wait();
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
  Pending pending_;
  View scattered_block_;  // what finish_scatter_add returns
};

}  // namespace kdist::layers
