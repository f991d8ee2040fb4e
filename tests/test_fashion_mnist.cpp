// Tests of examples/common/fashion_mnist.hpp: the real Debian data (dataset-fashion-mnist), ranges,
// the directory override, and every error path on files written to a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/fashion_mnist.hpp"

namespace {

namespace fs = std::filesystem;
using kdist::examples::fashion_mnist_dir;
using kdist::examples::fashion_mnist_path;
using kdist::examples::fashion_mnist_size;
using kdist::examples::load_fashion_mnist;
using kdist::examples::Split;

bool debian_data_installed() {
  return fs::exists(
      fashion_mnist_path(Split::train, false, kdist::examples::fashion_mnist_default_dir));
}

//! A fresh temporary directory, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("kdist_fmnist_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

//! Scoped environment variable.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const std::string& value) : name(n) { ::setenv(n, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(x >> s));
}

void write_gz(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  gzclose(f);
}

//! IDX image file content: magic, n, rows, cols, then pixel (i * 7 + k) % 256.
std::vector<std::uint8_t> images_idx(std::uint32_t n, std::uint32_t rows = 28,
                                     std::uint32_t cols = 28, std::uint32_t magic = 0x803,
                                     std::size_t stored = static_cast<std::size_t>(-1)) {
  std::vector<std::uint8_t> b;
  put_u32(b, magic);
  put_u32(b, n);
  put_u32(b, rows);
  put_u32(b, cols);
  const std::size_t count = std::min<std::size_t>(stored, std::size_t{n} * rows * cols);
  for (std::size_t k = 0; k < count; ++k) b.push_back(static_cast<std::uint8_t>((k * 7) % 256));
  return b;
}

std::vector<std::uint8_t> labels_idx(std::uint32_t n, std::uint32_t magic = 0x801,
                                     std::uint8_t bad_at_3 = 3) {
  std::vector<std::uint8_t> b;
  put_u32(b, magic);
  put_u32(b, n);
  for (std::uint32_t i = 0; i < n; ++i)
    b.push_back(static_cast<std::uint8_t>(i == 3 ? bad_at_3 : i % 10));
  return b;
}

//! Writes a consistent small t10k pair of `n` examples into `dir`.
void write_small_split(const TempDir& dir, std::uint32_t n) {
  write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(n));
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(n));
}

//! Expects `f` to throw E whose message contains every string of `parts`.
template <class E, class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << what << "\n  lacks: " << p;
  }
}

TEST(FashionMnist, TrainSplitFromDebianPackage) {
  if (!debian_data_installed()) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  const auto train = load_fashion_mnist(Split::train, 0, static_cast<std::size_t>(-1),
                                        kdist::examples::fashion_mnist_default_dir);
  ASSERT_EQ(train.count, 60000u);
  ASSERT_EQ(train.features, 784u);
  ASSERT_EQ(train.images.size(), 60000u * 784u);
  ASSERT_EQ(train.labels.size(), 60000u);
  const auto [lo, hi] = std::minmax_element(train.images.begin(), train.images.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  std::array<int, 10> per_class{};
  for (auto l : train.labels) {
    ASSERT_LT(l, 10);
    ++per_class[l];
  }
  for (int c : per_class) EXPECT_EQ(c, 6000);
  // Pixels are byte / 255: every value times 255 is an integer.
  for (std::size_t k = 0; k < 784 * 10; ++k) {
    const float v = train.images[k] * 255.0f;
    EXPECT_NEAR(v, std::round(v), 1e-3);
  }
  EXPECT_EQ(fashion_mnist_size(Split::train, kdist::examples::fashion_mnist_default_dir), 60000u);
}

TEST(FashionMnist, TestSplitAndRanges) {
  if (!debian_data_installed()) GTEST_SKIP() << "apt-get install dataset-fashion-mnist";
  const std::string dir = kdist::examples::fashion_mnist_default_dir;
  const auto test = load_fashion_mnist(Split::test, 0, static_cast<std::size_t>(-1), dir);
  ASSERT_EQ(test.count, 10000u);
  std::array<int, 10> per_class{};
  for (auto l : test.labels) ++per_class[l];
  for (int c : per_class) EXPECT_EQ(c, 1000);
  EXPECT_EQ(fashion_mnist_size(Split::test, dir), 10000u);
  // A range equals the same rows of the full read.
  const auto part = load_fashion_mnist(Split::test, 1234, 7, dir);
  ASSERT_EQ(part.first, 1234u);
  ASSERT_EQ(part.count, 7u);
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(part.labels[i], test.labels[1234 + i]);
    EXPECT_TRUE(std::equal(part.image(i), part.image(i) + 784, test.image(1234 + i)));
  }
  const auto tail = load_fashion_mnist(Split::test, 9990, static_cast<std::size_t>(-1), dir);
  EXPECT_EQ(tail.count, 10u);
  EXPECT_EQ(tail.labels[9], test.labels[9999]);
  EXPECT_EQ(load_fashion_mnist(Split::test, 10000, static_cast<std::size_t>(-1), dir).count, 0u);
}

