#pragma once
// A string usable as a template argument: axis names are types' parts (axis<"data", 2>).

#include <algorithm>
#include <cstddef>
#include <span>
#include <string_view>
#include <utility>

namespace kdist::detail {

template <std::size_t N>
struct fixed_string {
  char data[N]{};

  constexpr fixed_string(const char (&s)[N]) { std::copy_n(s, N, data); }  // NOLINT: implicit
  //! From a view of exactly N-1 characters (used to re-wrap names read out of other NTTPs).
  constexpr explicit fixed_string(std::string_view s) { std::copy_n(s.data(), N - 1, data); }

  static constexpr std::size_t size() { return N - 1; }
  constexpr std::string_view view() const { return {data, N - 1}; }
  constexpr operator std::string_view() const { return view(); }  // NOLINT: implicit

  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& other) const {
    return view() == other.view();
  }
};
template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N>;

//! A name as a type, for the arguments of kdist::error:: diagnostics: compilers print types, and
//! clang 14 prints a string template argument only as character codes ({{109, 111, ...}}), a
//! pack of chars as the characters ('m', 'o', 'd', 'l', 'e'). GCC and nvcc print the string.
template <char... C>
struct chars {};
template <fixed_string S>
struct text {};
template <fixed_string S, class = std::make_index_sequence<S.size()>>
struct as_chars;
template <fixed_string S, std::size_t... I>
struct as_chars<S, std::index_sequence<I...>> {
  using type = chars<S.data[I]...>;
};
#if defined(__clang__)
template <fixed_string S>
using diagnostic_name = typename as_chars<S>::type;  // chars<'m', 'o', 'd', 'l', 'e'>
#else
template <fixed_string S>
using diagnostic_name = text<S>;  // text<fixed_string<6>{"modle"}>
#endif

//! Writes an extent for a diagnostic, its digits or `?` for std::dynamic_extent (compilers print
//! that as 18446744073709551615), to `out` when it is not null; returns its length.
constexpr std::size_t write_extent(std::size_t extent, char* out) {
  if (extent == std::dynamic_extent) {
    if (out) out[0] = '?';
    return 1;
  }
  char digits[20]{};
  std::size_t k = 0;
  for (std::size_t v = extent; k == 0 || v != 0; v /= 10) {
    digits[k++] = static_cast<char>('0' + v % 10);
  }
  for (std::size_t i = 0; i < k; ++i) {
    if (out) out[i] = digits[k - 1 - i];
  }
  return k;
}

}  // namespace kdist::detail
