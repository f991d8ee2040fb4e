// kdist/core/matmul_plan.hpp at compile time: the rule the typed matmul's result type comes from,
// over DimSpec (built = passed; also compiled by plain nvcc, whose constant evaluator differs).
#include <kdist/core/matmul_plan.hpp>

namespace {

using kdist::DimSpec;
using kdist::MatmulSlice;
using kdist::plan_matmul;
using kdist::replicated;

// Column-parallel: x (data, None) times w (None, model): local, complete, (data, model).
constexpr auto column = plan_matmul(DimSpec("data"), replicated, replicated, DimSpec("model"));
static_assert(column.rows == DimSpec("data") && column.cols == DimSpec("model"));
static_assert(!column.is_partial() && column.slice == MatmulSlice::none);
static_assert(!column.gather_b_cols && !column.gather_a_contraction &&
              !column.gather_b_contraction);
// Row-parallel: h (data, model) times w (model, None): a pending sum over model.
constexpr auto row = plan_matmul(DimSpec("data"), DimSpec("model"), DimSpec("model"), replicated);
static_assert(row.pending == DimSpec("model") && row.is_partial());
static_assert(row.rows == DimSpec("data") && row.cols == replicated);
static_assert(row.slice == MatmulSlice::none && !row.gather_a_contraction);
// FSDP-like: x (data, None) times a weight sharded over data on its rows: the weight is gathered.
constexpr auto fsdp = plan_matmul(DimSpec("data"), replicated, DimSpec("data"), DimSpec("model"));
static_assert(fsdp.gather_b_contraction && !fsdp.gather_a_contraction && !fsdp.is_partial());
static_assert(fsdp.rows == DimSpec("data") && fsdp.cols == DimSpec("model"));
// Contraction sharded in B only: A is sliced to B's block, the sum is pending over B's axes.
constexpr auto slice_a = plan_matmul(replicated, replicated, DimSpec("model"), replicated);
static_assert(slice_a.slice == MatmulSlice::a && slice_a.pending == DimSpec("model"));
constexpr auto slice_b =
    plan_matmul(replicated, kdist::axes<"data", "model">, replicated, replicated);
static_assert(slice_b.slice == MatmulSlice::b && slice_b.pending == kdist::axes<"data", "model">);
// Conflicts: the contraction over other axes in A and B; B's columns on A's rows' axis.
constexpr auto conflict = plan_matmul(replicated, DimSpec("data"), DimSpec("model"), replicated);
static_assert(conflict.gather_a_contraction && conflict.gather_b_contraction);
static_assert(!conflict.is_partial() && conflict.slice == MatmulSlice::none);
constexpr auto same_axis = plan_matmul(DimSpec("model"), replicated, replicated, DimSpec("model"));
static_assert(same_axis.gather_b_cols && same_axis.cols == replicated);
// The same axes in another order are other shards: a conflict.
static_assert(plan_matmul(replicated, kdist::axes<"data", "model">, kdist::axes<"model", "data">,
                          replicated)
                  .gather_a_contraction);

}  // namespace
