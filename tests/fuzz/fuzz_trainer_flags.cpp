// Fuzz target: the example trainers' command line (examples/common/trainer_flags.hpp, CLI11).
// Input: one argument per line, e.g. "--epochs\n1e30\n" (tests/fuzz/corpus/trainer_flags/).
// A kdist::ValueError naming the flag is the expected outcome of bad flags; anything else is a
// defect, and so is a parsed value outside its documented range.
#include <common/trainer_flags.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ex = kdist::examples;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args{"trainer"};
  std::size_t start = 0;
  while (start < text.size() && args.size() < 64) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    args.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    const auto o = ex::parse_options(static_cast<int>(argv.size()), argv.data(), "usage", false);
    if (!o) return 0;  // --help
    KDIST_FUZZ_CHECK(o->epochs >= 1 && o->epochs <= ex::max_epochs);
    KDIST_FUZZ_CHECK(o->batch_size >= 1 && o->batch_size <= ex::max_batch_size);
    KDIST_FUZZ_CHECK(std::isfinite(o->learning_rate) && o->learning_rate > 0);
    for (auto e : o->mesh) KDIST_FUZZ_CHECK(e >= 1 && e <= ex::max_mesh_extent);
  } catch (const kdist::ValueError& e) {
    kdist::fuzz::expected_error(e);
    // bad flags: the documented outcome
  }
  return 0;
}
