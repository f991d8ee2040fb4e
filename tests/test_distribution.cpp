// kdist::Distribution, DataParallel, ModelParallel, set_distribution / distribution / scope:
// Keras' DistributionTest, DataParallelDistributionTest, ModelParallelDistributionTest and
// DataShardingIntegrationTest (keras/src/distribution/distribution_lib_test.py) ported with the
// same meshes, paths and expectations; Keras' mocks of num_processes / process_id become
// DistributionOptions. Plus kdist's differences, every error path, and a thread test.
//
// The tests run in file order: the first ones run without MPI (processes 1 and 0, as Keras
// without a multi-process backend); DataParallel() needs kdist::list_devices(), which needs kdist
// started (kdist::initialize: an MPI singleton) for the rest of the program.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <kdist/core/mesh.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using kdist::DataParallel;
using kdist::DimAxes;
using kdist::Distribution;
using kdist::DistributionOptions;
using kdist::LayoutMap;
using kdist::ModelParallel;
using kdist::RuntimeDeviceMesh;
using kdist::RuntimeTensorLayout;
using kdist::VariableInfo;
using ::testing::HasSubstr;

std::vector<std::string> cpu_devices(std::size_t n) {
  std::vector<std::string> d;
  for (std::size_t i = 0; i < n; ++i) d.push_back("cpu:" + std::to_string(i));
  return d;
}

template <class E = kdist::ValueError, class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

//! kdist (MPI and Kokkos) started by this test program for kdist::list_devices, finalised at exit
//! by kdist::initialize's own hook: kdist answers only where it was started, never for an MPI it
//! finds running.
class MpiEnvironment : public ::testing::Environment {
 public:
  static void ensure_started() { kdist::initialize(); }
};
[[maybe_unused]] auto* const mpi_environment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

// ---- Keras' DistributionTest --------------------------------------------------------------------

class DistributionTest : public ::testing::Test {
 protected:
  RuntimeDeviceMesh device_mesh{{4, 2}, {"batch", "model"}, cpu_devices(8)};
};

TEST_F(DistributionTest, InitWithDeviceMesh) {
  Distribution distribution(device_mesh);
  EXPECT_EQ(distribution.device_mesh(), device_mesh);
  EXPECT_FALSE(distribution.batch_dim_name());
  // Without MPI, as Keras without a multi-process backend: one process.
  EXPECT_EQ(distribution.num_processes(), 1u);
  EXPECT_EQ(distribution.process_id(), 0u);
  EXPECT_FALSE(distribution.is_multi_process());
  EXPECT_TRUE(distribution.auto_shard_dataset());
  EXPECT_EQ(distribution.to_string(),
            "<Distribution device_mesh=<DeviceMesh shape=(4, 2), axis_names=['batch', 'model']>>");
}

