// kdist-mpi-ranks: 1 2 4
// The sharded trainer against the single-process Eigen reference (tests/reference_mlp.hpp): for
// both strategies on every mesh of the world's size, 30 training steps with the same seed give the
// reference's per-step losses and final weights (float32, 1e-4 relative), i.e. results do not
// depend on the mesh; first-step gradients match the reference's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/fashion_mnist.hpp"
#include "common/trainer.hpp"
#include "mpi/step_allocations.hpp"
#include "reference_mlp.hpp"

namespace {

using Ref = kdist::reference::ReferenceMlp<float>;

int world() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

std::shared_ptr<const kdist::Distribution> make_dist(bool model_parallel,
                                                     std::vector<std::size_t> shape) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  if (!model_parallel) return std::make_shared<kdist::DataParallel>(mesh);
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};
  map["d1/bias"] = {"model"};
  map["d2/output"] = {"data", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

const kdist::examples::FashionMnist& data() {
  static auto d = kdist::examples::load_fashion_mnist(kdist::examples::Split::train, 0, 30 * 32);
  return d;
}

// The same rows as a kdist::ArrayDataset, batched by the library's loader.
const kdist::ArrayDataset<float>& dataset() {
  static auto d = kdist::examples::as_dataset(kdist::examples::FashionMnist(data()), {784});
  return d;
}

// Examples `idx` and their labels in the default memory space (the library's batch loader).
auto load_batch(kdist::detail::BatchLoader<float, 2>& loader, const std::vector<std::size_t>& idx) {
  return std::make_pair(loader.load_examples(idx), loader.load_labels(idx));
}

void expect_close(double a, double b, double rel, const std::string& what) {
  EXPECT_LE(std::abs(a - b), rel * std::max(1.0, std::abs(b))) << what << ": " << a << " vs " << b;
}

// `examples` of data() in batches of 32: 30 full steps, or (examples = 946) 29 full ones and a
// partial last batch of 18 rows, split over the data shards by the ceil rule (4 shards: 5, 5, 5,
// 3), which Keras trains on too.
void run_against_reference(bool model_parallel, std::vector<std::size_t> shape, kdist::Loss loss,
                           bool adam, std::size_t examples = 30 * 32) {
  const std::size_t B = 32;
  auto dist = make_dist(model_parallel, shape);
  auto model = kdist::examples::make_seed_model();
  kdist::Sequential::Optimizer opt = adam ? kdist::Sequential::Optimizer(kdist::Adam(0.001))
                                          : kdist::Sequential::Optimizer(kdist::SGD(0.1));
  model.compile(dist, loss, opt, 1337);
  kdist::reference::MlpConfig cfg;
  cfg.loss = loss == kdist::Loss::mean_squared_error
                 ? kdist::reference::Loss::mean_squared_error
                 : kdist::reference::Loss::categorical_crossentropy;
  kdist::reference::OptimizerConfig ocfg;
  if (!adam) {
    ocfg.kind = kdist::reference::OptimizerConfig::Kind::sgd;
    ocfg.learning_rate = 0.1;
  }
  Ref ref(cfg, ocfg);
  kdist::BatchPlan plan(examples, B, *dist);
  const std::size_t steps = plan.steps_per_epoch();
  const auto order = plan.order(0);
  const std::string what = std::string(model_parallel ? "ModelParallel " : "DataParallel ") +
                           dist->device_mesh().to_string();
  for (std::size_t s = 0; s < steps; ++s) {
    // the sharded step on this process's rows
    const auto idx = plan.local_indices(order, s);
    kdist::detail::BatchLoader<float, 2> loader(dataset(), idx.size());
    const auto [x, y] = load_batch(loader, idx);
    const std::size_t global = plan.global_batch_size_at(s);
    const auto m = model.train_step(x, y, global);
    // the reference on the whole global batch
    const auto gidx = plan.global_indices(order, s);
    Ref::Matrix gx(static_cast<Eigen::Index>(global), 784);
    std::vector<std::uint8_t> gy(global);
    for (std::size_t r = 0; r < global; ++r) {
      std::copy_n(data().image(gidx[r]), 784, &gx(static_cast<Eigen::Index>(r), 0));
      gy[r] = data().labels[gidx[r]];
    }
    const double ref_loss = ref.train_step(gx, gy);
    expect_close(m.loss, ref_loss, 1e-4, what + " loss at step " + std::to_string(s));
  }
  // final weights
  model.for_each_variable([&](auto& v) {
    auto full = kdist::full_tensor(v.value);
    const float* want = v.path == "d1/kernel"   ? ref.d1_kernel.data()
                        : v.path == "d2/kernel" ? ref.d2_kernel.data()
                                                : ref.d2_bias.data();
    double worst = 0;
    for (std::size_t i = 0; i < full.size(); ++i) {
      worst = std::max(worst, std::abs(double(full.data()[i]) - double(want[i])) /
                                  std::max(1e-2, std::abs(double(want[i]))));
    }
    EXPECT_LT(worst, 1e-4) << what << " " << v.path << " final weights";
  });
}

// A device-side copy of a float batch as double (a free function: nvcc forbids extended lambdas in
// a test body, which is a private member function).
Kokkos::View<double**, Kokkos::LayoutRight> to_double(
    const Kokkos::View<float**, Kokkos::LayoutRight>& x) {
  Kokkos::View<double**, Kokkos::LayoutRight> xd("xd", x.extent(0), x.extent(1));
  Kokkos::parallel_for(
      "to_double",
      Kokkos::MDRangePolicy<Kokkos::Rank<2>>(
          {0, 0}, {static_cast<std::int64_t>(x.extent(0)), static_cast<std::int64_t>(x.extent(1))}),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) { xd(i, j) = x(i, j); });
  return xd;
}

