#pragma once
//! \file common/fashion_mnist.hpp
//! Reader of Fashion-MNIST as Debian's package `dataset-fashion-mnist` installs it: gzip'd IDX
//! files `{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` in /usr/share/datasets/fashion-mnist.
//! Read with zlib (gzopen/gzread); magic numbers, image size and counts are checked.
//!
//! Directory: the `dir` argument if not empty, else the environment variable
//! KDIST_FASHION_MNIST_DIR if set and not empty, else /usr/share/datasets/fashion-mnist.
//!
//! Errors: a missing file is a kdist::RuntimeError naming the path and the Debian package; a
//! corrupt or truncated file a kdist::RuntimeError naming the path and what was wrong; a range
//! outside the split a kdist::ValueError.

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <kdist/core/error.hpp>
#include <limits>
#include <string>
#include <vector>

namespace kdist::examples {

//! Which file pair to read: the 60,000 training or the 10,000 test examples.
enum class Split {
  train,  //!< train-*-ubyte.gz
  test,   //!< t10k-*-ubyte.gz
};

//! Debian's install directory of dataset-fashion-mnist.
inline constexpr const char* fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";

//! Pixels per image (28 x 28).
inline constexpr std::size_t fashion_mnist_features = 784;

//! Classes (T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt, Sneaker, Bag, Ankle boot).
inline constexpr std::size_t fashion_mnist_classes = 10;

//! A block of consecutive examples.
struct FashionMnist {
  std::size_t first = 0;                          //!< index in the split of the first example held
  std::size_t count = 0;                          //!< number of examples held
  std::size_t features = fashion_mnist_features;  //!< 784
  std::vector<float> images;                      //!< [count, 784] row-major, pixel / 255 in [0, 1]
  std::vector<std::uint8_t> labels;               //!< [count], 0..9

