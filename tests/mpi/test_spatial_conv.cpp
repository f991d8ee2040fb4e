// kdist-mpi-ranks: 1 2 4 8
// kdist-mpi-filter-8: SpatialConv2D.EveryMeshGivesTheUnshardedOutputAndGradients
// Conv2D on spatially sharded images (issue 38): the height and width split over mesh axes - by a
// rule on the layer's output (the seeds' `layout_map["conv1/output"]`) or by the input arriving
// sharded - on every mesh of the world's size (1-D and 2-D process grids, uneven and empty blocks),
// for padding "valid", "same" and "periodic", strides and dilation: the output, the kernel and
// bias gradients and the input gradient equal the unsharded layer's (1e-12 in double); the
// unsharded layer equals the definition with Keras' padding (and its input gradient finite
// differences, on one process); a model with a spatially sharded Conv2D trains to the data-parallel
// losses; the constructor's and build's errors.
#include <gtest/gtest.h>
#include "model_test_support.hpp"
#include "spatial_test_support.hpp"
#include "step_allocations.hpp"

#include <array>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

namespace {

using kdist::test::all_values;
using kdist::test::contains;
using kdist::test::expect_close;
using kdist::test::mesh_name;
using kdist::test::message_of;
using kdist::test::normal_values;
using kdist::test::world_size;
// Meshes of the world's size: every split of the processes over the mesh's axes (at 8 processes
// the images' splits alone, CI's time kept: 1 x 8, 2 x 4, 4 x 2, 8 x 1).
std::vector<std::vector<std::size_t>> meshes() {
  return kdist::test::process_splits(3, kdist::test::world_size() >= 8 ? 1 : 0);
}
using Conv = kdist::layers::BasicConv2D<double>;
using Images = kdist::DistributedTensor<double****>;
using kdist::layers::Activation;
using kdist::layers::Conv2DOptions;
using kdist::layers::Padding;

struct Config {
  std::string name;
  std::size_t filters;
  std::array<std::size_t, 2> kernel;
  Conv2DOptions options;
  std::size_t h, w, c;
  Activation activation;
};

const std::vector<Config>& configs() {
  static const std::vector<Config> all{
      {"valid 3x3", 3, {3, 3}, {}, 7, 6, 2, Activation::relu},
      {"same 3x3", 3, {3, 3}, {.padding = Padding::same}, 7, 5, 2, Activation::linear},
      {"same 2x4 strides 2",
       2,
       {2, 4},
       {.strides = {2, 2}, .padding = Padding::same},
       9,
       7,
       1,
       Activation::relu},
      {"valid 3x2 strides (2, 1)", 2, {3, 2}, {.strides = {2, 1}}, 8, 6, 2, Activation::linear},
      {"same 3x3 dilation 2",
       2,
       {3, 3},
       {.padding = Padding::same, .dilation_rate = {2, 2}},
       7,
       7,
       2,
       Activation::linear},
      {"periodic 3x3", 2, {3, 3}, {.padding = Padding::periodic}, 6, 5, 2, Activation::linear},
      {"periodic 5x3 strides 2",
       2,
       {5, 3},
       {.strides = {2, 2}, .padding = Padding::periodic},
       5,
       6,
       1,
       Activation::linear},
  };
  return all;
}
constexpr std::size_t batch = 2;

std::shared_ptr<const kdist::Distribution> spatial(const std::vector<std::size_t>& shape,
                                                   bool rule) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "h", "w"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  if (rule) map["conv/output"] = {"data", "h", "w", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

struct Result {
  std::vector<double> y, dk, db, dx;
};

// Builds the layer (seed 3, a non-zero bias), runs forward and backward on x and dy in `x_layout`.
Result run(const Config& c, const kdist::Distribution& dist,
           const std::optional<kdist::RuntimeTensorLayout>& x_layout) {
  Conv conv(c.filters, c.kernel, c.activation, true, "conv", c.options);
  const auto out = conv.build({c.h, c.w, c.c}, dist, 3);
  const auto bias = normal_values(c.filters, 9);
  conv.bias()->value =
      kdist::distribute_tensor<double*>(bias.data(), {c.filters}, conv.bias()->value.layout());
  const std::array<std::size_t, 4> xs{batch, c.h, c.w, c.c};
  const auto xv = normal_values(batch * c.h * c.w * c.c, 1);
  const auto layout = x_layout ? *x_layout : dist.get_data_layout(xs);
  const auto x = kdist::distribute_tensor<double****>(xv.data(), xs, layout);
  const auto y = std::get<Images>(conv.forward(kdist::LayerTensor<double>(x), {}));
  EXPECT_EQ(y.shape(), (std::array<std::size_t, 4>{batch, out[0], out[1], c.filters}));
  if (x_layout || dist.get_tensor_layout("conv/output")) {  // computed on the image's blocks
    EXPECT_EQ(y.layout().axes()[1], kdist::DimAxes("h"));
    EXPECT_EQ(y.layout().axes()[2], kdist::DimAxes("w"));
  }
  const auto dyv = normal_values(y.global_size(), 2);
  const auto dy = kdist::distribute_tensor<double****>(dyv.data(), y.shape(), y.layout());
  const auto dx = kdist::backward_and_resolve(conv, kdist::LayerTensor<double>(dy), true);
  EXPECT_TRUE(dx.has_value());
  const auto& dxt = std::get<Images>(*dx);
  EXPECT_EQ(dxt.layout(), x.layout()) << "the input gradient comes in the input's layout";
  return {all_values(y), all_values(conv.kernel().grad), all_values(conv.bias()->grad),
          all_values(dxt)};
}

// The definition, with Keras' padding: pad_before = total // 2; periodic wraps.
std::vector<double> definition(const Config& c, const std::vector<double>& x,
                               const std::vector<double>& k, const std::vector<double>& b) {
  kdist::layers::WindowAxis ah{c.h, c.kernel[0], c.options.strides[0], c.options.dilation_rate[0],
                               c.options.padding};
  kdist::layers::WindowAxis aw{c.w, c.kernel[1], c.options.strides[1], c.options.dilation_rate[1],
                               c.options.padding};
  const std::size_t oh = ah.output_extent(), ow = aw.output_extent(), f = c.filters;
  std::vector<double> y(batch * oh * ow * f);
  for (std::size_t n = 0; n < batch; ++n)
    for (std::size_t i = 0; i < oh; ++i)
      for (std::size_t j = 0; j < ow; ++j)
        for (std::size_t o = 0; o < f; ++o) {
          double s = b[o];
          for (std::size_t a = 0; a < c.kernel[0]; ++a)
            for (std::size_t bb = 0; bb < c.kernel[1]; ++bb) {
              auto p = std::int64_t(i * ah.stride + a * ah.dilation) - ah.pad_before();
              auto q = std::int64_t(j * aw.stride + bb * aw.dilation) - aw.pad_before();
              const auto H = std::int64_t(c.h), W = std::int64_t(c.w);
              if (c.options.padding == Padding::periodic) {
                p = (p % H + H) % H;
                q = (q % W + W) % W;
              }
              if (p < 0 || p >= H || q < 0 || q >= W) continue;
              for (std::size_t ch = 0; ch < c.c; ++ch) {
                s += x[((n * c.h + std::size_t(p)) * c.w + std::size_t(q)) * c.c + ch] *
                     k[((a * c.kernel[1] + bb) * c.c + ch) * f + o];
              }
            }
          y[((n * oh + i) * ow + j) * f + o] =
              c.activation == Activation::relu ? std::max(s, 0.0) : s;
        }
  return y;
}

TEST(SpatialConv2D, TheUnshardedLayerIsTheDefinitionWithKerasPadding) {
  const auto dist = spatial({static_cast<std::size_t>(world_size()), 1, 1}, false);
  for (const auto& c : configs()) {
    Conv conv(c.filters, c.kernel, c.activation, true, "conv", c.options);
    conv.build({c.h, c.w, c.c}, *dist, 3);
    const auto bias = normal_values(c.filters, 9);
    conv.bias()->value =
        kdist::distribute_tensor<double*>(bias.data(), {c.filters}, conv.bias()->value.layout());
    const std::array<std::size_t, 4> xs{batch, c.h, c.w, c.c};
    const auto xv = normal_values(batch * c.h * c.w * c.c, 1);
    auto forward = [&](const std::vector<double>& v) {
      const auto x = kdist::distribute_tensor<double****>(v.data(), xs, dist->get_data_layout(xs));
      return std::get<Images>(conv.forward(kdist::LayerTensor<double>(x), {}));
    };
    expect_close(all_values(forward(xv)), definition(c, xv, all_values(conv.kernel().value), bias),
                 c.name + " forward");
    if (world_size() != 1) continue;  // finite differences on one process (each is 2 forwards)
    const auto y = forward(xv);
    const auto r = normal_values(y.global_size(), 4);
    const auto dy = kdist::distribute_tensor<double****>(r.data(), y.shape(), y.layout());
    const auto dx = all_values(
        std::get<Images>(*kdist::backward_and_resolve(conv, kdist::LayerTensor<double>(dy), true)));
    auto loss = [&](std::size_t i, double delta) {
      auto xp = xv;
      xp[i] += delta;
      const auto yv = all_values(forward(xp));
      double l = 0;
      for (std::size_t j = 0; j < yv.size(); ++j) l += yv[j] * r[j];
      return l;
    };
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double fd = (loss(i, 1e-6) - loss(i, -1e-6)) / 2e-6;
      ASSERT_NEAR(dx[i], fd, 1e-7 * std::max(1.0, std::abs(fd))) << c.name << " dx[" << i << "]";
    }
  }
}

TEST(SpatialConv2D, EveryMeshGivesTheUnshardedOutputAndGradients) {
  const auto reference_dist = spatial({static_cast<std::size_t>(world_size()), 1, 1}, false);
  for (const auto& c : configs()) {
    const auto want = run(c, *reference_dist, std::nullopt);
    for (const auto& shape : meshes()) {
      const std::string mesh = c.name + " on mesh (" + std::to_string(shape[0]) + ", " +
                               std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ")";
      // (a) the rule on the output shards the image; the input comes batch-sharded
      const auto by_rule = spatial(shape, true);
      const auto a = run(c, *by_rule, std::nullopt);
      expect_close(a.y, want.y, mesh + " by the output rule: y");
      expect_close(a.dk, want.dk, mesh + " by the output rule: kernel gradient");
      expect_close(a.db, want.db, mesh + " by the output rule: bias gradient");
      expect_close(a.dx, want.dx, mesh + " by the output rule: input gradient");
      // (b) the input arrives with its height and width sharded (a simulation's blocks)
      const auto plain = spatial(shape, false);
      kdist::RuntimeDeviceMesh m(shape, {"data", "h", "w"}, kdist::list_devices());
      const kdist::RuntimeTensorLayout blocks({"data", "h", "w", kdist::replicated}, m);
      const auto b = run(c, *plain, blocks);
      expect_close(b.y, want.y, mesh + " from sharded input: y");
      expect_close(b.dk, want.dk, mesh + " from sharded input: kernel gradient");
      expect_close(b.dx, want.dx, mesh + " from sharded input: input gradient");
    }
  }
}

TEST(SpatialConv2D, OverlappingTheHalosGivesWhatWaitingForThemGives) {
  // The rows that read only a process's own block are computed while the halos travel
  // (kdist::layers::halo_overlap, the default); waiting first must give the same.
  for (const auto& c : configs()) {
    for (const auto& shape : meshes()) {
      const auto dist = spatial(shape, false);
      kdist::RuntimeDeviceMesh m(shape, {"data", "h", "w"}, kdist::list_devices());
      const kdist::RuntimeTensorLayout blocks({"data", "h", "w", kdist::replicated}, m);
      kdist::layers::set_halo_overlap(false);
      const auto waited = run(c, *dist, blocks);
      kdist::layers::set_halo_overlap(true);
      const auto overlapped = run(c, *dist, blocks);
      const std::string what = c.name + " on mesh (" + std::to_string(shape[0]) + ", " +
                               std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ")";
      expect_close(overlapped.y, waited.y, what + ": y");
      expect_close(overlapped.dk, waited.dk, what + ": kernel gradient");
      expect_close(overlapped.dx, waited.dx, what + ": input gradient");
    }
  }
}

kdist::Sequential field_model() {
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(
      kdist::layers::Conv2D(4, {3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
  l.emplace_back(kdist::layers::Conv2D(3, {3, 3}, Activation::relu, true, "conv_1",
                                       {.strides = {2, 2}, .padding = Padding::periodic}));
  l.emplace_back(kdist::layers::Flatten());
  l.emplace_back(kdist::layers::Dense(10, Activation::softmax, true, "d2"));
  return kdist::Sequential({9, 7, 2}, std::move(l));
}
kdist::ArrayDataset<float> field_data() {
  std::vector<std::int32_t> labels(24);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i * 7 % 10);
  return kdist::ArrayDataset<float>(kdist::examples::random_normal(24 * 9 * 7 * 2, 5), {9, 7, 2},
                                    std::move(labels));
}
std::shared_ptr<const kdist::Distribution> field_distribution(
    const std::vector<std::size_t>& shape) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "h", "w"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["conv.*/output"] = {"data", "h", "w", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

TEST(SpatialConv2D, AModelWithTheImageShardedTrainsToTheDataParallelLosses) {
  const auto data = field_data();
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .verbose = 0};
  auto reference = field_model();
  reference.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                    kdist::Adam(0.01), 11);
  const auto want = reference.fit(data, fit);
  for (const auto& shape : meshes()) {
    const auto dist = field_distribution(shape);
    auto m = field_model();
    m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
    const auto got = m.fit(data, fit);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(got.epochs[e].loss, want.epochs[e].loss, 1e-5 * std::abs(want.epochs[e].loss))
          << "mesh (" << shape[0] << ", " << shape[1] << ", " << shape[2] << ") epoch " << e;
    }
    // Once its shapes are seen, a step allocates nothing: halo buffers and messages are kept.
    auto again = field_model();
    again.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
    EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<4>(again, *dist, data, 8), "")
        << "steps 3 and 4 allocated these Kokkos Views on mesh (" << shape[0] << ", " << shape[1]
        << ", " << shape[2] << ")";
  }
}

