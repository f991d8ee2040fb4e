#pragma once
//! \file core/halo_plan.hpp
//! The arithmetic of a halo exchange along one dimension of a field split in blocks over
//! processes (the chunk blocks of core/detail/shard_math.hpp, uneven and empty blocks included):
//! which process sends which positions to which, with nothing but the field's extent, the number of
//! blocks and the range of global positions each process wants. A range may reach outside the
//! field: those positions are zeros (padding), or wrap around (`Boundary::periodic`, as a periodic
//! simulation's domain). kdist/parallel/halo_exchange.hpp moves the data; a convolution wants, for
//! its block of output positions, the input positions its windows read.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <kdist/core/detail/shard_math.hpp>
#include <kdist/core/error.hpp>

namespace kdist {

//! What lies beyond a field's first and last positions along an axis.
enum class Boundary {
  zeros,     //!< zeros (Keras' padding "same")
  periodic,  //!< the positions at the other end (a periodic domain; PyTorch's "circular")
};

//! Global positions [begin, end) along one axis; may reach outside [0, extent).
struct HaloRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::size_t size() const { return end > begin ? static_cast<std::size_t>(end - begin) : 0; }
  friend bool operator==(const HaloRange&, const HaloRange&) = default;
};

//! The exchange one process takes part in, along one dimension of a field of `extent` positions
//! in `parts` chunk blocks, process (block) `me` of them, given the range every process wants.
//! Every process builds it from the same arguments (but `me`), so both ends of each message agree
//! on its positions and on the order of the messages between two processes.
class HaloPlan {
 public:
  //! A run of positions of one process's wanted range: `length` positions from `at` in that
  //! range (0 = its begin), held by process `owner` from `from` in its block. `owner` < 0: zeros.
  struct Segment {
    std::int64_t at = 0;
    int owner = -1;
    std::int64_t from = 0;
    std::int64_t length = 0;
    friend bool operator==(const Segment&, const Segment&) = default;
  };
  //! A run this process sends: `length` positions from `from` in its block to `peer`, where they
  //! land at `at` in the peer's range; `tag` numbers the runs between the two in order.
  struct Send {
    int peer = 0;
    int tag = 0;
    std::int64_t from = 0;
    std::int64_t at = 0;
    std::int64_t length = 0;
  };

  //! Any range goes (empty, beyond the field, longer than it). Errors: kdist::ValueError for 0
  //! parts, `me` >= parts, a `wanted` of other than `parts` ranges, or positions wanted of a field
  //! of extent 0.
  HaloPlan(std::size_t extent, std::size_t parts, std::size_t me, std::vector<HaloRange> wanted,
           Boundary boundary)
      : extent_(extent), parts_(parts), me_(me), boundary_(boundary), wanted_(std::move(wanted)) {
    const std::string who = "kdist::HaloPlan: ";
    if (parts == 0 || me >= parts) {
      throw ValueError(who + "process " + std::to_string(me) + " of " + std::to_string(parts) +
                       " blocks: give 1 block or more and a process below their number");
    }
    if (wanted_.size() != parts) {
      throw ValueError(who + std::to_string(wanted_.size()) + " wanted ranges for " +
                       std::to_string(parts) + " blocks: give one range per block");
    }
    if (extent == 0) {
      for (const auto& r : wanted_) {
        if (r.size() != 0) {
          throw ValueError(who + "a field of extent 0 has no positions to give (wanted [" +
                           std::to_string(r.begin) + ", " + std::to_string(r.end) + "))");
        }
      }
    }
    segments_ = segments_of(me);
    std::vector<int> tags(parts, 0);
    for (std::size_t q = 0; q < parts; ++q) {
      if (q == me) continue;
      for (const auto& s : segments_of(q)) {
        if (s.owner == static_cast<int>(me)) {
          sends_.push_back({static_cast<int>(q), tags[q]++, s.from, s.at, s.length});
        }
      }
    }
  }

  std::size_t extent() const { return extent_; }
  std::size_t parts() const { return parts_; }
  std::size_t me() const { return me_; }
  Boundary boundary() const { return boundary_; }
  //! The block this process holds: [offset, offset + extent).
  Block block() const { return detail::chunk_block(extent_, parts_, me_); }
  //! The range this process wants.
  const HaloRange& wanted() const { return wanted_[me_]; }
  //! The runs of that range, in order: zeros (owner < 0), this process's own positions (owner ==
  //! me) and the other processes' (to receive; `tag` of each is its number among those from the
  //! same owner, see receive_tag).
  const std::vector<Segment>& segments() const { return segments_; }
  //! The runs this process sends, peer by peer in the order of the peers' ranges.
  const std::vector<Send>& sends() const { return sends_; }
  //! The tag of segments()[i] (a run from another process): its number among that owner's runs.
  int receive_tag(std::size_t i) const {
    int tag = 0;
    for (std::size_t j = 0; j < i; ++j) tag += segments_[j].owner == segments_[i].owner ? 1 : 0;
    return tag;
  }

 private:
  //! The runs of process q's wanted range.
  std::vector<Segment> segments_of(std::size_t q) const {
    std::vector<Segment> out;
    const HaloRange r = wanted_[q];
    const auto n = static_cast<std::int64_t>(extent_);
    std::int64_t p = r.begin;
    while (p < r.end) {
      const bool outside = p < 0 || p >= n;
      if (outside && boundary_ == Boundary::zeros) {
        const std::int64_t stop = p < 0 ? std::min<std::int64_t>(r.end, 0) : r.end;
        out.push_back({p - r.begin, -1, 0, stop - p});
        p = stop;
        continue;
      }
      const std::int64_t g = ((p % n) + n) % n;  // periodic: the position it stands for
      const auto owner = detail::chunk_owner(extent_, parts_, static_cast<std::size_t>(g));
      const Block b = detail::chunk_block(extent_, parts_, owner);
      const std::int64_t block_end = static_cast<std::int64_t>(b.offset + b.extent);
      const std::int64_t length = std::min(r.end - p, block_end - g);
      out.push_back(
          {p - r.begin, static_cast<int>(owner), g - static_cast<std::int64_t>(b.offset), length});
      p += length;
    }
    return out;
  }

  std::size_t extent_, parts_, me_;
  Boundary boundary_;
  std::vector<HaloRange> wanted_;
  std::vector<Segment> segments_;
  std::vector<Send> sends_;
};

}  // namespace kdist
