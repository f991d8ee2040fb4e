#pragma once
//! \file nn/reservoir.hpp
//! `kdist::Reservoir<T>`: a fixed number of training examples kept from a stream that brings more
//! than memory holds (Melissa's reservoir buffer), and how often training has seen each. The
//! policy alone, with no MPI: kdist::StreamingDataset fills one from the producers' messages.
//!
//! - **Eviction** (add() when full): the new example replaces one of the examples seen MOST often
//!   by training, chosen at random (seeded) among those seen as often. Not the oldest: when the
//!   producers run ahead of training, nothing has been seen and "oldest first" would keep only the
//!   newest time steps; a random one keeps old steps in proportion (reservoir sampling's idea),
//!   and seen-most-first spends first what training has used most.
//! - **Sampling** (sample()): examples never seen come first (at random, seeded), then the
//!   others uniformly at random: each arrival is trained on in the next batch, and none fills
//!   batch after batch while it catches up with the others' counts. Each pick counts one more
//!   sight of it. Evicting the most-seen then spends first what training has used most.
//! Same seed, same calls: same choices, on any platform (a splitmix64 generator of its own).
//! add() and sample() cost O(1) per example while the streams run (examples are kept in buckets
//! by their seen count).
//!
//! \code
//! kdist::Reservoir<float> r(1024, 64 * 64, 64 * 64, /*seed=*/7);  // 1024 examples, target rows
//! r.add(x, y);                         // evicts one of the most-seen when full
//! std::vector<std::size_t> slots;
//! r.sample(32, slots);                 // 32 distinct examples, the unseen first
//! const float* first = r.example(slots[0]).data();
//! \endcode

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <kdist/core/error.hpp>

namespace kdist {

//! Counts of a reservoir's history (kdist::Reservoir::statistics()).
struct ReservoirStatistics {
  std::size_t received = 0;        //!< examples added
  std::size_t evicted = 0;         //!< examples replaced by a newer one
  std::size_t evicted_unseen = 0;  //!< of them, never seen by training (the stream outran it)
  std::size_t sampled = 0;         //!< sights: examples handed to training, with repeats
  std::size_t size = 0;            //!< examples held now
  std::uint64_t seen_min = 0;      //!< over the examples held now (0 when empty)
  double seen_mean = 0;
  std::uint64_t seen_max = 0;
};

template <class T>
class Reservoir {
 public:
  using value_type = T;
  static constexpr std::uint64_t unlimited = std::numeric_limits<std::uint64_t>::max();

