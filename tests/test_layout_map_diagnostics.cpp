// kdist::LayoutMap diagnostics for keras-hub's known pitfalls: contracted-dimension sharding
// (keras-hub#2807: Gemma's (heads, hidden, head_dim) query rule copied onto Llama's
// (hidden, heads, head_dim) query kernels) reported as a warning, and strict mode's single check
// point (keras-hub#2806: out of memory instead of an error) naming every unmatched variable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/layout_map_report.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kdist::LayoutMap;
using kdist::LayoutMapReport;
using kdist::RuntimeDeviceMesh;
using kdist::VariableInfo;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> cpu_devices(std::size_t n) {
  std::vector<std::string> d;
  for (std::size_t i = 0; i < n; ++i) d.push_back("cpu:" + std::to_string(i));
  return d;
}

template <class F>
std::string value_error_of(F&& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected kdist::ValueError";
  return {};
}

// Keras-hub's query/key/value rule of Gemma: (heads -> model, hidden -> batch, head_dim).
const char* const qkv_key = ".*attention/(query|key|value)/kernel";

class LayoutMapDiagnosticsTest : public ::testing::Test {
 protected:
  RuntimeDeviceMesh mesh{{2, 4}, {"batch", "model"}, cpu_devices(8)};
};

// ---- contracted-dimension sharding ------------------------------------------------------------

TEST_F(LayoutMapDiagnosticsTest, GemmasRuleOnLlamasQueryKernelReportsTheHiddenDimension) {
  LayoutMap layout_map(mesh);
  layout_map[qkv_key] = {"model", "batch", kdist::replicated};
  // Llama's query kernel follows Keras' EinsumDense convention: (hidden, heads, head_dim).
  const std::string path = "transformer_layer_0/self_attention/query/kernel";
  ASSERT_TRUE(layout_map.resolve(path, {64, 8, 16}));
  const LayoutMapReport report = layout_map.report();
  ASSERT_EQ(report.contracted_shardings.size(), 1u);
  const auto& c = report.contracted_shardings[0];
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.shape, (std::vector<std::size_t>{64, 8, 16}));
  EXPECT_EQ(c.rule, qkv_key);
  EXPECT_EQ(c.layout, "('model', 'batch', None)");
  EXPECT_EQ(c.dims, (std::vector<std::size_t>{0}));
  EXPECT_EQ(c.axes, (std::vector<std::vector<std::string>>{{"model"}}));
  EXPECT_FALSE(report.empty());
  const std::string text = report.to_string();
  EXPECT_THAT(text, HasSubstr("1 variable(s) shard a contracted dimension"));
  EXPECT_THAT(text, HasSubstr("contracted-dimension sharding (warning): "
                              "'transformer_layer_0/self_attention/query/kernel' shape (64, 8, 16) "
                              "matches rule '.*attention/(query|key|value)/kernel' = "
                              "('model', 'batch', None)"));
  EXPECT_THAT(text, HasSubstr("contracted (input) dimension 0 (extent 64) over 'model'"));
  EXPECT_THAT(text, HasSubstr("extra all-reduce of the output per call"));
  // operator<< prints the same text.
  std::ostringstream os;
  os << report;
  EXPECT_EQ(os.str(), text);
}

