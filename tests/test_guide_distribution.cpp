// The examples of docs/guide/03-layoutmap-and-distributions.md, compiled and run: one test per
// `cpp` block of the page, each block pasted verbatim (re-indented) after the page's first block,
// which names the 8 devices. GuideBlocksAreHere checks that every block of the page is in this
// file, so the page and the tests cannot drift apart.
#undef NDEBUG  // the examples check with assert, also in Release builds
#include <gtest/gtest.h>

#include <cassert>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <kdist/core/mesh.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#if __has_include(<nlohmann/json.hpp>)
#include <kdist/io/layout_map_file.hpp>
#endif

// The guide's blocks stand here verbatim (GuideBlocksAreHere checks it): keep the guide's layout.
// clang-format off
namespace {

TEST(GuideDistribution, DataParallel) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  // keras.distribution.DataParallel(devices=devices)
  kdist::DataParallel data_parallel(devices);
  assert(data_parallel.batch_dim_name() == "batch");

  // Or with a 1-D mesh.
  kdist::RuntimeDeviceMesh mesh_1d({8}, {"data"}, devices);
  kdist::DataParallel data_parallel_1d(mesh_1d);

  // The data (a batch of 128 images 28x28x1) is sharded on its first dimension over 8 devices;
  // the variables are replicated.
  kdist::RuntimeTensorLayout data_layout = data_parallel_1d.get_data_layout({128, 28, 28, 1});
  assert(data_layout.axes_repr() == "('data', None, None, None)");
  assert(data_layout.shards(0) == 8);
  kdist::VariableInfo kernel("dense/kernel", {784, 200});
  assert(data_parallel_1d.get_variable_layout(kernel).is_fully_replicated());
  assert(data_parallel_1d.get_tensor_layout("dense/output") == std::nullopt);
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, DataParallelMultiAxisMesh) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh_2d({4, 2}, {"data", "replica"}, devices);
  kdist::DataParallel data_parallel_2d(mesh_2d);
  assert(data_parallel_2d.get_data_layout({128, 784}).axes_repr() == "('data', None)");
  assert(data_parallel_2d.num_model_replicas() == 4);
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, DataParallelStaticMesh) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 8>>;
  kdist::DataParallel from_static(Mesh{devices});
  assert(from_static.device_mesh().axis_names() == std::vector<std::string>{"data"});
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, SetDistributionAndScope) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  auto distribution = std::make_shared<kdist::DataParallel>(devices);
  kdist::set_distribution(distribution);          // keras.distribution.set_distribution(...)
  assert(kdist::distribution() == distribution);  // keras.distribution.distribution()
  {
    kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, devices);
    kdist::ModelParallel model_parallel{kdist::LayoutMap(mesh)};
    auto scope = model_parallel.scope();          // with model_parallel.scope():
    assert(kdist::distribution()->name() == "ModelParallel");
  }
  assert(kdist::distribution() == distribution);  // restored
  kdist::set_distribution(nullptr);
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, ModelParallelAndLayoutMap) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh_2d({2, 4}, {"data", "model"}, devices);
  kdist::LayoutMap layout_map(mesh_2d);

  // The rule below means that for any weights that match with d1/kernel, it will be sharded with
  // model dimensions (4 devices), same for the d1/bias. All other weights will be fully replicated.
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  layout_map["d1/bias"] = {"model"};

  // You can also set the layout for the layer output like
  layout_map["d2/output"] = {"data", kdist::replicated};

  kdist::ModelParallel model_parallel(layout_map, "data");
  kdist::set_distribution(model_parallel);

  // The variables of the guide's model: d1 is sharded, d2 replicated.
  auto d1_kernel = model_parallel.get_variable_layout(kdist::VariableInfo("d1/kernel", {784, 200}));
  assert(d1_kernel.axes_repr() == "(None, 'model')" && d1_kernel.shards(1) == 4);
  auto d2_kernel = model_parallel.get_variable_layout(kdist::VariableInfo("d2/kernel", {200, 10}));
  assert(d2_kernel.is_fully_replicated());
  // The data is sharded across the "data" dimension of the mesh, which has 2 devices.
  assert(model_parallel.get_data_layout({128, 784}).shards(0) == 2);
  assert(model_parallel.get_tensor_layout("d2/output")->axes_repr() == "('data', None)");
  kdist::set_distribution(nullptr);
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, ChangingTheMeshShape) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh full_data_parallel_mesh({8, 1}, {"data", "model"}, devices);
  kdist::RuntimeDeviceMesh more_data_parallel_mesh({4, 2}, {"data", "model"}, devices);
  kdist::RuntimeDeviceMesh more_model_parallel_mesh({2, 4}, {"data", "model"}, devices);
  kdist::RuntimeDeviceMesh full_model_parallel_mesh({1, 8}, {"data", "model"}, devices);
  for (const auto& mesh : {full_data_parallel_mesh, more_data_parallel_mesh,
                           more_model_parallel_mesh, full_model_parallel_mesh}) {
    kdist::LayoutMap map(mesh);
    map["d1/kernel"] = {kdist::replicated, "model"};
    kdist::ModelParallel distribution(map, "data");
    auto kernel = distribution.get_variable_layout(kdist::VariableInfo("d1/kernel", {784, 200}));
    assert(kernel.shards(1) == mesh.extent(1));
    assert(distribution.num_model_replicas() == mesh.extent(0));
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, HowAPathFindsItsRule) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh({2, 4}, {"batch", "model"}, devices);
  kdist::LayoutMap layout_map(mesh);
  layout_map[".*dense.*kernel"] = {kdist::replicated, "model"};
  layout_map[".*dense.*bias"] = {"model"};
  layout_map[".*conv2d.*kernel"] = {kdist::replicated, kdist::replicated, kdist::replicated, "model"};
  layout_map[".*conv2d.*bias"] = {"model"};

  std::optional<kdist::RuntimeTensorLayout> layout_1 = layout_map["dense_1.kernel"];
  assert(layout_1 && layout_1->axes_repr() == "(None, 'model')");
  assert(layout_map["my_model/conv2d_123/kernel"]->rank() == 4);
  assert(layout_map["my_model/conv3d_1/kernel"] == std::nullopt);  // no rule: replicated
  assert(layout_map.matching_key("dense_2.bias") == ".*dense.*bias");

  layout_map[".*bias"] = {"model"};
  try {
    (void)layout_map.get("dense_2.bias");  // matches '.*dense.*bias' and '.*bias'
    assert(false && "unreachable: the lookup throws");
  } catch (const kdist::ValueError& e) {
    // kdist::LayoutMap: Path 'dense_2.bias' matches multiple layout specification keys:
    // ['.*dense.*bias', '.*bias']. ...
    assert(std::string(e.what()).find("['.*dense.*bias', '.*bias']") != std::string::npos);
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, KdistDifferences) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, devices);
  kdist::LayoutMap layout_map(mesh);
  try {
    layout_map["dense/(kernel"] = {kdist::replicated, "model"};
    assert(false && "unreachable: the insertion throws");
  } catch (const kdist::ValueError& e) {
    // kdist::LayoutMap: key 'dense/(kernel' is not a valid regular expression: missing ): ...
    assert(std::string(e.what()).find("missing )") != std::string::npos);
  }
  try {
    layout_map["d1/kernel"] = {kdist::replicated, "modle"};  // not an axis of the mesh
    assert(false && "unreachable: the insertion throws");
  } catch (const kdist::ValueError& e) {
    // ... Invalid axis names for Layout. Valid axis names: ['data', 'model'], Got ['modle'] ...
    assert(layout_map.size() == 0);  // nothing was inserted
  }
  layout_map["d1/kernel"] = std::vector<kdist::DimAxes>{kdist::replicated, "model"};
  assert(layout_map.contains("d1/kernel") && !layout_map.contains("d2/kernel"));
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, Diagnostics) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, devices);
  auto layout_map = std::make_shared<kdist::LayoutMap<>>(mesh);
  (*layout_map)["d1/kernel"] = {kdist::replicated, "model"};
  (*layout_map)["dense_2/kernel"] = {kdist::replicated, "model"};  // the model calls it d2
  kdist::ModelParallel model_parallel(std::shared_ptr<const kdist::LayoutMap<>>(layout_map), "data");

  for (const auto& v : {kdist::VariableInfo("d1/kernel", {784, 200}),
                        kdist::VariableInfo("d2/kernel", {200, 10}),
                        kdist::VariableInfo("d2/bias", {10})}) {
    (void)model_parallel.get_variable_layout(v);
  }
  kdist::LayoutMapReport report = layout_map->report();
  assert(report.unused_rules == std::vector<std::string>{"dense_2/kernel"});
  assert(report.replicated_variables.size() == 2);  // d2/bias and d2/kernel
  std::printf("%s", report.to_string().c_str());
  // LayoutMap report: 1 rule(s) matched nothing, 2 variable(s) fell back to replicated
  //   unused rule: 'dense_2/kernel'
  //   replicated: 'd2/bias' shape (10,)
  //   replicated: 'd2/kernel' shape (200, 10)

  // Strict mode: a variable of rank 2 or more that matches no rule is an error.
  layout_map->set_strict(true);
  try {
    (void)model_parallel.get_variable_layout(kdist::VariableInfo("d2/kernel", {200, 10}));
    assert(false && "unreachable: strict mode throws");
  } catch (const kdist::ValueError& e) {
    // kdist::LayoutMap (strict): variable 'd2/kernel' of shape (200, 10) matches no rule, ...
  }
  // A rule of the wrong rank names the variable.
  try {
    (void)model_parallel.get_variable_layout(kdist::VariableInfo("d1/kernel", {784}));
    assert(false && "unreachable: the rank check throws");
  } catch (const kdist::ValueError& e) {
    // kdist::LayoutMap: variable 'd1/kernel' of shape (784,) matches key 'd1/kernel', whose
    // layout (None, 'model') has rank 2, but the variable has rank 1; ...
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, ProcessesReplicasAndDataShards) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, devices);
  for (std::size_t process = 0; process < 8; ++process) {
    kdist::ModelParallel distribution(kdist::LayoutMap{mesh}, "data",
                                      {.num_processes = 8, .process_id = process});
    assert(distribution.num_data_shards() == 2);
    assert(distribution.data_shard_id() == process / 4);  // processes 0-3 read shard 0, 4-7 shard 1
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

TEST(GuideDistribution, ShardingTheInputData) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  std::vector<int> examples(100);
  std::iota(examples.begin(), examples.end(), 0);
  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, devices);
  kdist::ModelParallel distribution(kdist::LayoutMap{mesh}, "data",
                                    {.num_processes = 8, .process_id = 5});  // replica 1
  auto dataset = kdist::distribute_dataset(examples, 32, distribution, {.shuffle = true, .seed = 42});
  assert(dataset.steps_per_epoch() == 4);  // 3 batches of 32 and the last 4 examples, as Keras
  for (std::size_t epoch = 0; epoch < 2; ++epoch) {
    auto batches = dataset.epoch(epoch);
    for (std::size_t step = 0; step < batches.steps(); ++step) {
      std::vector<int> rows = batches.batch(step);  // the second half of global batch step
      assert(rows.size() == (step < 3 ? 16 : 2));   // 16 rows, then 2 of the partial batch's 4
    }
  }
  try {
    (void)kdist::distribute_dataset(examples, 31, distribution);
    assert(false && "unreachable: the setup throws");
  } catch (const kdist::ValueError& e) {
    // kdist::distribute_dataset: the global batch size 31 cannot be divided among the 2 data shards
  }
  EXPECT_EQ(kdist::distribution(), nullptr);
}

