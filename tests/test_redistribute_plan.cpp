// kdist/core/redistribute_plan.hpp: the pure redistribution plan, on one process and without MPI
// (only core/ headers): every transition, its printing, and the errors.
#include <kdist/core/redistribute_plan.hpp>

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace {

using kdist::DimAxes;
using kdist::RedistributePlan;
using kdist::RedistributeStep;
using kdist::RuntimeDeviceMesh;
using kdist::RuntimeTensorLayout;
using Kind = RedistributeStep::Kind;
using Sizes = std::vector<std::size_t>;
using Names = std::vector<std::string>;

const RuntimeDeviceMesh x2({2}, {"x"}, 2);
const RuntimeDeviceMesh mesh_2x4({2, 4}, {"data", "model"}, 8);

RuntimeTensorLayout on(const RuntimeDeviceMesh& m, std::vector<DimAxes> axes,
                       kdist::Division division = kdist::Division::chunk) {
  return RuntimeTensorLayout(std::move(axes), m, division);
}

// The one step of `plan` (every plan made today has one).
const RedistributeStep& only_step(const RedistributePlan& plan) {
  EXPECT_EQ(plan.steps.size(), 1u) << plan.to_string();
  return plan.steps.front();
}

TEST(RedistributePlan, SameLayoutMovesNothing) {
  const Sizes shape{4, 6};
  const auto rows = on(x2, {"x", kdist::replicated});
  const auto plan = kdist::plan_redistribute(rows, {}, rows, shape);
  EXPECT_EQ(only_step(plan).kind, Kind::nothing);
  EXPECT_FALSE(plan.communicates());
  EXPECT_EQ(plan.to_string(), "<RedistributePlan ('x', None) -> ('x', None): nothing>");
}

TEST(RedistributePlan, ShardToReplicatedIsAnAllGather) {
  const Sizes shape{4, 6};
  const auto plan = kdist::plan_redistribute(on(x2, {"x", kdist::replicated}), {},
                                             on(x2, {kdist::replicated, kdist::replicated}), shape);
  EXPECT_EQ(only_step(plan), (RedistributeStep{Kind::all_gather, {}, 0}));
  EXPECT_TRUE(plan.communicates());
  EXPECT_EQ(plan.to_string(), "<RedistributePlan ('x', None) -> (None, None): all_gather>");
  // Sharded over two axes to sharded over one of them: each keeps its block, gathers the rest.
  const auto partly =
      kdist::plan_redistribute(on(mesh_2x4, {DimAxes{"data", "model"}, kdist::replicated}), {},
                               on(mesh_2x4, {"data", kdist::replicated}), Sizes{16, 3});
  EXPECT_EQ(only_step(partly).kind, Kind::all_gather);
}

TEST(RedistributePlan, ReplicatedToShardIsALocalCopy) {
  const Sizes shape{4, 6};
  const auto plan = kdist::plan_redistribute(on(x2, {kdist::replicated, kdist::replicated}), {},
                                             on(x2, {kdist::replicated, "x"}), shape);
  EXPECT_EQ(only_step(plan).kind, Kind::local_copy);
  EXPECT_FALSE(plan.communicates());
  EXPECT_EQ(plan.to_string(), "<RedistributePlan (None, None) -> (None, 'x'): local_copy>");
  // Refining a shard (over 'data' to over ('data', 'model')) needs no data either.
  const auto finer = kdist::plan_redistribute(
      on(mesh_2x4, {"data", kdist::replicated}), {},
      on(mesh_2x4, {DimAxes{"data", "model"}, kdist::replicated}), Sizes{16, 3});
  EXPECT_EQ(only_step(finer).kind, Kind::local_copy);
  // Only the division rule changes, and the shape divides evenly: the blocks are the same.
  const auto even =
      kdist::plan_redistribute(on(x2, {"x"}), {}, on(x2, {"x"}, kdist::Division::even), Sizes{4});
  EXPECT_EQ(only_step(even).kind, Kind::local_copy);
}

TEST(RedistributePlan, ShardToOtherShardIsAnAllToAll) {
  const Sizes shape{4, 6};
  const auto plan = kdist::plan_redistribute(on(x2, {"x", kdist::replicated}), {},
                                             on(x2, {kdist::replicated, "x"}), shape);
  EXPECT_EQ(only_step(plan), (RedistributeStep{Kind::all_to_all, {}, 0}));
  EXPECT_TRUE(plan.communicates());
  EXPECT_EQ(plan.to_string(), "<RedistributePlan ('x', None) -> (None, 'x'): all_to_all>");
  // The same dimension over the other axis of a 2-D mesh.
  const auto swap =
      kdist::plan_redistribute(on(mesh_2x4, {"data", kdist::replicated}), {},
                               on(mesh_2x4, {"model", kdist::replicated}), Sizes{8, 3});
  EXPECT_EQ(only_step(swap).kind, Kind::all_to_all);
}

TEST(RedistributePlan, PartialToItsOwnLayoutIsAnAllReduce) {
  const Sizes shape{4, 6};
  const auto whole = on(mesh_2x4, {kdist::replicated, kdist::replicated});
  // Pending axes are sorted, as a tensor holds them.
  const auto plan = kdist::plan_redistribute(whole, {"model", "data"}, whole, shape);
  EXPECT_EQ(only_step(plan), (RedistributeStep{Kind::all_reduce, Names{"data", "model"}, 0}));
  EXPECT_TRUE(plan.communicates());
  EXPECT_EQ(plan.to_string(),
            "<RedistributePlan (None, None) partial=['data', 'model'] -> (None, None): "
            "all_reduce(sum) over ['data', 'model']>");
  // A sharded layout with a pending sum over the other axis (a row-parallel product's).
  const auto rows = on(mesh_2x4, {"data", kdist::replicated});
  EXPECT_EQ(only_step(kdist::plan_redistribute(rows, {"model"}, rows, shape)),
            (RedistributeStep{Kind::all_reduce, Names{"model"}, 0}));
}

TEST(RedistributePlan, PartialToAShardOverItsAxesIsAReduceScatter) {
  const Sizes shape{4, 6};
  const auto whole = on(x2, {kdist::replicated, kdist::replicated});
  const auto plan = kdist::plan_redistribute(whole, {"x"}, on(x2, {"x", kdist::replicated}), shape);
  EXPECT_EQ(only_step(plan), (RedistributeStep{Kind::reduce_scatter, Names{"x"}, 0}));
  EXPECT_EQ(plan.to_string(),
            "<RedistributePlan (None, None) partial=['x'] -> ('x', None): reduce_scatter(sum) "
            "over ['x'] along dimension 0>");
  // Along dimension 1, over two axes listed in the target's order (the communicator's).
  const auto two = kdist::plan_redistribute(
      on(mesh_2x4, {kdist::replicated, kdist::replicated}), {"data", "model"},
      on(mesh_2x4, {kdist::replicated, DimAxes{"model", "data"}}), Sizes{3, 16});
  EXPECT_EQ(only_step(two), (RedistributeStep{Kind::reduce_scatter, Names{"model", "data"}, 1}));
  EXPECT_EQ(only_step(two).to_string(),
            "reduce_scatter(sum) over ['model', 'data'] along dimension 1");
}

TEST(RedistributePlan, PartialToAnyOtherLayoutIsAnAllToAllThatSums) {
  const Sizes shape{8, 6};
  const auto whole = on(mesh_2x4, {kdist::replicated, kdist::replicated});
  // Sharded over an axis that is not the pending one.
  const auto other =
      kdist::plan_redistribute(whole, {"model"}, on(mesh_2x4, {"data", kdist::replicated}), shape);
  EXPECT_EQ(only_step(other), (RedistributeStep{Kind::all_to_all, Names{"model"}, 0}));
  EXPECT_EQ(only_step(other).to_string(), "all_to_all summing over ['model']");
  // Sharded over only some of the pending axes.
  const auto some = kdist::plan_redistribute(whole, {"data", "model"},
                                             on(mesh_2x4, {"model", kdist::replicated}), shape);
  EXPECT_EQ(only_step(some).kind, Kind::all_to_all);
  // Two dimensions change.
  const auto two = kdist::plan_redistribute(on(mesh_2x4, {"data", kdist::replicated}), {"model"},
                                            on(mesh_2x4, {kdist::replicated, "model"}), shape);
  EXPECT_EQ(only_step(two).kind, Kind::all_to_all);
  // The division rule changes too.
  const auto division =
      kdist::plan_redistribute(on(x2, {kdist::replicated, kdist::replicated}), {"x"},
                               on(x2, {"x", kdist::replicated}, kdist::Division::even), shape);
  EXPECT_EQ(only_step(division).kind, Kind::all_to_all);
}

TEST(RedistributePlan, APendingSumOverAnAxisOfExtentOneIsComplete) {
  const RuntimeDeviceMesh m({1, 2}, {"one", "x"}, 2);
  const auto rows = on(m, {"x", kdist::replicated});
  const auto plan = kdist::plan_redistribute(rows, {"one"}, rows, Sizes{4, 6});
  EXPECT_EQ(only_step(plan).kind, Kind::nothing);
  EXPECT_EQ(plan.source, "('x', None)");
}

TEST(RedistributePlan, PrintsToAStream) {
  const auto whole = on(x2, {kdist::replicated});
  std::ostringstream os;
  os << kdist::plan_redistribute(whole, {"x"}, whole, Sizes{5});
  EXPECT_EQ(os.str(),
            "<RedistributePlan (None,) partial=['x'] -> (None,): all_reduce(sum) over ['x']>");
}

TEST(RedistributePlan, Errors) {
  const Sizes shape{4, 6};
  const auto rows = on(x2, {"x", kdist::replicated});
  const RuntimeDeviceMesh other({2}, {"y"}, 2);
  EXPECT_THROW((void)kdist::plan_redistribute(rows, {}, on(other, {"y", kdist::replicated}), shape),
               kdist::ValueError);
  const RuntimeTensorLayout no_mesh({"x", kdist::replicated});
  EXPECT_THROW((void)kdist::plan_redistribute(rows, {}, no_mesh, shape), kdist::ValueError);
  EXPECT_THROW((void)kdist::plan_redistribute(rows, {}, rows, Sizes{4}), kdist::ValueError);
  EXPECT_THROW((void)kdist::plan_redistribute(rows, {"z"}, rows, shape), kdist::ValueError);
  EXPECT_THROW((void)kdist::plan_redistribute(
                   rows, {}, on(x2, {"x", kdist::replicated}, kdist::Division::even), Sizes{5, 6}),
               kdist::ValueError);
  try {
    (void)kdist::plan_redistribute(rows, {}, on(other, {"y", kdist::replicated}), shape);
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("kdist::plan_redistribute"), std::string::npos)
        << e.what();
  }
}

}  // namespace