TEST_F(LayoutMapDiagnosticsTest, GemmasRuleOnGemmasKernelDeclaredContractedDimIsNotReported) {
  LayoutMap layout_map(mesh);
  layout_map[qkv_key] = {"model", kdist::replicated, kdist::replicated};  // the heads
  // Undeclared, the kernel is read by Keras' convention (dimension 0 contracted): reported.
  LayoutMap undeclared = layout_map;
  ASSERT_TRUE(undeclared.resolve("decoder_block_0/attention/query/kernel", {8, 64, 16}));
  EXPECT_EQ(undeclared.report().contracted_shardings.size(), 1u);
  // Gemma's query kernel is (heads, hidden, head_dim): its einsum contracts dimension 1.
  layout_map.set_contracted_dims(qkv_key, {1});
  ASSERT_TRUE(layout_map.resolve("decoder_block_0/attention/query/kernel", {8, 64, 16}));
  EXPECT_TRUE(layout_map.report().contracted_shardings.empty());
  EXPECT_EQ(layout_map.contracted_dims("decoder_block_0/attention/key/kernel", 3),
            (std::vector<std::size_t>{1}));
  // The same map, Gemma's rule with its FSDP half (hidden over 'batch'): the contracted hidden
  // dimension is sharded, and reported (kdist gathers the kernel for it on every call).
  LayoutMap fsdp(mesh);
  fsdp[qkv_key] = {"model", "batch", kdist::replicated};
  fsdp.set_contracted_dims(qkv_key, {1});
  ASSERT_TRUE(fsdp.resolve("decoder_block_0/attention/query/kernel", {8, 64, 16}));
  ASSERT_EQ(fsdp.report().contracted_shardings.size(), 1u);
  EXPECT_EQ(fsdp.report().contracted_shardings[0].axes,
            (std::vector<std::vector<std::string>>{{"batch"}}));
}

TEST_F(LayoutMapDiagnosticsTest, LlamasOwnRuleShardingTheHeadsIsNotReported) {
  LayoutMap layout_map(mesh);
  layout_map[qkv_key] = {kdist::replicated, "model", kdist::replicated};
  layout_map[".*dense.*kernel"] = {kdist::replicated, "model"};  // column-parallel Dense
  ASSERT_TRUE(layout_map.resolve("transformer_layer_0/self_attention/value/kernel", {64, 8, 16}));
  ASSERT_TRUE(layout_map.resolve("feedforward_gate_dense/kernel", {64, 256}));
  EXPECT_TRUE(layout_map.report().contracted_shardings.empty());
  EXPECT_TRUE(layout_map.report().empty());
}

TEST_F(LayoutMapDiagnosticsTest, DenseKernelShardedOnItsInputIsReported) {
  LayoutMap layout_map(mesh);
  layout_map["d1/kernel"] = {"model", kdist::replicated};
  layout_map["d1/bias"] = {"model"};
  ASSERT_TRUE(layout_map.resolve("d1/kernel", {784, 200}));
  ASSERT_TRUE(layout_map.resolve("d1/bias", {200}));  // not a kernel: never reported
  const auto report = layout_map.report();
  ASSERT_EQ(report.contracted_shardings.size(), 1u);
  EXPECT_EQ(report.contracted_shardings[0].path, "d1/kernel");
  EXPECT_EQ(layout_map.contracted_dims("d1/kernel", 2), (std::vector<std::size_t>{0}));
  EXPECT_TRUE(layout_map.contracted_dims("d1/bias", 1).empty());
  EXPECT_TRUE(layout_map.contracted_dims("embeddings/embeddings", 2).empty());
  // reset_report forgets it; resolving again records it once.
  layout_map.reset_report();
  EXPECT_TRUE(layout_map.report().contracted_shardings.empty());
  (void)layout_map.resolve("d1/kernel", {784, 200});
  (void)layout_map.resolve("d1/kernel", {784, 200});
  EXPECT_EQ(layout_map.report().contracted_shardings.size(), 1u);
}

