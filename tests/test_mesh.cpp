// kdist/core/mesh.hpp: DeviceMesh<Axes...>, the mesh as a type; typed over static and dynamic extents.
#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_mesh.hpp>

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core_meshes.hpp"

namespace {

using kdist_test::Mesh2;

std::vector<std::string> cpus(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("cpu:" + std::to_string(i));
  return out;
}

// ---- the seeds' 2x4 mesh, in its four static/dynamic spellings ----------------------------------

template <class C>
class Mesh2x4 : public ::testing::Test {};
using Variants2x4 = kdist_test::Variants<2, 4>;
TYPED_TEST_SUITE(Mesh2x4, Variants2x4, kdist_test::Mesh2Name);

TYPED_TEST(Mesh2x4, Observers) {
  using M = typename TypeParam::type;
  const M mesh = TypeParam::make();
  static_assert(M::rank() == 2);
  EXPECT_EQ(M::rank_dynamic(), TypeParam::rank_dynamic);
  EXPECT_EQ(M::is_static(), TypeParam::rank_dynamic == 0);
  EXPECT_EQ(mesh.extent(0), 2u);
  EXPECT_EQ(mesh.extent(1), 4u);
  EXPECT_EQ(mesh.extents(), (std::array<std::size_t, 2>{2, 4}));
  EXPECT_EQ(mesh.size(), 8u);
  EXPECT_EQ(mesh.devices(), cpus(8));
  EXPECT_EQ(M::axis_names()[0], "data");
  EXPECT_EQ(M::axis_names()[1], "model");
}

TYPED_TEST(Mesh2x4, StaticExtentIsStaticOrDynamic) {
  using M = typename TypeParam::type;
  const bool data_static = M::static_extent(0) != kdist::dynamic_extent;
  const bool model_static = M::static_extent(1) != kdist::dynamic_extent;
  EXPECT_EQ(M::rank_dynamic(), (data_static ? 0u : 1u) + (model_static ? 0u : 1u));
  EXPECT_EQ(M::static_extent(0), data_static ? 2u : kdist::dynamic_extent);
  EXPECT_EQ(M::static_extent(1), model_static ? 4u : kdist::dynamic_extent);
  EXPECT_EQ(M::static_size(), (data_static ? 2u : 1u) * (model_static ? 4u : 1u));
}

TYPED_TEST(Mesh2x4, AxisIndexAtCompileTime) {
  using M = typename TypeParam::type;
  static_assert(M::template axis_index<"data"> == 0);
  static_assert(M::template axis_index<"model"> == 1);
  static_assert(kdist::axis_index_v<M, "model"> == 1);
  EXPECT_EQ(M::find_axis("model"), std::optional<std::size_t>(1));
  EXPECT_EQ(M::find_axis("data"), std::optional<std::size_t>(0));
  EXPECT_EQ(M::find_axis("batch"), std::nullopt);
  EXPECT_EQ(M::find_axis(""), std::nullopt);
}

// Devices are laid out row-major, as np.reshape(devices, (2, 4)): device 5 is at (1, 1).
TYPED_TEST(Mesh2x4, RowMajorDevices) {
  const auto mesh = TypeParam::make();
  EXPECT_EQ(mesh.coords_of(0), (std::array<std::size_t, 2>{0, 0}));
  EXPECT_EQ(mesh.coords_of(3), (std::array<std::size_t, 2>{0, 3}));
  EXPECT_EQ(mesh.coords_of(4), (std::array<std::size_t, 2>{1, 0}));
  EXPECT_EQ(mesh.coords_of(5), (std::array<std::size_t, 2>{1, 1}));
  EXPECT_EQ(mesh.coords_of(7), (std::array<std::size_t, 2>{1, 3}));
  EXPECT_EQ(mesh.device_index({1, 2}), 6u);
  EXPECT_EQ(mesh.devices()[mesh.device_index({1, 2})], "cpu:6");
}

TYPED_TEST(Mesh2x4, Repr) {
  const auto mesh = TypeParam::make();
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>");
  std::ostringstream os;
  os << mesh;
  EXPECT_EQ(os.str(), mesh.to_string());
}

TYPED_TEST(Mesh2x4, ToRuntimeAndEquality) {
  const auto mesh = TypeParam::make();
  const kdist::RuntimeDeviceMesh rt = mesh.to_runtime();
  EXPECT_EQ(rt.shape(), (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(rt.axis_names(), (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(rt.devices(), cpus(8));
  EXPECT_EQ(rt, kdist::RuntimeDeviceMesh({2, 4}, {"data", "model"}, cpus(8)));
  const kdist::RuntimeDeviceMesh implicit = mesh;  // every mesh converts
  EXPECT_EQ(implicit, rt);

  EXPECT_EQ(mesh, TypeParam::make());
  auto other = cpus(8);
  std::swap(other[0], other[1]);
  using M = typename TypeParam::type;
  const M swapped = [&] {
    if constexpr (M::rank_dynamic() <= 1) {
      return M(other);
    } else {
      return M({2, 4}, other);
    }
  }();
  EXPECT_FALSE(mesh == swapped);  // same shape, devices in another order
}

TYPED_TEST(Mesh2x4, ExplicitShapeConstructor) {
  using M = typename TypeParam::type;
  const M mesh({2, 4}, cpus(8));
  EXPECT_EQ(mesh, TypeParam::make());
  const M counted({2, 4}, 8);
  EXPECT_EQ(counted.devices()[7], "device:7");
  // A shape that contradicts a static extent, or the device count, is a ValueError.
  if constexpr (M::rank_dynamic() < 2) {
    EXPECT_THROW(M({4, 2}, cpus(8)), kdist::ValueError);  // contradicts a static extent
  } else {
    EXPECT_EQ(M({4, 2}, cpus(8)).extents(), (std::array<std::size_t, 2>{4, 2}));
  }
  EXPECT_THROW(M({2, 4}, cpus(6)), kdist::ValueError);
  EXPECT_THROW(M({2, 0}, cpus(0)), kdist::ValueError);
}

TYPED_TEST(Mesh2x4, CoordsOutOfRange) {
  const auto mesh = TypeParam::make();
  try {
    (void)mesh.coords_of(8);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: device index 8 is out of range for a mesh of 8 devices");
  }
  try {
    (void)mesh.device_index({0, 4});
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: coordinate 4 is out of range for axis 'model' of extent 4");
  }
  EXPECT_THROW((void)mesh.device_index({2, 0}), kdist::ValueError);
}

// ---- every guide shape, every static/dynamic mix ------------------------------------------------

template <class C>
class GuideMesh : public ::testing::Test {};
TYPED_TEST_SUITE(GuideMesh, kdist_test::GuideMeshes, kdist_test::Mesh2Name);

TYPED_TEST(GuideMesh, ShapeAndRepr) {
  const auto mesh = TypeParam::make();
  EXPECT_EQ(mesh.extent(0), TypeParam::shape[0]);
  EXPECT_EQ(mesh.extent(1), TypeParam::shape[1]);
  EXPECT_EQ(mesh.size(), TypeParam::size);
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(" + std::to_string(TypeParam::shape[0]) + ", " +
                                  std::to_string(TypeParam::shape[1]) +
                                  "), axis_names=['data', 'model']>");
}

// coords_of and device_index are inverse, and row-major: (d, m) is device d * M + m.
TYPED_TEST(GuideMesh, CoordsRoundTrip) {
  const auto mesh = TypeParam::make();
  const std::size_t M = TypeParam::shape[1];
  for (std::size_t i = 0; i < mesh.size(); ++i) {
    const auto c = mesh.coords_of(i);
    EXPECT_EQ(c[0], i / M);
    EXPECT_EQ(c[1], i % M);
    EXPECT_EQ(mesh.device_index(c), i);
    EXPECT_EQ(mesh.to_runtime().device_index(c), i);
  }
}

// ---- dynamic extents: inference from the device count, and its errors ---------------------------

using DataDyn = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;

TEST(MeshInference, OneDynamicExtentTakesTheRest) {
  EXPECT_EQ(DataDyn(8).extents(), (std::array<std::size_t, 2>{2, 4}));
  EXPECT_EQ(DataDyn(16).extents(), (std::array<std::size_t, 2>{4, 4}));
  EXPECT_EQ(DataDyn(4).extents(), (std::array<std::size_t, 2>{1, 4}));
  using ModelDyn = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model">>;
  EXPECT_EQ(ModelDyn(cpus(8)).extents(), (std::array<std::size_t, 2>{2, 4}));
  using Batch = kdist::DeviceMesh<kdist::axis<"batch">>;
  EXPECT_EQ(Batch(3).extent(0), 3u);
  using Three = kdist::DeviceMesh<kdist::axis<"a", 2>, kdist::axis<"b">, kdist::axis<"c", 3>>;
  EXPECT_EQ(Three(24).extents(), (std::array<std::size_t, 3>{2, 4, 3}));
}

TEST(MeshInference, CountThatDoesNotFitNamesBothNumbers) {
  try {
    DataDyn mesh(6);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: shape does not match the number of devices: 6 devices cannot "
                 "fill shape (?, 4) with axis_names ['data', 'model'] (the static extents multiply "
                 "to 4, which must divide the device count)");
  }
  EXPECT_THROW(DataDyn(0), kdist::ValueError);
}

TEST(MeshInference, StaticMeshWithTheWrongCount) {
  using Static = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  try {
    Static mesh(cpus(6));
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: shape does not match the number of devices: shape (2, 4) "
                 "with axis_names ['data', 'model'] holds 8 devices, but 6 were given");
  }
  EXPECT_NO_THROW(Static(8));
}

TEST(MeshInference, TwoDynamicExtentsNeedAShape) {
  using Both = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
  try {
    Both mesh(8);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: shape (?, ?) with axis_names ['data', 'model'] has 2 dynamic "
                 "extents; a device count alone determines at most one. Pass the shape: "
                 "DeviceMesh({...}, devices)");
  }
  const Both mesh({4, 2}, 8);
  EXPECT_EQ(mesh.extents(), (std::array<std::size_t, 2>{4, 2}));
}

// (2^32, 2^32) multiplies to 0 modulo 2^64: the count check multiplies with overflow checks,
// so 0 devices do not fill it.
TEST(MeshInference, ShapesBeyondA64BitCountAreErrors) {
  using Both = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;
  constexpr std::size_t two_32 = std::size_t{1} << 32;
  try {
    Both mesh({two_32, two_32}, 0);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: shape (4294967296, 4294967296) holds more devices than a "
                 "64-bit count can hold (its extents multiply beyond 2^64); give a shape whose "
                 "product is the number of devices");
  }
}

TEST(MeshInference, ExplicitShapeErrors) {
  using Static = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  try {
    Static mesh({4, 2}, 8);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(), "kdist::DeviceMesh: axis 'data' has static extent 2, but 4 was given");
  }
  try {
    DataDyn mesh({3, 4}, 8);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: shape does not match the number of devices: shape (3, 4) "
                 "holds 12 devices, but 8 were given");
  }
  try {
    DataDyn mesh({0, 4}, 0);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::DeviceMesh: axis 'data' has extent 0; every axis holds at least one "
                 "device");
  }
}

