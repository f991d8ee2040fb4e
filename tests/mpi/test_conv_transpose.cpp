// kdist-mpi-ranks: 1 2 4 8
// kdist-mpi-filter-8: ConvTranspose.EveryMeshGivesTheUnshardedOutputAndGradients
// Conv2DTranspose (issue 38): padding "valid" and "same", strides below, equal to and above the
// kernel, dilation; on every mesh ("data", "h", "w") of the world's size with the input's height
// and width in blocks (uneven, empty), the output, the input gradient and the kernel and bias
// gradients equal the unsharded layer's (1e-12 in double); the unsharded layer equals the
// definition (each input spreads its kernel over outputs i * stride + t * dilation, "same" crops
// max(span - stride, 0) // 2 before) and Keras 3.15.1's outputs, its input gradient finite
// differences; a U-Net level that goes back up with Conv2DTranspose trains to the data-parallel
// losses on every mesh; the constructor's errors.
#include <gtest/gtest.h>
#include "model_test_support.hpp"
#include "spatial_test_support.hpp"

#include <array>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layers/concatenate.hpp>
#include <kdist/nn/layers/conv_transpose.hpp>
#include <kdist/nn/layers/convolution.hpp>
#include <kdist/nn/layers/pooling.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

namespace {

using kdist::test::all_values;
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
using Images = kdist::DistributedTensor<double****>;
using ConvT = kdist::layers::BasicConv2DTranspose<double>;
using kdist::layers::Activation;
using kdist::layers::Conv2DOptions;
using kdist::layers::Padding;
constexpr std::size_t batch = 2;

kdist::RuntimeDeviceMesh mesh_of(const std::vector<std::size_t>& s) {
  return kdist::RuntimeDeviceMesh(s, {"data", "h", "w"}, kdist::list_devices());
}
std::shared_ptr<const kdist::Distribution> plain(const std::vector<std::size_t>& s) {
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh_of(s)), "data");
}

struct Config {
  std::string name;
  std::array<std::size_t, 2> kernel;
  Conv2DOptions options;
  std::size_t h, w, c, filters;
  Activation activation;
};
const std::vector<Config>& configs() {
  static const std::vector<Config> all{
      {"valid 3x3 strides 2",
       {3, 3},
       {{2, 2}, Padding::valid, {1, 1}},
       4,
       3,
       2,
       2,
       Activation::relu},
      {"same 3x3 strides 2",
       {3, 3},
       {{2, 2}, Padding::same, {1, 1}},
       5,
       4,
       1,
       2,
       Activation::linear},
      {"same 4x2 strides (3, 1)",
       {4, 2},
       {{3, 1}, Padding::same, {1, 1}},
       3,
       5,
       2,
       1,
       Activation::linear},
      {"same 1x1 strides 2 (kernel below the stride)",
       {1, 1},
       {{2, 2}, Padding::same, {1, 1}},
       4,
       3,
       2,
       2,
       Activation::linear},
      {"valid 2x3 strides (2, 1)",
       {2, 3},
       {{2, 1}, Padding::valid, {1, 1}},
       5,
       4,
       1,
       2,
       Activation::relu},
      {"same 3x3 dilation 2",
       {3, 3},
       {{1, 1}, Padding::same, {2, 2}},
       5,
       5,
       2,
       1,
       Activation::linear},
  };
  return all;
}

struct Result {
  std::vector<double> y, dx, dk, db;
};
Result run(const Config& c, const kdist::Distribution& dist,
           const kdist::RuntimeTensorLayout* layout) {
  ConvT layer(c.filters, c.kernel, c.activation, true, "up", c.options);
  layer.build({c.h, c.w, c.c}, dist, 3);
  const auto bias = normal_values(c.filters, 9);
  layer.bias()->value =
      kdist::distribute_tensor<double*>(bias.data(), {c.filters}, layer.bias()->value.layout());
  const std::array<std::size_t, 4> xs{batch, c.h, c.w, c.c};
  const auto xv = normal_values(batch * c.h * c.w * c.c, 1);
  const auto x = kdist::distribute_tensor<double****>(xv.data(), xs,
                                                      layout ? *layout : dist.get_data_layout(xs));
  const auto y = std::get<Images>(layer.forward(kdist::LayerTensor<double>(x), {}));
  const auto dyv = normal_values(y.global_size(), 2);
  const auto dy = kdist::distribute_tensor<double****>(dyv.data(), y.shape(), y.layout());
  const auto dx = kdist::backward_and_resolve(layer, kdist::LayerTensor<double>(dy), true);
  EXPECT_EQ(std::get<Images>(*dx).layout(), x.layout()) << c.name;
  return {all_values(y), all_values(std::get<Images>(*dx)), all_values(layer.kernel().grad),
          all_values(layer.bias()->grad)};
}