TEST_F(LayoutMapDiagnosticsTest, RowParallelKernelsAreNotReported) {
  LayoutMap layout_map(mesh);
  layout_map[".*attention_output/kernel"] = {"model", kdist::replicated, kdist::replicated};
  layout_map[".*(ffw_linear|down_proj|feedforward_output_dense|fc2)/kernel"] = {"model",
                                                                                kdist::replicated};
  for (const char* p : {"decoder_block_0/ffw_linear/kernel", "layers_0/mlp/down_proj/kernel",
                        "transformer_layer_0/feedforward_output_dense/kernel", "mlp/fc2/kernel"}) {
    ASSERT_TRUE(layout_map.resolve(p, {256, 64})) << p;
  }
  ASSERT_TRUE(layout_map.resolve("decoder_block_0/attention/attention_output/kernel", {8, 16, 64}));
  EXPECT_TRUE(layout_map.report().contracted_shardings.empty());
  EXPECT_EQ(layout_map.row_parallel_pattern(), LayoutMap<>::default_row_parallel_pattern);
  // Without the row-parallel names, the same rules are reported.
  layout_map.set_row_parallel_pattern("");
  EXPECT_EQ(layout_map.row_parallel_pattern(), "");
  ASSERT_TRUE(layout_map.resolve("decoder_block_0/attention/attention_output/kernel", {8, 16, 64}));
  ASSERT_TRUE(layout_map.resolve("layers_0/mlp/down_proj/kernel", {256, 64}));
  EXPECT_EQ(layout_map.report().contracted_shardings.size(), 2u);
  // A pattern of one's own; a copy keeps it.
  layout_map.reset_report();
  layout_map.set_row_parallel_pattern(".*down_proj/kernel");
  const LayoutMap<> copy = layout_map;
  ASSERT_TRUE(copy.resolve("layers_0/mlp/down_proj/kernel", {256, 64}));
  ASSERT_TRUE(copy.resolve("mlp/fc2/kernel", {256, 64}));
  ASSERT_EQ(copy.report().contracted_shardings.size(), 1u);
  EXPECT_EQ(copy.report().contracted_shardings[0].path, "mlp/fc2/kernel");
}

TEST_F(LayoutMapDiagnosticsTest, AnAxisOfExtentOneCostsNothingAndIsNotReported) {
  RuntimeDeviceMesh data_only({8, 1}, {"batch", "model"}, cpu_devices(8));
  LayoutMap layout_map(data_only);
  layout_map["d1/kernel"] = {"model", kdist::replicated};
  ASSERT_TRUE(layout_map.resolve("d1/kernel", {784, 200}));
  EXPECT_TRUE(layout_map.report().contracted_shardings.empty());
}

TEST_F(LayoutMapDiagnosticsTest, DeclarationErrors) {
  LayoutMap layout_map(mesh);
  EXPECT_THAT(value_error_of([&] { layout_map.set_contracted_dims("(query", {0}); }),
              HasSubstr("is not a valid regular expression"));
  EXPECT_THAT(value_error_of([&] { layout_map.set_row_parallel_pattern("(fc2"); }),
              HasSubstr("is not a valid regular expression"));
  EXPECT_EQ(layout_map.row_parallel_pattern(), LayoutMap<>::default_row_parallel_pattern);
  layout_map.set_contracted_dims(".*query/kernel", {3});
  layout_map[".*query/kernel"] = {"model", kdist::replicated, kdist::replicated};
  const std::string e = value_error_of([&] {
    (void)layout_map.resolve("q/query/kernel", {8, 4, 2});
  });
  EXPECT_THAT(e, HasSubstr("variable 'q/query/kernel' of shape (8, 4, 2)"));
  EXPECT_THAT(e, HasSubstr("declared (set_contracted_dims) to contract dimension 3, past its "
                           "rank 3"));
}

// ---- strict mode ------------------------------------------------------------------------------

