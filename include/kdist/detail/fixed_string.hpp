#pragma once
// A string usable as a template argument: axis names are types' parts (axis<"data", 2>).

#include <algorithm>
#include <cstddef>
#include <string_view>

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

}  // namespace kdist::detail
