// kdist-mpi-ranks: 1 2 4 8
// kdist-mpi-filter-8: SpatialPooling.EveryMeshGivesTheUnshardedOutputAndInputGradient
// The layers of a U-Net on spatially sharded images (issue 38): MaxPooling2D, AveragePooling2D and
// UpSampling2D with the image's height and width split over mesh axes (1-D and 2-D process grids,
// uneven and empty blocks, channels sharded as well) give the unsharded layer's output and input
// gradient (1e-12 in double) for padding "valid", "same" and "periodic", strides and overlapping
// windows; the unsharded layers equal the definitions with Keras' padding (a "same" maximum skips
// the padding, a "same" mean does not count it) and Keras' own outputs, and their input gradients
// finite differences; Concatenate joins x and f(x) and splits the gradient back; a U-Net-style
// model trains to the data-parallel losses on every mesh, allocating nothing once its shapes are
// seen; the constructors' and build's errors.
#include <gtest/gtest.h>
#include "model_test_support.hpp"
#include "spatial_test_support.hpp"
#include "step_allocations.hpp"

#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layers/concatenate.hpp>
#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/layers/pooling.hpp>
#include <kdist/nn/layers/upsampling.hpp>
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
using kdist::layers::Activation;
using kdist::layers::Padding;
using PoolingOptions = kdist::layers::Pooling2DOptions;
using MaxPool = kdist::layers::BasicMaxPooling2D<double>;
using AvgPool = kdist::layers::BasicAveragePooling2D<double>;
using UpSampling = kdist::layers::BasicUpSampling2D<double>;
using Layer = kdist::AnyLayer<double>;
constexpr std::size_t batch = 2;

std::shared_ptr<const kdist::Distribution> plain(const std::vector<std::size_t>& shape) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "h", "w"}, kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
}

enum class Kind { max, average, upsampling };
struct Case {
  std::string name;
  Kind kind;
  std::array<std::size_t, 2> pool;  // the pool size, or the upsampling's size
  PoolingOptions options;           // strides resolved to the pool size when (0, 0)
  std::size_t h, w, c;

  Layer make() const {
    if (kind == Kind::max) return MaxPool(pool, "pool", options);
    if (kind == Kind::average) return AvgPool(pool, "pool", options);
    return UpSampling(pool, "up");
  }
  std::array<std::size_t, 2> strides() const {
    return options.strides[0] == 0 ? pool : options.strides;
  }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"max valid 2x2", Kind::max, {2, 2}, {}, 9, 7, 2},
      {"average same 3x3 strides 2", Kind::average, {3, 3}, {{2, 2}, Padding::same}, 7, 5, 2},
      {"max same 2x2 strides 1 (overlapping)", Kind::max, {2, 2}, {{1, 1}, Padding::same}, 5, 6, 1},
      {"average valid 3x2 strides (2, 1)",
       Kind::average,
       {3, 2},
       {{2, 1}, Padding::valid},
       8,
       6,
       2},
      {"max periodic 3x3 strides 2", Kind::max, {3, 3}, {{2, 2}, Padding::periodic}, 6, 5, 2},
      {"average same 2x2", Kind::average, {2, 2}, {{0, 0}, Padding::same}, 5, 5, 3},
      {"upsampling 2x2", Kind::upsampling, {2, 2}, {}, 5, 3, 2},
      {"upsampling 3x2", Kind::upsampling, {3, 2}, {}, 3, 4, 1},
  };
  return all;
}

struct Result {
  std::vector<double> y, dx;
};

