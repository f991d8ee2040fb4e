#pragma once
//! \file tensor/from_local_blocks.hpp
//! `kdist::from_local_blocks`: a distributed tensor made of each process's own block of a field
//! as a simulation holds it - the issue 38 way into a spatially sharded model, the field never
//! gathered. Every process passes its block (a Kokkos View), the global shape and the layout that
//! says how the field is split (e.g. (None, "h", "w", None) for a (1, height, width, 1) field on a
//! 2-D process grid). kdist's blocks are chunk blocks (ceil(extent / parts), as torch.chunk and
//! JAX): a decomposition that gives block q of an axis the positions [q * ceil(n / P), ...) fits;
//! one that spreads the remainder over the first blocks (n / P + 1 for the first n % P) fits when
//! P divides n.
//!
//! - Zero copies when the View is LayoutRight (or a contiguous View of rank 1 in its
//!   dimension order) in the tensor's memory space: the tensor's block *is* the simulation's
//!   memory (a managed View shares its reference count; an unmanaged one must outlive the tensor).
//!   The simulation must not write it while a step reads it.
//! - Otherwise (LayoutLeft, a strided subview such as the interior of a block with halo cells,
//!   another memory space) one deep_copy into a block of the tensor's own.
//! Collective: a block of the wrong extents on any process is a kdist::ValueError on every process
//! (kdist::mpi::agree), naming the process, its extents and those the layout gives it.
//!
//! \code
//! Kokkos::View<float**> u("u", rows + 2, cols);   // the simulation's block, a halo row each side
//! auto interior = Kokkos::subview(u, std::pair(1, rows + 1), Kokkos::ALL);  // contiguous rows
//! Kokkos::View<float****, Kokkos::MemoryTraits<Kokkos::Unmanaged>> field(interior.data(), 1,
//!                                                                      rows, cols, 1);
//! auto x = kdist::from_local_blocks<float****>(field, {1, height, width, 1}, layout);  // no copy
//! \endcode

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/detail/shard_math.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/world.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {
//! Whether a View of type View may be a block of Tensor as it is, by its type: the same memory
//! space and value type (its layout and extents are checked at run time by aliases_as_block).
template <class Tensor, class View>
inline constexpr bool may_alias_as_block =
    (std::is_same_v<typename View::memory_space, typename Tensor::view_type::memory_space> &&
     std::is_same_v<typename View::value_type, typename Tensor::view_type::value_type>);

//! Whether `block` can be this tensor's block as it is: the same memory space, row-major, dense.
template <class Tensor, class View>
bool aliases_as_block(const View& block) {
  if constexpr (!may_alias_as_block<Tensor, View>) {
    return false;
  } else if constexpr (std::is_same_v<typename View::array_layout, Kokkos::LayoutRight>) {
    return block.span_is_contiguous();
  } else {
    return false;  // LayoutLeft or LayoutStride: the element order may differ
  }
}
}  // namespace detail

//! The tensor of global `shape` in `layout` whose block on this process is `block` (a View of the
//! tensor's rank: this process's positions of every dimension, as the layout gives them).
//! Collective (every process of kdist::communicator()). Errors: kdist::ValueError on every
//! process when a process's block has other extents than the layout gives it.
template <class DataType, class View>
DistributedTensor<DataType> from_local_blocks(
    const View& block, const typename DistributedTensor<DataType>::shape_type& shape,
    const RuntimeTensorLayout& layout) {
  using Tensor = DistributedTensor<DataType>;
  static_assert(Kokkos::is_view<View>::value,
                "kdist::from_local_blocks: the block is a Kokkos::View of this process's part");
  static_assert(static_cast<std::size_t>(View::rank) == Tensor::rank,
                "kdist::from_local_blocks: the block's rank must be the tensor's (view a 2-D field "
                "as (1, rows, cols, 1) with an unmanaged View of the same memory)");
  // The block the layout gives this process (chunk blocks of each dimension).
  const auto& mesh = layout.device_mesh();
  std::vector<std::size_t> coords;
  if (mesh) coords = mesh->coords_of(static_cast<std::size_t>(process_id()));
  bool fits = true;
  std::string got = "(", wanted = "(", at = "(";
  for (std::size_t d = 0; d < Tensor::rank; ++d) {
    const Block b =
        mesh ? detail::chunk_block(shape[d], layout.shards(d), layout.shard_index(d, coords))
             : Block{0, shape[d]};
    fits = fits && block.extent(d) == b.extent;
    const std::string sep = d ? ", " : "";
    got += sep + std::to_string(block.extent(d));
    wanted += sep + std::to_string(b.extent);
    at += sep + std::to_string(b.offset);
  }
  mpi::agree(communicator(), fits,
             fits ? std::string()
                  : "kdist::from_local_blocks: process " + std::to_string(process_id()) +
                        " gave a block of extents " + got + ") but layout " + layout.axes_repr() +
                        " gives it the block of extents " + wanted + ") at " + at + ") of shape " +
                        detail::shape_repr(shape) +
                        " (chunk blocks: ceil(extent / parts) positions each, the last ones "
                        "shorter or empty); split the field so, or give the layout that matches");
  // (compiled only for a View that may alias: a host block of a device tensor does not convert)
  if constexpr (detail::may_alias_as_block<Tensor, View>) {
    if (detail::aliases_as_block<Tensor>(block)) {
      typename Tensor::view_type alias = block;  // shares the memory (and a managed View's count)
      return Tensor::from_local(alias, shape, layout);
    }
  }
  auto copy = Tensor::uninitialized(shape, layout, "kdist::from_local_blocks");
  if constexpr (std::is_same_v<typename View::memory_space, typename Tensor::memory_space>) {
    Kokkos::deep_copy(copy.local(), block);  // any layout, in the block's memory space
  } else {
    const auto there = Kokkos::create_mirror_view_and_copy(typename Tensor::memory_space(), block);
    Kokkos::deep_copy(copy.local(), there);
  }
  return copy;
}

}  // namespace kdist
