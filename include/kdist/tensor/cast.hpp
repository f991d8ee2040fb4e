#pragma once
//! \file tensor/cast.hpp
//! `kdist::cast<U>(t)`: a distributed tensor's values converted to scalars `U`, in the same layout
//! and on the same mesh (Keras' `keras.ops.cast`): how float32 and kdist::bfloat16 tensors meet,
//! since an expression that mixes them does not compile (a Keras layer casts its inputs to its
//! compute dtype the same way). Each process converts its own block; nothing is communicated.
//!
//! \code
//! kdist::DistributedTensor<kdist::bfloat16**> h = kdist::cast<kdist::bfloat16>(x);  // rounds
//! kdist::DistributedTensor<float**> back = kdist::cast<float>(h);                   // exact
//! \endcode

#include <cstddef>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

//! `t` with every value converted to `U` (static_cast: to bfloat16 rounds to nearest, ties to
//! even; from bfloat16 is exact), laid out as `t`. A pending sum stays pending when the conversion
//! is exact (to float or double from bfloat16 or float), since then the sum of the converted
//! summands is the converted sum. Errors: kdist::ValueError for a pending sum converted to
//! bfloat16 (rounding each summand is not rounding the sum: resolve it first, kdist::redistribute).
template <class U, class DataType, class MemorySpace>
DistributedTensor<typename detail::dynamic_data_type<
                      U, DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>::rank>::type,
                  RuntimeTensorLayout, MemorySpace>
cast(const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& t) {
  using From = DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>;
  using To = DistributedTensor<typename detail::dynamic_data_type<U, From::rank>::type,
                               RuntimeTensorLayout, MemorySpace>;
  using T = typename From::value_type;
  if constexpr (!sums_in_place_v<U>) {
    if (t.is_partial()) {
      throw ValueError(
          "kdist::cast: the tensor is a pending sum; converting each summand to 16 bits is not "
          "the 16-bit value of the sum: resolve it first (kdist::redistribute into its layout)");
    }
  }
  const auto& from = t.local_summand();
  typename To::view_type to(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::cast"),
                            from.layout());
  // LayoutRight blocks: one flat loop over the elements of both
  const T* src = from.data();
  U* dst = to.data();
  Kokkos::parallel_for(
      "kdist::cast", Kokkos::RangePolicy<typename MemorySpace::execution_space>(0, from.span()),
      KOKKOS_LAMBDA(const std::size_t i) { dst[i] = static_cast<U>(src[i]); });
  return To::from_local(to, t.shape(), t.layout(), t.partial_axes());
}

}  // namespace kdist