Result run(const Case& c, const kdist::Distribution& dist,
           const kdist::RuntimeTensorLayout* layout) {
  Layer layer = c.make();
  const auto out = layer.build({c.h, c.w, c.c}, dist, 3);
  const std::array<std::size_t, 4> xs{batch, c.h, c.w, c.c};
  const auto xv = normal_values(batch * c.h * c.w * c.c, 1);
  const auto x = kdist::distribute_tensor<double****>(xv.data(), xs,
                                                      layout ? *layout : dist.get_data_layout(xs));
  const auto y = std::get<Images>(layer.forward(kdist::LayerTensor<double>(x), {}));
  EXPECT_EQ(y.shape(), (std::array<std::size_t, 4>{batch, out[0], out[1], out[2]})) << c.name;
  EXPECT_EQ(y.layout(), x.layout()) << c.name << ": computed in the input's layout";
  const auto dyv = normal_values(y.global_size(), 2);
  const auto dy = kdist::distribute_tensor<double****>(dyv.data(), y.shape(), y.layout());
  const auto dx = kdist::backward_and_resolve(layer, kdist::LayerTensor<double>(dy), true);
  EXPECT_TRUE(dx.has_value());
  const auto& dxt = std::get<Images>(*dx);
  EXPECT_EQ(dxt.layout(), x.layout()) << c.name << ": the input gradient in the input's layout";
  return {all_values(y), all_values(dxt)};
}

TEST(SpatialPooling, EveryMeshGivesTheUnshardedOutputAndInputGradient) {
  const auto reference = plain({static_cast<std::size_t>(world_size()), 1, 1});
  for (const auto& c : cases()) {
    const auto want = run(c, *reference, nullptr);
    for (const auto& shape : meshes()) {
      const auto dist = plain(shape);
      kdist::RuntimeDeviceMesh m(shape, {"data", "h", "w"}, kdist::list_devices());
      // the image's height and width on "h" and "w" (a simulation's blocks), and the height on
      // "h" with the channels on "w" (a Conv2D's filters sharded besides)
      const kdist::RuntimeTensorLayout blocks({"data", "h", "w", kdist::replicated}, m),
          channels({"data", "h", kdist::replicated, "w"}, m);
      for (const auto* layout : {&blocks, &channels}) {
        const std::string what =
            c.name + " on " + mesh_name(shape) + (layout == &blocks ? " (h, w)" : " (h, channels)");
        const auto got = run(c, *dist, layout);
        expect_close(got.y, want.y, what + ": y");
        expect_close(got.dx, want.dx, what + ": input gradient");
      }
    }
  }
}

// The definitions with Keras' padding (before = total // 2; "same" positions beyond the image are
// skipped by the maximum and not counted by the mean; "periodic" wraps).
std::vector<double> definition(const Case& c, const std::vector<double>& x) {
  std::vector<double> y;
  const bool up = c.kind == Kind::upsampling, max = c.kind == Kind::max;
  const auto pool = c.pool, strides = c.strides();
  const Padding padding = c.options.padding;
  kdist::layers::WindowAxis ah{c.h, pool[0], strides[0], 1, padding},
      aw{c.w, pool[1], strides[1], 1, padding};
  const auto H = static_cast<std::int64_t>(c.h), W = static_cast<std::int64_t>(c.w);
  const std::size_t oh = up ? c.h * pool[0] : ah.output_extent();
  const std::size_t ow = up ? c.w * pool[1] : aw.output_extent();
  for (std::size_t n = 0; n < batch; ++n)
    for (std::size_t i = 0; i < oh; ++i)
      for (std::size_t j = 0; j < ow; ++j)
        for (std::size_t ch = 0; ch < c.c; ++ch) {
          auto at = [&](std::int64_t p, std::int64_t q) {
            return x[((n * c.h + std::size_t(p)) * c.w + std::size_t(q)) * c.c + ch];
          };
          if (up) {
            y.push_back(at(std::int64_t(i / pool[0]), std::int64_t(j / pool[1])));
            continue;
          }
          double m = -1e300, s = 0;
          int count = 0;
          for (std::size_t a = 0; a < pool[0]; ++a)
            for (std::size_t b = 0; b < pool[1]; ++b) {
              auto p = std::int64_t(i * strides[0] + a) - ah.pad_before();
              auto q = std::int64_t(j * strides[1] + b) - aw.pad_before();
              if (padding == Padding::periodic) {
                p = (p % H + H) % H;
                q = (q % W + W) % W;
              }
              if (p < 0 || p >= H || q < 0 || q >= W) continue;
              m = std::max(m, at(p, q));
              s += at(p, q);
              ++count;
            }
          y.push_back(max ? m : s / count);
        }
  return y;
}

