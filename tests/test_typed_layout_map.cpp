// kdist::LayoutMap<Mesh>: a LayoutMap typed by a static mesh checks the rules written in code at
// compile time (tests/compile_fail/layout_map_rule_*.cpp hold the errors) and behaves as the
// run-time map in everything else; rules read at run time take the explicit run-time form.
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <vector>

namespace {

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

TEST(TypedLayoutMap, TheConstructorsArgumentPicksTheType) {
  kdist::LayoutMap typed(Mesh{});
  static_assert(std::is_same_v<decltype(typed), kdist::LayoutMap<Mesh>>);
  kdist::LayoutMap runtime(kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8));
  static_assert(std::is_same_v<decltype(runtime), kdist::LayoutMap<>>);
  kdist::LayoutMap none;
  static_assert(std::is_same_v<decltype(none), kdist::LayoutMap<kdist::RuntimeDeviceMesh>>);
  static_assert(std::is_base_of_v<kdist::RuntimeLayoutMap, kdist::LayoutMap<Mesh>>);
  EXPECT_EQ(typed.device_mesh(), runtime.device_mesh());
}

// The guide's rules, written in code: checked when compiled, stored as the run-time map stores
// them, looked up alike.
TEST(TypedLayoutMap, RulesInCodeGiveTheRunTimeMapsLayouts) {
  kdist::LayoutMap typed(Mesh{});
  typed["d1/kernel"] = {kdist::replicated, "model"};
  typed["d1/bias"] = {"model"};
  typed.insert("d2/output", {"data", kdist::replicated});
  typed["d3/kernel"] = {kdist::axes<"data", "model">, kdist::replicated};
  typed["d4/kernel"] = kdist::TensorLayout<Mesh, "model", kdist::replicated>{};

  kdist::LayoutMap runtime(kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8));
  runtime["d1/kernel"] = {kdist::replicated, "model"};
  runtime["d1/bias"] = {"model"};
  runtime["d2/output"] = {"data", kdist::replicated};
  runtime["d3/kernel"] = {kdist::DimAxes({"data", "model"}), kdist::replicated};
  runtime["d4/kernel"] = {"model", kdist::replicated};

  ASSERT_EQ(typed.keys(), runtime.keys());
  for (const auto& key : runtime.keys()) {
    EXPECT_EQ(*typed[key], *runtime[key]) << key;
  }
  const auto& as_const = typed;
  EXPECT_EQ(as_const["d1/kernel"]->axes_repr(), "(None, 'model')");
  EXPECT_EQ(typed.resolve("d1/kernel", {784, 200})->axes_repr(), "(None, 'model')");
}

// Rules known only at run time (from a file, a flag) take the run-time form and its errors.
TEST(TypedLayoutMap, RunTimeRulesAreCheckedWhenInserted) {
  kdist::LayoutMap typed(Mesh{});
  const std::vector<kdist::DimAxes> from_a_file{kdist::replicated, "model"};
  typed.insert("d1/kernel", from_a_file);
  typed.runtime()["d1/bias"] = {"model"};
  EXPECT_EQ(typed["d1/bias"]->axes_repr(), "('model',)");
  try {
    typed.insert("d2/kernel", std::vector<kdist::DimAxes>{kdist::replicated, "modle"});
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Got ['modle']"), std::string::npos) << e.what();
  }
  EXPECT_EQ(typed.size(), 2u);
  // duplicate keys stay run-time errors (they depend on what was inserted before)
  EXPECT_THROW((typed["d1/kernel"] = {"model", kdist::replicated}), kdist::ValueError);
}

TEST(TypedLayoutMap, ModelParallelTakesATypedMap) {
  kdist::LayoutMap typed(Mesh{});
  typed["d1/kernel"] = {kdist::replicated, "model"};
  kdist::ModelParallel distribution(typed, "data", {.num_processes = 8, .process_id = 5});
  EXPECT_EQ(distribution.layout_map().size(), 1u);
  EXPECT_EQ(distribution.batch_dim_name(), "data");
  // a batch axis known only at run time takes the run-time constructor and its error
  const std::string from_a_flag = "dta";
  EXPECT_THROW(kdist::ModelParallel(typed, from_a_flag, {.num_processes = 8, .process_id = 5}),
               kdist::ValueError);
}

}  // namespace