TEST(ConvTranspose, EveryMeshGivesTheUnshardedOutputAndGradients) {
  const auto reference = plain({static_cast<std::size_t>(world_size()), 1, 1});
  for (const auto& c : configs()) {
    const auto want = run(c, *reference, nullptr);
    for (const auto& shape : meshes()) {
      const kdist::RuntimeTensorLayout blocks({"data", "h", "w", kdist::replicated},
                                              mesh_of(shape));
      const auto got = run(c, *plain(shape), &blocks);
      const std::string what = c.name + " on " + mesh_name(shape);
      expect_close(got.y, want.y, what + ": y");
      expect_close(got.dx, want.dx, what + ": input gradient");
      expect_close(got.dk, want.dk, what + ": kernel gradient");
      expect_close(got.db, want.db, what + ": bias gradient");
    }
  }
}

// The definition: input (i, j) spreads k[t, u, f, c] over pre-crop outputs (i * s + t * d, ...);
// "same" crops max(span - s, 0) // 2 before; outputs beyond the spread are 0 (+ bias).
std::vector<double> definition(const Config& c, const std::vector<double>& x,
                               const std::vector<double>& k, const std::vector<double>& b) {
  std::array<kdist::layers::TransposedWindowAxis, 2> ax{
      kdist::layers::TransposedWindowAxis{c.h, c.kernel[0], c.options.strides[0],
                                          c.options.dilation_rate[0], c.options.padding},
      kdist::layers::TransposedWindowAxis{c.w, c.kernel[1], c.options.strides[1],
                                          c.options.dilation_rate[1], c.options.padding}};
  const std::size_t oh = ax[0].output_extent(), ow = ax[1].output_extent(), f = c.filters;
  std::vector<double> y(batch * oh * ow * f);
  for (std::size_t n = 0; n < batch; ++n)
    for (std::size_t i = 0; i < c.h; ++i)
      for (std::size_t j = 0; j < c.w; ++j)
        for (std::size_t t = 0; t < c.kernel[0]; ++t)
          for (std::size_t u = 0; u < c.kernel[1]; ++u) {
            const auto p = std::int64_t(i * ax[0].stride + t * ax[0].dilation) - ax[0].pad_before();
            const auto q = std::int64_t(j * ax[1].stride + u * ax[1].dilation) - ax[1].pad_before();
            if (p < 0 || q < 0 || p >= std::int64_t(oh) || q >= std::int64_t(ow)) continue;
            for (std::size_t o = 0; o < f; ++o)
              for (std::size_t ch = 0; ch < c.c; ++ch) {
                y[((n * oh + std::size_t(p)) * ow + std::size_t(q)) * f + o] +=
                    x[((n * c.h + i) * c.w + j) * c.c + ch] *
                    k[((t * c.kernel[1] + u) * f + o) * c.c + ch];
              }
          }
  for (std::size_t e = 0; e < y.size(); ++e) {
    y[e] += b[e % f];
    if (c.activation == Activation::relu) y[e] = std::max(y[e], 0.0);
  }
  return y;
}