TEST(SpatialConv2D, BadStridesDilationAndKernelsAreValueErrors) {
  auto msg = message_of<kdist::ValueError>([] {
    Conv(2, {3, 3}, Activation::relu, true, "c", {.strides = {0, 1}});
  });
  EXPECT_EQ(msg,
            "kdist::layers::Conv2D 'c': strides (0, 1) and dilation_rate (1, 1) must be >= 1 in "
            "both dimensions");
  msg = message_of<kdist::ValueError>([] {
    Conv(2, {3, 3}, Activation::relu, true, "c", {.strides = {2, 1}, .dilation_rate = {1, 2}});
  });
  EXPECT_EQ(msg,
            "kdist::layers::Conv2D 'c': strides > 1 not supported in conjunction with "
            "dilation_rate > 1 (as in Keras); received strides (2, 1) and dilation_rate (1, 2)");
  const auto dist = spatial({static_cast<std::size_t>(world_size()), 1, 1}, false);
  Conv dilated(2, {3, 3}, Activation::relu, true, "c", {.dilation_rate = {3, 1}});
  msg = message_of<kdist::ValueError>([&] { dilated.build({6, 6, 1}, *dist, 0); });
  EXPECT_EQ(msg,
            "kdist::layers::Conv2D 'c': the kernel (3, 3) dilated to (7, 3) does not fit examples "
            "of shape (6, 6, 1) (padding 'valid')");
  // "same" fits any image
  Conv same(2, {5, 5}, Activation::relu, true, "c", {.padding = Padding::same});
  EXPECT_EQ(same.build({2, 3, 1}, *dist, 0), (kdist::Shape{2, 3, 2}));
}

}  // namespace
