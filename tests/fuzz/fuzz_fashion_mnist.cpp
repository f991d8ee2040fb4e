// Fuzz target: the Fashion-MNIST reader (examples/common/fashion_mnist.hpp) on hostile files.
// Input: the images file's bytes, the 8 bytes "--LABELS", then the labels file's bytes; each is
// written as the test split (t10k-*-idx?-ubyte.gz) of a scratch directory, gzip'd or plain as the
// bytes are (zlib reads both). tests/fuzz/corpus/fashion_mnist/ holds files built by
// make_corpus.py. A kdist::Error naming the file is the expected outcome of a bad file; anything
// else is a defect (bad_alloc from an untrusted count included), and so is a file that loads with
// data that its header does not declare.
#include <common/fashion_mnist.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "fuzz_text.hpp"

namespace {

// A directory of this process's own, removed at exit.
struct ScratchDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("kdist-fuzz-fashion-mnist-" + std::to_string(::getpid()));
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::filesystem::path& scratch() {
  static const ScratchDir dir;
  return dir.path;
}

void write(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace ex = kdist::examples;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find("--LABELS");
  const auto images = input.substr(0, split);
  const auto labels =
      split == std::string_view::npos ? std::string_view{} : input.substr(split + 8);
  write(scratch() / "t10k-images-idx3-ubyte.gz", images);
  write(scratch() / "t10k-labels-idx1-ubyte.gz", labels);
  try {
    const auto set = ex::load_fashion_mnist(ex::Split::test, 0, SIZE_MAX, scratch().string());
    KDIST_FUZZ_CHECK(set.images.size() == set.count * ex::fashion_mnist_features);
    KDIST_FUZZ_CHECK(set.labels.size() == set.count);
    for (auto l : set.labels) KDIST_FUZZ_CHECK(l < ex::fashion_mnist_classes);
    for (auto p : set.images) KDIST_FUZZ_CHECK(p >= 0.0f && p <= 1.0f);
  } catch (const kdist::Error& e) {
    kdist::fuzz::expected_error(e);
    // a bad file: the documented outcome
  }
  return 0;
}
