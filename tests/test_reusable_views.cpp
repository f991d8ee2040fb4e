// kdist::ReusableViews (tensor/reusable_views.hpp): a kept View is handed out again only while
// nothing else references it, with the extents asked for; otherwise the other slot or a new View
// (kept when a slot is free). Kokkos' allocation callback counts what a get allocates.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <utility>

#include <kdist/tensor/reusable_views.hpp>

#include "kokkos_environment.hpp"

namespace {

using Matrix = Kokkos::View<float**, Kokkos::LayoutRight>;
using Vector = Kokkos::View<double*, Kokkos::LayoutRight>;

int allocations = 0;
void count_allocation(Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) {
  ++allocations;
}

//! Counts Kokkos allocations while it lives.
struct CountAllocations {
  CountAllocations() {
    allocations = 0;
    Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
  }
  ~CountAllocations() { Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr); }
};

TEST(ReusableViews, HandsTheSameViewOutOnceNothingElseHoldsIt) {
  kdist::ReusableViews<Matrix> views;
  const CountAllocations count;
  const float* first = nullptr;
  {
    const Matrix a = views.get("a", 3, 4);
    EXPECT_EQ(a.extent(0), 3u);
    EXPECT_EQ(a.extent(1), 4u);
    first = a.data();
  }
  EXPECT_EQ(views.kept(), 1u);
  for (int step = 0; step < 5; ++step) {
    const Matrix again = views.get("a", 3, 4);
    EXPECT_EQ(again.data(), first) << "step " << step;
  }
  EXPECT_EQ(allocations, 1);
}

TEST(ReusableViews, NeverHandsOutAViewSomeoneStillHolds) {
  kdist::ReusableViews<Matrix> views;
  const CountAllocations count;
  const Matrix held = views.get("x", 2, 2);
  Kokkos::deep_copy(held, 7.0f);
  const Matrix other = views.get("x", 2, 2);  // `held` is in use: the second slot
  EXPECT_NE(other.data(), held.data());
  Kokkos::deep_copy(other, 1.0f);
  // Both slots in use: a new View, not kept, and neither held one is written over.
  const Matrix third = views.get("x", 2, 2);
  EXPECT_NE(third.data(), held.data());
  EXPECT_NE(third.data(), other.data());
  EXPECT_EQ(views.kept(), 2u);
  EXPECT_EQ(allocations, 3);
  // A copy of a handed-out View (a tensor the caller kept) holds it too.
  Matrix copy = other;
  const Matrix fourth = views.get("x", 2, 2);
  EXPECT_NE(fourth.data(), other.data());
  EXPECT_NE(fourth.data(), held.data());
  // `held` is untouched (read through a host copy, which the count above leaves out: the Views
  // may be in device memory)
  EXPECT_EQ(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), held)(1, 1), 7.0f);
}

TEST(ReusableViews, PingPongsBetweenTwoSlotsWhenTheLastStepsViewIsStillHeld) {
  // A layer's output of step k is held by the next layer until step k+1's forward: the cache
  // alternates between its two slots and allocates nothing after the first two steps.
  kdist::ReusableViews<Matrix> views;
  const CountAllocations count;
  Matrix last;
  for (int step = 0; step < 6; ++step) {
    const Matrix now = views.get("y", 4, 8);
    EXPECT_NE(now.data(), last.data()) << "step " << step;
    last = now;
  }
  EXPECT_EQ(allocations, 2);
}

TEST(ReusableViews, NewExtentsReplaceAFreeSlot) {
  kdist::ReusableViews<Vector> views;
  const CountAllocations count;
  { const Vector a = views.get("v", 10); }
  const Vector b = views.get("v", 12);  // the 10-element View is free: replaced
  EXPECT_EQ(b.extent(0), 12u);
  { const Vector c = views.get("v", 10); }  // b is held: the empty slot
  EXPECT_EQ(views.kept(), 2u);
  EXPECT_EQ(allocations, 3);
  const Vector d = views.get("v", 10);  // kept and free: no allocation
  EXPECT_EQ(d.extent(0), 10u);
  EXPECT_EQ(allocations, 3);
}

// A process's empty block (9 rows over 4 processes: 3, 3, 3, 0) asks for empty Views every step:
// they take no memory and no allocation, and keep no slot.
TEST(ReusableViews, EmptyViewsAllocateNothing) {
  kdist::ReusableViews<Matrix> views;
  const CountAllocations count;
  for (int step = 0; step < 3; ++step) {
    const Matrix e = views.get("empty", 0, 8);
    EXPECT_EQ(e.extent(0), 0u);
    EXPECT_EQ(e.extent(1), 8u);
    EXPECT_EQ(e.size(), 0u);
  }
  EXPECT_EQ(allocations, 0);
  EXPECT_EQ(views.kept(), 0u);
  const Matrix full = views.get("y", 2, 8);  // the slots are still free for real Views
  EXPECT_EQ(views.kept(), 1u);
  EXPECT_EQ(allocations, 1);
}

TEST(ReusableViews, GetLikeTakesTheExtentsOfAnotherView) {
  kdist::ReusableViews<Kokkos::View<float***, Kokkos::LayoutRight>, 1> views;
  const Kokkos::View<float***, Kokkos::LayoutRight> like("like", 2, 3, 5);
  const auto v = views.get_like("v", like);
  EXPECT_EQ(v.extent(0), 2u);
  EXPECT_EQ(v.extent(1), 3u);
  EXPECT_EQ(v.extent(2), 5u);
  EXPECT_NE(v.data(), like.data());
}

TEST(ReusableViews, ACopyStartsEmptyAndSharesNothing) {
  kdist::ReusableViews<Matrix> views;
  const float* kept = nullptr;
  { kept = views.get("a", 2, 2).data(); }
  kdist::ReusableViews<Matrix> copy = views;
  EXPECT_EQ(copy.kept(), 0u);
  EXPECT_NE(copy.get("a", 2, 2).data(), kept);
  EXPECT_EQ(views.get("a", 2, 2).data(), kept);  // the original still has its own
  kdist::ReusableViews<Matrix> assigned;
  { const Matrix b = assigned.get("b", 3, 3); }
  assigned = views;
  EXPECT_EQ(assigned.kept(), 0u);
  kdist::ReusableViews<Matrix> moved = std::move(views);
  EXPECT_EQ(moved.get("a", 2, 2).data(), kept);
}

TEST(ReusableViews, EmptyExtentsAreNotKept) {
  kdist::ReusableViews<Matrix> views;
  const Matrix none = views.get("none", 0, 4);
  EXPECT_EQ(none.size(), 0u);
  EXPECT_EQ(views.kept(), 0u);
}

}  // namespace
