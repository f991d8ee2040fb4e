#pragma once
//! \file core/dim_spec.hpp
//! How one tensor dimension is laid out on the mesh, as a compile-time value: replicated (Keras'
//! `None`), sharded over one mesh axis (`"model"`), or over several (`kdist::axes<"data",
//! "model">`, JAX's `P(('data', 'model'))`, which Keras cannot express).

#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>

#include <kdist/core/detail/fixed_string.hpp>

namespace kdist {

//! A structural value usable as a template argument: `TensorLayout<Mesh, kdist::replicated,
//! "model">` passes one DimSpec per tensor dimension. Limits: 4 mesh axes per dimension, 31
//! characters per axis name (checked by TensorLayout with a message).
struct DimSpec {
  static constexpr std::size_t max_axes = 4;
  static constexpr std::size_t max_name = 31;

  char names[max_axes][max_name + 1]{};
  std::size_t count = 0;
  bool overflow = false;  // more axes or longer names than the limits

  constexpr DimSpec() = default;
  //! One mesh axis: `"model"`.
  template <std::size_t N>
  constexpr DimSpec(const char (&name)[N]) {  // NOLINT: implicit, so "model" is a dim
    push(std::string_view(name, N - 1));
  }

  //! Member-wise, as nvcc's front end spells a DimSpec template argument in the host code it
  //! hands to the host compiler (`kdist::DimSpec{{{'m', ...}, ...}, 1UL, false}`); DimSpec is not
  //! an aggregate (it converts from "model"), so without this constructor g++ rejects that code.
  constexpr DimSpec(const char (&axis_names)[max_axes][max_name + 1], std::size_t axis_count,
                    bool over_limits)
      : count(axis_count), overflow(over_limits) {
    for (std::size_t a = 0; a < max_axes; ++a) std::copy_n(axis_names[a], max_name + 1, names[a]);
  }

  template <class... Views>
  static constexpr DimSpec of(Views... views) {
    DimSpec d;
    (d.push(std::string_view(views)), ...);
    return d;
  }

  constexpr std::size_t size() const { return count; }
  constexpr bool is_replicated() const { return count == 0; }
  constexpr std::string_view axis(std::size_t i) const {
    return std::string_view(names[i], std::char_traits<char>::length(names[i]));
  }

  // Written out: nvcc's constant evaluator (CUDA 13) reads past the end of a row of `names` in
  // the defaulted comparison of the 2-D array, and rejects every typed matmul that compares two.
  friend constexpr bool operator==(const DimSpec& a, const DimSpec& b) {
    if (a.count != b.count || a.overflow != b.overflow) return false;
    for (std::size_t i = 0; i < max_axes; ++i) {
      for (std::size_t c = 0; c <= max_name; ++c) {
        if (a.names[i][c] != b.names[i][c]) return false;
      }
    }
    return true;
  }

 private:
  constexpr void push(std::string_view name) {
    if (count == max_axes || name.size() > max_name) {
      overflow = true;
      return;
    }
    std::copy_n(name.data(), name.size(), names[count]);
    ++count;
  }
};

//! A replicated tensor dimension (Keras' `None` in a layout's axes).
inline constexpr DimSpec replicated{};

//! A tensor dimension sharded over several mesh axes, row-major in the order given:
//! `kdist::axes<"data", "model">` (JAX `P(('data', 'model'))`).
template <detail::fixed_string... Names>
inline constexpr DimSpec axes = DimSpec::of(Names.view()...);

}  // namespace kdist
