#pragma once
// What a Kokkos data type (`float**`, `float*[200]`, `float[784][200]`) says about its extents,
// and the data types built from extents: the run-time (all-dynamic) form a typed tensor converts
// to, and the Kokkos spelling of a local block whose trailing extents are static.
//
// Kokkos writes the run-time extents first (`*`) and the static ones after (`[N]`), so a static
// extent before a run-time one cannot be spelled: such a dimension is run-time in the View type.

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include <kdist/core/detail/fixed_string.hpp>

namespace kdist::detail {

//! Number of `*` in a pointer type, and what they point to.
template <class T>
struct pointer_depth {
  static constexpr std::size_t value = 0;
  using pointee = T;
};
template <class T>
struct pointer_depth<T*> {
  static constexpr std::size_t value = pointer_depth<T>::value + 1;
  using pointee = typename pointer_depth<T>::pointee;
};

//! `value_type`, `rank` and `extents` (std::dynamic_extent for `*` and `[]`) of a Kokkos data
//! type. As C++ types, `float*[6]` is an array of 6 `float*`, and `float**[3][4]` an array of
//! arrays of `float**`: the array bounds are the last dimensions, the pointers the first.
template <class DataType>
struct data_type_extents {
 private:
  using elements = std::remove_all_extents_t<DataType>;
  static constexpr std::size_t dynamic_rank = pointer_depth<elements>::value;
  static constexpr std::size_t static_rank = std::rank_v<DataType>;
  template <std::size_t... I>
  static constexpr std::array<std::size_t, static_rank> bounds(std::index_sequence<I...>) {
    // std::extent is 0 for an unknown bound (`float[]`), which is run-time.
    return {
        (std::extent_v<DataType, I> == 0 ? std::dynamic_extent : std::extent_v<DataType, I>)...};
  }

