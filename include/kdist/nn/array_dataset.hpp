#pragma once
//! \file nn/array_dataset.hpp
//! `kdist::ArrayDataset<T>`: in-memory examples and targets, what Keras' `fit(x, y)` and
//! `tf.data.Dataset.from_tensor_slices((x, y))` take: N examples of one shape, row-major, with N
//! integer class ids (sparse labels) or N rows of float targets. `fit` and `evaluate` hand each
//! process its rows of every global batch (kdist::BatchPlan) through a `detail::BatchLoader`,
//! which gathers them on the host and copies them once to where the model runs.
//!
//! A dataset owns its values (the constructors, which take vectors), or borrows the caller's host
//! memory without copying it (`ArrayDataset<T>::borrow`: a simulation's buffers, a host
//! `Kokkos::View`'s `data()`). Batches already in the caller's memory, host or device, go to
//! `model.train_step(x_view, y_view, global_batch)` directly, with no dataset at all.
//!
//! \code
//! std::vector<float> x = ...;                         // 128 x 28 x 28 x 1
//! std::vector<float> y = ...;                         // 128 x 10
//! kdist::ArrayDataset<float> data(std::move(x), {28, 28, 1}, std::move(y), 10);
//! model.fit(data, {.batch_size = 16, .epochs = 3, .shuffle = false});
//! auto view = kdist::ArrayDataset<float>::borrow(snapshots, {64, 64, 1}, next, 4096);  // no copy
//! \endcode

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/shape.hpp>

namespace kdist {

template <class T>
class ArrayDataset {
 public:
  using value_type = T;

  //! `x`: N examples of `example_shape`, row-major; `labels`: N class ids.
  //! Errors: ValueError for no examples, an empty example shape or one with a 0 extent, a size of
  //! `x` that is not N examples, or a negative label.
  ArrayDataset(std::vector<T> x, Shape example_shape, std::vector<std::int32_t> labels)
      : x_(std::move(x)), example_shape_(std::move(example_shape)), targets_(std::move(labels)) {
    check_labels();
  }
  //! `x` as above; `targets`: N rows of `target_width` values (regression or one-hot targets).
  //! Errors: as above, and a size of `targets` that is not N * target_width.
  ArrayDataset(std::vector<T> x, Shape example_shape, std::vector<T> targets,
               std::size_t target_width)
      : x_(std::move(x)),
        example_shape_(std::move(example_shape)),
        targets_(std::move(targets)),
        target_width_(target_width),
        has_labels_(false) {
    check_targets();
  }

  //! The caller's examples and labels, borrowed, not copied (zero-copy input). The memory must
  //! be host-accessible, outlive the dataset and its copies, and not change while fit or evaluate
  //! read it. Errors: as the owning constructor's.
  [[nodiscard]] static ArrayDataset borrow(std::span<const T> x, Shape example_shape,
                                           std::span<const std::int32_t> labels) {
    ArrayDataset d(x, std::move(example_shape), labels, 1, true);
    d.check_labels();
    return d;
  }
  //! The caller's examples and target rows, borrowed, not copied; as above.
  [[nodiscard]] static ArrayDataset borrow(std::span<const T> x, Shape example_shape,
                                           std::span<const T> targets, std::size_t target_width) {
    ArrayDataset d(x, std::move(example_shape), targets, target_width, false);
    d.check_targets();
    return d;
  }

  std::size_t size() const { return n_; }
  const Shape& example_shape() const { return example_shape_; }
  //! Values per example: the product of example_shape.
  std::size_t example_size() const { return example_size_; }
  bool has_labels() const { return has_labels_; }
  //! Values per target row (1 for labels).
  std::size_t target_width() const { return target_width_; }
  //! True when the values are the caller's memory (borrow), not the dataset's own.
  bool borrowed() const { return borrowed_; }
  const T* example(std::size_t i) const { return x_values().data() + i * example_size_; }
  std::span<const std::int32_t> labels() const {
    if (borrowed_) return borrowed_labels_;
    return std::get<0>(targets_);
  }
  const T* target(std::size_t i) const { return target_values().data() + i * target_width_; }

