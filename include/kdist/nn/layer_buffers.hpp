#pragma once
//! \file nn/layer_buffers.hpp
//! `kdist::LayerBuffers<T>`: a layer's kept buffers for the blocks of a `LayerTensor<T>` of any
//! of its ranks (a (batch, features) matrix, a (batch, sequence, features) sequence, an NHWC
//! batch, an NDHWC batch): one kdist::ReusableViews per rank, so a layer that takes all of them keeps one of these
//! for its outputs, one for its input gradients and one for each place it redistributes a tensor
//! (Dropout, Residual, LayerNormalization).

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include <Kokkos_Core.hpp>

#include <kdist/core/runtime_layout.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

template <class T>
class LayerBuffers {
 public:
  //! A buffer of `like`'s extents (a block of rank 2 to 5), kept for the next steps: see
  //! kdist::ReusableViews::get.
  template <class Like>
  auto get_like(const std::string& label, const Like& like) {
    return of_rank<static_cast<std::size_t>(Like::rank)>().get_like(label, like);
  }

  //! The kept Views for blocks of rank R (2, 3, 4 or 5).
  template <std::size_t R>
  auto& of_rank() {
    static_assert(R >= 2 && R <= 5,
                  "kdist::LayerBuffers: a LayerTensor block has rank 2, 3, 4 or 5");
    if constexpr (R == 2) {
      return matrices_;
    } else if constexpr (R == 3) {
      return sequences_;
    } else if constexpr (R == 4) {
      return images_;
    } else {
      return volumes_;
    }
  }

 private:
  ReusableViews<typename DistributedTensor<T**>::view_type> matrices_;
  ReusableViews<typename DistributedTensor<T***>::view_type> sequences_;
  ReusableViews<typename DistributedTensor<T****>::view_type> images_;
  ReusableViews<typename DistributedTensor<T*****>::view_type> volumes_;
};

//! kdist::redistribute(t, target, views) with the kept Views of `t`'s rank.
template <class T, class DataType>
DistributedTensor<DataType> redistribute(const DistributedTensor<DataType>& t,
                                         RuntimeTensorLayout target, LayerBuffers<T>& buffers) {
  return redistribute(t, std::move(target),
                      buffers.template of_rank<DistributedTensor<DataType>::rank>());
}

//! A copy of `t` (its block, shape, layout and pending axes) in a kept View of `views` (a
//! kdist::LayerBuffers or a kdist::ReusableViews of its View type).
template <class DataType, class Views>
DistributedTensor<DataType> copy_of(const DistributedTensor<DataType>& t, Views& views) {
  const auto packed = views.get_like("kdist::packed", t.local());
  Kokkos::deep_copy(packed, t.local());
  return DistributedTensor<DataType>::from_local(packed, t.shape(), t.layout(), t.partial_axes());
}

//! `t` when its block is contiguous, else copy_of(t, views): what the kernels that take whole
//! Views need after a redistribute that narrowed a dimension (a strided slice).
template <class DataType, class Views>
DistributedTensor<DataType> contiguous(const DistributedTensor<DataType>& t, Views& views) {
  if (t.local().span_is_contiguous()) return t;
  return copy_of(t, views);
}

//! A kept View of `views` (a kdist::ReusableViews) with extents `e`, one per dimension.
template <class Views, std::size_t R>
auto get_block(Views& views, const std::string& label, const std::array<std::size_t, R>& e) {
  return [&]<std::size_t... D>(std::index_sequence<D...>) {
    return views.get(label, e[D]...);
  }
  (std::make_index_sequence<R>());
}

//! A contiguous block (rows..., features) seen as the (rows, features) matrix of its memory.
template <class View>
auto as_rows(const View& v) {
  using Rows = Kokkos::View<typename View::value_type**, Kokkos::LayoutRight,
                            typename View::memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  std::size_t rows = 1;
  constexpr unsigned last = static_cast<unsigned>(View::rank) - 1;
  for (unsigned d = 0; d < last; ++d) rows *= v.extent(d);
  return Rows(v.data(), rows, v.extent(last));
}

}  // namespace kdist