  //! Pointer to the 784 pixels of example `i` (0 <= i < count).
  const float* image(std::size_t i) const { return images.data() + i * features; }
};

//! The directory the reader uses: `dir` if not empty, else $KDIST_FASHION_MNIST_DIR if set and not
//! empty, else Debian's /usr/share/datasets/fashion-mnist.
inline std::string fashion_mnist_dir(const std::string& dir = {}) {
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("KDIST_FASHION_MNIST_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return fashion_mnist_default_dir;
}

//! The path of the images (`labels == false`) or labels file of `split` in `dir` (resolved as
//! fashion_mnist_dir does).
inline std::string fashion_mnist_path(Split split, bool labels, const std::string& dir = {}) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string kind = labels ? "labels-idx1" : "images-idx3";
  return (std::filesystem::path(fashion_mnist_dir(dir)) / (prefix + "-" + kind + "-ubyte.gz"))
      .string();
}

namespace detail {

//! An open gzip (or plain) file; closes on scope exit.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      throw RuntimeError("kdist: Fashion-MNIST file not found: " + path +
                         ". Install Debian's package (apt-get install dataset-fashion-mnist), or "
                         "point KDIST_FASHION_MNIST_DIR (or the directory argument) at a directory "
                         "holding the four *-ubyte.gz files");
    }
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw RuntimeError("kdist: Fashion-MNIST path " + path +
                         " is not a regular file; it should be the gzip'd IDX file of Debian's "
                         "dataset-fashion-mnist");
    }
    read_stored_size(path);
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      throw RuntimeError("kdist: cannot open Fashion-MNIST file " + path +
                         " for reading; check its permissions");
    }
    gzbuffer(file_, 1u << 17);
  }

  //! Checks, before anything is allocated, that a header declaring `declared` bytes in all
  //! (`items` of something) fits the file: a plain file's size, or a gzip file's trailer (the
  //! uncompressed size modulo 2^32) and deflate's best ratio (1032:1) over its compressed size.
  void check_declared_size(std::uint64_t declared, const std::string& items) const {
    bool fits = false;
    if (gzip_) {
      fits = (declared & 0xffffffffu) == stored_ && declared <= compressed_ * 1032u + 1024u;
    } else {
      fits = declared == stored_;
    }
    if (!fits) {
      throw RuntimeError(
          "kdist: Fashion-MNIST file " + path_ + " is corrupt: its header declares " + items +
          " (" + std::to_string(declared) + " bytes), but the file holds " +
          std::to_string(stored_) + " bytes" + (gzip_ ? " (gzip trailer, modulo 2^32)" : "") +
          ". Reinstall it (apt-get install --reinstall dataset-fashion-mnist)");
    }
  }

  //! Reads to the end of the file, so that zlib checks the gzip CRC-32 and length, and checks
  //! that nothing follows the declared data.
  void finish() {
    unsigned char extra = 0;
    const int got = gzread(file_, &extra, 1);
    if (got < 0) read(&extra, 1, "the gzip trailer");  // throws with zlib's message
    if (got > 0) {
      throw RuntimeError("kdist: Fashion-MNIST file " + path_ +
                         " is corrupt: it holds more data than its header declares. Reinstall it "
                         "(apt-get install --reinstall dataset-fashion-mnist)");
    }
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() {
    if (file_ != nullptr) gzclose(file_);
  }

  //! Reads exactly `n` bytes or throws RuntimeError saying what was expected (`what`).
  void read(void* out, std::size_t n, const std::string& what) {
    auto* p = static_cast<unsigned char*>(out);
    std::size_t done = 0;
    while (done < n) {
      const std::size_t want = std::min<std::size_t>(n - done, std::size_t{1} << 30);
      const int got = gzread(file_, p + done, static_cast<unsigned>(want));
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_, &errnum);
        throw RuntimeError("kdist: Fashion-MNIST file " + path_ +
                           " is corrupt: zlib error while "
                           "reading " +
                           what + ": " + (msg != nullptr ? msg : "unknown") +
                           ". Reinstall it (apt-get install --reinstall dataset-fashion-mnist)");
      }
      if (got == 0) {
        throw RuntimeError("kdist: Fashion-MNIST file " + path_ +
                           " is truncated: it ended while "
                           "reading " +
                           what + " (" + std::to_string(done) + " of " + std::to_string(n) +
                           " bytes). Reinstall it (apt-get install "
                           "--reinstall dataset-fashion-mnist)");
      }
      done += static_cast<std::size_t>(got);
    }
  }

  //! Reads a big-endian 32-bit unsigned integer.
  std::uint32_t read_u32(const std::string& what) {
    unsigned char b[4];
    read(b, 4, what);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  //! Skips `n` bytes (reads and discards them: gzip has no random access).
  void skip(std::size_t n, const std::string& what) {
    std::vector<unsigned char> buf(std::min<std::size_t>(n, std::size_t{1} << 20));
    while (n > 0) {
      const std::size_t k = std::min(n, buf.size());
      read(buf.data(), k, what);
      n -= k;
    }
  }

  const std::string& path() const { return path_; }

 private:
  //! gzip: the trailer's ISIZE (little-endian, last 4 bytes); plain: the file size.
  void read_stored_size(const std::string& path) {
    std::error_code ec;
    compressed_ = static_cast<std::uint64_t>(std::filesystem::file_size(path, ec));
    if (ec) compressed_ = 0;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      throw RuntimeError("kdist: cannot open Fashion-MNIST file " + path +
                         " for reading; check its permissions");
    }
    unsigned char head[2] = {0, 0};
    gzip_ = std::fread(head, 1, 2, f) == 2 && head[0] == 0x1f && head[1] == 0x8b;
    stored_ = compressed_;
    if (gzip_) {
      unsigned char tail[4] = {0, 0, 0, 0};
      if (compressed_ < 18 || std::fseek(f, -4, SEEK_END) != 0 || std::fread(tail, 1, 4, f) != 4) {
        std::fclose(f);
        throw RuntimeError("kdist: Fashion-MNIST file " + path +
                           " is truncated: too short for a gzip file. Reinstall it (apt-get "
                           "install --reinstall dataset-fashion-mnist)");
      }
      stored_ = std::uint64_t{tail[0]} | (std::uint64_t{tail[1]} << 8) |
                (std::uint64_t{tail[2]} << 16) | (std::uint64_t{tail[3]} << 24);
    }
    std::fclose(f);
  }

  std::string path_;
  gzFile file_ = nullptr;
  bool gzip_ = false;
  std::uint64_t stored_ = 0;      // uncompressed bytes (gzip: modulo 2^32)
  std::uint64_t compressed_ = 0;  // bytes on disk
};

inline std::string hex32(std::uint32_t x) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int i = 28; i >= 0; i -= 4) s += digits[(x >> i) & 0xfu];
  return s;
}

//! Opens an IDX file, checks its magic number; returns the number of items.
inline std::uint32_t read_idx_header(GzFile& f, std::uint32_t expected_magic) {
  const std::uint32_t magic = f.read_u32("the IDX magic number");
  if (magic != expected_magic) {
    throw RuntimeError(
        "kdist: Fashion-MNIST file " + f.path() + " is corrupt: IDX magic number " + hex32(magic) +
        ", expected " + hex32(expected_magic) + " (" +
        (expected_magic == 0x803 ? "ubyte images, 3 dimensions" : "ubyte labels, 1 dimension") +
        ")");
  }
  return f.read_u32("the number of items");
}

}  // namespace detail