TEST(FashionMnist, DirectoryResolution) {
  ::unsetenv("KDIST_FASHION_MNIST_DIR");
  EXPECT_EQ(fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(fashion_mnist_dir("/data"), "/data");
  {
    ScopedEnv env("KDIST_FASHION_MNIST_DIR", "/from/env");
    EXPECT_EQ(fashion_mnist_dir(), "/from/env");
    EXPECT_EQ(fashion_mnist_dir("/data"), "/data");  // the argument wins
    EXPECT_EQ(fashion_mnist_path(Split::train, true), "/from/env/train-labels-idx1-ubyte.gz");
    EXPECT_EQ(fashion_mnist_path(Split::test, false), "/from/env/t10k-images-idx3-ubyte.gz");
  }
  {
    ScopedEnv empty("KDIST_FASHION_MNIST_DIR", "");
    EXPECT_EQ(fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  }
  // The variable is honoured by the reader.
  TempDir dir;
  write_small_split(dir, 5);
  ScopedEnv env("KDIST_FASHION_MNIST_DIR", dir.str());
  const auto small = load_fashion_mnist(Split::test);
  ASSERT_EQ(small.count, 5u);
  EXPECT_EQ(small.labels[4], 4);
  EXPECT_FLOAT_EQ(small.images[1], 7.0f / 255.0f);
  EXPECT_FLOAT_EQ(small.image(1)[0], static_cast<float>((784 * 7) % 256) / 255.0f);
}

TEST(FashionMnistErrors, MissingFileNamesPathAndPackage) {
  TempDir dir;
  const std::string images = (dir.path / "train-images-idx3-ubyte.gz").string();
  expect_error<kdist::RuntimeError>(
      [&] { load_fashion_mnist(Split::train, 0, 10, dir.str()); },
      {"Fashion-MNIST file not found: " + images, "apt-get install dataset-fashion-mnist",
       "KDIST_FASHION_MNIST_DIR"});
  // Images present, labels missing: names the labels file.
  write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(3));
  expect_error<kdist::RuntimeError>(
      [&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
      {"not found: " + (dir.path / "t10k-labels-idx1-ubyte.gz").string()});
  expect_error<kdist::RuntimeError>([&] { fashion_mnist_size(Split::train, dir.str()); },
                                    {"train-labels-idx1-ubyte.gz", "dataset-fashion-mnist"});
}

TEST(FashionMnistErrors, NotARegularFile) {
  TempDir dir;
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(3));
  fs::create_directory(dir.path / "t10k-images-idx3-ubyte.gz");
  expect_error<kdist::RuntimeError>(
      [&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
      {"Fashion-MNIST path " + (dir.path / "t10k-images-idx3-ubyte.gz").string() +
       " is not a regular file"});
}

TEST(FashionMnistErrors, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files without permission";
  TempDir dir;
  write_small_split(dir, 2);
  const auto path = dir.path / "t10k-images-idx3-ubyte.gz";
  fs::permissions(path, fs::perms::none);
  expect_error<kdist::RuntimeError>(
      [&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
      {"cannot open Fashion-MNIST file " + path.string(), "check its permissions"});
}

TEST(FashionMnistErrors, CorruptHeaders) {
  {
    TempDir dir;
    write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(3, 28, 28, 0x801));
    write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(3));
    expect_error<kdist::RuntimeError>(
        [&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
        {(dir.path / "t10k-images-idx3-ubyte.gz").string(),
         "is corrupt: IDX magic number 0x00000801", "expected 0x00000803"});
  }
  {
    TempDir dir;
    write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(3));
    write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(3, 0x12345678));
    expect_error<kdist::RuntimeError>(
        [&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
        {"t10k-labels-idx1-ubyte.gz is corrupt: IDX magic number 0x12345678",
         "expected 0x00000801"});
  }
  {
    TempDir dir;
    write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(3, 27, 28));
    write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(3));
    expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
                                      {"is corrupt: images are 27x28, expected 28x28"});
  }
  {
    TempDir dir;
    write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(5));
    write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(4));
    expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
                                      {"do not match: 5 images but 4 labels"});
  }
  {
    TempDir dir;
    write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(5));
    write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(5, 0x801, 10));
    expect_error<kdist::RuntimeError>(
        [&] { load_fashion_mnist(Split::test, 0, 5, dir.str()); },
        {"t10k-labels-idx1-ubyte.gz is corrupt: label 10 of example 3 is not in 0..9"});
    // The bad label is outside the requested range: reading the other examples works.
    EXPECT_EQ(load_fashion_mnist(Split::test, 0, 3, dir.str()).count, 3u);
  }
  {
    TempDir dir;  // an empty file: no header at all
    write_gz(dir.path / "t10k-images-idx3-ubyte.gz", {});
    write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(3));
    expect_error<kdist::RuntimeError>(
        [&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
        {"is truncated: it ended while reading the IDX magic number"});
  }
}

