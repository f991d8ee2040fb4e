// examples/common/batch_loader.hpp: rows of a dataset reach the default memory space through host
// mirrors (read back through mirrors here), a shorter last batch reuses the buffers, and bad
// requests are errors.
#include <gtest/gtest.h>

#include "kokkos_environment.hpp"

#include <Kokkos_Core.hpp>
#include <string>
#include <vector>

#include "common/batch_loader.hpp"

namespace {

using kdist::examples::BatchLoader;
using kdist::examples::FashionMnist;

FashionMnist synthetic(std::size_t count, std::size_t features) {
  FashionMnist d;
  d.count = count;
  d.features = features;
  d.images.resize(count * features);
  d.labels.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t f = 0; f < features; ++f) d.images[i * features + f] = float(i * 100 + f);
    d.labels[i] = static_cast<std::uint8_t>(i % 10);
  }
  return d;
}

TEST(BatchLoader, RowsArriveInOrderThroughMirrors) {
  const auto data = synthetic(20, 6);
  BatchLoader loader(4, 6);
  for (const std::vector<std::size_t>& idx :
       {std::vector<std::size_t>{7, 3, 19, 0}, std::vector<std::size_t>{12, 5}}) {
    const auto [x, y] = loader.load(data, idx);
    ASSERT_EQ(x.extent(0), idx.size());
    ASSERT_EQ(x.extent(1), 6u);
    ASSERT_EQ(y.extent(0), idx.size());
    auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
    auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
    for (std::size_t r = 0; r < idx.size(); ++r) {
      EXPECT_EQ(hy(r), static_cast<std::int32_t>(idx[r] % 10));
      for (std::size_t f = 0; f < 6; ++f) EXPECT_EQ(hx(r, f), float(idx[r] * 100 + f));
    }
  }
}

TEST(BatchLoader, TooManyRowsOrAnExampleOutsideTheDataAreErrors) {
  const auto data = synthetic(5, 6);
  BatchLoader loader(2, 6);
  try {
    (void)loader.load(data, {0, 1, 2});
    ADD_FAILURE() << "no error for 3 rows into buffers of 2";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("a batch of 3x6 does not fit buffers of 2x6"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)loader.load(data, {4, 5});
    ADD_FAILURE() << "no error for example 5 of 5";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("example 5 is outside the 5 held"), std::string::npos)
        << e.what();
  }
  BatchLoader narrow(2, 3);
  EXPECT_THROW((void)narrow.load(data, {0}), kdist::ValueError);  // 6 features into 3
}

}  // namespace