TEST(ConvTranspose, TheUnshardedLayerIsTheDefinitionAndKeras) {
  const auto dist = plain({static_cast<std::size_t>(world_size()), 1, 1});
  for (const auto& c : configs()) {
    ConvT layer(c.filters, c.kernel, c.activation, true, "up", c.options);
    const auto out = layer.build({c.h, c.w, c.c}, *dist, 3);
    const auto bias = normal_values(c.filters, 9);
    layer.bias()->value =
        kdist::distribute_tensor<double*>(bias.data(), {c.filters}, layer.bias()->value.layout());
    const std::array<std::size_t, 4> xs{batch, c.h, c.w, c.c};
    const auto xv = normal_values(batch * c.h * c.w * c.c, 1);
    auto forward = [&](const std::vector<double>& v) {
      const auto x = kdist::distribute_tensor<double****>(v.data(), xs, dist->get_data_layout(xs));
      return std::get<Images>(layer.forward(kdist::LayerTensor<double>(x), {}));
    };
    const auto y = forward(xv);
    EXPECT_EQ(y.shape(), (std::array<std::size_t, 4>{batch, out[0], out[1], c.filters})) << c.name;
    expect_close(all_values(y), definition(c, xv, all_values(layer.kernel().value), bias),
                 c.name + " forward");
    if (world_size() != 1) continue;  // finite differences on one process
    const auto r = normal_values(y.global_size(), 4);
    const auto dy = kdist::distribute_tensor<double****>(r.data(), y.shape(), y.layout());
    const auto dx = all_values(std::get<Images>(
        *kdist::backward_and_resolve(layer, kdist::LayerTensor<double>(dy), true)));
    for (std::size_t i = 0; i < xv.size(); ++i) {
      auto loss = [&](double delta) {
        auto xp = xv;
        xp[i] += delta;
        const auto yv = all_values(forward(xp));
        double l = 0;
        for (std::size_t j = 0; j < yv.size(); ++j) l += yv[j] * r[j];
        return l;
      };
      const double fd = (loss(1e-6) - loss(-1e-6)) / 2e-6;
      ASSERT_NEAR(dx[i], fd, 1e-7 * std::max(1.0, std::abs(fd))) << c.name << " dx[" << i << "]";
    }
  }
  // Keras 3.15.1 (JAX): x = (arange(9) - 4) / 4 as (1, 3, 3, 1), Conv2DTranspose(2, 3, strides=2,
  // use_bias=False) with kernel ((arange(18) % 7) - 3) / 4 as (3, 3, 2, 1); and
  // Conv2DTranspose(1, (5, 4), strides=(1, 2), padding="same") with ((arange(20) % 7) - 3) / 4.
  std::vector<double> x(9), k(18);
  for (std::size_t i = 0; i < 9; ++i) x[i] = (double(i) - 4) / 4;
  for (std::size_t i = 0; i < 18; ++i) k[i] = (double(i % 7) - 3) / 4;
  auto keras = [&](Padding padding) {
    ConvT layer(2, {3, 3}, Activation::linear, false, "k", {{2, 2}, padding, {1, 1}});
    layer.build({3, 3, 1}, *dist, 0);
    layer.kernel().value =
        kdist::distribute_tensor<double****>(k.data(), {3, 3, 2, 1}, layer.kernel().value.layout());
    const std::array<std::size_t, 4> xs{1, 3, 3, 1};
    const auto t = kdist::distribute_tensor<double****>(x.data(), xs, dist->get_data_layout(xs));
    return all_values(std::get<Images>(layer.forward(kdist::LayerTensor<double>(t), {})));
  };
  expect_close(keras(Padding::same),
               {0.75,    0.5,     0.25,    0.0,    0.3125,  -0.125,  0.1875,  0.0,     0.1875,
                -0.125,  0.125,   0.0,     -0.75,  0.75,    0.5,     0.25,    -0.5625, 0.3125,
                0.375,   0.1875,  -0.375,  0.1875, 0.25,    0.125,   -0.3125, -0.625,  0.8125,
                0.5,     -0.1875, -0.6875, 0.5625, 0.375,   -0.25,   -0.5,    0.3125,  0.25,
                -0.1875, 0.1875,  0.125,   0.0625, 0.0,     -0.0625, 0.0,     0.0,     0.1875,
                -0.1875, -0.125,  -0.0625, -0.5,   -0.4375, 0.0625,  0.125,   -0.375,  -0.125,
                -0.1875, 0.0,     -0.4375, 0.0625, -0.4375, -0.125,  0.375,   -0.375,  -0.25,
                -0.125,  0.5625,  -0.4375, -0.375, -0.1875, 0.75,    -0.5625, -0.5,    -0.25},
               "Keras' Conv2DTranspose same", 1e-6);
  {  // a crop before on both axes: kernel (5, 4), strides (1, 2): 2 rows and 1 column
    ConvT layer(1, {5, 4}, Activation::linear, false, "k", {{1, 2}, Padding::same, {1, 1}});
    layer.build({3, 3, 1}, *dist, 0);
    std::vector<double> k5(20);
    for (std::size_t i = 0; i < 20; ++i) k5[i] = (double(i % 7) - 3) / 4;
    layer.kernel().value = kdist::distribute_tensor<double****>(k5.data(), {5, 4, 1, 1},
                                                                layer.kernel().value.layout());
    const std::array<std::size_t, 4> xs{1, 3, 3, 1};
    const auto t = kdist::distribute_tensor<double****>(x.data(), xs, dist->get_data_layout(xs));
    expect_close(all_values(std::get<Images>(layer.forward(kdist::LayerTensor<double>(t), {}))),
                 {-0.125, -0.5, -0.25, -0.625, -0.4375, -0.0625, -0.4375, 0.9375, -0.125, 1.0,
                  -0.125, 1.125, -0.3125, -0.25, -0.4375, -0.4375, -0.25, -0.3125},
                 "Keras' Conv2DTranspose same, kernel (5, 4), strides (1, 2)", 1e-6);
  }
  const auto v = keras(Padding::valid);
  ASSERT_EQ(v.size(), 98u);
  const std::vector<double> first{0.75, 0.5,    0.25,   0.0,   0.3125, -0.125, 0.1875,
                                  0.0,  0.1875, -0.125, 0.125, 0.0,    -0.125, -0.25};
  const std::vector<double> last{0.0,     0.25,   0.25,   0.375, -0.375, -0.25, 0.25,  0.5625,
                                 -0.5625, -0.375, 0.3125, 0.75,  -0.75,  -0.5,  -0.25, 0.0};
  expect_close(std::vector<double>(v.begin(), v.begin() + 14), first, "Keras valid, first row",
               1e-6);
  expect_close(std::vector<double>(v.end() - 16, v.end()), last, "Keras valid, last values", 1e-6);
}

