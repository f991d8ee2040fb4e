#pragma once
//! \file nn/layer_buffers.hpp
//! `kdist::LayerBuffers<T>`: a layer's kept buffers for the blocks of a `LayerTensor<T>` of any
//! of its ranks (a (batch, features) matrix, a (batch, sequence, features) sequence, an NHWC
//! batch): one kdist::ReusableViews per rank, so a layer that takes all of them keeps one of these
//! for its outputs and one for its input gradients (Dropout, Residual, LayerNormalization).

#include <string>

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

 private:
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

  ReusableViews<typename DistributedTensor<T**>::view_type> matrices_;
  ReusableViews<typename DistributedTensor<T***>::view_type> sequences_;
  ReusableViews<typename DistributedTensor<T****>::view_type> images_;
};

}  // namespace kdist