//! The number of examples of `split`, read from the labels file's header.
//! Errors: as load_fashion_mnist.
inline std::size_t fashion_mnist_size(Split split, const std::string& dir = {}) {
  detail::GzFile labels(fashion_mnist_path(split, true, dir));
  const std::size_t n = detail::read_idx_header(labels, 0x00000801);
  labels.check_declared_size(8 + std::uint64_t{n}, std::to_string(n) + " labels");
  return n;
}

//! Reads `count` examples of `split` starting at example `first` (count = max: to the end).
//! Images are float [count, 784] with pixel / 255 in [0, 1], labels uint8 in 0..9.
//! Errors: kdist::RuntimeError for a missing file (naming the path and `apt-get install
//! dataset-fashion-mnist`), a corrupt one (bad magic number, image size other than 28x28, image
//! and label counts that differ, a count its file cannot hold (checked before anything is
//! allocated), a label above 9, zlib errors, a gzip CRC-32 or length that does not match, data
//! beyond the declared count) or a truncated one. The whole file is read, whatever the range, so
//! the gzip checks cover every byte;
//! kdist::ValueError if [first, first + count) is not inside the split. Example: `auto test =
//! kdist::examples::load_fashion_mnist(Split::test);`
inline FashionMnist load_fashion_mnist(Split split, std::size_t first = 0,
                                       std::size_t count = std::numeric_limits<std::size_t>::max(),
                                       const std::string& dir = {}) {
  detail::GzFile images(fashion_mnist_path(split, false, dir));
  detail::GzFile labels(fashion_mnist_path(split, true, dir));
  const std::size_t n_images = detail::read_idx_header(images, 0x00000803);
  const std::uint32_t rows = images.read_u32("the number of rows");
  const std::uint32_t cols = images.read_u32("the number of columns");
  if (rows != 28 || cols != 28) {
    throw RuntimeError("kdist: Fashion-MNIST file " + images.path() + " is corrupt: images are " +
                       std::to_string(rows) + "x" + std::to_string(cols) + ", expected 28x28");
  }
  // Header bytes + data; n is at most 2^32 - 1, so these cannot overflow 64 bits.
  images.check_declared_size(16 + std::uint64_t{n_images} * fashion_mnist_features,
                             std::to_string(n_images) + " images of 28x28");
  const std::size_t n_labels = detail::read_idx_header(labels, 0x00000801);
  labels.check_declared_size(8 + std::uint64_t{n_labels}, std::to_string(n_labels) + " labels");
  if (n_images != n_labels) {
    throw RuntimeError("kdist: Fashion-MNIST files " + images.path() + " and " + labels.path() +
                       " do not match: " + std::to_string(n_images) + " images but " +
                       std::to_string(n_labels) + " labels");
  }
  if (first > n_images) {
    throw ValueError("kdist::examples::load_fashion_mnist: first example " + std::to_string(first) +
                     " is past the end of the split (" + std::to_string(n_images) + " examples)");
  }
  if (count == std::numeric_limits<std::size_t>::max()) count = n_images - first;
  if (count > n_images - first) {
    throw ValueError("kdist::examples::load_fashion_mnist: examples [" + std::to_string(first) +
                     ", " + std::to_string(first + count) + ") are not inside the split (" +
                     std::to_string(n_images) + " examples)");
  }

  FashionMnist out;
  out.first = first;
  out.count = count;
  const std::size_t pixels = count * fashion_mnist_features;
  images.skip(first * fashion_mnist_features, "the images before the requested range");
  std::vector<std::uint8_t> raw(pixels);
  images.read(raw.data(), pixels, "the image pixels");
  out.images.resize(pixels);
  for (std::size_t i = 0; i < pixels; ++i) out.images[i] = static_cast<float>(raw[i]) / 255.0f;

  // The rest of the file too: the gzip CRC and length cover the whole file.
  images.skip((n_images - first - count) * fashion_mnist_features,
              "the images after the requested range");
  images.finish();

  labels.skip(first, "the labels before the requested range");
  out.labels.resize(count);
  labels.read(out.labels.data(), count, "the labels");
  labels.skip(n_labels - first - count, "the labels after the requested range");
  labels.finish();
  for (std::size_t i = 0; i < count; ++i) {
    if (out.labels[i] >= fashion_mnist_classes) {
      throw RuntimeError("kdist: Fashion-MNIST file " + labels.path() + " is corrupt: label " +
                         std::to_string(out.labels[i]) + " of example " +
                         std::to_string(first + i) + " is not in 0..9");
    }
  }
  return out;
}

}  // namespace kdist::examples
