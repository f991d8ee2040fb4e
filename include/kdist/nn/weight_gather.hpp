#pragma once
//! \file nn/weight_gather.hpp
//! `kdist::WeightGather<Tensor>`: how a layer brings one of its variables to the layout its compute
//! needs (an FSDP kernel or table, sharded over the batch axes, all-gathered), into Views kept from
//! step to step (kdist::ReusableViews). With GradientSyncOptions::bfloat16_gathers
//! (StepContext::bfloat16_gathers) a float32 weight that has to move between processes is gathered
//! moving bfloat16: each process rounds its block to bfloat16 once (to nearest, ties to even),
//! the bfloat16 blocks are redistributed (half the bytes) and widened (exactly) into float32.
//! Every value of the gathered weight, this process's own block included, is then the variable's
//! value rounded to bfloat16 (relative error at most 2^-9; what Keras' "mixed_bfloat16" policy
//! casts a variable to before its GEMMs), the same on every process. The variable itself, its
//! gradient and the optimizer stay float32. A weight that does not move (an unchanged layout, a
//! local slice) is not rounded; float64 weights always move as they are.

#include <cstddef>
#include <type_traits>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/redistribute_plan.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/nn/autocast.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

//! One call site's weight gather (see the file's comment): `gather(w, target, in_bfloat16)` is
//! `kdist::redistribute(w, target, views)`, moving bfloat16 when asked and `w` moves.
template <class Tensor, std::size_t Slots = 2>
class WeightGather {
  using T = typename Tensor::value_type;
  using View = typename Tensor::view_type;
  using Tensor16 =
      DistributedTensor<typename detail::dynamic_data_type<bfloat16, Tensor::rank>::type,
                        RuntimeTensorLayout, typename Tensor::memory_space>;

 public:
  //! `w` laid out by `target`: `w`'s block when nothing moves, else a kept View. Errors: those of
  //! kdist::redistribute.
  Tensor operator()(const Tensor& w, const RuntimeTensorLayout& target, bool in_bfloat16 = false) {
    if constexpr (std::is_same_v<T, float>) {
      if (in_bfloat16 && moves(w, target)) {
        const auto own = own_.get_like("kdist::WeightGather::bfloat16", w.local());
        detail::convert_block(w.local(), own);
        const Tensor16 gathered =
            redistribute(Tensor16::from_local(own, w.shape(), w.layout()), target, moved_);
        const View wide = views_.get_like("kdist::WeightGather::widened", gathered.local());
        detail::convert_block(gathered.local(), wide);  // exact
        return Tensor::from_local(wide, w.shape(), gathered.layout());
      }
    }
    return redistribute(w, target, views_);
  }

 private:
  //! Whether `w` exchanges data with other processes on its way to `target`.
  static bool moves(const Tensor& w, const RuntimeTensorLayout& target) {
    for (const RedistributeStep& s : plan_redistribute(w, target).steps) {
      if (s.kind == RedistributeStep::Kind::all_gather ||
          s.kind == RedistributeStep::Kind::all_to_all) {
        return true;
      }
    }
    return false;
  }

  ReusableViews<View, Slots> views_;
  ReusableViews<typename Tensor16::view_type> own_, moved_;
};

}  // namespace kdist