TEST(FashionMnistErrors, TruncatedData) {
  // The header promises 4 images; the file holds 2.5: an error before anything is read or
  // allocated, even for a range the file holds (bad data never trains).
  TempDir dir;
  write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(4, 28, 28, 0x803, 784 * 5 / 2));
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(4));
  for (std::size_t count : {2, 4}) {
    expect_error<kdist::RuntimeError>(
        [&] { load_fashion_mnist(Split::test, 0, count, dir.str()); },
        {(dir.path / "t10k-images-idx3-ubyte.gz").string(),
         "is corrupt: its header declares 4 images of 28x28 (3152 bytes), but the file holds "
         "1976 bytes (gzip trailer, modulo 2^32)",
         "apt-get install --reinstall dataset-fashion-mnist"});
  }
}

TEST(FashionMnistErrors, HugeDeclaredCountsFailBeforeAllocating) {
  // Headers declaring 2^32 - 1 images (3.4 TB) or 3 M labels in files of a few bytes: the
  // documented error, at once (no bad_alloc, no gigabytes per rank).
  TempDir dir;
  write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(0xffffffffu, 28, 28, 0x803, 100));
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(3));
  expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, 1, dir.str()); },
                                    {"t10k-images-idx3-ubyte.gz is corrupt: its header declares "
                                     "4294967295 images of 28x28"});
  TempDir dir2;
  write_gz(dir2.path / "t10k-images-idx3-ubyte.gz", images_idx(3));
  std::vector<std::uint8_t> labels;
  put_u32(labels, 0x801);
  put_u32(labels, 3'000'000);
  labels.push_back(1);
  write_gz(dir2.path / "t10k-labels-idx1-ubyte.gz", labels);
  expect_error<kdist::RuntimeError>(
      [&] { load_fashion_mnist(Split::test, 0, 1, dir2.str()); },
      {"t10k-labels-idx1-ubyte.gz is corrupt: its header declares 3000000 labels"});
  expect_error<kdist::RuntimeError>([&] { (void)fashion_mnist_size(Split::test, dir2.str()); },
                                    {"declares 3000000 labels"});
}

