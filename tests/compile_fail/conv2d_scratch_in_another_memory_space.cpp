// The convolutions fill the scratch with the images' execution space: a scratch View in another
// memory space than the images' is a compile error naming the rule.
// expect: the scratch View must be in the memory space of the images
#include <kdist/ops/conv2d.hpp>

void f(float* memory) {
  using Images = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
  Images x("x", 2, 5, 5, 3), k("k", 3, 3, 3, 4), y("y", 2, 3, 3, 4);
#ifdef KDIST_BAD
  using Elsewhere = Kokkos::AnonymousSpace;  // a memory space other than the images'
#else
  using Elsewhere = Kokkos::HostSpace;
#endif
  Kokkos::View<float**, Kokkos::LayoutRight, Elsewhere, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      scratch(memory, 18, 27);
  kdist::ops::conv2d(x, k, y, kdist::ops::AutoBackend{}, scratch);
}
