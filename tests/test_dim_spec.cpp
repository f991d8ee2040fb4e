// kdist/core/dim_spec.hpp: one tensor dimension's sharding as a compile-time value.
#include <kdist/core/dim_spec.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(DimSpec, ReplicatedIsKerasNone) {
  constexpr kdist::DimSpec r = kdist::replicated;
  EXPECT_TRUE(r.is_replicated());
  EXPECT_EQ(r.size(), 0u);
  EXPECT_FALSE(r.overflow);
  EXPECT_EQ(r, kdist::DimSpec{});
}

TEST(DimSpec, OneAxisFromAStringLiteral) {
  constexpr kdist::DimSpec m = "model";
  EXPECT_FALSE(m.is_replicated());
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m.axis(0), "model");
  EXPECT_NE(m, kdist::replicated);
  EXPECT_NE(m, kdist::DimSpec("data"));
}

TEST(DimSpec, SeveralAxesInOrder) {
  constexpr kdist::DimSpec dm = kdist::axes<"data", "model">;
  ASSERT_EQ(dm.size(), 2u);
  EXPECT_EQ(dm.axis(0), "data");
  EXPECT_EQ(dm.axis(1), "model");
  // Order matters: ('data', 'model') and ('model', 'data') shard differently.
  EXPECT_NE(dm, (kdist::axes<"model", "data">));
  // axes<> of one name is the plain name.
  EXPECT_EQ((kdist::axes<"model">), kdist::DimSpec("model"));
  // axes<> of none is replicated.
  EXPECT_EQ((kdist::axes<>), kdist::replicated);
}

TEST(DimSpec, LimitsSetOverflow) {
  constexpr auto four = kdist::axes<"a", "b", "c", "d">;
  EXPECT_FALSE(four.overflow);
  EXPECT_EQ(four.size(), kdist::DimSpec::max_axes);
  constexpr auto five = kdist::axes<"a", "b", "c", "d", "e">;
  EXPECT_TRUE(five.overflow);

  constexpr kdist::DimSpec name31 = "abcdefghijklmnopqrstuvwxyz01234";  // 31 characters
  EXPECT_FALSE(name31.overflow);
  EXPECT_EQ(name31.axis(0).size(), kdist::DimSpec::max_name);
  constexpr kdist::DimSpec name32 = "abcdefghijklmnopqrstuvwxyz012345";  // 32 characters
  EXPECT_TRUE(name32.overflow);
}

TEST(DimSpec, OfBuildsFromViews) {
  constexpr auto d = kdist::DimSpec::of(std::string_view("x"), std::string_view("y"));
  EXPECT_EQ(d, (kdist::axes<"x", "y">));
}

// DimSpecs are structural: they are template arguments.
template <kdist::DimSpec D>
constexpr std::size_t count_axes() {
  return D.size();
}
TEST(DimSpec, UsableAsTemplateArgument) {
  EXPECT_EQ(count_axes<kdist::replicated>(), 0u);
  EXPECT_EQ(count_axes<"model">(), 1u);
  EXPECT_EQ((count_axes<kdist::axes<"data", "model">>()), 2u);
}

}  // namespace