TEST_F(DistributionTest, Scope) {
  auto distribution_1 = std::make_shared<Distribution>(device_mesh);
  auto distribution_2 = std::make_shared<Distribution>(device_mesh);

  EXPECT_EQ(kdist::distribution(), nullptr);
  {
    auto scope_1 = distribution_1->scope();
    EXPECT_EQ(kdist::distribution(), distribution_1);
    {
      auto scope_2 = distribution_2->scope();
      EXPECT_EQ(kdist::distribution(), distribution_2);
    }
    EXPECT_EQ(kdist::distribution(), distribution_1);
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST_F(DistributionTest, ScopeOfAnObjectNotOwnedBySharedPtrUsesACopy) {
  DataParallel data_parallel(device_mesh);
  {
    auto scope = data_parallel.scope();
    auto current = kdist::distribution();
    ASSERT_NE(current, nullptr);
    EXPECT_EQ(current->name(), "DataParallel");
    EXPECT_EQ(current->device_mesh(), device_mesh);
    EXPECT_EQ(current->batch_dim_name(), "batch");
    auto moved = std::move(scope);  // a moved scope restores once
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

// A Distribution whose num_model_replicas is chosen by the test (Keras mocks the property).
class ReplicasDistribution : public Distribution {
 public:
  ReplicasDistribution(RuntimeDeviceMesh mesh, std::size_t replicas, DistributionOptions options)
      : Distribution(std::move(mesh), {}, options), replicas_(replicas) {}
  std::size_t num_model_replicas() const override { return replicas_; }

 private:
  std::size_t replicas_;
};

TEST_F(DistributionTest, DataShardId) {
  // Case 1: num_model_replicas >= num_processes: data_shard_id should be process_id
  for (std::size_t process_id = 0; process_id < 4; ++process_id) {
    ReplicasDistribution distribution(device_mesh, 8,
                                      {.num_processes = 4, .process_id = process_id});
    EXPECT_EQ(distribution.data_shard_id(), process_id);
    EXPECT_EQ(distribution.num_data_shards(), 4u);
  }
  // Case 2: num_model_replicas < num_processes: data_shard_id should be
  // process_id // (num_processes // num_model_replicas)
  const std::vector<std::size_t> expected_data_shard_ids{0, 0, 1, 1};
  for (std::size_t process_id = 0; process_id < 4; ++process_id) {
    ReplicasDistribution distribution(device_mesh, 2,
                                      {.num_processes = 4, .process_id = process_id});
    EXPECT_EQ(distribution.data_shard_id(), expected_data_shard_ids[process_id]);
    EXPECT_EQ(distribution.num_data_shards(), 2u);
  }
}

TEST_F(DistributionTest, BaseClassMembersAreNotImplemented) {
  Distribution distribution(device_mesh);
  expect_error<kdist::RuntimeError>([&] { (void)distribution.num_model_replicas(); },
                                    {"Distribution::num_model_replicas is not implemented"});
  expect_error<kdist::RuntimeError>(
      [&] {
        (void)distribution.get_data_layout({4, 2});
      },
      {"get_data_layout is not implemented"});
  expect_error<kdist::RuntimeError>(
      [&] { (void)distribution.get_variable_layout(VariableInfo("v", {3})); },
      {"get_variable_layout is not implemented"});
  expect_error<kdist::RuntimeError>([&] { (void)distribution.get_tensor_layout("t"); },
                                    {"get_tensor_layout is not implemented"});
}

TEST_F(DistributionTest, ProcessOptionsAreValidated) {
  expect_error([&] { Distribution d(device_mesh, {}, {.num_processes = 0, .process_id = 0}); },
               {"num_processes must be at least 1, got 0"});
  expect_error([&] { Distribution d(device_mesh, {}, {.num_processes = 2, .process_id = 2}); },
               {"process_id 2 is out of range for num_processes=2"});
  expect_error([&] { Distribution d(device_mesh, "data"); },
               {"batch_dim_name 'data' is not an axis of the mesh", "['batch', 'model']"});
}

// ---- Keras' DataParallelDistributionTest -------------------------------------------------------

class DataParallelDistributionTest : public ::testing::Test {
 protected:
  std::vector<std::string> devices = cpu_devices(8);
  RuntimeDeviceMesh device_mesh{{8}, {"data"}, devices};
};

TEST_F(DataParallelDistributionTest, CreateWithDeviceMesh) {
  DataParallel distribution(device_mesh);
  const auto& mesh = distribution.device_mesh();
  EXPECT_EQ(mesh.devices().size(), 8u);
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"data"}));
  EXPECT_EQ(distribution.batch_dim_name(), "data");

  EXPECT_FALSE(distribution.is_multi_process());
  EXPECT_EQ(distribution.process_id(), 0u);
  EXPECT_EQ(distribution.num_processes(), 1u);
}

TEST_F(DataParallelDistributionTest, CreateWithDevices) {
  DataParallel distribution(devices);
  const auto& mesh = distribution.device_mesh();
  EXPECT_EQ(mesh.devices().size(), 8u);
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"batch"}));
  EXPECT_EQ(distribution.batch_dim_name(), "batch");
  expect_error([] { DataParallel d(std::vector<std::string>{}); },
               {"the list of devices is empty"});
}

TEST_F(DataParallelDistributionTest, GetDataLayout) {
  DataParallel distribution(device_mesh);
  const std::vector<std::size_t> data_shape{4, 2, 2};  // np.arange(16).reshape((4, 2, 2))
  auto data_layout = distribution.get_data_layout(data_shape);
  EXPECT_EQ(data_layout.device_mesh(), device_mesh);
  EXPECT_EQ(data_layout.axes(),
            (std::vector<DimAxes>{"data", kdist::replicated, kdist::replicated}));
  expect_error([&] { (void)distribution.get_data_layout(std::vector<std::size_t>{}); },
               {"data of shape () has no batch dimension"});
}