TEST(SpatialPooling, TheUnshardedLayersAreTheDefinitionsWithKerasPadding) {
  const auto dist = plain({static_cast<std::size_t>(world_size()), 1, 1});
  for (const auto& c : cases()) {
    Layer layer = c.make();
    layer.build({c.h, c.w, c.c}, *dist, 3);
    const std::array<std::size_t, 4> xs{batch, c.h, c.w, c.c};
    const auto xv = normal_values(batch * c.h * c.w * c.c, 1);
    auto forward = [&](const std::vector<double>& v) {
      const auto x = kdist::distribute_tensor<double****>(v.data(), xs, dist->get_data_layout(xs));
      return std::get<Images>(layer.forward(kdist::LayerTensor<double>(x), {}));
    };
    expect_close(all_values(forward(xv)), definition(c, xv), c.name + " forward");
    if (world_size() != 1) continue;  // finite differences on one process
    const auto y = forward(xv);
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
}

TEST(SpatialPooling, SamePoolingAgreesWithKeras) {
  // Keras 3.15.1 (JAX backend): x = (arange(25) - 12) / 4 as (1, 5, 5, 1) with x[0, 4, 4] = -9;
  // MaxPooling2D(3, strides=2, padding="same") and AveragePooling2D(2, padding="same").
  std::vector<double> x(25);
  for (std::size_t i = 0; i < 25; ++i) x[i] = (double(i) - 12) / 4;
  x[24] = -9;
  const auto dist = plain({static_cast<std::size_t>(world_size()), 1, 1});
  auto apply = [&](Layer layer) {
    layer.build({5, 5, 1}, *dist, 0);
    const std::array<std::size_t, 4> shape{1, 5, 5, 1};
    const auto t =
        kdist::distribute_tensor<double****>(x.data(), shape, dist->get_data_layout(shape));
    return all_values(std::get<Images>(layer.forward(kdist::LayerTensor<double>(t), {})));
  };
  expect_close(apply(MaxPool({3, 3}, "m", {.strides = {2, 2}, .padding = Padding::same})),
               {-1.5, -1.0, -0.75, 1.0, 1.5, 1.75, 2.25, 2.75, 2.75}, "MaxPooling2D same");
  expect_close(apply(AvgPool({2, 2}, "a", {.padding = Padding::same})),
               {-2.25, -1.75, -1.375, 0.25, 0.75, 1.125, 2.125, 2.625, -9.0},
               "AveragePooling2D same");
}

TEST(SpatialPooling, ConcatenateJoinsXAndFOfXAndSplitsTheGradient) {
  // y = [x, Dense(x)]: the first features are x, the rest the Dense; dL/dx = dy's first part plus
  // the Dense's input gradient of the second.
  const auto dist = plain({static_cast<std::size_t>(world_size()), 1, 1});
  kdist::layers::BasicConcatenate<double> join(
      "join", {kdist::layers::BasicDense<double>(2, Activation::linear, false, "d")});
  EXPECT_EQ(join.build({3}, *dist, 1), (kdist::Shape{5}));
  using Matrix = kdist::DistributedTensor<double**>;
  const auto xv = normal_values(4 * 3, 1);
  const auto x = kdist::distribute_tensor<double**>(
      xv.data(), {4, 3}, dist->get_data_layout(std::array<std::size_t, 2>{4, 3}));
  const auto y = all_values(std::get<Matrix>(join.forward(kdist::LayerTensor<double>(x), {})));
  auto dense = join.layers()[0].variables()[0];
  const auto k = all_values(std::get<kdist::TrainableVariable<double**>*>(dense)->value);
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::size_t f = 0; f < 3; ++f) EXPECT_EQ(y[r * 5 + f], xv[r * 3 + f]);
    for (std::size_t o = 0; o < 2; ++o) {
      double s = 0;
      for (std::size_t f = 0; f < 3; ++f) s += xv[r * 3 + f] * k[f * 2 + o];
      EXPECT_NEAR(y[r * 5 + 3 + o], s, 1e-12);
    }
  }
  const auto dyv = normal_values(4 * 5, 2);
  const auto dy = kdist::distribute_tensor<double**>(
      dyv.data(), {4, 5}, dist->get_data_layout(std::array<std::size_t, 2>{4, 5}));
  const auto dx = all_values(
      std::get<Matrix>(*kdist::backward_and_resolve(join, kdist::LayerTensor<double>(dy), true)));
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t f = 0; f < 3; ++f) {
      double want = dyv[r * 5 + f];
      for (std::size_t o = 0; o < 2; ++o) want += dyv[r * 5 + 3 + o] * k[f * 2 + o];
      EXPECT_NEAR(dx[r * 3 + f], want, 1e-12);
    }
}

