// kdist-mpi-ranks: 1 2 4
// MultiHeadAttention distributed (issue 20): on every (data, model) mesh of the world's size, with
// the heads sharded over "model" (Megatron), with sequence-sharded input and output
// (("data", "model", None)), with FSDP kernels (also sharded over "data"), with a rule that
// shards the contracted d_model of the query kernel, and under DataParallel, the output, the
// input's gradient and every variable's gradient equal those of a layout where every process
// computes everything (double, 1e-10 relative), each in the layout it belongs in. Every error a
// user meets is a ValueError on every process alike.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using kdist::test::contains;
using kdist::test::meshes;
using kdist::test::message_of;
using kdist::test::world_size;
using MHA = kdist::layers::BasicMultiHeadAttention<double>;
using Tensor3 = kdist::DistributedTensor<double***>;
using Dist = std::shared_ptr<const kdist::Distribution>;
using kdist::replicated;

static_assert(kdist::Layer<MHA>);

// heads 4: divisible by every model axis of 1, 2, 4; seq 6 over a model axis of 4: 2, 2, 2, 0.
constexpr std::size_t B = 4, S = 6, D = 8, H = 4, K = 3;

std::vector<double> normal(std::size_t n, unsigned seed, double sd = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, sd);
  std::vector<double> out(n);
  for (auto& v : out) v = dist(gen);
  return out;
}

template <class Tensor>
std::vector<double> full(const Tensor& t) {
  auto h = kdist::full_tensor(t);
  return std::vector<double>(h.data(), h.data() + h.size());
}

kdist::RuntimeDeviceMesh mesh_of(const std::vector<std::size_t>& shape) {
  return kdist::RuntimeDeviceMesh(shape, {"data", "model"}, kdist::list_devices());
}

// Every process computes everything: a (1, n) mesh without rules.
Dist replicated_everywhere() {
  return std::make_shared<kdist::ModelParallel>(
      kdist::LayoutMap(mesh_of({1, static_cast<std::size_t>(world_size())})), "data");
}

// Megatron: q/k/v kernels (None, 'model', None), their biases ('model', None), the output kernel
// ('model', None, None).
void megatron_rules(kdist::RuntimeLayoutMap& map, bool query_kernel = true) {
  for (const char* p : {"query", "key", "value"}) {
    if (query_kernel || std::string(p) != "query") {
      map[std::string("mha/") + p + "/kernel"] = {replicated, "model", replicated};
    }
    map[std::string("mha/") + p + "/bias"] = {"model", replicated};
  }
  map["mha/attention_output/kernel"] = {"model", replicated, replicated};
}

struct Case {
  std::string name;
  Dist dist;
  kdist::RuntimeTensorLayout x_layout;  // on the distribution's mesh
  kdist::RuntimeTensorLayout y_layout;  // the output's expected layout
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& shape : meshes()) {
    const auto mesh = mesh_of(shape);
    const std::string m = mesh.to_string();
    const kdist::RuntimeTensorLayout rows({"data", replicated, replicated}, mesh);
    const kdist::RuntimeTensorLayout seq({"data", "model", replicated}, mesh);
    {
      kdist::LayoutMap map(mesh);
      megatron_rules(map);
      out.push_back({"heads on 'model' " + m,
                     std::make_shared<kdist::ModelParallel>(std::move(map), "data"), rows, rows});
    }
    {
      kdist::LayoutMap map(mesh);
      megatron_rules(map);
      map["mha/output"] = {"data", "model", replicated};
      out.push_back({"heads on 'model', sequence parallel " + m,
                     std::make_shared<kdist::ModelParallel>(std::move(map), "data"), seq, seq});
    }
    {
      kdist::LayoutMap map(mesh);
      for (const char* p : {"query", "key", "value"}) {
        map[std::string("mha/") + p + "/kernel"] = {"data", "model", replicated};
        map[std::string("mha/") + p + "/bias"] = {"model", replicated};
      }
      map["mha/attention_output/kernel"] = {"model", replicated, "data"};
      map["mha/attention_output/bias"] = {"data"};
      out.push_back({"FSDP kernels " + m,
                     std::make_shared<kdist::ModelParallel>(std::move(map), "data"), rows, rows});
    }
    {
      kdist::LayoutMap map(mesh);
      megatron_rules(map, false);
      map["mha/query/kernel"] = {"model", replicated, replicated};  // shards d_model (contracted)
      out.push_back({"query kernel ('model', None, None) " + m,
                     std::make_shared<kdist::ModelParallel>(std::move(map), "data"), seq, rows});
    }
  }
  auto dp = std::make_shared<kdist::DataParallel>();
  const auto dp_rows = dp->get_data_layout({B, S, D});
  out.push_back({"DataParallel", dp, dp_rows, dp_rows});
  return out;
}