// ---- constructors, 1-D meshes, names ------------------------------------------------------------

TEST(Mesh, DefaultConstructorOnlyForStaticMeshes) {
  using Static = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
  EXPECT_TRUE(std::is_default_constructible_v<Static>);
  EXPECT_FALSE(std::is_default_constructible_v<DataDyn>);
  const Static mesh;
  EXPECT_EQ(mesh.size(), 8u);
  EXPECT_EQ(mesh.devices().front(), "device:0");
  EXPECT_EQ(mesh.devices().back(), "device:7");
}

TEST(Mesh, CountConstructorNamesDevices) {
  const std::vector<std::string> expected{"device:0", "device:1", "device:2", "device:3",
                                          "device:4", "device:5", "device:6", "device:7"};
  EXPECT_EQ(DataDyn(8).devices(), expected);
}

TEST(Mesh, OneDimensionalReprHasATrailingComma) {
  using Mesh1 = kdist::DeviceMesh<kdist::axis<"data">>;
  const Mesh1 mesh(cpus(8));
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(8,), axis_names=['data']>");
  using Data2 = kdist::DeviceMesh<kdist::axis<"data", 2>>;
  EXPECT_EQ(Data2().to_string(), "<DeviceMesh shape=(2,), axis_names=['data']>");
  EXPECT_EQ(mesh.coords_of(6), (std::array<std::size_t, 1>{6}));
}