// One level of a U-Net: a skip around pool -> conv -> upsample, joined by Concatenate.
kdist::Sequential unet() {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Conv2D(4, {3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
  l.emplace_back(Concatenate(
      "skip", {MaxPooling2D({2, 2}, "pool"),
               Conv2D(4, {3, 3}, Activation::relu, true, "conv_1", {.padding = Padding::same}),
               UpSampling2D({2, 2}, "up")}));
  l.emplace_back(AveragePooling2D({2, 2}, "avg", {.padding = Padding::same}));
  l.emplace_back(Conv2D(3, {1, 1}, Activation::relu, true, "conv_2"));
  l.emplace_back(Flatten());
  l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  return kdist::Sequential({8, 6, 2}, std::move(l));
}

TEST(SpatialPooling, AUNetTrainsToTheDataParallelLossesOnEveryMesh) {
  std::vector<std::int32_t> labels(24);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i * 7 % 10);
  const kdist::ArrayDataset<float> data(kdist::examples::random_normal(24 * 8 * 6 * 2, 5),
                                        {8, 6, 2}, std::move(labels));
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .verbose = 0};
  auto reference = unet();
  reference.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                    kdist::Adam(0.01), 11);
  const auto want = reference.fit(data, fit);
  for (const auto& shape : meshes()) {
    kdist::RuntimeDeviceMesh mesh(shape, {"data", "h", "w"}, kdist::list_devices());
    kdist::LayoutMap map(mesh);
    map["conv.*/output"] = {"data", "h", "w", kdist::replicated};
    const auto dist = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
    auto m = unet();
    m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
    const auto got = m.fit(data, fit);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(got.epochs[e].loss, want.epochs[e].loss, 1e-5 * std::abs(want.epochs[e].loss))
          << mesh_name(shape) << " epoch " << e;
    }
    auto again = unet();
    again.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
    EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<4>(again, *dist, data, 8), "")
        << "steps 3 and 4 allocated these Kokkos Views on " << mesh_name(shape);
  }
}

