// The examples of docs/guide/01-meshes-and-layouts.md, compiled and run: one test per `cpp`
// block of the page, each block pasted verbatim (re-indented) after the page's first block, which
// names the 8 devices. GuideBlocksAreHere checks that every block of the page is in this file, so
// the page and the tests cannot drift apart. A failed assert aborts the test binary.
#undef NDEBUG  // the examples check with assert, also in Release builds
#include <gtest/gtest.h>

#include <array>
#include <cassert>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <kdist/core/layout.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

namespace {

TEST(GuideMeshes, Devices) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));
  EXPECT_EQ(devices.size(), 8u);
  EXPECT_EQ(devices.back(), "cpu:7");
}

TEST(GuideMeshes, DeviceMesh) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  Mesh mesh(devices);
  assert(mesh.to_string() == "<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>");

  // Observers in the std::mdspan vocabulary, and axes by name at compile time.
  static_assert(Mesh::rank() == 2 && Mesh::rank_dynamic() == 0);
  static_assert(Mesh::static_extent(1) == 4);
  static_assert(Mesh::axis_index<"model"> == 1);
  static_assert(kdist::axis_index_v<Mesh, "data"> == 0);
  assert(mesh.extent(0) == 2 && mesh.size() == 8);
  assert(Mesh::axis_names()[1] == "model");
}

TEST(GuideMeshes, RowMajor) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  Mesh mesh(devices);
  assert((mesh.coords_of(5) == std::array<std::size_t, 2>{1, 1}));
  assert(mesh.device_index({1, 1}) == 5);
  assert(mesh.devices()[mesh.device_index({0, 3})] == "cpu:3");
}

TEST(GuideMeshes, DynamicExtent) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;
  static_assert(Mesh::rank_dynamic() == 1);
  Mesh mesh(devices);  // 8 devices: data = 8 / 4 = 2
  assert(mesh.extent(0) == 2);
  assert(Mesh(16).extent(0) == 4);  // from a count: devices "device:0" ... "device:15"
}

TEST(GuideMeshes, CountThatDoesNotFit) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;
  try {
    Mesh mesh(6);
    assert(false);
  } catch (const kdist::ValueError& e) {
    assert(std::string(e.what()) ==
           "kdist::DeviceMesh: shape does not match the number of devices: 6 devices cannot "
           "fill shape (?, 4) with axis_names ['data', 'model'] (the static extents multiply to "
           "4, which must divide the device count)");
  }
}

TEST(GuideMeshes, TwoDynamicExtents) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using AnyMesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
  AnyMesh mesh({4, 2}, devices);
  assert(mesh.to_string() == "<DeviceMesh shape=(4, 2), axis_names=['data', 'model']>");
  bool threw = false;
  try {
    AnyMesh guess(devices);  // 2 dynamic extents and no shape
  } catch (const kdist::ValueError&) {
    threw = true;
  }
  assert(threw);
}

TEST(GuideMeshes, OneDimensionalMesh) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::DeviceMesh<kdist::axis<"data">> mesh_1d(devices);
  assert(mesh_1d.to_string() == "<DeviceMesh shape=(8,), axis_names=['data']>");
}

TEST(GuideMeshes, TensorLayout) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 1>>;
  Mesh mesh(std::vector<std::string>(devices.begin(), devices.begin() + 2));

  // A 2D layout: "model" shards the rows, "data" the columns.
  kdist::TensorLayout<Mesh, "model", "data"> layout_2d(mesh);
  assert(layout_2d.to_string() ==
         "<TensorLayout axes=('model', 'data'), device_mesh=<DeviceMesh shape=(2, 1), "
         "axis_names=['data', 'model']>>");

  // A 4D layout for data parallelism of an image input.
  kdist::TensorLayout<Mesh, "data", kdist::replicated, kdist::replicated, kdist::replicated>
      replicated_layout_4d(mesh);
  assert(replicated_layout_4d.to_string() ==
         "<TensorLayout axes=('data', None, None, None), device_mesh=<DeviceMesh shape=(2, 1), "
         "axis_names=['data', 'model']>>");
}

TEST(GuideMeshes, WhichDeviceHoldsWhat) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  Mesh mesh(devices);
  kdist::TensorLayout<Mesh, kdist::replicated, "model"> kernel(mesh);
  const std::array<std::size_t, 2> shape{784, 200};

  // Device 6 = (data 1, model 2) holds rows [0, 784) and columns [100, 150).
  assert((kernel.local_extents(shape, 6) == std::array<std::size_t, 2>{784, 50}));
  assert((kernel.offsets(shape, 6) == std::array<std::size_t, 2>{0, 100}));
  assert(kernel.shards(1) == 4);

  // Element (0, 120) lives on the devices of model coordinate 2: one per data row.
  assert((kernel.owners(shape, {0, 120}) == std::vector<std::size_t>{2, 6}));
}

TEST(GuideMeshes, Constexpr) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;
  static_assert(Kernel::static_shards(1) == 4);
  constexpr std::array<std::size_t, 2> local = Kernel::static_local_extents<784, 200>({1, 2});
  static_assert(local == std::array<std::size_t, 2>{784, 50});
  static_assert(Kernel::static_block(1, 200, {1, 2}) == kdist::Block{100, 50});
}

