#pragma once
//! \file tensor/reusable_views.hpp
//! `kdist::ReusableViews<View>`: the buffers a layer writes step after step (its output, its input
//! gradient, scratch), allocated in the first steps and handed out again afterwards, so that a
//! training step allocates nothing once its shapes have been seen. On a VM a freshly allocated
//! page costs a fault (microseconds) when it is first written: the seeds' MLP spent 10-25% of a
//! 1-process step on them (docs/benchmarks.md, "No allocation in a step").
//!
//! A kept View is handed out only while nothing else references it (Kokkos' use_count is 1, the
//! cache's own reference): a step's activation still held by the next layer, a tensor returned to
//! the caller or a gradient an in-flight collective holds is never written over; the cache then
//! uses its other slot or a fresh View. Views are reference counted, so this is exact for every
//! managed View; an unmanaged alias kept past the step (a raw pointer) is not seen, as with any
//! Kokkos View.

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include <Kokkos_Core.hpp>

#include <kdist/tensor/view_arena.hpp>

namespace kdist {

//! Up to `Slots` kept Views of type `View` (a managed Kokkos::View with run-time extents). Two
//! slots suffice for a layer's per-step buffer: this step's and the last step's, which the next
//! layer may still hold until its own forward. Not thread safe (a layer's, used by one thread).
//! Copies start empty (nothing is shared between a layer and its copy); moves take the Views.
//! While a kdist::detail::ViewArena is active on the thread (a rematerialised layer's passes,
//! kdist/nn/remat.hpp), get() hands out the arena's Views instead and keeps none itself.
template <class View, std::size_t Slots = 2>
class ReusableViews {
  static_assert(Kokkos::is_view<View>::value, "kdist::ReusableViews holds Kokkos::Views");
  static_assert(Slots >= 1, "kdist::ReusableViews needs at least one slot");

 public:
  ReusableViews() = default;
  //! A copy starts empty: a copied layer keeps its own buffers, sharing none with the original.
  ReusableViews(const ReusableViews&) {}
  ReusableViews& operator=(const ReusableViews&) {
    kept_ = {};
    return *this;
  }
  //! A move takes the Views and empties the source (a moved-from Kokkos::View may still count as
  //! a reference, which would keep the Views from ever being handed out again).
  ReusableViews(ReusableViews&& other) noexcept : kept_(other.kept_) { other.kept_ = {}; }
  ReusableViews& operator=(ReusableViews&& other) noexcept {
    if (this != &other) {
      kept_ = other.kept_;
      other.kept_ = {};
    }
    return *this;
  }

  //! A View of these extents, its contents unspecified (as Kokkos::WithoutInitializing): a kept
  //! one that nothing else references, else a new one (kept when a slot is free; `label` names
  //! it in Kokkos' tools); the active arena's, when there is one.
  template <class... Extents>
  View get(const std::string& label, Extents... extents) {
    static_assert(sizeof...(Extents) == View::rank_dynamic,
                  "kdist::ReusableViews::get takes one extent per run-time dimension");
    if (auto* arena = detail::ViewArena::current()) return arena->get<View>(label, extents...);
    const std::array<std::size_t, sizeof...(Extents)> want{static_cast<std::size_t>(extents)...};
    std::size_t size = 1;
    for (const auto e : want) size *= e;
    // An empty View (a process's empty block) needs no memory: no allocation, step after step.
    if (size == 0) return View(static_cast<typename View::pointer_type>(nullptr), extents...);
    View* spare = nullptr;  // a slot nothing uses: empty, or kept with other extents
    for (auto& v : kept_) {
      if (v.data() == nullptr) {
        if (spare == nullptr) spare = &v;
        continue;
      }
      if (v.use_count() != 1) continue;  // someone else still holds it
      if (has_extents(v, want)) return v;
      if (spare == nullptr) spare = &v;
    }
    View fresh(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), extents...);
    if (spare != nullptr) *spare = fresh;
    return fresh;
  }

  //! As get, with the extents of `like` (a View of the same rank).
  template <class Like>
  View get_like(const std::string& label, const Like& like) {
    static_assert(static_cast<std::size_t>(Like::rank) == View::rank_dynamic,
                  "kdist::ReusableViews::get_like takes a View of the same rank");
    return get_like(label, like, std::make_index_sequence<View::rank_dynamic>());
  }

  //! How many Views are kept (for tests and benchmarks).
  std::size_t kept() const {
    std::size_t n = 0;
    for (const auto& v : kept_) n += v.data() != nullptr ? 1 : 0;
    return n;
  }

 private:
  template <class Like, std::size_t... D>
  View get_like(const std::string& label, const Like& like, std::index_sequence<D...>) {
    return get(label, like.extent(D)...);
  }

  template <std::size_t R>
  static bool has_extents(const View& v, const std::array<std::size_t, R>& want) {
    for (std::size_t d = 0; d < R; ++d) {
      if (v.extent(d) != want[d]) return false;
    }
    return true;
  }

  std::array<View, Slots> kept_{};
};

}  // namespace kdist