// A U-Net level going back up with a learned Conv2DTranspose.
kdist::Sequential unet() {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Conv2D(3, {3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
  l.emplace_back(Concatenate(
      "skip",
      {MaxPooling2D({2, 2}, "pool"),
       Conv2D(4, {3, 3}, Activation::relu, true, "conv_1", {.padding = Padding::same}),
       Conv2DTranspose(3, {3, 3}, Activation::relu, true, "up", {{2, 2}, Padding::same, {1, 1}})}));
  l.emplace_back(Conv2D(1, {3, 3}, Activation::linear, true, "conv_2", {.padding = Padding::same}));
  return kdist::Sequential({8, 6, 1}, std::move(l));
}

TEST(ConvTranspose, AUNetGoingUpWithItTrainsToTheDataParallelLossesOnEveryMesh) {
  const std::size_t n = 16;
  auto x = kdist::examples::random_normal(n * 8 * 6, 3);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = 0.5f * x[i] + 0.1f;
  const kdist::ArrayDataset<float> data(std::move(x), {8, 6, 1}, std::move(y), 48);
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .verbose = 0};
  auto reference = unet();
  reference.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                    kdist::Adam(0.01), 11);
  const auto want = reference.fit(data, fit);
  for (const auto& shape : meshes()) {
    kdist::LayoutMap map(mesh_of(shape));
    map["conv.*/output"] = {"data", "h", "w", kdist::replicated};
    const auto dist = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
    auto m = unet();
    m.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 11);
    const auto got = m.fit(data, fit);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(got.epochs[e].loss, want.epochs[e].loss, 1e-5 * std::abs(want.epochs[e].loss))
          << mesh_name(shape) << " epoch " << e;
    }
  }
}

TEST(ConvTranspose, BadArgumentsAreValueErrors) {
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              ConvT(0, {3, 3}, Activation::relu, true, "t");
            }),
            "kdist::layers::Conv2DTranspose 't': filters must be >= 1");
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              ConvT(2, {3, 3}, Activation::relu, true, "t", {{0, 1}, Padding::same, {1, 1}});
            }),
            "kdist::layers::Conv2DTranspose 't': strides (0, 1) and dilation_rate (1, 1) must be "
            ">= 1 in both dimensions");
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              ConvT(2, {3, 3}, Activation::relu, true, "t", {{1, 1}, Padding::periodic, {1, 1}});
            }),
            "kdist::layers::Conv2DTranspose 't': padding 'periodic' is not defined for a "
            "transposed convolution; give 'valid' or 'same'");
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              ConvT(2, {3, 0}, Activation::relu, true, "t");
            }),
            "kdist::layers::Conv2DTranspose 't': kernel_size (3, 0) must be >= 1 in both "
            "dimensions");
}

}  // namespace
