// LayoutAxes (the value of a LayoutMap rule written in code) checks its names with the layout
// rules of core/detail/layout_rules.hpp at compile time; built by g++/clang and plain nvcc
// (nvcc.static). The failing cases are compile-fail tests
// (layout_map_rule_axis_not_in_mesh, layout_map_rule_uses_axis_twice).
#include <kdist/core/layout_axes.hpp>

namespace {
using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

constexpr kdist::LayoutAxes<Mesh> kernel = {kdist::replicated, "model"};
static_assert(kernel.rank() == 2);
static_assert(kernel[0].size() == 0 && kernel[1].size() == 1 && kernel[1].axis(0) == "model");

constexpr kdist::LayoutAxes<Mesh> both = {kdist::axes<"data", "model">, kdist::replicated};
static_assert(both.rank() == 2 && both[0].size() == 2);

constexpr kdist::LayoutAxes<Mesh> fsdp = {"data", "model"};
static_assert(fsdp[0].axis(0) == "data" && fsdp[1].axis(0) == "model");
}  // namespace
