#pragma once
//! \file nn/layer_buffers.hpp
//! `kdist::LayerBuffers<T>`: a layer's kept buffers for the blocks of a `LayerTensor<T>` of any
//! of its ranks (a (batch, features) matrix, a (batch, sequence, features) sequence, an NHWC
//! batch): one kdist::ReusableViews per rank, so a layer that takes all of them keeps one of these
//! for its outputs, one for its input gradients and one for each place it redistributes a tensor
//! (Dropout, Residual, LayerNormalization).

#include <cstddef>
#include <string>
#include <utility>

#include <kdist/core/runtime_layout.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

template <class T>
class LayerBuffers {
 public:
  //! A buffer of `like`'s extents (a block of rank 2, 3 or 4), kept for the next steps: see
  //! kdist::ReusableViews::get.
  template <class Like>
  auto get_like(const std::string& label, const Like& like) {
    return of_rank<static_cast<std::size_t>(Like::rank)>().get_like(label, like);
  }

  //! The kept Views for blocks of rank R (2, 3 or 4).
  template <std::size_t R>
  auto& of_rank() {
    static_assert(R >= 2 && R <= 4, "kdist::LayerBuffers: a LayerTensor block has rank 2, 3 or 4");
    if constexpr (R == 2) {
      return matrices_;
    } else if constexpr (R == 3) {
      return sequences_;
    } else {
      return images_;
    }
  }

 private:
  ReusableViews<typename DistributedTensor<T**>::view_type> matrices_;
  ReusableViews<typename DistributedTensor<T***>::view_type> sequences_;
  ReusableViews<typename DistributedTensor<T****>::view_type> images_;
};

//! kdist::redistribute(t, target, views) with the kept Views of `t`'s rank.
template <class T, class DataType>
DistributedTensor<DataType> redistribute(const DistributedTensor<DataType>& t,
                                         RuntimeTensorLayout target, LayerBuffers<T>& buffers) {
  return redistribute(t, std::move(target),
                      buffers.template of_rank<DistributedTensor<DataType>::rank>());
}

}  // namespace kdist