std::vector<std::vector<std::size_t>> meshes() {
  const auto n = static_cast<std::size_t>(world());
  if (n == 1) return {{1, 1}};
  if (n == 2) return {{2, 1}, {1, 2}};
  return {{2, 2}, {4, 1}, {1, 4}};
}

// The matmul precision (ops/matmul_precision.hpp): a bad KDIST_MATMUL_PRECISION fails compile
// on every process, on a CPU run too (where the setting changes no product); a good one compiles.
TEST(ShardedTrainer, ABadMatmulPrecisionIsAValueErrorAtCompile) {
  auto dist = make_dist(false, meshes().front());
  ::setenv("KDIST_MATMUL_PRECISION", "tf32", 1);
  auto m = kdist::examples::make_seed_model();
  std::string message;
  try {
    m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.1), 1);
  } catch (const kdist::ValueError& e) {
    message = e.what();
  }
  EXPECT_EQ(message,
            "KDIST_MATMUL_PRECISION is 'tf32', not one of highest (or float32: full float32 "
            "products) and high (or tensorfloat32: TensorFloat-32 tensor cores on a GPU)");
  ::setenv("KDIST_MATMUL_PRECISION", "tensorfloat32", 1);
  m.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.1), 1);
  EXPECT_EQ(kdist::ops::matmul_precision(), kdist::ops::MatmulPrecision::high);
  ::unsetenv("KDIST_MATMUL_PRECISION");
}

}  // namespace

// Sequential is a template on the scalar type: the double model draws the same initial weights
// (rounded from float) and follows the float model's losses to float precision, on every mesh.
TEST(ShardedTrainer, DoubleModelFollowsTheFloatModel) {
  using namespace kdist::layers;
  using D = kdist::BasicSequential<double>;
  const std::size_t B = 32, steps = 10;
  for (bool model_parallel : {false, true}) {
    for (const auto& shape : meshes()) {
      auto dist = make_dist(model_parallel, shape);
      auto f = kdist::examples::make_seed_model();
      std::vector<D::Layer> layers;
      layers.emplace_back(D::Dense(200, Activation::relu, false, "d1"));
      layers.emplace_back(D::Dropout(0.4, "dropout"));
      layers.emplace_back(D::Dense(10, Activation::softmax, true, "d2"));
      D d(784, std::move(layers));
      f.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.1), 1337);
      d.compile(dist, kdist::Loss::categorical_crossentropy, kdist::SGD(0.1), 1337);
      kdist::BatchPlan plan(data().count, B, *dist, {.drop_remainder = true});
      const auto order = plan.order(0);
      kdist::detail::BatchLoader<float, 2> loader(dataset(), plan.local_batch_size());
      for (std::size_t s = 0; s < steps; ++s) {
        const auto idx = plan.local_indices(order, s);
        const auto [x, y] = load_batch(loader, idx);
        const auto xd = to_double(x);
        const auto mf = f.train_step(x, y, B);
        const auto md = d.train_step(xd, y, B);
        expect_close(md.loss, mf.loss, 1e-4,
                     dist->device_mesh().to_string() + " step " + std::to_string(s));
        EXPECT_EQ(md.accuracy, mf.accuracy);
      }
    }
  }
}