TEST_F(DataParallelDistributionTest, GetVariableLayout) {
  DataParallel distribution(device_mesh);
  VariableInfo variable("variable", {3});  // backend.Variable(initializer=[1.0, 2.0, 3.0])
  auto variable_layout = distribution.get_variable_layout(variable);
  EXPECT_EQ(variable_layout.device_mesh(), device_mesh);
  EXPECT_EQ(variable_layout.axes(), (std::vector<DimAxes>{kdist::replicated}));
}

TEST_F(DataParallelDistributionTest, GetVariableLayoutWithExplicitLayout) {
  DataParallel distribution(device_mesh);
  RuntimeDeviceMesh explicit_mesh({8}, {"x"}, devices);
  RuntimeTensorLayout explicit_layout({"x"}, explicit_mesh);
  VariableInfo variable("variable", {3}, explicit_layout);
  auto variable_layout = distribution.get_variable_layout(variable);
  EXPECT_EQ(variable_layout.device_mesh(), explicit_mesh);
  EXPECT_EQ(variable_layout.axes(), explicit_layout.axes());
}

TEST_F(DataParallelDistributionTest, NumModelReplicas) {
  DataParallel distribution(device_mesh, {.num_processes = 2, .process_id = 0});
  EXPECT_EQ(distribution.num_model_replicas(), 8u);
  EXPECT_EQ(distribution.num_processes(), 2u);
}

TEST_F(DataParallelDistributionTest, BatchAxisNamedInCodeOrAtRunTime) {
  // a (model, data) mesh: the batch axis is the second one, checked at compile time when written
  // in code on a typed mesh (compile_fail/data_parallel_batch_axis_not_in_mesh.cpp)
  kdist::DeviceMesh<kdist::axis<"model">, kdist::axis<"data">> typed({2, 4}, devices);
  DataParallel distribution(typed, "data", {.num_processes = 8, .process_id = 5});
  EXPECT_EQ(distribution.batch_dim_name(), "data");
  EXPECT_EQ(distribution.num_model_replicas(), 4u);
  EXPECT_EQ(distribution.get_data_layout(std::vector<std::size_t>{16, 3}).axes(),
            (std::vector<DimAxes>{"data", kdist::replicated}));
  // at run time: the same, and a name that is not an axis is a ValueError naming the axes
  RuntimeDeviceMesh mesh({2, 4}, {"model", "data"}, devices);
  const std::string batch = "data";
  DataParallel runtime(mesh, batch, {.num_processes = 8, .process_id = 5});
  EXPECT_EQ(runtime.get_data_layout(std::vector<std::size_t>{16, 3}).axes(),
            (std::vector<DimAxes>{"data", kdist::replicated}));
  expect_error([&] { DataParallel d(mesh, std::string("dta")); },
               {"kdist::DataParallel: batch_dim_name 'dta' is not an axis of the mesh",
                "valid axis names: ['model', 'data']"});
}

TEST_F(DataParallelDistributionTest, GetTensorLayout) {
  DataParallel distribution(device_mesh);
  EXPECT_EQ(distribution.get_tensor_layout("path/to/tensor"), std::nullopt);
}

TEST_F(DataParallelDistributionTest, MultiAxisMeshShardsDataOnTheFirstAxis) {
  // Keras warns and then fails on a mesh of more than one axis; kdist shards on the first axis
  // and replicates over the others.
  RuntimeDeviceMesh mesh_2d({4, 2}, {"data", "model"}, devices);
  DataParallel distribution(mesh_2d, {.num_processes = 8, .process_id = 5});
  EXPECT_EQ(distribution.batch_dim_name(), "data");
  EXPECT_EQ(distribution.num_model_replicas(), 4u);
  EXPECT_EQ(distribution.num_data_shards(), 4u);
  EXPECT_EQ(distribution.data_shard_id(), 2u);  // device 5 is at (2, 1)
  auto data_layout = distribution.get_data_layout({16, 28, 28});
  EXPECT_EQ(data_layout.axes_repr(), "('data', None, None)");
  EXPECT_EQ(data_layout.shards(0), 4u);
  EXPECT_EQ(data_layout.replicated_mesh_axes(), (std::vector<std::size_t>{1}));
  EXPECT_TRUE(distribution.get_variable_layout(VariableInfo("d1/kernel", {784, 200}))
                  .is_fully_replicated());
}