// The ModelParallel page's mesh: DeviceMesh(shape=(2, 4), axis_names=('batch', 'model')).
TEST(Mesh, BatchModelMesh) {
  using M = kdist::DeviceMesh<kdist::axis<"batch", 2>, kdist::axis<"model", 4>>;
  const M mesh(cpus(8));
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(2, 4), axis_names=['batch', 'model']>");
  static_assert(M::axis_index<"batch"> == 0);
  EXPECT_EQ(M::find_axis("data"), std::nullopt);
}

TEST(Mesh, TraitRecognisesMeshes) {
  EXPECT_TRUE(kdist::is_device_mesh_v<DataDyn>);
  EXPECT_FALSE(kdist::is_device_mesh_v<int>);
  EXPECT_FALSE(kdist::is_device_mesh_v<kdist::RuntimeDeviceMesh>);
}

TEST(Mesh, ThreeAxes) {
  using M =
      kdist::DeviceMesh<kdist::axis<"pipe", 2>, kdist::axis<"data", 3>, kdist::axis<"model", 4>>;
  const M mesh;
  static_assert(M::axis_index<"model"> == 2);
  EXPECT_EQ(mesh.coords_of(23), (std::array<std::size_t, 3>{1, 2, 3}));
  EXPECT_EQ(mesh.coords_of(13), (std::array<std::size_t, 3>{1, 0, 1}));
  for (std::size_t i = 0; i < mesh.size(); ++i) EXPECT_EQ(mesh.device_index(mesh.coords_of(i)), i);
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(2, 3, 4), axis_names=['pipe', 'data', 'model']>");
}

}  // namespace