 private:
  ArrayDataset(std::span<const T> x, Shape example_shape, std::span<const std::int32_t> labels,
               std::size_t target_width, bool)
      : example_shape_(std::move(example_shape)),
        target_width_(target_width),
        borrowed_(true),
        borrowed_x_(x),
        borrowed_labels_(labels) {}
  ArrayDataset(std::span<const T> x, Shape example_shape, std::span<const T> targets,
               std::size_t target_width, bool)
      : example_shape_(std::move(example_shape)),
        target_width_(target_width),
        has_labels_(false),
        borrowed_(true),
        borrowed_x_(x),
        borrowed_targets_(targets) {}

  // The values wherever they live (views recomputed on access, so copies never dangle).
  std::span<const T> x_values() const {
    if (borrowed_) return borrowed_x_;
    return x_;
  }
  std::span<const T> target_values() const {
    if (borrowed_) return borrowed_targets_;
    return std::get<1>(targets_);
  }

  void check_labels() {
    const auto labels = this->labels();
    const std::size_t n = labels.size();
    validate(n, "labels");
    for (std::size_t i = 0; i < n; ++i) {
      if (labels[i] < 0) {
        throw ValueError("kdist::ArrayDataset: label " + std::to_string(labels[i]) +
                         " of example " + std::to_string(i) +
                         " is negative; labels are class ids 0, 1, ...");
      }
    }
  }
  void check_targets() {
    if (target_width_ == 0) {
      throw ValueError("kdist::ArrayDataset: target_width is 0; each example needs >= 1 target");
    }
    const auto t = target_values();
    if (t.size() % target_width_ != 0) {
      throw ValueError("kdist::ArrayDataset: " + std::to_string(t.size()) +
                       " target values are not whole rows of target_width " +
                       std::to_string(target_width_));
    }
    validate(t.size() / target_width_, "target rows");
  }

  void validate(std::size_t n, const char* what) {
    n_ = n;
    if (n == 0) throw ValueError("kdist::ArrayDataset: no examples (0 " + std::string(what) + ")");
    if (example_shape_.empty()) {
      throw ValueError(
          "kdist::ArrayDataset: the example shape is (); give the shape of one "
          "example, e.g. {28, 28, 1} or {784}");
    }
    example_size_ = 1;
    for (auto e : example_shape_) example_size_ *= e;
    if (example_size_ == 0) {
      throw ValueError("kdist::ArrayDataset: the example shape " +
                       detail::shape_repr(example_shape_) + " holds no values");
    }
    if (x_values().size() != n * example_size_) {
      throw ValueError("kdist::ArrayDataset: x holds " + std::to_string(x_values().size()) +
                       " values but " + std::to_string(n) + " " + what + " need " +
                       std::to_string(n) + " examples of shape " +
                       detail::shape_repr(example_shape_) + " (" +
                       std::to_string(n * example_size_) + " values)");
    }
  }

  std::vector<T> x_;  // owned values (empty when borrowed)
  Shape example_shape_;
  std::variant<std::vector<std::int32_t>, std::vector<T>> targets_;
  std::size_t target_width_ = 1;
  std::size_t n_ = 0;
  std::size_t example_size_ = 0;
  bool has_labels_ = true;
  bool borrowed_ = false;
  std::span<const T> borrowed_x_;
  std::span<const std::int32_t> borrowed_labels_;
  std::span<const T> borrowed_targets_;
};

namespace detail {

//! The rank-R View type of a batch of examples (R = 1 + the example rank).
template <class T, std::size_t R>
struct batch_view;
template <class T>
struct batch_view<T, 2> {
  using type = Kokkos::View<T**, Kokkos::LayoutRight>;
};
template <class T>
struct batch_view<T, 4> {
  using type = Kokkos::View<T****, Kokkos::LayoutRight>;
};
template <class T>
struct batch_view<T, 5> {
  using type = Kokkos::View<T*****, Kokkos::LayoutRight>;
};

//! Moves batches of an ArrayDataset to the default memory space: rows gathered into host mirrors,
//! one deep_copy per View. Buffers are allocated once (a smaller batch is a subview), so a GPU
//! step allocates nothing.
template <class T, std::size_t R>
class BatchLoader {
 public:
  using Examples = typename batch_view<T, R>::type;
  using Labels = Kokkos::View<std::int32_t*, Kokkos::LayoutRight>;
  using Targets = Kokkos::View<T**, Kokkos::LayoutRight>;

