// kdist::ops::add (ops/elementwise.hpp): a + b on whole Views of any rank, in place or not, in the
// Views' memory space; extents that differ and non-contiguous Views are errors that say so.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <string>

#include <kdist/ops/elementwise.hpp>

#include "kokkos_environment.hpp"

namespace {

using View3 = Kokkos::View<double***, Kokkos::LayoutRight>;

View3 filled(const std::string& label, double scale) {
  View3 v(label, 2, 3, 4);
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = scale * static_cast<double>(i);
  Kokkos::deep_copy(v, h);
  return v;
}

TEST(Elementwise, AddsEveryElementInPlaceOrNot) {
  auto a = filled("a", 1.0), b = filled("b", 10.0);
  View3 out("out", 2, 3, 4);
  kdist::ops::add(a, b, out);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  for (std::size_t i = 0; i < h.size(); ++i) EXPECT_EQ(h.data()[i], 11.0 * static_cast<double>(i));
  kdist::ops::add(a, b, a);  // in place
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  for (std::size_t i = 0; i < ha.size(); ++i)
    EXPECT_EQ(ha.data()[i], 11.0 * static_cast<double>(i));
}

std::string error_of(const auto& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Elementwise, ShapesThatDifferAndStridedViewsAreErrors) {
  auto a = filled("a", 1.0);
  View3 other("other", 2, 3, 5), out("out", 2, 3, 4);
  const std::string e = error_of([&] { kdist::ops::add(a, other, out); });
  EXPECT_NE(e.find("extent 2 differs: 4, 5 and 4"), std::string::npos) << e;
  auto strided = Kokkos::subview(other, Kokkos::ALL, Kokkos::ALL, std::make_pair(0, 4));
  const std::string s = error_of([&] { kdist::ops::add(a, strided, out); });
  EXPECT_NE(s.find("b is not contiguous"), std::string::npos) << s;
}

}  // namespace
