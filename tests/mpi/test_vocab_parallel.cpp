// kdist-mpi-ranks: 1 2 4
// Vocabulary-parallel loss, Dense on sequences, Dropout on rank 3 (issue 20), on every (data,
// model) mesh of the world's size, in double:
// - kdist::sparse_categorical_crossentropy with the vocabulary sharded on "model" and the rows
//   (batch, or sequence) on "data" gives the naive one-process loss and gradient (1e-10), with
//   only small all-reduces (counted through the profiling regions); targets out of range or of
//   the wrong shape on ONE process are a ValueError on every process;
// - a column -> row pair of Dense layers ((None, "model") then ("model", None), the second's
//   output sequence-sharded ("data", "model", None)), and the same pair with FSDP kernels, give
//   the outputs and gradients of the replicated run;
// - Dropout on (batch, sequence, features) and NHWC tensors draws the same mask on every layout.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/sparse_categorical_crossentropy.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "host_views.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using kdist::test::contains;
using kdist::test::edit_on_host;
using kdist::test::host_copy;
using kdist::test::message_of;
using kdist::test::world_rank;
using kdist::test::world_size;
using Tensor3 = kdist::DistributedTensor<double***>;
using Space = Kokkos::DefaultExecutionSpace::memory_space;
const auto None = kdist::DimAxes();

std::vector<std::vector<std::size_t>> meshes() {
  const auto n = static_cast<std::size_t>(world_size());
  if (n == 1) return {{1, 1}};
  if (n == 2) return {{2, 1}, {1, 2}};
  return {{4, 1}, {2, 2}, {1, 4}};
}
kdist::RuntimeDeviceMesh mesh_of(const std::vector<std::size_t>& shape) {
  return kdist::RuntimeDeviceMesh(shape, {"data", "model"}, kdist::list_devices());
}
std::string name_of(const std::vector<std::size_t>& shape) {
  return "mesh (" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ")";
}

void expect_rel(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::max(1.0, std::abs(want)))
      << what << ": " << got << " vs " << want;
}

// ---- the cross-entropy --------------------------------------------------------------------------

constexpr std::size_t B = 4, S = 6, V = 10;
double logit(std::size_t b, std::size_t s, std::size_t v) {
  return std::sin(double(b * 31 + s * 7 + v * 3)) * 3.0 + 0.05 * double(v);
}
int target_of(std::size_t b, std::size_t s) {
  return static_cast<int>((b * 7 + s * 3 + 2) % V);
}

// The naive loss and gradient of the whole tensor, on every process.
struct Reference {
  double loss = 0;
  std::vector<double> grad = std::vector<double>(B * S * V);
};
Reference reference() {
  Reference r;
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t s = 0; s < S; ++s) {
      double mx = -1e300;
      for (std::size_t v = 0; v < V; ++v) mx = std::max(mx, logit(b, s, v));
      double sum = 0;
      for (std::size_t v = 0; v < V; ++v) sum += std::exp(logit(b, s, v) - mx);
      const int t = target_of(b, s);
      r.loss += mx + std::log(sum) - logit(b, s, static_cast<std::size_t>(t));
      for (std::size_t v = 0; v < V; ++v) {
        const double p = std::exp(logit(b, s, v) - mx) / sum;
        r.grad[(b * S + s) * V + v] = (p - (int(v) == t ? 1.0 : 0.0)) / double(B * S);
      }
    }
  }
  r.loss /= double(B * S);
  return r;
}

// This process's targets for the logits' block.
Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Space> local_targets(const Tensor3& logits) {
  const auto& ext = logits.local_extents();
  const auto& off = logits.offsets();
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Space> t("targets", ext[0], ext[1]);
  edit_on_host(t, [&](auto h) {
    for (std::size_t i = 0; i < ext[0]; ++i)
      for (std::size_t j = 0; j < ext[1]; ++j) h(i, j) = target_of(off[0] + i, off[1] + j);
  });
  return t;
}

std::vector<std::string>& regions() {
  static std::vector<std::string> r;
  return r;
}