//! Each line stripped of its leading blanks, blank lines dropped.
#if __has_include(<nlohmann/json.hpp>)
// "Rules from a JSON file": compiled here; run in tests/mpi/test_layout_map_file.cpp, since
// reading is collective over MPI, which this one-process test does not start.
[[maybe_unused]] void rules_from_a_json_file(const kdist::RuntimeDeviceMesh& mesh_2d) {
  kdist::LayoutMap layout_map(mesh_2d);                    // a typed map takes them too
  kdist::read_layout_map("rules.json", layout_map);        // checked against the mesh at run time
  auto same = kdist::read_layout_map("rules.json", mesh_2d);  // or a new RuntimeLayoutMap
  kdist::write_layout_map(layout_map, "out.json");         // the rules back, one per line
  (void)same;
}
#endif

std::string normalized(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(' ');
    if (first != std::string::npos) out += line.substr(first) + "\n";
  }
  return out;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(GuideDistribution, GuideBlocksAreHere) {
  // The source tree from the build (__FILE__ is relative when ccache rewrites paths under
  // CCACHE_BASEDIR, tests/CMakeLists.txt).
  const std::string root = KDIST_SOURCE_DIR;
  const std::string here = root + "/tests/test_guide_distribution.cpp";
  const std::string page = read(root + "/docs/guide/03-layoutmap-and-distributions.md");
  const std::string tests = normalized(read(here));
  std::size_t blocks = 0;
  for (std::size_t pos = page.find("```cpp\n"); pos != std::string::npos;
       pos = page.find("```cpp\n", pos)) {
    const std::size_t start = pos + 7;
    const std::size_t end = page.find("```", start);
    ASSERT_NE(end, std::string::npos);
    const std::string block = normalized(page.substr(start, end - start));
    EXPECT_NE(tests.find(block), std::string::npos) << "guide block not in this test file:\n" << block;
    ++blocks;
    pos = end + 3;
  }
  EXPECT_EQ(blocks, 13);
}

}  // namespace
// clang-format on
