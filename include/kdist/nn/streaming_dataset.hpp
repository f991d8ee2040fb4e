#pragma once
//! \file nn/streaming_dataset.hpp
//! `kdist::StreamingDataset<T>`: training data that arrives while the model trains, sent by
//! simulation processes (kdist::StreamProducer, parallel/stream_channel.hpp) to this training
//! process, kept in a reservoir of fixed capacity (kdist::Reservoir, nn/reservoir.hpp) - the
//! in-transit training of Melissa, with MPI alone and no thread.
//!
//! - Each data-parallel training process owns one, fed by its own producers (ranks of the
//!   communicator both ends give: many-to-one, one-to-one, or several producer groups, an
//!   ensemble of simulations).
//! - `next_batch(x, y)` takes the messages that have arrived (MPI_Improbe / MPI_Mrecv), then fills
//!   the caller's host Views (x: (batch, example shape...), LayoutRight; y: (batch, target_width)
//!   values or (batch) integer labels) with distinct examples of the reservoir, the least seen
//!   first (seeded: the same arrivals give the same batches). When full, an arrival evicts one of
//!   the most seen (at random among equals, so old time steps stay while the producers run ahead).
//! - Waiting: only before the first batch, until the reservoir holds `min_fill` examples (default
//!   one batch), or when asked for a batch larger than what it holds; after that a batch never
//!   waits (the reservoir never shrinks). A wait that hears nothing within the collective timeout
//!   (KDIST_COLLECTIVE_TIMEOUT, kdist::set_collective_timeout) ends the job, naming the producers
//!   that have not closed.
//! - End of stream: once every producer has closed, batches hold only examples seen fewer than
//!   `passes` times (default 1: each example held is trained on at least once); the last batch may
//!   be partial (next_batch returns the rows it filled; the rest of the Views is untouched), then
//!   next_batch returns 0 and done() is true.
//!
//! \code
//! // training process 2 of MPI_COMM_WORLD, fed by simulation processes 0 and 1
//! kdist::StreamingDataset<float> data(MPI_COMM_WORLD, {0, 1}, {64, 64}, 4096,
//!                                     {.capacity = 2048, .seed = 7});
//! Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace> x("x", 32, 64, 64);
//! Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> y("y", 32, 4096);
//! while (const std::size_t n = data.next_batch(x, y)) { /* train on the first n rows */ }
//! \endcode

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/nn/reservoir.hpp>
#include <kdist/parallel/stream_channel.hpp>

namespace kdist {

//! StreamingDataset's settings.
struct StreamingOptions {
  //! Examples the reservoir holds (> 0).
  std::size_t capacity = 0;
  //! Examples to hold before the first batch (0: one batch); at most capacity.
  std::size_t min_fill = 0;
  //! Seeds eviction and sampling.
  std::uint64_t seed = 0;
  //! After the end of the streams, every example held is seen this many times (>= 1).
  std::uint64_t passes = 1;
  //! The messages' tag (the producers give the same).
  int tag = default_stream_tag;
};

//! The reservoir's counts and the trainer's waits (StreamingDataset::statistics()).
struct StreamingStatistics : ReservoirStatistics {
  std::size_t batches = 0;         //!< next_batch calls that filled rows
  std::size_t waits = 0;           //!< next_batch calls that had to wait for examples
  double wait_seconds = 0;         //!< time spent in those waits
  std::size_t open_producers = 0;  //!< producers that have not closed (as of the last drain)
};

template <class T>
class StreamingDataset {
 public:
  using value_type = T;

  //! This training process's reservoir, fed by `producers` (ranks of `comm`, which the producers
  //! gave too) with examples of `example_shape` and `target_width` target values (0: integer
  //! labels). Errors: kdist::ValueError for a capacity of 0, a min_fill over it, passes 0, no
  //! producers, a producer that is not a rank of comm, is this process or is listed twice, a bad
  //! example shape or tag.
  StreamingDataset(MPI_Comm comm, std::vector<int> producers,
                   std::vector<std::size_t> example_shape, std::size_t target_width,
                   StreamingOptions options)
      : options_(checked(options)),
        receiver_(comm, std::move(producers), StreamFormat{std::move(example_shape), target_width},
                  options.tag, "kdist::StreamingDataset"),
        reservoir_(options.capacity, receiver_.format().example_size(), target_width,
                   options.seed) {}

