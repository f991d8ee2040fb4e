#pragma once
// Python-style text for reprs that read exactly as Keras prints them: (2, 4), (8,), ['a', 'b'].

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kdist::detail {

//! 'name'. (Appended piecewise: `"'" + std::string(s) + "'"` trips a GCC 12 -Wrestrict false
//! positive at -O2 and above, which users of the headers would see.)
inline std::string py_str(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

//! (2, 4) / (8,) / ()
inline std::string py_tuple(std::span<const std::string> items) {
  std::string out = "(";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i];
  }
  if (items.size() == 1) out += ",";
  return out + ")";
}

//! [a, b]
inline std::string py_list(std::span<const std::string> items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += items[i];
  }
  return out + "]";
}

}  // namespace kdist::detail