  //! `capacity` examples of `example_size` values, each with `target_width` values or, with
  //! `target_width` 0, an integer label. Errors: kdist::ValueError for a capacity or an
  //! example_size of 0.
  Reservoir(std::size_t capacity, std::size_t example_size, std::size_t target_width,
            std::uint64_t seed = 0)
      : capacity_(capacity),
        example_size_(example_size),
        target_width_(target_width),
        state_(seed) {
    if (capacity == 0) {
      throw ValueError(
          "kdist::Reservoir: the capacity is 0 examples; give room for at least one "
          "batch (e.g. 10 to 100 batches of examples)");
    }
    if (example_size == 0) {
      throw ValueError(
          "kdist::Reservoir: examples of 0 values; give the example's size (the "
          "product of its shape)");
    }
    x_.resize(capacity * example_size);
    if (target_width) {
      targets_.resize(capacity * target_width);
    } else {
      labels_.resize(capacity);
    }
    seen_.resize(capacity);
    arrival_.resize(capacity);
    position_.resize(capacity);
    chosen_.resize(capacity);
    buckets_.resize(1);
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool full() const noexcept { return size_ == capacity_; }
  [[nodiscard]] std::size_t example_size() const noexcept { return example_size_; }
  [[nodiscard]] std::size_t target_width() const noexcept { return target_width_; }
  [[nodiscard]] bool has_labels() const noexcept { return target_width_ == 0; }

  //! Adds an example and its target row; when full, first evicts one of the most-seen. Returns
  //! its slot. Errors: kdist::ValueError for sizes other than example_size() and target_width(),
  //! or a reservoir of labels.
  std::size_t add(std::span<const T> x, std::span<const T> target) {
    if (target_width_ == 0) {
      throw ValueError(
          "kdist::Reservoir::add: this reservoir holds integer labels; call "
          "add(x, label)");
    }
    check_size("the target", target.size(), target_width_);
    const std::size_t slot = place(x);
    std::copy(target.begin(), target.end(), targets_.begin() + offset(slot, target_width_));
    return slot;
  }
  //! Adds an example and its label (>= 0), as above. Errors: kdist::ValueError for a size other
  //! than example_size(), a negative label, or a reservoir of target rows.
  std::size_t add(std::span<const T> x, std::int32_t label) {
    if (target_width_ != 0) {
      throw ValueError("kdist::Reservoir::add: this reservoir holds " +
                       std::to_string(target_width_) +
                       " target values per example; call "
                       "add(x, target)");
    }
    if (label < 0) {
      throw ValueError("kdist::Reservoir::add: label " + std::to_string(label) +
                       " is negative; labels are class ids 0, 1, ...");
    }
    const std::size_t slot = place(x);
    labels_[slot] = label;
    return slot;
  }

  //! Picks up to `count` distinct examples seen fewer than `below` times: those never seen first
  //! (at random), then the others uniformly at random; counts one more sight of each and writes
  //! their slots to `slots`. Returns how many it picked: `count` unless fewer are held (or seen
  //! fewer than `below` times).
  std::size_t sample(std::size_t count, std::vector<std::size_t>& slots,
                     std::uint64_t below = unlimited) {
    slots.clear();
    if (below == 0 || count == 0) return 0;
    auto& unseen = buckets_[0];
    while (!unseen.empty() && slots.size() < count) {
      const std::size_t slot = unseen[random_below(unseen.size())];
      remove(slot);  // out of its bucket until all are picked: distinct
      chosen_[slot] = 1;
      slots.push_back(slot);
    }
    const std::size_t first_seen = slots.size();
    if (slots.size() < count) pick_seen(count - slots.size(), slots, below);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const std::size_t slot = slots[i];
      if (i >= first_seen) remove(slot);
      chosen_[slot] = 0;
      ++seen_[slot];
      insert(slot);
    }
    sampled_ += slots.size();
    return slots.size();
  }

  //! Example `slot` (0 to size() - 1), its target row (empty for labels), label, sights, and
  //! arrival number (0 for the first example added: its age).
  [[nodiscard]] std::span<const T> example(std::size_t slot) const {
    return {x_.data() + offset(slot, example_size_), example_size_};
  }
  [[nodiscard]] std::span<const T> target(std::size_t slot) const {
    if (target_width_ == 0) return {};
    return {targets_.data() + offset(slot, target_width_), target_width_};
  }
  [[nodiscard]] std::int32_t label(std::size_t slot) const {
    return target_width_ == 0 ? labels_[slot] : 0;
  }
  [[nodiscard]] std::uint64_t seen(std::size_t slot) const { return seen_[slot]; }
  [[nodiscard]] std::uint64_t arrival(std::size_t slot) const { return arrival_[slot]; }
  //! The examples held, slot after slot (size() * example_size() values), and their targets or
  //! labels: what kdist::ArrayDataset::borrow reads.
  [[nodiscard]] std::span<const T> examples() const { return {x_.data(), size_ * example_size_}; }
  [[nodiscard]] std::span<const T> targets() const {
    return {targets_.data(), size_ * target_width_};
  }
  [[nodiscard]] std::span<const std::int32_t> labels() const {
    return {labels_.data(), target_width_ == 0 ? size_ : 0};
  }

  //! The fewest sights of any example held (0 when empty).
  [[nodiscard]] std::uint64_t seen_min() const noexcept {
    for (std::uint64_t k = 0; k < buckets_.size(); ++k) {
      if (!buckets_[k].empty()) return k;
    }
    return 0;
  }

  [[nodiscard]] ReservoirStatistics statistics() const {
    ReservoirStatistics s{received_, evicted_, evicted_unseen_, sampled_, size_, 0, 0, 0};
    if (size_ == 0) return s;
    double total = 0;
    s.seen_min = seen_min();
    for (std::uint64_t k = 0; k < buckets_.size(); ++k) {
      total += static_cast<double>(k) * static_cast<double>(buckets_[k].size());
      if (!buckets_[k].empty()) s.seen_max = k;
    }
    s.seen_mean = total / static_cast<double>(size_);
    return s;
  }