TEST_F(DataParallelDistributionTest, FromAStaticMesh) {
  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 8>>;
  DataParallel distribution(Mesh{});
  EXPECT_EQ(distribution.device_mesh().shape(), (std::vector<std::size_t>{8}));
  EXPECT_EQ(distribution.batch_dim_name(), "data");
  EXPECT_EQ(distribution.to_string(),
            "<DataParallel device_mesh=<DeviceMesh shape=(8,), axis_names=['data']>>");
}

// Keras mocks list_devices to return 8 devices; kdist's list_devices is one device per MPI
// process, so here it returns 1. Runs after the tests above (it starts MPI).
TEST_F(DataParallelDistributionTest, CreateWithListDevices) {
  MpiEnvironment::ensure_started();
  DataParallel distribution;
  const auto& mesh = distribution.device_mesh();
  EXPECT_EQ(mesh.devices(), kdist::list_devices());
  EXPECT_EQ(mesh.devices().size(), static_cast<std::size_t>(kdist::get_device_count()));
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"batch"}));
  EXPECT_EQ(distribution.batch_dim_name(), "batch");
  EXPECT_EQ(distribution.num_processes(), static_cast<std::size_t>(kdist::process_count()));
  EXPECT_EQ(distribution.process_id(), static_cast<std::size_t>(kdist::process_id()));
}

// ---- Keras' ModelParallelDistributionTest -------------------------------------------------------

class ModelParallelDistributionTest : public ::testing::Test {
 protected:
  std::vector<std::string> devices = cpu_devices(8);
  RuntimeDeviceMesh device_mesh{{2, 4}, {"data", "model"}, devices};
};

TEST_F(ModelParallelDistributionTest, DistributeWeights) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = RuntimeTensorLayout{kdist::replicated, "model"};
  layout_map[".*bias"] = RuntimeTensorLayout{"model"};

  ModelParallel distribution(layout_map, "data");
  VariableInfo kernel("kernel", {8, 4});  // np.arange(8, 4) in Keras' test is empty; a 2-D kernel
  VariableInfo bias("bias", {4});
  VariableInfo rng_seed("seed", {2});

  auto kernel_layout = distribution.get_variable_layout(kernel);
  EXPECT_EQ(kernel_layout.device_mesh(), device_mesh);
  EXPECT_EQ(kernel_layout.axes(), (std::vector<DimAxes>{kdist::replicated, "model"}));

  auto bias_layout = distribution.get_variable_layout(bias);
  EXPECT_EQ(bias_layout.device_mesh(), device_mesh);
  EXPECT_EQ(bias_layout.axes(), (std::vector<DimAxes>{"model"}));

  auto rng_seed_layout = distribution.get_variable_layout(rng_seed);
  EXPECT_EQ(rng_seed_layout.device_mesh(), device_mesh);
  EXPECT_EQ(rng_seed_layout.axes(), (std::vector<DimAxes>{kdist::replicated}));
}

TEST_F(ModelParallelDistributionTest, DistributeData) {
  LayoutMap layout_map(device_mesh);
  ModelParallel distribution(layout_map, "data");
  auto data_layout = distribution.get_data_layout({4, 2, 2});
  EXPECT_EQ(data_layout.device_mesh(), device_mesh);
  EXPECT_EQ(data_layout.axes(),
            (std::vector<DimAxes>{"data", kdist::replicated, kdist::replicated}));
}

TEST_F(ModelParallelDistributionTest, GetTensorLayout) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = RuntimeTensorLayout{kdist::replicated, "model"};
  layout_map[".*bias"] = RuntimeTensorLayout{"model"};
  layout_map["/model/layer/tensor"] = {"data", kdist::replicated};

  ModelParallel distribution(layout_map, "data");
  auto layout = distribution.get_tensor_layout("/model/layer/tensor");
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->device_mesh(), device_mesh);
  EXPECT_EQ(layout->axes(), (std::vector<DimAxes>{"data", kdist::replicated}));

  EXPECT_EQ(distribution.get_tensor_layout("/model/layer/other_tensor"), std::nullopt);
}

