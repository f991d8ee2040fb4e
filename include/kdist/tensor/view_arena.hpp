#pragma once
//! \file tensor/view_arena.hpp
//! `kdist::detail::ViewArena`: the buffers that rematerialised layers (kdist/nn/remat.hpp) share,
//! handed out instead of a layer's own kdist::ReusableViews while an arena is active on the
//! thread (`ViewArena::Use`). Without it every layer keeps its step's buffers for the next step,
//! so a model's activation memory is the sum over its layers; with it the layers of every
//! rematerialised segment draw from one set, sized for one segment.
//!
//! Two ways to hand out a View:
//! - `replay` (a segment's forward pass, and its recomputation before its backward pass): the
//!   n-th request of the pass gets the arena's n-th View (of that type and those extents), whoever
//!   still holds it. Segment i's forward writes over segment i-1's saved activations; that is the
//!   point - segment i-1 recomputes them before its backward reads them. What leaves a segment
//!   (its output) is copied out by the caller before the next segment runs.
//! - `shared` (a segment's backward pass): any View of the type and extents that nothing else
//!   references (Kokkos' use_count is 1), as kdist::ReusableViews does with its own slots, so a
//!   gradient that a collective still holds is never written over. A backward pass's buffers are
//!   free again once the layer before has consumed them, and the next segment's backward reuses
//!   them.
//!
//! Views are kept for the next steps (no allocation per step once the shapes have been seen).

#include <cstddef>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include <Kokkos_Core.hpp>

namespace kdist::detail {

class ViewArena {
 public:
  enum class Mode { replay, shared };

  ViewArena() = default;
  ViewArena(const ViewArena&) = delete;
  ViewArena& operator=(const ViewArena&) = delete;

  //! While one lives, kdist::ReusableViews::get on this thread asks `arena` (in `mode`) instead
  //! of its own slots; the arena that was active before is active again after. A `replay` use
  //! starts at the arena's first View. nullptr: no arena (a layer's own buffers) for a while.
  class Use {
   public:
    Use(ViewArena* arena, Mode mode) : saved_(active()), saved_mode_(active_mode()) {
      active() = arena;
      active_mode() = mode;
      if (arena != nullptr && mode == Mode::replay) arena->next_ = 0;
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    ~Use() {
      active() = saved_;
      active_mode() = saved_mode_;
    }

   private:
    ViewArena* saved_;
    Mode saved_mode_;
  };

  //! The arena active on this thread (nullptr: none), and how it hands out Views.
  static ViewArena* current() noexcept { return active(); }
  static Mode current_mode() noexcept { return active_mode(); }

  //! The arena that rematerialised layers created on this thread share (kdist::RematScope): one,
  //! so that layers created in separate scopes share it too. Sharing is safe between any layers
  //! that one thread runs (see the file's comment); two threads training at once need their
  //! layers created on their own threads.
  //! Its Views are let go at Kokkos::finalize (a View must not outlive Kokkos).
  static std::shared_ptr<ViewArena> for_this_thread() {
    thread_local const auto a = [] {
      auto arena = std::make_shared<ViewArena>();
      Kokkos::push_finalize_hook([weak = std::weak_ptr<ViewArena>(arena)] {
        if (auto live = weak.lock()) live->clear();
      });
      return arena;
    }();
    return a;
  }

  //! Lets go of every View (a layer that still holds one keeps it until it is done with it; the
  //! next pass allocates afresh).
  void clear() noexcept {
    replayed_.clear();
    shared_.clear();
    next_ = 0;
  }

  //! A View of type `View` with these extents, contents unspecified: see the file's comment.
  template <class View, class... Extents>
  View get(const std::string& label, Extents... extents) {
    const std::vector<std::size_t> want{static_cast<std::size_t>(extents)...};
    if (active_mode() == Mode::replay) {
      if (next_ == replayed_.size()) replayed_.emplace_back();
      auto& candidates = replayed_[next_++];
      for (auto& e : candidates) {
        if (e.matches<View>(want)) return e.template view<View>();
      }
      return candidates.emplace_back(make<View>(label, want, extents...)).template view<View>();
    }
    return get_unused<View>(label, extents...);
  }

  //! A View of type `View` with these extents that nothing else references (the `shared` way),
  //! whatever the mode: scratch that lives while its holder holds it (kdist/nn/autocast.hpp).
  template <class View, class... Extents>
  View get_unused(const std::string& label, Extents... extents) {
    const std::vector<std::size_t> want{static_cast<std::size_t>(extents)...};
    for (auto& e : shared_) {
      if (e.matches<View>(want) && e.template view<View>().use_count() == 1) {
        return e.template view<View>();
      }
    }
    return shared_.emplace_back(make<View>(label, want, extents...)).template view<View>();
  }

  //! How many Views the arena keeps (for tests).
  std::size_t kept() const noexcept {
    std::size_t n = shared_.size();
    for (const auto& c : replayed_) n += c.size();
    return n;
  }

 private:
  struct Entry {
    const std::type_info* type;
    std::vector<std::size_t> extents;
    std::shared_ptr<void> holder;  // a View of `type`: the arena's reference

    template <class View>
    bool matches(const std::vector<std::size_t>& want) const {
      return *type == typeid(View) && extents == want;
    }
    template <class View>
    const View& view() const {
      return *static_cast<const View*>(holder.get());
    }
  };

  template <class View, class... Extents>
  static Entry make(const std::string& label, const std::vector<std::size_t>& want,
                    Extents... extents) {
    auto v =
        std::make_shared<View>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), extents...);
    return Entry{&typeid(View), want, std::shared_ptr<void>(std::move(v))};
  }

  static ViewArena*& active() noexcept {
    thread_local ViewArena* a = nullptr;
    return a;
  }
  static Mode& active_mode() noexcept {
    thread_local Mode m = Mode::replay;
    return m;
  }

  std::vector<std::vector<Entry>> replayed_;  // by the request's position in a replayed pass
  std::vector<Entry> shared_;
  std::size_t next_ = 0;
};

}  // namespace kdist::detail