// A surrogate of a field: a U-Net level whose output is a field (batch, height, width, 1), trained
// with mean_squared_error against target fields - here the 5-point stencil of the input's first
// channel, with zeros outside.
kdist::Sequential field_surrogate() {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Conv2D(3, {3, 3}, Activation::relu, true, "conv", {.padding = Padding::same}));
  l.emplace_back(Concatenate(
      "skip", {AveragePooling2D({2, 2}, "pool"),
               Conv2D(3, {3, 3}, Activation::relu, true, "conv_1", {.padding = Padding::same}),
               UpSampling2D({2, 2}, "up")}));
  l.emplace_back(Conv2D(1, {3, 3}, Activation::linear, true, "conv_2", {.padding = Padding::same}));
  return kdist::Sequential({8, 6, 2}, std::move(l));
}
kdist::ArrayDataset<float> field_pairs() {
  const std::size_t n = 16, h = 8, w = 6;
  auto x = kdist::examples::random_normal(n * h * w * 2, 7);
  std::vector<float> y(n * h * w);
  auto u = [&](std::size_t e, std::int64_t i, std::int64_t j) {
    if (i < 0 || j < 0 || i >= std::int64_t(h) || j >= std::int64_t(w)) return 0.0f;
    return x[((e * h + std::size_t(i)) * w + std::size_t(j)) * 2];
  };
  for (std::size_t e = 0; e < n; ++e)
    for (std::int64_t i = 0; i < std::int64_t(h); ++i)
      for (std::int64_t j = 0; j < std::int64_t(w); ++j) {
        y[(e * h + std::size_t(i)) * w + std::size_t(j)] =
            u(e, i, j) + 0.2f * (u(e, i - 1, j) + u(e, i + 1, j) + u(e, i, j - 1) + u(e, i, j + 1) -
                                 4 * u(e, i, j));
      }
  return kdist::ArrayDataset<float>(std::move(x), {h, w, 2}, std::move(y), h * w);
}

TEST(FieldSurrogate, TrainsOnTheFieldsBlocksToTheDataParallelLosses) {
  const auto data = field_pairs();
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 3, .verbose = 0};
  auto reference = field_surrogate();
  reference.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                    kdist::Adam(0.01), 11);
  const auto want = reference.fit(data, fit);
  EXPECT_LT(want.epochs[2].loss, want.epochs[0].loss) << "the surrogate learns";
  for (const auto& shape : meshes()) {
    kdist::RuntimeDeviceMesh mesh(shape, {"data", "h", "w"}, kdist::list_devices());
    kdist::LayoutMap map(mesh);
    map["conv.*/output"] = {"data", "h", "w", kdist::replicated};
    const auto dist = std::make_shared<kdist::ModelParallel>(std::move(map), "data");
    auto m = field_surrogate();
    m.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 11);
    const auto got = m.fit(data, fit);
    for (std::size_t e = 0; e < 3; ++e) {
      EXPECT_NEAR(got.epochs[e].loss, want.epochs[e].loss, 1e-5 * std::abs(want.epochs[e].loss))
          << mesh_name(shape) << " epoch " << e;
    }
    EXPECT_NEAR(m.evaluate(data, {.batch_size = 8, .verbose = 0}).loss,
                reference.evaluate(data, {.batch_size = 8, .verbose = 0}).loss, 1e-5)
        << mesh_name(shape);
    // The output stays in blocks: each process holds its rows and columns of the field.
    std::vector<float> x(8 * 8 * 6 * 2, 0.5f);
    const std::size_t rows = 8 / shape[0];  // this process's examples
    const Kokkos::View<float****, Kokkos::HostSpace> xs(x.data() + 0, rows, 8, 6, 2);
    const auto y = std::get<kdist::DistributedTensor<float****>>(m.predict_step(xs, 8));
    EXPECT_EQ(y.layout().axes()[1], kdist::DimAxes("h")) << mesh_name(shape);
    EXPECT_EQ(y.layout().axes()[2], kdist::DimAxes("w")) << mesh_name(shape);
    auto again = field_surrogate();
    again.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 11);
    EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<4>(again, *dist, data, 8), "")
        << "steps 3 and 4 allocated these Kokkos Views on " << mesh_name(shape);
  }
}