TEST_F(ModelParallelDistributionTest, GetVariableLayoutWithExplicitLayout) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = RuntimeTensorLayout{kdist::replicated, "model"};
  ModelParallel distribution(layout_map, "data");

  RuntimeDeviceMesh explicit_mesh({8}, {"x"}, devices);
  RuntimeTensorLayout explicit_layout({"x"}, explicit_mesh);
  VariableInfo variable("kernel", {3}, explicit_layout);
  auto variable_layout = distribution.get_variable_layout(variable);
  EXPECT_EQ(variable_layout.device_mesh(), explicit_mesh);
  EXPECT_EQ(variable_layout.axes(), explicit_layout.axes());
}

TEST_F(ModelParallelDistributionTest, NumProcessesValidation) {
  RuntimeDeviceMesh mesh({3, 2}, {"data", "model"}, cpu_devices(6));
  LayoutMap layout_map(mesh);
  expect_error(
      [&] { ModelParallel d(layout_map, "data", {.num_processes = 4, .process_id = 0}); },
      {"`num_processes` must be divisible by `num_model_replicas`",
       "If `num_processes` is greater than `num_model_replicas`, `num_processes` must be divisible "
       "by `num_model_replicas`. Got num_processes=4, num_model_replicas=3."});
  // Fewer processes than replicas, or a multiple of them, are fine.
  EXPECT_NO_THROW((ModelParallel(layout_map, "data", {.num_processes = 2, .process_id = 1})));
  EXPECT_NO_THROW((ModelParallel(layout_map, "data", {.num_processes = 6, .process_id = 1})));
}

TEST_F(ModelParallelDistributionTest, NumModelReplicas) {
  RuntimeDeviceMesh mesh({4, 2}, {"data", "model"}, devices);
  LayoutMap layout_map(mesh);
  ModelParallel distribution(layout_map, "data", {.num_processes = 2, .process_id = 0});
  EXPECT_EQ(distribution.num_model_replicas(), 4u);
  EXPECT_EQ(distribution.num_processes(), 2u);
}

// ---- kdist's additions to ModelParallel ---------------------------------------------------------

TEST_F(ModelParallelDistributionTest, BatchAxisDefaultsToTheFirstAxisAndIsValidated) {
  LayoutMap layout_map(device_mesh);
  ModelParallel distribution(layout_map);
  EXPECT_EQ(distribution.batch_dim_name(), "data");
  EXPECT_EQ(distribution.name(), "ModelParallel");
  expect_error([&] { ModelParallel d(layout_map, "batch"); },
               {"kdist::ModelParallel: batch_dim_name 'batch' is not an axis of the mesh",
                "valid axis names: ['data', 'model']"});
  expect_error([&] { ModelParallel d(LayoutMap{}); }, {"the layout_map has no device mesh"});
  expect_error([&] { ModelParallel d(std::shared_ptr<const LayoutMap<>>{}); },
               {"You must specify a layout_map argument"});
}

TEST_F(ModelParallelDistributionTest, VariablesAreResolvedWithDiagnostics) {
  auto layout_map = std::make_shared<LayoutMap<>>(device_mesh);
  (*layout_map)["d1/kernel"] = {kdist::replicated, "model"};
  (*layout_map)["d1/bias"] = {"model"};
  (*layout_map)["d3/kernel"] = {kdist::replicated, "model"};
  ModelParallel distribution(std::shared_ptr<const LayoutMap<>>(layout_map), "data");
  EXPECT_EQ(&distribution.layout_map(), layout_map.get());  // shared, not copied
  // A rule whose rank does not fit the variable: the path is in the message.
  expect_error(
      [&] {
        (void)distribution.get_variable_layout(VariableInfo("d1/bias", {200, 1}));
      },
      {"variable 'd1/bias' of shape (200, 1)", "has rank 1"});
  (void)distribution.get_variable_layout(VariableInfo("d1/kernel", {784, 200}));
  (void)distribution.get_variable_layout(VariableInfo("d2/kernel", {200, 10}));
  auto report = distribution.layout_map().report();
  EXPECT_EQ(report.unused_rules, (std::vector<std::string>{"d3/kernel"}));
  ASSERT_EQ(report.replicated_variables.size(), 1u);
  EXPECT_EQ(report.replicated_variables[0].path, "d2/kernel");
  layout_map->set_strict(true);
  expect_error(
      [&] {
        (void)distribution.get_variable_layout(VariableInfo("d2/kernel", {200, 10}));
      },
      {"strict", "'d2/kernel'"});
}

