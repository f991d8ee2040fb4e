#pragma once
// Python-style text for reprs that read exactly as Keras prints them: (2, 4), (8,), ['a', 'b'].

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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

//! ['data', 'model']: names as a Python list of strings.
inline std::string join_quoted(std::span<const std::string> names) {
  std::vector<std::string> quoted;
  for (const auto& n : names) quoted.push_back(py_str(n));
  return py_list(quoted);
}

//! (2, 4) / (8,): a shape as a Python tuple.
inline std::string shape_repr(std::span<const std::size_t> shape) {
  std::vector<std::string> items;
  for (auto e : shape) items.push_back(std::to_string(e));
  return py_tuple(items);
}

}  // namespace kdist::detail