template <class DT>
void set_values(kdist::TrainableVariable<DT>& v, const std::vector<double>& data) {
  v.value = kdist::distribute_tensor<DT>(data.data(), v.value.shape(), v.value.layout());
}

// The output, the input's gradient and every variable's gradient, as full tensors; the layouts
// checked on the way.
std::map<std::string, std::vector<double>> run(const kdist::Distribution& dist,
                                               const kdist::RuntimeTensorLayout& x_layout,
                                               const kdist::RuntimeTensorLayout& y_layout,
                                               const std::string& what) {
  MHA mha(H, K, "mha");
  mha.build({S, D}, dist, 7);
  unsigned seed = 10;
  for (auto ref : mha.variables()) {  // non-zero biases, the same global values on every mesh
    std::visit(
        [&](auto* v) {
          ++seed;
          if (v->value.rank < 3) set_values(*v, normal(v->value.global_size(), seed, 0.3));
        },
        ref);
  }
  const auto xv = normal(B * S * D, 1);
  const auto r = normal(B * S * D, 2);
  const auto x = kdist::distribute_tensor<double***>(xv.data(), {B, S, D}, x_layout);
  const Tensor3 y = mha.forward(x);
  EXPECT_EQ(y.layout().axes(), y_layout.axes()) << what << ": output layout";
  EXPECT_FALSE(y.is_partial()) << what;
  const auto dy = kdist::distribute_tensor<double***>(r.data(), {B, S, D}, y.layout());
  const auto dx = kdist::backward_and_resolve(mha, dy, true);
  std::map<std::string, std::vector<double>> out;
  out["y"] = full(y);
  if (dx) {
    EXPECT_EQ(dx->layout().axes(), x_layout.axes()) << what << ": input gradient layout";
    out["dx"] = full(*dx);
  } else {
    ADD_FAILURE() << what << ": no input gradient";
  }
  for (auto ref : mha.variables()) {
    std::visit(
        [&](auto* v) {
          EXPECT_EQ(v->grad.layout().axes(), v->value.layout().axes()) << what << " " << v->path;
          EXPECT_FALSE(v->grad.is_partial()) << what << " " << v->path;
          out[v->path + "/grad"] = full(v->grad);
        },
        ref);
  }
  return out;
}

void expect_same(const std::map<std::string, std::vector<double>>& got,
                 const std::map<std::string, std::vector<double>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [key, w] : want) {
    const auto& g = got.at(key);
    ASSERT_EQ(g.size(), w.size()) << what << " " << key;
    double scale = 0;
    for (double x : w) scale = std::max(scale, std::abs(x));
    double worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
    EXPECT_LE(worst, 1e-10 * std::max(scale, 1e-3)) << what << " " << key;
    EXPECT_GT(scale, 0.0) << what << " " << key << " is all zeros";
  }
}

TEST(MultiHeadAttention, OutputsAndGradientsEqualTheOneProcessValuesOnEveryMesh) {
  const auto ref_dist = replicated_everywhere();
  const kdist::RuntimeTensorLayout ref_rows({"data", replicated, replicated},
                                            ref_dist->device_mesh());
  const auto want = run(*ref_dist, ref_rows, ref_rows, "reference");
  EXPECT_EQ(want.size(), 10u);  // y, dx, 8 gradients
  for (const auto& c : cases())
    expect_same(run(*c.dist, c.x_layout, c.y_layout, c.name), want, c.name);
}

// The heads a process holds come from the distribution's layouts: under the Megatron rules each
// process's query kernel block holds heads / model-extent heads.
TEST(MultiHeadAttention, MegatronRulesShardTheHeads) {
  for (const auto& shape : meshes()) {
    kdist::LayoutMap map(mesh_of(shape));
    megatron_rules(map);
    kdist::ModelParallel dist(std::move(map), "data");
    MHA mha(H, K, "mha");
    mha.build({S, D}, dist, 7);
    EXPECT_EQ(mha.query_kernel().value.local_extents()[1], H / shape[1]);
    EXPECT_EQ(mha.output_kernel().value.local_extents()[0], H / shape[1]);
    EXPECT_EQ(mha.query_bias()->value.local_extents()[0], H / shape[1]);
  }
}