TEST_F(LayoutMapDiagnosticsTest, StrictCheckNamesEveryUnmatchedVariableOfRankTwoOrMore) {
  LayoutMap layout_map(mesh);
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  layout_map.set_strict(true);
  const std::vector<VariableInfo> variables{VariableInfo("d1/kernel", {784, 200}),
                                            VariableInfo("d1/bias", {200}),
                                            VariableInfo("d2/kernel", {200, 10}),
                                            VariableInfo("d2/bias", {10}),
                                            VariableInfo("embeddings/embeddings", {1000, 64}),
                                            VariableInfo("conv/kernel", {3, 3, 1, 8})};
  const std::string e = value_error_of([&] { (void)layout_map.check_variables(variables); });
  EXPECT_THAT(e, HasSubstr("kdist::LayoutMap (strict): 3 variable(s) of rank 2 or more match no "
                           "rule: 'd2/kernel' (200, 10), 'embeddings/embeddings' (1000, 64), "
                           "'conv/kernel' (3, 3, 1, 8)"));
  EXPECT_THAT(e, HasSubstr("set_strict(false)"));
  EXPECT_THAT(e, Not(HasSubstr("bias")));  // rank 1: replicated without an error
  // Raised before any variable was resolved: nothing fell back.
  EXPECT_TRUE(layout_map.report().replicated_variables.empty());
  // With rules for all of them, the check passes and gives the layouts in order.
  layout_map[".*embeddings"] = {kdist::replicated, "model"};
  layout_map["d2/kernel"] = {kdist::replicated, kdist::replicated};
  layout_map["conv/kernel"] = {kdist::replicated, kdist::replicated, kdist::replicated, "model"};
  const auto layouts = layout_map.check_variables(variables);
  ASSERT_EQ(layouts.size(), variables.size());
  EXPECT_EQ(layouts[0]->axes_repr(), "(None, 'model')");
  EXPECT_FALSE(layouts[1]);  // d1/bias: no rule
  EXPECT_EQ(layouts[5]->axes_repr(), "(None, None, None, 'model')");
}

TEST_F(LayoutMapDiagnosticsTest, NonStrictCheckIsSilentAndReportsTheFallbacks) {
  LayoutMap layout_map(mesh);
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  struct Summary {  // the model's VariableSummary: data members
    std::string path;
    std::vector<std::size_t> shape;
  };
  const std::vector<Summary> variables{
      {"d1/kernel", {784, 200}}, {"d2/kernel", {200, 10}}, {"d2/bias", {10}}};
  std::vector<std::optional<kdist::RuntimeTensorLayout>> layouts;
  EXPECT_NO_THROW(layouts = layout_map.check_variables(variables));
  ASSERT_EQ(layouts.size(), 3u);
  EXPECT_TRUE(layouts[0]);
  EXPECT_FALSE(layouts[1]);
  EXPECT_EQ(layout_map.report().replicated_variables.size(), 2u);
  EXPECT_TRUE(layout_map.report().contracted_shardings.empty());
}

// ---- through a distribution --------------------------------------------------------------------

TEST_F(LayoutMapDiagnosticsTest, DistributionLevelReportAndCheck) {
  auto layout_map = std::make_shared<LayoutMap<>>(mesh);
  (*layout_map)[qkv_key] = {"model", "batch", kdist::replicated};
  kdist::ModelParallel model_parallel(std::shared_ptr<const LayoutMap<>>(layout_map), "batch");
  const std::vector<VariableInfo> variables{
      VariableInfo("transformer_layer_0/self_attention/query/kernel", {64, 8, 16}),
      VariableInfo("token_embedding/embeddings", {1000, 64})};
  for (const auto& v : variables) (void)model_parallel.get_variable_layout(v);
  auto report = kdist::layout_map_report(model_parallel);
  ASSERT_TRUE(report);
  ASSERT_EQ(report->contracted_shardings.size(), 1u);
  EXPECT_EQ(report->replicated_variables.size(), 1u);
  EXPECT_NO_THROW(kdist::check_variable_layouts(model_parallel, variables));
  layout_map->set_strict(true);
  EXPECT_THAT(value_error_of([&] { kdist::check_variable_layouts(model_parallel, variables); }),
              HasSubstr("1 variable(s) of rank 2 or more match no rule: "
                        "'token_embedding/embeddings' (1000, 64)"));
  // The per-variable error of strict mode, at variable creation, points to the check.
  EXPECT_THAT(value_error_of([&] { (void)model_parallel.get_variable_layout(variables[1]); }),
              HasSubstr("check_variables"));

  kdist::DataParallel data_parallel(mesh);
  EXPECT_FALSE(kdist::layout_map_report(data_parallel));
  EXPECT_NO_THROW(kdist::check_variable_layouts(data_parallel, variables));
}

}  // namespace
