// Fuzz target: sequences of LayoutMap operations, checked against the map's own invariants.
// Input lines (tests/fuzz/corpus/layout_map/ has examples):
//   mesh <extent>... : <name>...      give the map a mesh (first line only)
//   set <key> <dim>...                insert a rule: key is an RE2 regex, dims '.', 'a' or 'a,b'
//   get <path>   resolve <path> <extent>...   erase <key>   pop <key>   strict   copy   report
// kdist::Error (duplicate key, bad regex, axes not in the mesh, several matches, rank or
// division mismatch, missing key) is the expected outcome of a bad operation, and a failed
// operation changes nothing; anything else is a defect.
#include <kdist/strategy/layout_map.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_text.hpp"

namespace {

constexpr std::size_t max_operations = 64;

std::optional<kdist::RuntimeDeviceMesh> mesh_from(const std::vector<std::string>& w) {
  std::vector<std::size_t> shape;
  std::vector<std::string> names;
  bool in_names = false;
  for (std::size_t i = 1; i < w.size(); ++i) {
    if (w[i] == ":") {
      in_names = true;
    } else if (in_names) {
      names.push_back(w[i]);
    } else if (auto v = kdist::fuzz::number(w[i]); v && *v <= 64) {
      shape.push_back(static_cast<std::size_t>(*v));
    } else {
      return std::nullopt;
    }
  }
  std::size_t count = 1;
  for (auto e : shape) count *= e;  // each extent <= 64, few axes: cannot overflow here
  if (shape.size() > 4 || count > 4096) return std::nullopt;
  return kdist::RuntimeDeviceMesh(shape, names, count);
}

void apply(kdist::LayoutMap<>& map, const std::vector<std::string>& w) {
  const std::string& op = w[0];
  const std::size_t before = map.size();
  if (op == "set" && w.size() >= 2) {
    const auto axes = kdist::fuzz::layout_axes<kdist::DimAxes>(w, 2);
    try {
      map.insert(w[1], axes);
    } catch (const kdist::Error& e) {
      kdist::fuzz::expected_error(e);
      KDIST_FUZZ_CHECK(map.size() == before);  // strong guarantee
      return;
    }
    KDIST_FUZZ_CHECK(map.size() == before + 1 && map.contains(w[1]));
    KDIST_FUZZ_CHECK(map.at(w[1]).axes().size() == axes.size());
    // An exact key wins over every regex.
    const auto* found = map.find(w[1]);
    KDIST_FUZZ_CHECK(found == &map.at(w[1]));
  } else if (op == "get" && w.size() == 2) {
    const auto layout = map.get(w[1]);
    const auto key = map.matching_key(w[1]);
    KDIST_FUZZ_CHECK(layout.has_value() == key.has_value());
    if (key) KDIST_FUZZ_CHECK(map.contains(*key));
  } else if (op == "resolve" && w.size() >= 2) {
    if (auto shape = kdist::fuzz::numbers(w, 2)) {
      if (auto layout = map.resolve(w[1], *shape)) {
        KDIST_FUZZ_CHECK(layout->rank() == shape->size());
      }
    }
  } else if (op == "erase" && w.size() == 2) {
    const bool had = map.contains(w[1]);
    KDIST_FUZZ_CHECK(map.erase(w[1]) == (had ? 1u : 0u));
    KDIST_FUZZ_CHECK(!map.contains(w[1]) && map.size() == before - (had ? 1 : 0));
  } else if (op == "pop" && w.size() == 2) {
    (void)map.pop(w[1]);
    KDIST_FUZZ_CHECK(!map.contains(w[1]) && map.size() == before - 1);
  } else if (op == "strict") {
    map.set_strict(true);
  } else if (op == "copy") {
    const kdist::LayoutMap copy(map);
    KDIST_FUZZ_CHECK(copy.keys() == map.keys());
    map = copy;
  } else if (op == "report") {
    (void)map.report().to_string();
  }
  KDIST_FUZZ_CHECK(map.keys().size() == map.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto ops = kdist::fuzz::lines(data, size);
  std::optional<kdist::RuntimeDeviceMesh> mesh;
  std::size_t first = 0;
  if (!ops.empty() && ops[0][0] == "mesh") {
    try {
      mesh = mesh_from(ops[0]);
    } catch (const kdist::Error& e) {
      kdist::fuzz::expected_error(e);
      return 0;
    }
    first = 1;
  }
  kdist::LayoutMap map(mesh);
  for (std::size_t i = first; i < ops.size() && i < first + max_operations; ++i) {
    try {
      apply(map, ops[i]);
    } catch (const kdist::Error& e) {
      kdist::fuzz::expected_error(e);
      // a bad operation: the documented outcome
    }
  }
  return 0;
}
