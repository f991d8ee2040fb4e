// kdist/core/matmul_plan.hpp: matmul's parallelism rule, once for static and run-time dimensions
// (only core/ headers, no MPI): at compile time over DimSpec, at run time over DimAxes, with the
// same answers; column-parallel, row-parallel, sliced, gathered (FSDP-like) and conflicting
// operands; printing.
#include <kdist/core/matmul_plan.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using kdist::DimAxes;
using kdist::DimSpec;
using kdist::MatmulSlice;
using kdist::plan_matmul;
using kdist::replicated;

// The typed matmul's form, at compile time (tests/static/core_matmul_plan.cpp has the rest).
constexpr auto row = plan_matmul(DimSpec("data"), DimSpec("model"), DimSpec("model"), replicated);
constexpr auto fsdp = plan_matmul(DimSpec("data"), replicated, DimSpec("data"), DimSpec("model"));

// ---- run time: the same rule over DimAxes ----------------------------------------------------------
TEST(MatmulPlan, ColumnParallelIsLocalAndComplete) {
  const auto p = plan_matmul(DimAxes("data"), DimAxes(), DimAxes(), DimAxes("model"));
  EXPECT_EQ(p.rows, DimAxes("data"));
  EXPECT_EQ(p.cols, DimAxes("model"));
  EXPECT_FALSE(p.is_partial());
  EXPECT_FALSE(p.gather_b_cols || p.gather_a_contraction || p.gather_b_contraction);
  EXPECT_EQ(p.slice, MatmulSlice::none);
  EXPECT_EQ(p.to_string(), "local product -> ('data', 'model')");
}

TEST(MatmulPlan, RowParallelLeavesAPendingSum) {
  const auto p = plan_matmul(DimAxes("data"), DimAxes("model"), DimAxes("model"), DimAxes());
  EXPECT_EQ(p.pending, DimAxes("model"));
  EXPECT_EQ(p.cols, DimAxes());
  EXPECT_EQ(p.to_string(), "local product -> ('data', None), pending sum over ['model']");
  // As the typed form says.
  EXPECT_EQ(DimAxes(row.pending), p.pending);
}

TEST(MatmulPlan, TheOperandReplicatedInTheContractionIsSliced) {
  const auto a = plan_matmul(DimAxes(), DimAxes(), DimAxes("model"), DimAxes());
  EXPECT_EQ(a.slice, MatmulSlice::a);
  EXPECT_EQ(a.pending, DimAxes("model"));
  EXPECT_EQ(a.to_string(),
            "slice A's contraction to B's block; local product -> (None, None), pending sum over "
            "['model']");
  const auto b = plan_matmul(DimAxes(), DimAxes({"data", "model"}), DimAxes(), DimAxes());
  EXPECT_EQ(b.slice, MatmulSlice::b);
  EXPECT_EQ(b.pending, DimAxes({"data", "model"}));
}

TEST(MatmulPlan, AWeightShardedLikeTheBatchIsGathered) {
  // FSDP: activations (data, None), the weight's rows sharded over data as well.
  const auto p = plan_matmul(DimAxes("data"), DimAxes(), DimAxes("data"), DimAxes("model"));
  EXPECT_TRUE(p.gather_b_contraction);
  EXPECT_FALSE(p.gather_a_contraction);
  EXPECT_FALSE(p.is_partial());
  EXPECT_EQ(p.to_string(), "gather B's contraction; local product -> ('data', 'model')");
  EXPECT_EQ(DimAxes(fsdp.cols), p.cols);
}

TEST(MatmulPlan, ConflictingShardingsAreGathered) {
  // The contraction over 'data' in A and over 'model' in B.
  const auto k = plan_matmul(DimAxes(), DimAxes("data"), DimAxes("model"), DimAxes());
  EXPECT_TRUE(k.gather_a_contraction && k.gather_b_contraction);
  EXPECT_FALSE(k.is_partial());
  EXPECT_EQ(k.to_string(),
            "gather A's contraction; gather B's contraction; local product -> (None, None)");
  // B's columns on the axis of A's rows: the columns are gathered first.
  const auto cols = plan_matmul(DimAxes("model"), DimAxes(), DimAxes(), DimAxes("model"));
  EXPECT_TRUE(cols.gather_b_cols);
  EXPECT_EQ(cols.cols, DimAxes());
  EXPECT_EQ(cols.to_string(),
            "gather B's columns (A's rows use their mesh axes); local product -> ('model', None)");
  // The contraction on an axis the result's columns use: gathered, the product complete.
  const auto out = plan_matmul(DimAxes(), DimAxes("model"), DimAxes("model"), DimAxes("model"));
  EXPECT_TRUE(out.gather_a_contraction && out.gather_b_contraction);
  EXPECT_EQ(out.cols, DimAxes("model"));
  // ... but when the columns were gathered first, the contraction's sum stays pending.
  const auto both =
      plan_matmul(DimAxes("data"), DimAxes("model"), DimAxes("model"), DimAxes("data"));
  EXPECT_TRUE(both.gather_b_cols);
  EXPECT_EQ(both.pending, DimAxes("model"));
}

}  // namespace