// Any type with path() and shape() is a variable; layout() is optional.
struct MyVariable {
  std::string p;
  std::vector<int> s;
  const std::string& path() const { return p; }
  const std::vector<int>& shape() const { return s; }
};
struct MyVariableWithLayout : MyVariable {
  std::optional<RuntimeTensorLayout> l;
  const std::optional<RuntimeTensorLayout>& layout() const { return l; }
};

TEST_F(ModelParallelDistributionTest, AnyVariableTypeWorks) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = {kdist::replicated, "model"};
  ModelParallel distribution(layout_map);
  EXPECT_EQ(distribution.get_variable_layout(MyVariable{"d/kernel", {4, 8}}).axes_repr(),
            "(None, 'model')");
  MyVariableWithLayout v;
  v.p = "d/kernel";
  v.s = {4, 8};
  EXPECT_EQ(distribution.get_variable_layout(v).axes_repr(), "(None, 'model')");  // no layout set
  v.l = RuntimeTensorLayout({"data", kdist::replicated}, device_mesh);
  EXPECT_EQ(distribution.get_variable_layout(v).axes_repr(), "('data', None)");
}

TEST_F(ModelParallelDistributionTest, DataShardIdFollowsTheDeviceOnTheBatchAxis) {
  // One process per device (kdist's model). Batch axis first: Keras' formula, process // 4.
  LayoutMap first(device_mesh);  // (2, 4) data, model
  for (std::size_t p = 0; p < 8; ++p) {
    ModelParallel d(first, "data", {.num_processes = 8, .process_id = p});
    EXPECT_EQ(d.num_data_shards(), 2u);
    EXPECT_EQ(d.data_shard_id(), p / 4);
  }
  // Batch axis second: process p drives device p at (p / 4, p % 4), whose data shard is p % 4
  // (Keras' formula would give p / 2, the rows of another device).
  for (std::size_t p = 0; p < 8; ++p) {
    ModelParallel d(first, "model", {.num_processes = 8, .process_id = p});
    EXPECT_EQ(d.num_data_shards(), 4u);
    EXPECT_EQ(d.data_shard_id(), p % 4);
  }
  // Devices listed in another order: process p drives the device named "cpu:p".
  RuntimeDeviceMesh reversed(
      {2, 4}, {"data", "model"},
      {"cpu:7", "cpu:6", "cpu:5", "cpu:4", "cpu:3", "cpu:2", "cpu:1", "cpu:0"});
  ModelParallel d(LayoutMap{reversed}, "data", {.num_processes = 8, .process_id = 0});
  EXPECT_EQ(d.data_shard_id(), 1u);  // "cpu:0" is at (1, 3)
}

// ---- Keras' DataShardingIntegrationTest
// -----------------------------------------------------------

TEST(DataShardingIntegrationTest, DistributeDatasetShardingBehavior) {
  const std::size_t num_devices = 8;
  const std::size_t num_model_replicas = num_devices / 2;
  RuntimeDeviceMesh device_mesh({num_model_replicas, 2}, {"data", "model"},
                                cpu_devices(num_devices));
  LayoutMap layout_map(device_mesh);
  std::vector<int> global_dataset(4 * num_model_replicas);  // tf.data.Dataset.range(16)
  for (std::size_t i = 0; i < global_dataset.size(); ++i) global_dataset[i] = static_cast<int>(i);
  const std::size_t global_batch = 2 * num_model_replicas;

  // Simulate one process per device.
  std::vector<std::vector<int>> shards;
  for (std::size_t process_id = 0; process_id < num_devices; ++process_id) {
    ModelParallel distribution(layout_map, "data",
                               {.num_processes = num_devices, .process_id = process_id});
    auto dataset = kdist::distribute_dataset(global_dataset, global_batch, distribution);
    auto epoch = dataset.epoch(0);
    std::vector<int> rows;
    for (std::size_t step = 0; step < epoch.steps(); ++step) {
      for (int x : epoch.batch(step)) rows.push_back(x);
    }
    shards.push_back(rows);
  }
  const std::size_t processes_per_replica = num_devices / num_model_replicas;
  for (std::size_t replica_id = 0; replica_id < num_model_replicas; ++replica_id) {
    const std::size_t start = replica_id * processes_per_replica;
    for (std::size_t process_id = start + 1; process_id < start + processes_per_replica;
         ++process_id) {
      EXPECT_EQ(shards[start], shards[process_id])
          << "Processes " << start << " and " << process_id << " should have same shard";
    }
  }
  for (std::size_t replica_id = 1; replica_id < num_model_replicas; ++replica_id) {
    EXPECT_NE(shards[0], shards[replica_id * processes_per_replica])
        << "Replica groups should have different shards";
  }
  // kdist's rule: replica r reads rows [2r, 2r + 2) of each global batch of 8.
  EXPECT_EQ(shards[0], (std::vector<int>{0, 1, 8, 9}));
  EXPECT_EQ(shards[7], (std::vector<int>{6, 7, 14, 15}));
}

