#pragma once
//! \file common/text_data.hpp
//! Byte-level text for the GPT trainer: a file (--text FILE) or, by default, the plain-text files
//! of Debian's `fortunes` package (/usr/share/games/fortunes, English quotations), cut into
//! windows of `sequence + 1` bytes (inputs: the first `sequence`, targets: the last `sequence`),
//! the last `validation_split` of them held out.

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/nn/array_dataset.hpp>

namespace kdist::examples {

inline constexpr const char* debian_fortunes_dir = "/usr/share/games/fortunes";

//! The bytes of `path`, or of every fortunes file (sorted, .dat indexes and symlinks skipped) when
//! `path` is empty. Errors: ValueError naming what is missing and how to get it.
inline std::string load_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (!path.empty()) {
    if (!fs::is_regular_file(path)) {
      throw ValueError("--text " + path + ": no such file (give a plain-text file)");
    }
    files.push_back(path);
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(debian_fortunes_dir, ec)) {
      if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
      files.push_back(e.path());
    }
    if (files.empty()) {
      throw ValueError(std::string("no text: ") + debian_fortunes_dir +
                       " has no files; install Debian's fortunes package (apt-get install "
                       "fortunes) or give --text FILE");
    }
    std::sort(files.begin(), files.end());
  }
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return text;
}

struct TextSplits {
  ArrayDataset<float> train;
  ArrayDataset<float> validation;
};

//! Non-overlapping windows of `sequence + 1` bytes; tokens are the bytes' values (0-255) as
//! floats (the Embedding casts them). Errors: ValueError when either split would be empty.
inline TextSplits text_windows(const std::string& text, std::size_t sequence,
                               double validation_split) {
  const std::size_t windows = text.size() > sequence ? (text.size() - 1) / sequence : 0;
  const auto held = static_cast<std::size_t>(static_cast<double>(windows) * validation_split);
  if (windows < 2 || held == 0 || held >= windows) {
    throw ValueError(
        "the text has " + std::to_string(text.size()) + " bytes: " + std::to_string(windows) +
        " windows of " + std::to_string(sequence + 1) +
        " bytes, too few for a training and a validation split of " +
        std::to_string(validation_split) + "; give a longer --text or a shorter --seq");
  }
  auto split = [&](std::size_t first, std::size_t count) {
    std::vector<float> x(count * sequence), y(count * sequence);
    for (std::size_t w = 0; w < count; ++w) {
      const std::size_t at = (first + w) * sequence;
      for (std::size_t j = 0; j < sequence; ++j) {
        x[w * sequence + j] = static_cast<float>(static_cast<unsigned char>(text[at + j]));
        y[w * sequence + j] = static_cast<float>(static_cast<unsigned char>(text[at + j + 1]));
      }
    }
    return ArrayDataset<float>(std::move(x), {sequence}, std::move(y), sequence);
  };
  return {split(0, windows - held), split(windows - held, held)};
}

}  // namespace kdist::examples
