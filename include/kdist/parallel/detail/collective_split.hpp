#pragma once
//! \file parallel/detail/collective_split.hpp
//! `detail::CollectiveSplit`: where the collectives go while the training step is recorded as a
//! device graph (kdist/nn/train/step_graph.hpp). MPI cannot be captured in a graph, and where it
//! stages through the host it waits for the device; so the recording is split at each collective:
//! the work enqueued before it is one piece of graph, the collective a host call that runs between
//! that piece and the next at every replay, with the same Views.
//!
//! Each blocking collective of collectives.hpp offers itself (`offer`) to the split active on its
//! thread, if any, before it runs: a split that takes it runs it later (`take` returned true). A
//! collective that cannot be replayed that way (a non-blocking one, whose wait is elsewhere, or
//! raw MPI on data the host computed in the step) tells the split (`cannot_take`) and runs now.
//! Which memory a collective works on is the split's to judge (`step_memory`: the memory of the
//! default execution space, where the step's kernels write): in a CUDA build, data of the step in
//! host memory was computed by the host during the step, which a replay does not run again.

#include <Kokkos_Core.hpp>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kdist::detail {

class CollectiveSplit {
 public:
  CollectiveSplit() = default;
  CollectiveSplit(const CollectiveSplit&) = delete;
  CollectiveSplit& operator=(const CollectiveSplit&) = delete;
  virtual ~CollectiveSplit() = default;

  //! A blocking collective `who` on the step's memory (`step_memory`) or other memory. True: the
  //! split took it and runs `call` when it chooses (the caller returns); false: it runs now.
  virtual bool take(std::string_view who, bool step_memory, std::function<void()> call) = 0;
  //! A collective the split cannot take: it runs now (the split may end its recording).
  virtual void cannot_take(std::string_view who) = 0;

  //! The split of this thread's step under way, or null (nearly always).
  static CollectiveSplit* active() noexcept { return slot(); }

  //! Makes `split` the active one while it lives (the one before comes back after).
  class Scope {
   public:
    explicit Scope(CollectiveSplit* split) noexcept : previous_(std::exchange(slot(), split)) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { slot() = previous_; }

   private:
    CollectiveSplit* previous_;
  };

 private:
  static CollectiveSplit*& slot() noexcept {
    thread_local CollectiveSplit* split = nullptr;
    return split;
  }
};

//! Whether every View is in the memory of the default execution space, where the step's kernels
//! write: device memory in a GPU build (host memory on a host backend, where nothing is recorded).
template <class... Views>
inline constexpr bool in_step_memory_v =
    (std::is_same_v<typename Views::memory_space, Kokkos::DefaultExecutionSpace::memory_space> &&
     ...);

//! Offers `call` to the active split as a collective on the step's memory or not: true when the
//! split took it (`call` runs later, with no split active); false: run it now.
template <class Call>
bool offer_call_to_split(std::string_view who, bool step_memory, Call&& call) {
  CollectiveSplit* split = CollectiveSplit::active();
  if (split == nullptr) [[likely]] {
    return false;
  }
  return split->take(who, step_memory, [call = std::forward<Call>(call)] {
    const CollectiveSplit::Scope none(nullptr);
    call();
  });
}

//! In a blocking collective's entry point, of Views `Views`: offer_call_to_split.
template <class... Views, class Call>
bool offer_to_split(std::string_view who, Call&& call) {
  return offer_call_to_split(who, in_step_memory_v<Views...>, std::forward<Call>(call));
}

//! For a collective whose inputs stay the same in every step with the same shapes (an agreement
//! on checks of shapes that passed): offered as one on the step's memory.
template <class Call>
bool offer_host_call_to_split(std::string_view who, Call&& call) {
  return offer_call_to_split(who, true, std::forward<Call>(call));
}

//! In a collective that a split cannot take: tells the active split, if any.
inline void tell_split_cannot_take(std::string_view who) {
  if (CollectiveSplit* split = CollectiveSplit::active()) [[unlikely]] {
    split->cannot_take(who);
  }
}

}  // namespace kdist::detail
