// "From Keras to kdist" (docs/guide.md): the spellings the table recommends where a Keras user's
// first C++ spelling does not compile, each built and checked here (one process, no MPI needed).
#include <gtest/gtest.h>

#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include <memory>
#include <string>
#include <vector>

namespace {

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 1>>;

Mesh one_device_mesh() {
  return Mesh(std::vector<std::string>{"cpu:0"});
}

// Instead of `const kdist::LayoutMap&` (LayoutMap is a class template): every map, typed or not,
// is a kdist::RuntimeLayoutMap.
std::size_t rules_of(const kdist::RuntimeLayoutMap& layout_map) {
  return layout_map.size();
}

// Or keep the mesh type: a function template over the typed map.
template <class M>
std::size_t typed_rules_of(const kdist::LayoutMap<M>& layout_map) {
  return layout_map.size();
}

kdist::LayoutMap<Mesh> guide_map(const Mesh& mesh) {
  kdist::LayoutMap layout_map(mesh);
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  layout_map["d1/bias"] = {"model"};
  return layout_map;
}

TEST(PortingSpellings, FunctionsTakeARuntimeLayoutMapOrATemplate) {
  const auto layout_map = guide_map(one_device_mesh());
  EXPECT_EQ(rules_of(layout_map), 2u);
  EXPECT_EQ(typed_rules_of(layout_map), 2u);
}

TEST(PortingSpellings, MakeSharedOfAModelParallelBuiltWithItsCheckedAxis) {
  const auto layout_map = guide_map(one_device_mesh());
  // std::make_shared<kdist::ModelParallel>(layout_map, "data") cannot check "data" at compile
  // time (make_shared forwards it as a run-time value); build the distribution, then share it:
  auto checked = std::make_shared<kdist::ModelParallel>(kdist::ModelParallel(layout_map, "data"));
  EXPECT_EQ(checked->batch_dim_name(), "data");
  // or name the axis as a run-time string, checked when the distribution is built:
  auto run_time = std::make_shared<kdist::ModelParallel>(layout_map, std::string("data"));
  EXPECT_EQ(run_time->batch_dim_name(), "data");
  EXPECT_THROW((void)std::make_shared<kdist::ModelParallel>(layout_map, std::string("dta")),
               kdist::ValueError);
}

TEST(PortingSpellings, AMapBuiltInTheArgumentListTakesBraces) {
  const auto mesh = one_device_mesh();
  // kdist::ModelParallel d(kdist::LayoutMap(mesh), "data"); is a GCC 12 parse error (a class
  // template placeholder read as a parameter declaration); braces, or auto, say the same thing:
  kdist::ModelParallel braces{kdist::LayoutMap{mesh}, "data"};
  auto with_auto = kdist::ModelParallel(kdist::LayoutMap(mesh), "data");
  EXPECT_EQ(braces.batch_dim_name(), "data");
  EXPECT_EQ(with_auto.batch_dim_name(), "data");
}

TEST(PortingSpellings, SetDistributionTakesTheDistributionItself) {
  const auto layout_map = guide_map(one_device_mesh());
  kdist::set_distribution(kdist::ModelParallel(layout_map, "data"));
  ASSERT_NE(kdist::distribution(), nullptr);
  EXPECT_EQ(kdist::distribution()->batch_dim_name(), "data");
  kdist::set_distribution(nullptr);
}

}  // namespace
