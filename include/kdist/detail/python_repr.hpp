#pragma once
// Python-style text for reprs that read exactly as Keras prints them: (2, 4), (8,), ['a', 'b'].

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kdist::detail {

inline std::string py_str(std::string_view s) { return "'" + std::string(s) + "'"; }

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
