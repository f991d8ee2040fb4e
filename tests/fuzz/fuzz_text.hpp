#pragma once
// Text inputs for kdist's fuzz targets: lines of blank-separated words, so that every corpus file
// reads as the case it tests (tests/fuzz/corpus/<target>/). libFuzzer mutates them byte by byte;
// a line that does not parse is skipped, never an error of the target.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kdist::fuzz {

//! An invariant of kdist that the input broke: print it and abort, which libFuzzer reports as a
//! crash with the input saved.
#define KDIST_FUZZ_CHECK(cond)                                                                \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "kdist fuzz: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, \
                   #cond);                                                                    \
      std::abort();                                                                           \
    }                                                                                         \
  } while (false)

//! An error that is the documented outcome of a bad input: silent, unless KDIST_FUZZ_VERBOSE is set
//! (for reading what each corpus file ends in: KDIST_FUZZ_VERBOSE=1 fuzz_<name>_replay <dir>).
inline void expected_error(const std::exception& e) {
  static const bool verbose = std::getenv("KDIST_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::printf("  expected error: %s\n", e.what());
}

inline std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

//! The input as lines of words (empty lines dropped).
inline std::vector<std::vector<std::string>> lines(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::vector<std::string>> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    auto w = words(text.substr(start, end - start));
    if (!w.empty()) out.push_back(std::move(w));
    start = end + 1;
  }
  return out;
}

//! A decimal 64-bit number, or nothing.
inline std::optional<std::uint64_t> number(std::string_view w) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (w.empty() || ec != std::errc() || end != w.data() + w.size()) return std::nullopt;
  return v;
}

//! Words [first, end) as numbers; nothing when one is not.
inline std::optional<std::vector<std::size_t>> numbers(const std::vector<std::string>& w,
                                                       std::size_t first = 1) {
  std::vector<std::size_t> out;
  for (std::size_t i = first; i < w.size(); ++i) {
    const auto v = number(w[i]);
    if (!v) return std::nullopt;
    out.push_back(static_cast<std::size_t>(*v));
  }
  return out;
}

//! One layout entry per word: "." is replicated (None), "a" one axis, "a,b" several.
template <class DimAxes>
std::vector<DimAxes> layout_axes(const std::vector<std::string>& w, std::size_t first) {
  std::vector<DimAxes> out;
  for (std::size_t i = first; i < w.size(); ++i) {
    if (w[i] == ".") {
      out.emplace_back();
      continue;
    }
    std::vector<std::string> names;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = w[i].find(',', start);
      names.push_back(w[i].substr(start, comma == std::string::npos ? comma : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    out.emplace_back(std::move(names));
  }
  return out;
}

}  // namespace kdist::fuzz