TEST(VocabParallelCrossEntropy, EveryMeshAndLayoutGivesTheNaiveLossAndGradient) {
  const Reference ref = reference();
  for (const auto& shape : meshes()) {
    const auto mesh = mesh_of(shape);
    const std::vector<kdist::RuntimeTensorLayout> layouts = {
        kdist::RuntimeTensorLayout({"data", None, "model"}, mesh),
        kdist::RuntimeTensorLayout({None, "data", "model"}, mesh),
        kdist::RuntimeTensorLayout({"data", "model", None}, mesh),
        kdist::RuntimeTensorLayout({None, None, kdist::DimAxes({"data", "model"})}, mesh)};
    for (const auto& layout : layouts) {
      const std::string what = name_of(shape) + " layout " + layout.axes_repr();
      const Tensor3 logits = kdist::distribute_tensor<double***>(
          [](std::size_t b, std::size_t s, std::size_t v) { return logit(b, s, v); }, {B, S, V},
          layout);
      const auto targets = local_targets(logits);
      regions().clear();
      Kokkos::Tools::Experimental::set_push_region_callback(
          [](const char* n) { regions().emplace_back(n); });
      const auto result = kdist::sparse_categorical_crossentropy(logits, targets);
      Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
      expect_rel(result.loss, ref.loss, 1e-10, what + " loss");
      EXPECT_EQ(result.dlogits.layout(), layout) << what;
      const auto g = host_copy(result.dlogits.local());
      const auto& off = result.dlogits.offsets();
      for (std::size_t i = 0; i < g.extent(0); ++i)
        for (std::size_t j = 0; j < g.extent(1); ++j)
          for (std::size_t k = 0; k < g.extent(2); ++k)
            expect_rel(g(i, j, k), ref.grad[((off[0] + i) * S + off[1] + j) * V + off[2] + k],
                       1e-10, what + " gradient");
      // Collectives: 2 small all-reduces over a sharded vocabulary, 1 over sharded rows, no
      // gather of the logits.
      std::size_t vocab_shards = 1, row_shards = 1;
      for (std::size_t d = 0; d < 3; ++d) {
        for (const auto& a : layout.axes()[d].names()) {
          const std::size_t e = a == "data" ? shape[0] : shape[1];
          (d == 2 ? vocab_shards : row_shards) *= e;
        }
      }
      const std::size_t want = (vocab_shards > 1 ? 2u : 0u) + (row_shards > 1 ? 1u : 0u);
      std::size_t all_reduces = 0;
      for (const auto& r : regions()) {
        if (r == "kdist::all_reduce") ++all_reduces;
        EXPECT_TRUE(r == "kdist::all_reduce" || r == "kdist::sparse_categorical_crossentropy")
            << what << ": unexpected region " << r;
      }
      EXPECT_EQ(all_reduces, want) << what;
    }
  }
}

TEST(VocabParallelCrossEntropy, OneProcessesBadTargetsAreAValueErrorEverywhere) {
  const int last = world_size() - 1;
  for (const auto& shape : meshes()) {
    const auto mesh = mesh_of(shape);
    const Tensor3 logits = kdist::distribute_tensor<double***>(
        [](std::size_t b, std::size_t s, std::size_t v) { return logit(b, s, v); }, {B, S, V},
        kdist::RuntimeTensorLayout({"data", None, "model"}, mesh));
    auto targets = local_targets(logits);
    if (world_rank() == last) {
      edit_on_host(targets, [](auto h) { h(0, 0) = static_cast<std::int32_t>(V) + 3; });
    }
    auto msg = message_of<kdist::ValueError>(
        [&] { (void)kdist::sparse_categorical_crossentropy(logits, targets); });
    EXPECT_TRUE(contains(msg, "1 target(s) on process " + std::to_string(last) +
                                  " lie outside [0, 10) (the first is 13)"))
        << msg;
    const auto& ext = logits.local_extents();
    Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Space> wrong(
        "wrong", ext[0], world_rank() == last ? ext[1] + 1 : ext[1]);
    msg = message_of<kdist::ValueError>(
        [&] { (void)kdist::sparse_categorical_crossentropy(logits, wrong); });
    EXPECT_TRUE(contains(msg, "the targets View is " + std::to_string(ext[0]) + "x" +
                                  std::to_string(ext[1] + 1) + " on process " +
                                  std::to_string(last)))
        << msg;
    const kdist::LayerTensor<double> matrix = kdist::DistributedTensor<double**>::zeros(
        {B, V}, kdist::RuntimeTensorLayout({"data", None}, mesh));
    msg = message_of<kdist::ValueError>(
        [&] { (void)kdist::sparse_categorical_crossentropy(matrix, targets); });
    EXPECT_TRUE(contains(msg, "the logits have rank 2")) << msg;
  }
}

