#pragma once
//! \file strategy/detail/layout_map_keys.hpp
//! The machinery behind RuntimeLayoutMap's keys (runtime_layout_map.hpp): RE2 options and memory
//! budgets for one key and for the RE2::Set of all keys, a transparent string hash for the lookup
//! cache, and keys quoted (and abbreviated) for error messages.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/strategy/detail/re2.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kdist::detail {

//! Transparent string hash, so maps keyed by std::string can be searched with a string_view
//! without building a std::string.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

//! RE2 options shared by every key: RE2's defaults (UTF-8, `.` does not match a newline, case
//! sensitive; as Python's `re` without flags), no logging (kdist reports errors itself), and the
//! memory budget given.
inline RE2::Options layout_map_re2_options(std::int64_t max_mem) {
  RE2::Options options;
  options.set_log_errors(false);
  options.set_never_capture(true);  // matching only: no submatch bookkeeping
  options.set_max_mem(max_mem);
  return options;
}

//! Memory budget of one key's RE2 (its program and DFA cache); a key too large for it is an
//! error at insertion ("pattern too large - compile failed").
inline constexpr std::int64_t layout_map_key_max_mem = std::int64_t{8} << 20;

//! Memory budget of the RE2::Set holding every key: 64 MiB plus 64 KiB per key. The Set's DFA
//! caches the states it has seen; when it runs out (huge or pathological paths), the lookup
//! falls back to the keys' own RE2 objects, which fall back to RE2's NFA: still linear time.
inline std::int64_t layout_map_set_max_mem(std::size_t keys) {
  return (std::int64_t{64} << 20) + static_cast<std::int64_t>(keys) * (std::int64_t{64} << 10);
}

//! A key or path for an error message: quoted, and cut to its first 200 characters when longer
//! (a 1 MB path must not make a 1 MB message).
inline std::string quote_abbreviated(std::string_view s) {
  constexpr std::size_t limit = 200;
  if (s.size() <= limit) return py_str(s);
  return py_str(s.substr(0, limit)) + "... (" + std::to_string(s.size()) + " characters)";
}

inline std::string quoted_keys(std::span<const std::string> keys) {
  std::vector<std::string> q;
  q.reserve(keys.size());
  for (const auto& k : keys) q.push_back(quote_abbreviated(k));
  return py_list(q);
}

}  // namespace kdist::detail
