#pragma once
//! \file common/batch_loader.hpp
//! Moves mini-batches of Fashion-MNIST from host memory to where the model runs: rows gathered
//! into host mirrors, then one `Kokkos::deep_copy` per View (no copy when the default memory space
//! is host memory). The device Views are allocated once and reused (a smaller last batch is a
//! subview), so a GPU step allocates nothing.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "fashion_mnist.hpp"

namespace kdist::examples {

class BatchLoader {
 public:
  using Images = Kokkos::View<float**, Kokkos::LayoutRight>;   //!< [rows, 784], default space
  using Labels = Kokkos::View<std::int32_t*, Kokkos::LayoutRight>;  //!< [rows]

  //! Buffers for batches of at most `max_rows` rows of `features` values.
  BatchLoader(std::size_t max_rows, std::size_t features)
      : x_("kdist::batch/x", max_rows, features),
        y_("kdist::batch/y", max_rows),
        hx_(Kokkos::create_mirror_view(x_)),
        hy_(Kokkos::create_mirror_view(y_)) {}

  //! Examples `idx` of `data` as (images, labels) in the default memory space; valid until the
  //! next call. Errors: kdist::ValueError when idx has more rows than the buffers or an index is
  //! outside `data`.
  std::pair<Images, Labels> load(const FashionMnist& data, const std::vector<std::size_t>& idx) {
    const std::size_t n = idx.size();
    if (n > x_.extent(0) || data.features != x_.extent(1)) {
      throw ValueError("kdist::examples::BatchLoader: a batch of " + std::to_string(n) + "x" +
                       std::to_string(data.features) + " does not fit buffers of " +
                       std::to_string(x_.extent(0)) + "x" + std::to_string(x_.extent(1)));
    }
    for (std::size_t r = 0; r < n; ++r) {
      if (idx[r] >= data.count) {
        throw ValueError("kdist::examples::BatchLoader: example " + std::to_string(idx[r]) +
                         " is outside the " + std::to_string(data.count) + " held");
      }
      std::copy_n(data.image(idx[r]), data.features, &hx_(r, 0));
      hy_(r) = data.labels[idx[r]];
    }
    const auto rows = std::make_pair(std::size_t{0}, n);
    Images x = Kokkos::subview(x_, rows, Kokkos::ALL);
    Labels y = Kokkos::subview(y_, rows);
    Kokkos::deep_copy(x, Kokkos::subview(hx_, rows, Kokkos::ALL));
    Kokkos::deep_copy(y, Kokkos::subview(hy_, rows));
    return {x, y};
  }

 private:
  Images x_;
  Labels y_;
  Images::HostMirror hx_;
  Labels::HostMirror hy_;
};

}  // namespace kdist::examples