// ---- Dense: column -> row on sequence-sharded activations ---------------------------------------

constexpr std::size_t F = 6, H = 8;

struct PairRun {
  std::vector<double> y, dx, k1, b1, k2, b2;
};

std::vector<double> flat(const Kokkos::View<double*, Kokkos::LayoutRight, Kokkos::HostSpace>& v) {
  return {v.data(), v.data() + v.size()};
}
template <class HostView>
std::vector<double> flat_any(const HostView& v) {
  return {v.data(), v.data() + v.size()};
}

// d2(d1(x)) forward and backward with L = sum(y * w), the layouts given by `map` and `x_layout`.
PairRun run_pair(const std::shared_ptr<const kdist::Distribution>& dist,
                 const kdist::RuntimeTensorLayout& x_layout) {
  kdist::layers::BasicDense<double> d1(H, kdist::layers::Activation::gelu, true, "d1");
  kdist::layers::BasicDense<double> d2(F, kdist::layers::Activation::linear, true, "d2");
  d1.build(kdist::Shape{S, F}, *dist, 5);
  d2.build(kdist::Shape{S, H}, *dist, 5);
  // Non-zero biases, the same on every layout (a function of the global index).
  d1.bias()->value = kdist::distribute_tensor<double*>(
      [](std::size_t u) { return 0.05 * double(u) - 0.1; }, {H}, d1.bias()->value.layout());
  d2.bias()->value = kdist::distribute_tensor<double*>(
      [](std::size_t u) { return 0.02 * double(u) + 0.03; }, {F}, d2.bias()->value.layout());
  const Tensor3 x = kdist::distribute_tensor<double***>(
      [](std::size_t b, std::size_t s, std::size_t f) {
        return std::sin(double(b * 13 + s * 5 + f)) * 1.2;
      },
      {B, S, F}, x_layout);
  const Tensor3 y = d2.forward(d1.forward(x));
  const Tensor3 w = kdist::distribute_tensor<double***>(
      [](std::size_t b, std::size_t s, std::size_t f) { return std::cos(double(b * 3 + s + f)); },
      {B, S, F}, y.layout());
  const auto dh = kdist::backward_and_resolve(d2, w, true);
  const auto dx = kdist::backward_and_resolve(d1, *dh, true);
  EXPECT_EQ(dx->layout(), x.layout());
  PairRun r;
  r.y = flat_any(kdist::full_tensor(y));
  r.dx = flat_any(kdist::full_tensor(*dx));
  r.k1 = flat_any(kdist::full_tensor(d1.kernel().grad));
  r.b1 = flat(kdist::full_tensor(d1.bias()->grad));
  r.k2 = flat_any(kdist::full_tensor(d2.kernel().grad));
  r.b2 = flat(kdist::full_tensor(d2.bias()->grad));
  return r;
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) expect_rel(got[i], want[i], 1e-10, what);
}