TEST(ShardedTrainer, ModelParallelMatchesReferenceOnEveryMesh) {
  for (const auto& m : meshes())
    run_against_reference(true, m, kdist::Loss::categorical_crossentropy, true);
}

TEST(ShardedTrainer, DataParallelMatchesReferenceOnEveryMesh) {
  for (const auto& m : meshes())
    run_against_reference(false, m, kdist::Loss::categorical_crossentropy, true);
}

// The seeds' model compiled data parallel over the world's processes, and this process's rows of
// the first `steps` batches of 32 (each in its own Views).
struct SeedModelAndBatches {
  static constexpr std::size_t B = 32;
  kdist::Sequential model = kdist::examples::make_seed_model();
  std::vector<std::pair<Kokkos::View<float**, Kokkos::LayoutRight>,
                        Kokkos::View<std::int32_t*, Kokkos::LayoutRight>>>
      batches;
  explicit SeedModelAndBatches(std::size_t steps) {
    auto dist = make_dist(false, {static_cast<std::size_t>(world()), 1});
    model.compile(dist, kdist::Loss::categorical_crossentropy, kdist::Adam(0.001), 1337);
    kdist::BatchPlan plan(steps * B, B, *dist);
    const auto order = plan.order(0);
    for (std::size_t s = 0; s < steps; ++s) {
      const auto idx = plan.local_indices(order, s);
      kdist::detail::BatchLoader<float, 2> loader(dataset(), idx.size());
      batches.push_back(load_batch(loader, idx));
    }
  }
  void train_step(std::size_t s) { model.train_step(batches[s].first, batches[s].second, B); }
};

// kdist::ReusableViews: once its shapes have been seen, a data-parallel step allocates nothing
// (no malloc, no page faults): the layers' outputs and gradients and the loss gradient reuse the
// buffers of the last steps, the gradients are all-reduced in place.
TEST(ShardedTrainer, DataParallelStepsAllocateNothingOnceTheirShapesAreSeen) {
  SeedModelAndBatches run(4);
  for (std::size_t s = 0; s < 2; ++s) run.train_step(s);
  const kdist::test::CountAllocations count;
  for (std::size_t s = 2; s < 4; ++s) run.train_step(s);
  EXPECT_EQ(count.seen(), "") << "steps 3 and 4 allocated these Kokkos Views";
}

// A prediction the caller keeps is never a buffer a later step writes into (a kept buffer is
// handed out again only while nothing else references it).
TEST(ShardedTrainer, APredictionTheCallerKeepsIsNotWrittenOverByLaterSteps) {
  SeedModelAndBatches run(2);
  using Matrix = kdist::DistributedTensor<float**>;
  const auto kept = std::get<Matrix>(run.model.predict_step(run.batches[0].first, run.B));
  const auto before = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), kept.local());
  for (int i = 0; i < 3; ++i) {
    run.train_step(1);
    const auto other = std::get<Matrix>(run.model.predict_step(run.batches[1].first, run.B));
    EXPECT_NE(other.local().data(), kept.local().data());
  }
  const auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), kept.local());
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after.data()[i], before.data()[i]) << "element " << i << " of the kept prediction";
  }
}