TEST(FashionMnistErrors, FlippedBytesFailTheGzipCheckWhateverTheRange) {
  // 64 bytes flipped inside the deflate stream: inflate either fails or yields other bytes, whose
  // CRC-32 then differs from the trailer's. Either way an error naming the file, also when only
  // the first example is asked for (the whole file is checked).
  TempDir dir;
  const auto images = dir.path / "t10k-images-idx3-ubyte.gz";
  write_gz(images, images_idx(400));
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(400));
  std::vector<char> bytes;
  {
    std::ifstream in(images, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 200u);
  for (std::size_t k = 0; k < 64; ++k) bytes[bytes.size() / 2 + k] ^= 0x5a;
  {
    std::ofstream out(images, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  for (std::size_t count : {1, 400}) {
    expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, count, dir.str()); },
                                      {images.string(), "is corrupt"});
  }
}

TEST(FashionMnistErrors, DataBeyondTheDeclaredCount) {
  TempDir dir;
  auto labels = labels_idx(5);
  labels.push_back(7);  // a sixth label the header does not declare
  write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(5));
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels);
  expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, 5, dir.str()); },
                                    {"t10k-labels-idx1-ubyte.gz is corrupt: its header declares 5 "
                                     "labels (13 bytes), but the file holds 14 bytes"});
}

TEST(FashionMnistErrors, TrailerThatDoesNotMatchTheData) {
  // A gzip file whose CRC-32 is wrong (the data decompresses, the check fails at the end).
  TempDir dir;
  const auto labels = dir.path / "t10k-labels-idx1-ubyte.gz";
  write_gz(dir.path / "t10k-images-idx3-ubyte.gz", images_idx(5));
  write_gz(labels, labels_idx(5));
  std::vector<char> bytes;
  {
    std::ifstream in(labels, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 8] ^= 0x01;  // first byte of the CRC-32
  {
    std::ofstream out(labels, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, 2, dir.str()); },
                                    {labels.string(), "is corrupt: zlib error", "check"});
}

TEST(FashionMnistErrors, CorruptCompressedStream) {
  // A valid gzip file cut in the middle of its deflate stream, and one with garbage bytes in it.
  TempDir dir;
  const auto images = dir.path / "t10k-images-idx3-ubyte.gz";
  write_gz(images, images_idx(50));
  write_gz(dir.path / "t10k-labels-idx1-ubyte.gz", labels_idx(50));
  std::vector<char> bytes;
  {
    std::ifstream in(images, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 100u);
  {
    std::ofstream out(images, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  try {
    load_fashion_mnist(Split::test, 0, 50, dir.str());
    ADD_FAILURE() << "no exception";
  } catch (const kdist::RuntimeError& e) {
    const std::string what = e.what();
    std::cout << "  cut stream: " << what << "\n";
    EXPECT_NE(what.find(images.string()), std::string::npos) << what;
    EXPECT_NE(what.find("apt-get install --reinstall"), std::string::npos) << what;
    EXPECT_TRUE(what.find("is truncated") != std::string::npos ||
                what.find("is corrupt") != std::string::npos)
        << what;
  }
  {
    std::vector<char> garbled = bytes;
    for (std::size_t k = 20; k < garbled.size() - 8; k += 3) garbled[k] = static_cast<char>(0xA5);
    std::ofstream out(images, std::ios::binary | std::ios::trunc);
    out.write(garbled.data(), static_cast<std::streamsize>(garbled.size()));
  }
  expect_error<kdist::RuntimeError>([&] { load_fashion_mnist(Split::test, 0, 50, dir.str()); },
                                    {images.string(), "is corrupt: zlib error while reading"});
}

TEST(FashionMnistErrors, RangeOutsideTheSplit) {
  TempDir dir;
  write_small_split(dir, 5);
  expect_error<kdist::ValueError>([&] { load_fashion_mnist(Split::test, 6, 1, dir.str()); },
                                  {"first example 6 is past the end of the split (5 examples)"});
  expect_error<kdist::ValueError>([&] { load_fashion_mnist(Split::test, 3, 3, dir.str()); },
                                  {"examples [3, 6) are not inside the split (5 examples)"});
}

}  // namespace