 public:
  using value_type = typename pointer_depth<elements>::pointee;
  static constexpr std::size_t rank = dynamic_rank + static_rank;
  static constexpr std::array<std::size_t, rank> extents = [] {
    std::array<std::size_t, rank> out{};
    out.fill(std::dynamic_extent);  // the pointers, first
    const auto b = bounds(std::make_index_sequence<static_rank>{});
    std::copy(b.begin(), b.end(), out.begin() + dynamic_rank);  // then the bounds
    return out;
  }();
};

//! True when the data type has no static extent (`float**`).
template <class DataType>
inline constexpr bool is_dynamic_data_type_v = [] {
  for (std::size_t e : data_type_extents<DataType>::extents) {
    if (e != std::dynamic_extent) return false;
  }
  return true;
}();

//! True when every extent is static (`float[784][200]`).
template <class DataType>
inline constexpr bool is_static_data_type_v = [] {
  for (std::size_t e : data_type_extents<DataType>::extents) {
    if (e == std::dynamic_extent) return false;
  }
  return true;
}();

//! `Value` with `Rank` run-time extents: `float**` for (float, 2).
template <class Value, std::size_t Rank>
struct dynamic_data_type {
  using type = typename dynamic_data_type<Value, Rank - 1>::type*;
};
template <class Value>
struct dynamic_data_type<Value, 0> {
  using type = Value;
};
//! The run-time form of a data type: `float[784][200]` and `float*[200]` are `float**`.
template <class DataType>
using dynamic_data_type_t =
    typename dynamic_data_type<typename data_type_extents<DataType>::value_type,
                               data_type_extents<DataType>::rank>::type;

//! First dimension of the static suffix of `extents`: every dimension from it on is static.
template <std::size_t R>
constexpr std::size_t static_suffix_begin(const std::array<std::size_t, R>& extents) {
  std::size_t begin = R;
  while (begin > 0 && extents[begin - 1] != std::dynamic_extent) --begin;
  return begin;
}

//! Appends `[E_I]...[E_last]` to Base. (Extents as a pack of numbers, not a std::array template
//! argument: nvcc's front end cannot pass class-type template arguments to the host compiler.)
template <class Base, std::size_t I, bool Done, std::size_t... E>
struct append_static_extents {
  static constexpr std::array<std::size_t, sizeof...(E)> extents{E...};
  using inner = typename append_static_extents<Base, I + 1, I + 1 == sizeof...(E), E...>::type;
  using type = inner[extents[I]];
};
template <class Base, std::size_t I, std::size_t... E>
struct append_static_extents<Base, I, true, E...> {
  using type = Base;
};

//! `type`: the Kokkos data type of `Value` with extents `E...` (std::dynamic_extent for a
//! run-time one): the static suffix as `[N]`, the rest as `*` (a static extent before a run-time
//! one is run-time). `data_type_with_extents<float, std::dynamic_extent, 10>::type` is
//! `float*[10]`.
template <class Value, std::size_t... E>
struct data_type_with_extents {
  static constexpr std::size_t suffix =
      static_suffix_begin(std::array<std::size_t, sizeof...(E)>{E...});
  using type = typename append_static_extents<typename dynamic_data_type<Value, suffix>::type,
                                              suffix, suffix == sizeof...(E), E...>::type;
};

//! The same from `Source::extents`, a static constexpr std::array.
template <class Value, class Source, class Seq = std::make_index_sequence<Source::extents.size()>>
struct data_type_from;
template <class Value, class Source, std::size_t... D>
struct data_type_from<Value, Source, std::index_sequence<D...>> {
  using type = typename data_type_with_extents<Value, Source::extents[D]...>::type;
};

//! Whether two extents can be the same: equal, or either one run-time.
constexpr bool extents_agree(std::size_t a, std::size_t b) {
  return a == std::dynamic_extent || b == std::dynamic_extent || a == b;
}

//! Whether a run-time `shape` agrees with the static extents of DataType; the first dimension
//! that does not, or the rank when all do.
template <class DataType>
constexpr std::size_t first_static_extent_mismatch(std::span<const std::size_t> shape) {
  constexpr auto want = data_type_extents<DataType>::extents;
  for (std::size_t d = 0; d < want.size() && d < shape.size(); ++d) {
    if (!extents_agree(want[d], shape[d])) return d;
  }
  return want.size();
}

//! Whether two data types of one rank agree wherever both give a static extent.
template <class A, class B>
constexpr bool static_extents_agree() {
  constexpr auto a = data_type_extents<A>::extents;
  constexpr auto b = data_type_extents<B>::extents;
  for (std::size_t d = 0; d < a.size(); ++d) {
    if (!extents_agree(a[d], b[d])) return false;
  }
  return true;
}

//! Writes DataType's extents as a shape, `(784, 200)` or `(?, 784)` (a run-time extent as `?`),
//! to `out` when it is not null; returns its length.
template <class DataType>
constexpr std::size_t write_static_shape(char* out) {
  std::size_t n = 0;
  auto put = [&](char c) {
    if (out) out[n] = c;
    ++n;
  };
  constexpr auto extents = data_type_extents<DataType>::extents;
  put('(');
  for (std::size_t d = 0; d < extents.size(); ++d) {
    if (d) put(','), put(' ');
    n += write_extent(extents[d], out ? out + n : nullptr);
  }
  if (extents.size() == 1) put(',');
  put(')');
  return n;
}
template <class DataType>
constexpr auto make_static_shape_string() {
  constexpr std::size_t n = write_static_shape<DataType>(nullptr);
  char buf[n + 1]{};
  write_static_shape<DataType>(buf);
  return fixed_string<n + 1>(std::string_view(buf, n));
}
//! The same as a fixed_string, for diagnostics (compilers print a run-time extent as
//! 18446744073709551615). Always computed at compile time: GCC 12 warned
//! (-Wstringop-overflow) on the digit copy it could not bound when a caller ran it at run time.
template <class DataType>
constexpr auto static_shape_string() {
  constexpr auto s = make_static_shape_string<DataType>();
  return s;
}

}  // namespace kdist::detail
