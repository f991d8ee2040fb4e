// Runs a fuzz target over files, without libFuzzer: the corpus as regression tests in every build
// (g++ included). Usage: fuzz_<name>_replay <file or directory>...; exits non-zero when an input
// makes the target crash (it aborts) or when no input was found.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
int replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  std::printf("replaying %s (%zu bytes)\n", file.c_str(), bytes.size());
  std::fflush(stdout);
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) count += replay(e.path());
      }
    } else {
      count += replay(p);
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "no input found in the paths given\n");
    return 1;
  }
  std::printf("%d inputs replayed, no crash\n", count);
  return 0;
}
