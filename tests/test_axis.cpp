// kdist/core/axis.hpp: an axis' name and extent, static or dynamic.
#include <kdist/core/axis.hpp>

#include <gtest/gtest.h>

#include <span>
#include <string_view>
#include <type_traits>

namespace {

using Data2 = kdist::axis<"data", 2>;
using Model4 = kdist::axis<"model", 4>;
using Batch = kdist::axis<"batch">;

TEST(Axis, StaticExtent) {
  EXPECT_EQ(Data2::name.view(), "data");
  EXPECT_EQ(Data2::static_extent, 2u);
  EXPECT_FALSE(Data2::is_dynamic);
  EXPECT_EQ(Model4::name.view(), "model");
  EXPECT_EQ(Model4::static_extent, 4u);
  EXPECT_FALSE(Model4::is_dynamic);
}

TEST(Axis, DynamicByDefault) {
  EXPECT_EQ(Batch::name.view(), "batch");
  EXPECT_TRUE(Batch::is_dynamic);
  EXPECT_EQ(Batch::static_extent, kdist::dynamic_extent);
  EXPECT_EQ(kdist::dynamic_extent, std::dynamic_extent);
  // Spelling the dynamic extent out names the same type.
  EXPECT_TRUE((std::is_same_v<Batch, kdist::axis<"batch", kdist::dynamic_extent>>));
}

TEST(Axis, ExtentOneIsStatic) {
  using Model1 = kdist::axis<"model", 1>;
  EXPECT_FALSE(Model1::is_dynamic);
  EXPECT_EQ(Model1::static_extent, 1u);
}

TEST(Axis, NameAndExtentMakeTheType) {
  EXPECT_FALSE((std::is_same_v<Data2, kdist::axis<"data", 4>>));
  EXPECT_FALSE((std::is_same_v<Data2, kdist::axis<"model", 2>>));
  EXPECT_TRUE((std::is_same_v<Data2, kdist::axis<"data", 2>>));
}

TEST(Axis, IsAxisTrait) {
  EXPECT_TRUE(kdist::is_axis_v<Data2>);
  EXPECT_TRUE(kdist::is_axis_v<Batch>);
  EXPECT_FALSE(kdist::is_axis_v<int>);
  EXPECT_FALSE(kdist::is_axis_v<const Data2*>);
}

TEST(Axis, NamesCompareAsText) {
  constexpr kdist::detail::fixed_string a = "model";
  EXPECT_EQ(a.size(), 5u);
  EXPECT_TRUE(a == Model4::name);
  EXPECT_FALSE(a == Data2::name);
  EXPECT_EQ(std::string_view(Data2::name), "data");
}

}  // namespace