// Rows the step cannot take as they are - column-major, or in host memory when the model is on a
// GPU - are copied into the model's memory first: the same steps and predictions as its own rows.
TEST(ShardedTrainer, ColumnMajorOrHostRowsTrainAsTheModelsOwnRows) {
  SeedModelAndBatches own(4), other(4);
  using Matrix = kdist::DistributedTensor<float**>;
  for (std::size_t s = 0; s < 4; ++s) {
    const auto& [x, y] = own.batches[s];
    const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
    Kokkos::View<float**, Kokkos::LayoutLeft, Kokkos::HostSpace> left("left", host.extent(0),
                                                                      host.extent(1));
    Kokkos::deep_copy(left, host);
    const auto want = own.model.train_step(x, y, own.B);
    const auto got =
        s % 2 ? other.model.train_step(left, y, other.B) : other.model.train_step(host, y, other.B);
    EXPECT_EQ(got.loss, want.loss) << "step " << s << (s % 2 ? " (LayoutLeft)" : " (host)");
    const auto p = std::get<Matrix>(own.model.predict_step(x, own.B));
    const auto q = std::get<Matrix>(other.model.predict_step(left, other.B));
    const auto ph = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.local());
    const auto qh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q.local());
    ASSERT_EQ(ph.size(), qh.size());
    for (std::size_t i = 0; i < ph.size(); ++i) {
      ASSERT_EQ(qh.data()[i], ph.data()[i]) << "prediction element " << i << " after step " << s;
    }
  }
}

// The partial last batch (kept by default, as Keras keeps it) trains as the reference does on
// those rows, also where the data shards get unequal rows.
TEST(ShardedTrainer, PartialLastBatchMatchesReferenceOnEveryMesh) {
  for (const auto& m : meshes()) {
    run_against_reference(true, m, kdist::Loss::categorical_crossentropy, true, 946);
    run_against_reference(false, m, kdist::Loss::categorical_crossentropy, false, 946);
  }
}

TEST(ShardedTrainer, MeanSquaredErrorWithSgd) {
  run_against_reference(true, meshes().front(), kdist::Loss::mean_squared_error, false);
}

TEST(ShardedTrainer, VariablesHaveKerasPathsAndLayouts) {
  auto model = kdist::examples::make_seed_model();
  const auto n = static_cast<std::size_t>(world());
  model.compile(make_dist(true, {1, n}), kdist::Loss::categorical_crossentropy, kdist::Adam(), 1);
  auto vars = model.variables();
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars[0].path, "d1/kernel");
  EXPECT_EQ(vars[0].layout.axes_repr(), "(None, 'model')");
  EXPECT_EQ(vars[1].path, "d2/kernel");
  EXPECT_EQ(vars[1].layout.axes_repr(), "(None, None)");
  EXPECT_EQ(vars[2].path, "d2/bias");
  EXPECT_EQ((vars[0].shape), (std::vector<std::size_t>{784, 200}));
}

TEST(ShardedTrainer, TrainerErrorsAreClear) {
  EXPECT_THROW(kdist::examples::parse_mesh("2y4"), kdist::ValueError);
  EXPECT_THROW(kdist::examples::parse_mesh("0x2"), kdist::ValueError);
  EXPECT_THROW(kdist::examples::parse_mesh(""), kdist::ValueError);
  EXPECT_EQ(kdist::examples::parse_mesh("2x4"), (std::vector<std::size_t>{2, 4}));
  const auto n = static_cast<std::size_t>(world());
  // a mesh that does not match the number of processes
  EXPECT_THROW(make_dist(true, {n + 1, 1}), kdist::ValueError);
  // a global batch the data axis does not divide
  if (n > 1) {
    auto dist = make_dist(false, {n, 1});
    EXPECT_THROW(kdist::BatchPlan(100, n + 1, *dist, {}), kdist::ValueError);
  }
  // a missing dataset names the path and the Debian package
  try {
    kdist::examples::load_fashion_mnist(kdist::examples::Split::train, 0, 0, "/nonexistent");
    ADD_FAILURE() << "expected an error";
  } catch (const kdist::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dataset-fashion-mnist"), std::string::npos) << e.what();
  }
}