TEST(DenseOnSequences, ColumnThenRowParallelWithSequenceShardingMatchesTheReplicatedRun) {
  for (const auto& shape : meshes()) {
    const auto mesh = mesh_of(shape);
    const auto replicated = std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
    const PairRun want = run_pair(replicated, kdist::RuntimeTensorLayout({None, None, None}, mesh));
    for (const bool fsdp : {false, true}) {
      kdist::LayoutMap map(mesh);
      if (fsdp) {  // the kernels also sharded on the batch axis: gathered for compute
        map["d1/kernel"] = {"data", "model"};
        map["d2/kernel"] = {"model", "data"};
      } else {
        map["d1/kernel"] = {kdist::replicated, "model"};
        map["d2/kernel"] = {"model", kdist::replicated};
      }
      map["d1/bias"] = {"model"};
      map["d2/output"] = {"data", "model", kdist::replicated};
      const auto dist = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
      const std::string what = name_of(shape) + (fsdp ? " fsdp" : "");
      const PairRun got = run_pair(dist, kdist::RuntimeTensorLayout({"data", "model", None}, mesh));
      expect_same(got.y, want.y, what + " output");
      expect_same(got.dx, want.dx, what + " input gradient");
      expect_same(got.k1, want.k1, what + " d1 kernel gradient");
      expect_same(got.b1, want.b1, what + " d1 bias gradient");
      expect_same(got.k2, want.k2, what + " d2 kernel gradient");
      expect_same(got.b2, want.b2, what + " d2 bias gradient");
    }
  }
}

// ---- Dropout ------------------------------------------------------------------------------------

TEST(DropoutOnSequences, TheSameMaskOnEveryMeshAndLayout) {
  kdist::StepContext ctx;
  ctx.seed = 3;
  ctx.step = 9;
  std::vector<double> want3, want4;
  {
    const auto mesh = mesh_of(meshes().front());
    kdist::layers::BasicDropout<double> drop(0.3, "drop");
    const Tensor3 x = kdist::distribute_tensor<double***>(
        [](std::size_t b, std::size_t s, std::size_t f) { return 1.0 + double(b + s + f); },
        {B, S, F}, kdist::RuntimeTensorLayout({None, None, None}, mesh));
    want3 = flat_any(kdist::full_tensor(std::get<Tensor3>(drop.forward(x, ctx))));
    using T4 = kdist::DistributedTensor<double****>;
    const T4 x4 = kdist::distribute_tensor<double****>(
        [](std::size_t n, std::size_t h, std::size_t w, std::size_t c) {
          return 1.0 + double(n + h + w + c);
        },
        {4, 3, 5, 2}, kdist::RuntimeTensorLayout({None, None, None, None}, mesh));
    want4 = flat_any(kdist::full_tensor(std::get<T4>(drop.forward(x4, ctx))));
  }
  for (const auto& shape : meshes()) {
    const auto mesh = mesh_of(shape);
    kdist::layers::BasicDropout<double> drop(0.3, "drop");
    for (const auto& layout : {kdist::RuntimeTensorLayout({"data", "model", None}, mesh),
                               kdist::RuntimeTensorLayout({None, "data", "model"}, mesh)}) {
      const Tensor3 x = kdist::distribute_tensor<double***>(
          [](std::size_t b, std::size_t s, std::size_t f) { return 1.0 + double(b + s + f); },
          {B, S, F}, layout);
      const auto y = std::get<Tensor3>(drop.forward(x, ctx));
      EXPECT_EQ(y.layout(), layout);
      const auto got = flat_any(kdist::full_tensor(y));
      EXPECT_EQ(got, want3) << name_of(shape) << " " << layout.axes_repr();
      const auto dx = std::get<Tensor3>(*kdist::backward_and_resolve(drop, x, true));
      EXPECT_EQ(flat_any(kdist::full_tensor(dx)), want3);  // the same mask, backward
    }
    using T4 = kdist::DistributedTensor<double****>;
    const T4 x4 = kdist::distribute_tensor<double****>(
        [](std::size_t n, std::size_t h, std::size_t w, std::size_t c) {
          return 1.0 + double(n + h + w + c);
        },
        {4, 3, 5, 2}, kdist::RuntimeTensorLayout({"data", None, None, "model"}, mesh));
    EXPECT_EQ(flat_any(kdist::full_tensor(std::get<T4>(drop.forward(x4, ctx)))), want4)
        << name_of(shape);
  }
}

}  // namespace