// ---- errors -------------------------------------------------------------------------------------

TEST(MultiHeadAttention, HeadsTheModelAxisDoesNotDivideAreAValueErrorNamingPathShapeAndAxis) {
  const auto n = static_cast<std::size_t>(world_size());
  if (n == 1) GTEST_SKIP() << "a model axis of 1 divides any number of heads";
  {
    kdist::LayoutMap map(mesh_of({1, n}));
    megatron_rules(map);
    kdist::ModelParallel dist(std::move(map), "data");
    MHA mha(3, K, "mha");
    const auto msg = message_of<kdist::ValueError>([&] { mha.build({S, D}, dist, 7); });
    EXPECT_TRUE(contains(msg, "'mha/query/kernel'")) << msg;
    EXPECT_TRUE(contains(msg, "(8, 3, 3)")) << msg;
    EXPECT_TRUE(contains(msg, "'model'")) << msg;
    EXPECT_TRUE(contains(msg, "extent " + std::to_string(n))) << msg;
  }
  {
    kdist::LayoutMap map(mesh_of({1, n}));
    map["mha/attention_output/kernel"] = {"model", replicated, replicated};
    kdist::ModelParallel dist(std::move(map), "data");
    MHA mha(3, K, "mha");
    const auto msg = message_of<kdist::ValueError>([&] { mha.build({S, D}, dist, 7); });
    EXPECT_TRUE(contains(msg, "'mha/attention_output/kernel'")) << msg;
    EXPECT_TRUE(contains(msg, "(3, 3, 8)")) << msg;
  }
}

TEST(MultiHeadAttention, InputsOfTheWrongRankAreValueErrors) {
  kdist::ModelParallel dist(kdist::LayoutMap(mesh_of({1, static_cast<std::size_t>(world_size())})),
                            "data");
  MHA mha(H, K, "mha");
  for (const kdist::Shape& bad : {kdist::Shape{D}, kdist::Shape{B, S, D}}) {
    const auto msg = message_of<kdist::ValueError>([&] { mha.build(bad, dist, 7); });
    EXPECT_TRUE(contains(msg, "(sequence, features)")) << msg;
  }
  mha.build({S, D}, dist, 7);
  const auto rank2 =
      kdist::DistributedTensor<double**>::zeros({B, D}, dist.get_data_layout({B, D}));
  const auto msg = message_of<kdist::ValueError>(
      [&] { (void)mha.forward(kdist::LayerTensor<double>(rank2), kdist::StepContext{}); });
  EXPECT_TRUE(contains(msg, "rank 3")) << msg;
  EXPECT_TRUE(contains(msg, "rank 2")) << msg;
  const auto wide = Tensor3::zeros({B, S, D + 1}, dist.get_data_layout({B, S, D + 1}));
  const auto msg2 = message_of<kdist::ValueError>([&] { (void)mha.forward(wide); });
  EXPECT_TRUE(contains(msg2, "built for 8 features")) << msg2;
  const auto x = Tensor3::zeros({B, S, D}, dist.get_data_layout({B, S, D}));
  const auto msg3 =
      message_of<kdist::ValueError>([&] { (void)kdist::backward_and_resolve(mha, x, true); });
  EXPECT_TRUE(contains(msg3, "backward before forward")) << msg3;
  MHA unbuilt(H, K, "mha");
  const auto msg4 = message_of<kdist::ValueError>([&] { (void)unbuilt.forward(x); });
  EXPECT_TRUE(contains(msg4, "before build")) << msg4;
}

TEST(MultiHeadAttention, ZeroHeadsOrKeyDimAreValueErrors) {
  for (auto [h, k] : {std::pair<std::size_t, std::size_t>{0, 4}, {2, 0}}) {
    const std::size_t heads = h, key_dim = k;  // clang 14 captures no structured bindings
    const auto msg = message_of<kdist::ValueError>([&] { MHA(heads, key_dim, "mha"); });
    EXPECT_TRUE(contains(msg, "'mha'")) << msg;
    EXPECT_TRUE(contains(msg, "num_heads")) << msg;
    EXPECT_TRUE(contains(msg, "key_dim")) << msg;
  }
}

}  // namespace