  BatchLoader(const ArrayDataset<T>& data, std::size_t max_rows) : data_(&data) {
    const auto& s = data.example_shape();
    if constexpr (R == 2) {
      x_ = Examples("kdist::batch/x", max_rows, s[0]);
    } else if constexpr (R == 4) {
      // (height, width, channels) images; (depth, height, width, channels) volumes as (depth *
      // height, width, channels): the same memory, one loader and epoch loop for both
      // (Sequential's input_tensor views them as volumes again).
      if (s.size() == 4) {
        x_ = Examples("kdist::batch/x", max_rows, s[0] * s[1], s[2], s[3]);
      } else {
        x_ = Examples("kdist::batch/x", max_rows, s[0], s[1], s[2]);
      }
    } else {
      x_ = Examples("kdist::batch/x", max_rows, s[0], s[1], s[2], s[3]);
    }
    hx_ = Kokkos::create_mirror_view(x_);
    if (data.has_labels()) {
      labels_ = Labels("kdist::batch/y", max_rows);
      hlabels_ = Kokkos::create_mirror_view(labels_);
    } else {
      targets_ = Targets("kdist::batch/y", max_rows, data.target_width());
      htargets_ = Kokkos::create_mirror_view(targets_);
    }
  }

  //! Examples `idx` in the default memory space; valid until the next call.
  Examples load_examples(const std::vector<std::size_t>& idx) {
    const std::size_t n = check(idx);
    const std::size_t size = data_->example_size();
    for (std::size_t r = 0; r < n; ++r) {
      std::copy_n(data_->example(idx[r]), size, hx_.data() + r * size);
    }
    const auto rows = std::make_pair(std::size_t{0}, n);
    if constexpr (R == 2) {
      Examples x = Kokkos::subview(x_, rows, Kokkos::ALL);
      Kokkos::deep_copy(x, Kokkos::subview(hx_, rows, Kokkos::ALL));
      return x;
    } else if constexpr (R == 4) {
      Examples x = Kokkos::subview(x_, rows, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL);
      Kokkos::deep_copy(x, Kokkos::subview(hx_, rows, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL));
      return x;
    } else {
      const auto all = Kokkos::ALL;
      Examples x = Kokkos::subview(x_, rows, all, all, all, all);
      Kokkos::deep_copy(x, Kokkos::subview(hx_, rows, all, all, all, all));
      return x;
    }
  }
  Labels load_labels(const std::vector<std::size_t>& idx) {
    const std::size_t n = check(idx);
    for (std::size_t r = 0; r < n; ++r) hlabels_(r) = data_->labels()[idx[r]];
    const auto rows = std::make_pair(std::size_t{0}, n);
    Labels y = Kokkos::subview(labels_, rows);
    Kokkos::deep_copy(y, Kokkos::subview(hlabels_, rows));
    return y;
  }
  Targets load_targets(const std::vector<std::size_t>& idx) {
    const std::size_t n = check(idx);
    const std::size_t w = data_->target_width();
    for (std::size_t r = 0; r < n; ++r) {
      std::copy_n(data_->target(idx[r]), w, htargets_.data() + r * w);
    }
    const auto rows = std::make_pair(std::size_t{0}, n);
    Targets y = Kokkos::subview(targets_, rows, Kokkos::ALL);
    Kokkos::deep_copy(y, Kokkos::subview(htargets_, rows, Kokkos::ALL));
    return y;
  }

 private:
  std::size_t check(const std::vector<std::size_t>& idx) const {
    if (idx.size() > x_.extent(0)) {
      throw ValueError("kdist::detail::BatchLoader: a batch of " + std::to_string(idx.size()) +
                       " rows does not fit buffers of " + std::to_string(x_.extent(0)));
    }
    for (auto i : idx) {
      if (i >= data_->size()) {
        throw ValueError("kdist::detail::BatchLoader: example " + std::to_string(i) +
                         " is outside the " + std::to_string(data_->size()) + " held");
      }
    }
    return idx.size();
  }

  const ArrayDataset<T>* data_;
  Examples x_;
  typename Examples::HostMirror hx_;
  Labels labels_;
  typename Labels::HostMirror hlabels_;
  Targets targets_;
  typename Targets::HostMirror htargets_;
};

}  // namespace detail

}  // namespace kdist