TEST(FieldSurrogate, LabelsOtherLossesAndTargetsOfAnotherSizeAreValueErrors) {
  const auto dist = plain({static_cast<std::size_t>(world_size()), 1, 1});
  auto m = field_surrogate();
  m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.01), 11);
  const auto pairs = field_pairs();
  EXPECT_EQ(message_of<kdist::ValueError>([&] { m.fit(pairs, {.batch_size = 8, .verbose = 0}); }),
            "kdist::Sequential: the model gives (batch, height, width, channels) fields, which "
            "take Loss::mean_squared_error, not categorical_crossentropy");
  auto m2 = field_surrogate();
  m2.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 11);
  std::vector<std::int32_t> labels(16, 1);
  const kdist::ArrayDataset<float> labelled(kdist::examples::random_normal(16 * 8 * 6 * 2, 1),
                                            {8, 6, 2}, std::move(labels));
  EXPECT_EQ(
      message_of<kdist::ValueError>([&] { m2.fit(labelled, {.batch_size = 8, .verbose = 0}); }),
      "kdist::Sequential: the model gives (batch, height, width, channels) fields, which "
      "take target fields (height * width * channels values per example), not class "
      "labels; end it with a Flatten and a Dense to classify");
  const kdist::ArrayDataset<float> short_rows(kdist::examples::random_normal(16 * 8 * 6 * 2, 1),
                                              {8, 6, 2}, std::vector<float>(16 * 47), 47);
  EXPECT_EQ(
      message_of<kdist::ValueError>([&] { m2.fit(short_rows, {.batch_size = 8, .verbose = 0}); }),
      "kdist::Sequential::fit: targets of 47 values per example for a model of 48 outputs");
}

TEST(SpatialPooling, BadArgumentsAndShapesAreValueErrors) {
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              MaxPool({0, 2}, "p");
            }),
            "kdist::layers::MaxPooling2D 'p': pool_size (0, 2) must be >= 1 in both dimensions");
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              AvgPool({2, 2}, "p", {.strides = {0, 1}});
            }),
            "kdist::layers::AveragePooling2D 'p': strides (0, 1) must be >= 1 in both dimensions, "
            "or (0, 0) for the pool size (Keras' strides=None)");
  EXPECT_EQ(AvgPool({3, 2}, "p").options().strides, (std::array<std::size_t, 2>{3, 2}));
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              UpSampling({2, 0}, "u");
            }),
            "kdist::layers::UpSampling2D 'u': size (2, 0) must be >= 1 in both dimensions");
  const auto dist = plain({static_cast<std::size_t>(world_size()), 1, 1});
  MaxPool big({4, 4}, "p");
  EXPECT_EQ(message_of<kdist::ValueError>([&] {
              big.build({3, 5, 1}, *dist, 0);
            }),
            "kdist::layers::MaxPooling2D 'p': the pool (4, 4) does not fit examples of shape (3, "
            "5, 1) (padding 'valid'; padding 'same' fits any image)");
  EXPECT_EQ(message_of<kdist::ValueError>([&] { big.build({3}, *dist, 0); }),
            "kdist::layers::MaxPooling2D 'p': takes examples of shape (height, width, channels), "
            "not (3,)");
  EXPECT_EQ(message_of<kdist::ValueError>([] { kdist::layers::BasicConcatenate<double>("j", {}); }),
            "kdist::layers::Concatenate 'j': give at least one inner layer (y = concatenate([x, "
            "f(x)]))");
  kdist::layers::BasicConcatenate<double> pooled("j", {MaxPool({2, 2}, "p")});
  EXPECT_EQ(message_of<kdist::ValueError>([&] {
              pooled.build({4, 4, 2}, *dist, 0);
            }),
            "kdist::layers::Concatenate 'j': its layers map examples of shape (4, 4, 2) to (2, 2, "
            "2); a concatenation along the last axis needs every other dimension equal (a U-Net "
            "level ends with the UpSampling2D that undoes its pooling)");
  // a (batch, features) tensor given to a pooling layer
  MaxPool p({2, 2}, "p");
  p.build({4, 4, 1}, *dist, 0);
  const std::vector<double> v(8, 1.0);
  const auto m = kdist::distribute_tensor<double**>(
      v.data(), {2, 4}, dist->get_data_layout(std::array<std::size_t, 2>{2, 4}));
  EXPECT_EQ(message_of<kdist::ValueError>([&] { p.forward(kdist::LayerTensor<double>(m), {}); }),
            "kdist::layers::MaxPooling2D 'p' takes tensors of rank 4 but was given one of rank 2; "
            "give it (batch, height, width, channels) tensors");
}

}  // namespace