// ---- the global distribution
// ---------------------------------------------------------------------

TEST(GlobalDistributionTest, SetDistributionAndReset) {
  RuntimeDeviceMesh mesh({8}, {"batch"}, cpu_devices(8));
  auto dp = std::make_shared<DataParallel>(mesh);
  EXPECT_EQ(kdist::set_distribution(dp), nullptr);
  EXPECT_EQ(kdist::distribution(), dp);
  DataParallel on_stack(mesh);
  EXPECT_EQ(kdist::set_distribution(on_stack), dp);  // previous returned
  EXPECT_NE(kdist::distribution(), nullptr);
  EXPECT_NE(kdist::distribution().get(), &on_stack);  // a copy: on_stack is not shared-owned
  EXPECT_EQ(kdist::distribution()->name(), "DataParallel");
  kdist::set_distribution(nullptr);
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GlobalDistributionTest, ReadersNeverSeeATornValue) {
  // One writer alternates two distributions while readers check that what they read is whole
  // (the mesh, name and batch axis of one of the two, never a mix or a dangling pointer).
  RuntimeDeviceMesh mesh_a({8}, {"batch"}, cpu_devices(8));
  RuntimeDeviceMesh mesh_b({2, 4}, {"data", "model"}, cpu_devices(8));
  std::shared_ptr<const Distribution> a = std::make_shared<DataParallel>(mesh_a);
  std::shared_ptr<const Distribution> b =
      std::make_shared<ModelParallel>(LayoutMap(mesh_b), "model");
  std::atomic<bool> stop{false};
  std::atomic<long> reads{0};
  std::atomic<int> bad{0};
  std::atomic<int> started{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      ++started;
      while (!stop.load()) {
        auto d = kdist::distribution();
        if (!d) continue;
        const bool is_a = d->name() == "DataParallel" && d->device_mesh() == mesh_a &&
                          d->batch_dim_name() == "batch" && d->num_model_replicas() == 8;
        const bool is_b = d->name() == "ModelParallel" && d->device_mesh() == mesh_b &&
                          d->batch_dim_name() == "model" && d->num_model_replicas() == 4;
        if (!is_a && !is_b) ++bad;
        ++reads;
      }
    });
  }
  std::thread writer([&] {
    while (started.load() < 4) std::this_thread::yield();
    // At least 20000 writes, and on until the readers have read 4000 times (a loaded machine may
    // not schedule them during the first writes), at most 20 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int i = 0;
         i < 20000 || (reads.load() < 4000 && std::chrono::steady_clock::now() < deadline); ++i) {
      kdist::set_distribution(i % 2 ? a : b);
      if (i % 3 == 0) {  // scopes from another thread too
        auto scope = (i % 2 ? b : a)->scope();
      }
    }
  });
  writer.join();
  stop = true;
  for (auto& r : readers) r.join();
  kdist::set_distribution(nullptr);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
}

TEST(DistributionThreads, ScopesFromManyThreadsLeaveNothingBehind) {
  // 8 threads each open and close scopes of their own distribution, interleaved: each sees its
  // own inside its scope, and afterwards the global distribution is what it was before.
  RuntimeDeviceMesh mesh({8}, {"batch"}, cpu_devices(8));
  std::shared_ptr<const Distribution> global = std::make_shared<DataParallel>(mesh);
  kdist::set_distribution(global);
  std::vector<std::shared_ptr<const Distribution>> own;
  for (int t = 0; t < 8; ++t) own.push_back(std::make_shared<DataParallel>(mesh));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto scope = own[static_cast<std::size_t>(t)]->scope();
        if (kdist::distribution() != own[static_cast<std::size_t>(t)]) ++wrong;
        std::this_thread::yield();
      }
      if (kdist::distribution() != global) ++wrong;  // this thread's scopes are closed
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(kdist::distribution(), global);
  kdist::set_distribution(nullptr);
}

}  // namespace