  //! Fills the first rows of `x` (a host View of T, LayoutRight, (batch, example shape...)) and
  //! `y` ((batch, target_width) of T, or (batch) integer labels) with a batch: all of its rows
  //! while the streams run; after their end, those left to see (see the file's comment). Returns
  //! the rows filled. Waits as the file's comment says. Errors: kdist::ValueError for Views whose
  //! extents do not fit the stream, a batch of 0 or over the capacity, and bad messages (another
  //! shape or type, a stranger's, a wrong size: StreamReceiver::drain).
  template <class XV, class YV>
  std::size_t next_batch(const XV& x, const YV& y) {
    check_views(x, y);
    const std::size_t batch = x.extent(0);
    drain();
    const std::size_t needed = started_ ? batch : std::max(batch, options_.min_fill);
    if (reservoir_.size() < needed && !receiver_.all_closed()) {
      const auto start = std::chrono::steady_clock::now();
      ++waits_;
      while (reservoir_.size() < needed && !receiver_.all_closed()) {
        receiver_.wait(add_example(), "for " + std::to_string(needed) +
                                          " examples before a batch (it holds " +
                                          std::to_string(reservoir_.size()) + ")");
      }
      wait_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    started_ = true;
    const std::uint64_t below = receiver_.all_closed() ? options_.passes : Reservoir<T>::unlimited;
    const std::size_t n = reservoir_.sample(batch, slots_, below);
    for (std::size_t i = 0; i < n; ++i) {
      const auto e = reservoir_.example(slots_[i]);
      std::memcpy(x.data() + i * e.size(), e.data(), e.size() * sizeof(T));
      if (reservoir_.has_labels()) {
        y.data()[i] = static_cast<typename YV::non_const_value_type>(reservoir_.label(slots_[i]));
      } else {
        const auto t = reservoir_.target(slots_[i]);
        std::memcpy(y.data() + i * t.size(), t.data(), t.size() * sizeof(T));
      }
    }
    if (n > 0) ++batches_;
    return n;
  }

  //! Takes the messages that have arrived, without waiting (next_batch does it first). Returns
  //! the messages taken. Errors: as next_batch's for bad messages.
  std::size_t drain() { return receiver_.drain(add_example()); }

  //! Waits until every producer has closed, taking their examples (under the collective timeout,
  //! as next_batch's waits): e.g. to read a held-out set whole (reservoir().examples()).
  void wait_for_end() {
    drain();
    while (!receiver_.all_closed()) {
      receiver_.wait(add_example(), "for the end of the streams");
    }
  }

  //! Every producer has closed and every example held was seen `passes` times (as of the last
  //! drain): next_batch returns 0.
  [[nodiscard]] bool done() const {
    return receiver_.all_closed() &&
           (reservoir_.size() == 0 || reservoir_.seen_min() >= options_.passes);
  }

  [[nodiscard]] const Reservoir<T>& reservoir() const noexcept { return reservoir_; }
  [[nodiscard]] const StreamFormat& format() const noexcept { return receiver_.format(); }
  [[nodiscard]] const StreamingOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::vector<int> open_producers() const { return receiver_.open_producers(); }

  [[nodiscard]] StreamingStatistics statistics() const {
    StreamingStatistics s;
    static_cast<ReservoirStatistics&>(s) = reservoir_.statistics();
    s.batches = batches_;
    s.waits = waits_;
    s.wait_seconds = wait_seconds_;
    s.open_producers = receiver_.open_producers().size();
    return s;
  }

 private:
  static StreamingOptions checked(StreamingOptions o) {
    if (o.capacity == 0) {
      throw ValueError(
          "kdist::StreamingDataset: the capacity is 0 examples; give room for at "
          "least one batch (e.g. 10 to 100 batches of examples)");
    }
    if (o.min_fill > o.capacity) {
      throw ValueError("kdist::StreamingDataset: min_fill is " + std::to_string(o.min_fill) +
                       " examples, over the capacity of " + std::to_string(o.capacity) +
                       "; give a min_fill of at most the capacity (0: one batch)");
    }
    if (o.passes == 0) {
      throw ValueError(
          "kdist::StreamingDataset: passes is 0; give 1 or more (the times each "
          "example is seen after the end of the streams)");
    }
    return o;
  }

  auto add_example() {
    return [this](int, const T* x, std::span<const T> target, std::int32_t label) {
      const std::span<const T> e(x, reservoir_.example_size());
      if (reservoir_.has_labels()) {
        reservoir_.add(e, label);
      } else {
        reservoir_.add(e, target);
      }
    };
  }

  template <class XV, class YV>
  void check_views(const XV& x, const YV& y) const {
    static_assert(Kokkos::is_view<XV>::value && Kokkos::is_view<YV>::value,
                  "kdist::StreamingDataset::next_batch(x, y): give Kokkos Views");
    static_assert(std::is_same_v<typename XV::non_const_value_type, T> &&
                      std::is_same_v<typename XV::array_layout, Kokkos::LayoutRight> &&
                      std::is_same_v<typename YV::array_layout, Kokkos::LayoutRight>,
                  "kdist::StreamingDataset<T>::next_batch(x, y): x is a LayoutRight View of T, y "
                  "a LayoutRight View");
    static_assert(
        Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename XV::memory_space>::accessible &&
            Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename YV::memory_space>::accessible,
        "kdist::StreamingDataset::next_batch(x, y): give host Views (copy the batch to "
        "the device with Kokkos::deep_copy)");
    static_assert(
        !std::is_const_v<typename XV::value_type> && !std::is_const_v<typename YV::value_type>,
        "kdist::StreamingDataset::next_batch(x, y): the Views are written");
    const std::string who = "kdist::StreamingDataset::next_batch";
    const auto& shape = format().example_shape;
    const std::size_t batch = x.extent(0);
    bool fits = XV::rank == shape.size() + 1;
    for (std::size_t d = 1; fits && d < XV::rank; ++d) fits = x.extent(d) == shape[d - 1];
    if (!fits) {
      std::string got = "(";
      for (std::size_t d = 0; d < XV::rank; ++d) {
        got += (d ? ", " : "") + std::to_string(x.extent(d));
      }
      throw ValueError(who + ": x is " + got + "); give (batch, then the example shape) for " +
                       format().describe());
    }
    if (!x.span_is_contiguous() || !y.span_is_contiguous()) {
      throw ValueError(who + ": x or y is not contiguous (a strided subview?); give packed Views");
    }
    if (batch == 0 || batch > reservoir_.capacity()) {
      throw ValueError(who + ": a batch of " + std::to_string(batch) +
                       " examples; give 1 to the capacity, " +
                       std::to_string(reservoir_.capacity()));
    }
    if (reservoir_.has_labels()) {
      if constexpr (YV::rank == 1 && std::is_integral_v<typename YV::non_const_value_type>) {
        if (y.extent(0) == batch) return;
      }
      throw ValueError(who + ": this stream carries integer labels; give y as a View of " +
                       std::to_string(batch) + " integers (one label per row of x)");
    } else {
      if constexpr (YV::rank == 2 && std::is_same_v<typename YV::non_const_value_type, T>) {
        if (y.extent(0) == batch && y.extent(1) == reservoir_.target_width()) return;
      }
      throw ValueError(who + ": y must be a (" + std::to_string(batch) + ", " +
                       std::to_string(reservoir_.target_width()) +
                       ") View of T: one target row per row of x");
    }
  }

  StreamingOptions options_;
  StreamReceiver<T> receiver_;
  Reservoir<T> reservoir_;
  std::vector<std::size_t> slots_;
  bool started_ = false;
  std::size_t batches_ = 0, waits_ = 0;
  double wait_seconds_ = 0;
};

}  // namespace kdist