TEST(GuideMeshes, UnevenSizes) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  Mesh mesh(devices);
  kdist::TensorLayout<Mesh, "model"> bias(mesh);
  std::vector<std::size_t> sizes, offsets;
  for (std::size_t device = 0; device < 4; ++device) {
    sizes.push_back(bias.local_extents(std::array<std::size_t, 1>{10}, device)[0]);
    offsets.push_back(bias.offsets(std::array<std::size_t, 1>{10}, device)[0]);
  }
  assert((sizes == std::vector<std::size_t>{3, 3, 3, 1}));
  assert((offsets == std::vector<std::size_t>{0, 3, 6, 9}));
  assert(bias.local_extents(std::array<std::size_t, 1>{2}, 3)[0] == 0);
}

TEST(GuideMeshes, EvenDivision) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  using EvenKernel = kdist::EvenTensorLayout<Mesh, kdist::replicated, "model">;
  static_assert(EvenKernel::check_static_shape<784, 200>());  // <784, 202> does not compile
  EvenKernel kernel{Mesh(devices)};
  bool threw = false;
  try {
    kernel.check_shape(std::array<std::size_t, 2>{784, 202});
  } catch (const kdist::ValueError& e) {
    threw = std::string(e.what()).find("cannot divide evenly") != std::string::npos;
  }
  assert(threw);
}

TEST(GuideMeshes, SeveralMeshAxes) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  kdist::TensorLayout<Mesh, kdist::axes<"data", "model">, kdist::replicated> rows(Mesh{devices});
  assert(rows.axes_repr() == "(('data', 'model'), None)");
  assert(rows.shards(0) == 8);
  const std::array<std::size_t, 2> shape{16, 10};
  assert((rows.offsets(shape, 6) == std::array<std::size_t, 2>{12, 0}));  // shard 1 * 4 + 2
}

TEST(GuideMeshes, ChangingTheMeshShape) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  using AnyMesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
  const std::array<std::size_t, 2> shapes[] = {{8, 1}, {4, 2}, {2, 4}, {1, 8}};
  std::vector<std::size_t> columns_per_device;
  for (const auto& shape : shapes) {
    AnyMesh mesh(shape, devices);
    kdist::TensorLayout<AnyMesh, kdist::replicated, "model"> kernel(mesh);
    columns_per_device.push_back(kernel.local_extents(std::array<std::size_t, 2>{784, 200}, 0)[1]);
  }
  assert((columns_per_device == std::vector<std::size_t>{200, 100, 50, 25}));
}

TEST(GuideMeshes, LayoutsAsValues) {
  // kdist::list_devices() under mpiexec -n 8; named here so one process can run the examples.
  std::vector<std::string> devices;
  for (int i = 0; i < 8; ++i) devices.push_back("cpu:" + std::to_string(i));

  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, devices);
  kdist::RuntimeTensorLayout kernel({kdist::replicated, "model"}, mesh);
  assert(kernel.to_string() ==
         "<TensorLayout axes=(None, 'model'), device_mesh=<DeviceMesh shape=(2, 4), "
         "axis_names=['data', 'model']>>");

  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  kdist::TensorLayout<Mesh, kdist::replicated, "model"> static_kernel(Mesh{devices});
  assert(static_kernel == kernel);
  assert(static_kernel.to_runtime() == kernel);

  // An axis the mesh does not have (Keras' words).
  try {
    kdist::RuntimeTensorLayout bad({kdist::replicated, "modle"}, mesh);
    assert(false);
  } catch (const kdist::ValueError& e) {
    assert(std::string(e.what()) ==
           "kdist::TensorLayout: Invalid axis names for Layout. Valid axis names: ['data', "
           "'model'], Got ['modle'] in layout (None, 'modle')");
  }
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

//! Each line without its leading blanks: blocks compare whatever their indentation.
std::string normalized(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(' ');
    out += (first == std::string::npos ? "" : line.substr(first)) + "\n";
  }
  return out;
}

TEST(GuideMeshes, GuideBlocksAreHere) {
  // The source tree from the build (__FILE__ is relative when ccache rewrites paths under
  // CCACHE_BASEDIR, tests/CMakeLists.txt).
  const std::string root = KDIST_SOURCE_DIR;
  const std::string here = root + "/tests/test_guide_meshes.cpp";
  const std::string page = read(root + "/docs/guide/01-meshes-and-layouts.md");
  ASSERT_FALSE(page.empty()) << "cannot read the guide page";
  const std::string tests = normalized(read(here));
  std::size_t blocks = 0;
  for (std::size_t pos = page.find("```cpp\n"); pos != std::string::npos;
       pos = page.find("```cpp\n", pos)) {
    const std::size_t start = pos + 7;
    const std::size_t end = page.find("```", start);
    ASSERT_NE(end, std::string::npos);
    const std::string block = normalized(page.substr(start, end - start));
    EXPECT_NE(tests.find(block), std::string::npos) << "guide block not in this file:\n" << block;
    ++blocks;
    pos = end + 3;
  }
  EXPECT_EQ(blocks, 15U);
}

}  // namespace