 private:
  static std::ptrdiff_t offset(std::size_t slot, std::size_t width) {
    return static_cast<std::ptrdiff_t>(slot * width);
  }

  void check_size(const char* what, std::size_t got, std::size_t want) const {
    if (got != want) {
      throw ValueError(std::string("kdist::Reservoir::add: ") + what + " has " +
                       std::to_string(got) + " values; this reservoir's have " +
                       std::to_string(want));
    }
  }

  //! Appends `need` distinct examples seen 1 to below - 1 times, uniformly at random (all of them
  //! when fewer): by rejection over the slots while they are plenty, else from a list of them.
  void pick_seen(std::size_t need, std::vector<std::size_t>& slots, std::uint64_t below) {
    std::size_t available = 0;
    for (std::uint64_t k = 1; k < buckets_.size() && k < below; ++k)
      available += buckets_[k].size();
    if (below == unlimited && 2 * need <= available) {
      while (need > 0) {  // every slot not chosen has been seen (bucket 0 is empty): <= 2 tries
        const std::size_t slot = random_below(size_);
        if (chosen_[slot]) continue;
        chosen_[slot] = 1;
        slots.push_back(slot);
        --need;
      }
      return;
    }
    candidates_.clear();
    for (std::uint64_t k = 1; k < buckets_.size() && k < below; ++k) {
      candidates_.insert(candidates_.end(), buckets_[k].begin(), buckets_[k].end());
    }
    for (std::size_t i = 0; i < need && i < candidates_.size(); ++i) {
      std::swap(candidates_[i], candidates_[i + random_below(candidates_.size() - i)]);
      chosen_[candidates_[i]] = 1;
      slots.push_back(candidates_[i]);
    }
  }

  //! The slot of a new example (a free one, or one of the most-seen evicted), with x copied in.
  std::size_t place(std::span<const T> x) {
    check_size("the example", x.size(), example_size_);
    std::size_t slot = size_;
    if (size_ < capacity_) {
      ++size_;
    } else {
      std::uint64_t k = buckets_.size() - 1;
      while (buckets_[k].empty()) --k;  // full: some bucket holds an example
      slot = buckets_[k][random_below(buckets_[k].size())];
      remove(slot);
      ++evicted_;
      if (seen_[slot] == 0) ++evicted_unseen_;
    }
    std::copy(x.begin(), x.end(), x_.begin() + offset(slot, example_size_));
    seen_[slot] = 0;
    arrival_[slot] = received_++;
    insert(slot);
    return slot;
  }

  void insert(std::size_t slot) {
    const std::uint64_t k = seen_[slot];
    if (buckets_.size() <= k) buckets_.resize(k + 1);
    position_[slot] = buckets_[k].size();
    buckets_[k].push_back(slot);
  }
  void remove(std::size_t slot) {
    auto& bucket = buckets_[seen_[slot]];
    const std::size_t at = position_[slot];
    bucket[at] = bucket.back();
    position_[bucket[at]] = at;
    bucket.pop_back();
  }

  //! splitmix64: the same numbers on every platform.
  std::uint64_t next_random() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t random_below(std::size_t n) noexcept {
    return static_cast<std::size_t>(next_random() % static_cast<std::uint64_t>(n));
  }

  std::size_t capacity_, example_size_, target_width_;
  std::uint64_t state_;
  std::size_t size_ = 0;
  std::vector<T> x_, targets_;
  std::vector<std::int32_t> labels_;
  std::vector<std::uint64_t> seen_, arrival_;
  std::vector<std::size_t> position_;  // of each slot in its bucket
  std::vector<char> chosen_;           // in the batch being picked
  std::vector<std::size_t> candidates_;
  std::vector<std::vector<std::size_t>> buckets_;  // slots by seen count
  std::size_t received_ = 0, evicted_ = 0, evicted_unseen_ = 0, sampled_ = 0;
};

}  // namespace kdist
