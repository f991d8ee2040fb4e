// kdist/core/layout.hpp: TensorLayout / EvenTensorLayout, layouts checked against the mesh type, and
// their shard arithmetic; typed over static and dynamic mesh extents.
#include <kdist/core/layout.hpp>
#include <kdist/core/runtime_layout.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core_meshes.hpp"

namespace {

using kdist::replicated;
using Static2x4 = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Dynamic2x4 = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;

template <std::size_t R>
using Shape = std::array<std::size_t, R>;

// ---- static facts -------------------------------------------------------------------------------

TEST(Layout, AxesReprAsKerasPrintsThem) {
  EXPECT_EQ((kdist::TensorLayout<Static2x4, "model", "data">::axes_repr()), "('model', 'data')");
  using Replicated4d = kdist::TensorLayout<Static2x4, "data", replicated, replicated, replicated>;
  EXPECT_EQ(Replicated4d::axes_repr(), "('data', None, None, None)");
  EXPECT_EQ((kdist::TensorLayout<Static2x4, replicated, "model">::axes_repr()), "(None, 'model')");
  EXPECT_EQ((kdist::TensorLayout<Static2x4, "model">::axes_repr()), "('model',)");
  EXPECT_EQ((kdist::TensorLayout<Static2x4, "data", replicated>::axes_repr()), "('data', None)");
  EXPECT_EQ((kdist::TensorLayout<Static2x4, kdist::axes<"data", "model">, replicated>::axes_repr()),
            "(('data', 'model'), None)");
  EXPECT_EQ((kdist::TensorLayout<Static2x4, replicated>::axes_repr()), "(None,)");
  EXPECT_EQ((kdist::TensorLayout<Static2x4>::axes_repr()), "()");
}

TEST(Layout, RankDimsAndMeshAxes) {
  using L = kdist::TensorLayout<Static2x4, kdist::axes<"model", "data">, replicated>;
  static_assert(L::rank() == 2);
  static_assert(L::division() == kdist::Division::chunk);
  static_assert(std::is_same_v<L::mesh_type, Static2x4>);
  EXPECT_EQ(L::dims()[0], (kdist::axes<"model", "data">));
  EXPECT_EQ(L::dims()[1], replicated);
  EXPECT_EQ(L::mesh_axis_count(0), 2u);
  EXPECT_EQ(L::mesh_axis(0, 0), 1u);  // "model"
  EXPECT_EQ(L::mesh_axis(0, 1), 0u);  // "data"
  EXPECT_EQ(L::mesh_axis_count(1), 0u);
  EXPECT_TRUE(kdist::is_tensor_layout_v<L>);
  EXPECT_FALSE(kdist::is_tensor_layout_v<Static2x4>);
  EXPECT_EQ((kdist::EvenTensorLayout<Static2x4, "model">::division()), kdist::Division::even);
}

TEST(Layout, StaticShards) {
  using L = kdist::TensorLayout<Static2x4, replicated, "model", kdist::axes<"data">>;
  EXPECT_EQ(L::static_shards(0), 1u);
  EXPECT_EQ(L::static_shards(1), 4u);
  EXPECT_EQ(L::static_shards(2), 2u);
  using LD = kdist::TensorLayout<Dynamic2x4, kdist::axes<"data", "model">, replicated>;
  EXPECT_EQ(LD::static_shards(0), kdist::dynamic_extent);  // "data" is dynamic
  EXPECT_EQ(LD::static_shards(1), 1u);
  using LD2 = kdist::TensorLayout<Dynamic2x4, replicated, "model">;
  EXPECT_EQ(LD2::static_shards(1), 4u);  // "model" is static
}

TEST(Layout, ConstexprShardArithmeticOnStaticMeshes) {
  using L = kdist::TensorLayout<Static2x4, replicated, "model">;
  static_assert(L::check_static_shape<784, 200>());
  static_assert(L::static_block(1, 200, {1, 3}) == kdist::Block{150, 50});
  static_assert(L::static_block(0, 784, {1, 3}) == kdist::Block{0, 784});
  constexpr auto ext = L::static_local_extents<784, 200>({0, 2});
  static_assert(ext == Shape<2>{784, 50});
  // uneven: 10 over 4 -> 3, 3, 3, 1
  using U = kdist::TensorLayout<Static2x4, "model">;
  static_assert(U::static_local_extents<10>({0, 0}) == Shape<1>{3});
  static_assert(U::static_local_extents<10>({1, 3}) == Shape<1>{1});
  static_assert(U::static_local_extents<2>({0, 2}) == Shape<1>{0});
  // the dynamic mesh's static axes still compute at compile time
  using LD = kdist::TensorLayout<Dynamic2x4, replicated, "model">;
  static_assert(LD::static_local_extents<784, 200>({0, 1}) == Shape<2>{784, 50});
  EXPECT_EQ(ext[1], 50u);
}

// ---- printing -----------------------------------------------------------------------------------

// The seeds print these on a (2, 1) mesh.
TEST(Layout, SeedsReprs) {
  using M21 = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 1>>;
  const M21 mesh;
  const kdist::TensorLayout<M21, "model", "data"> layout_2d(mesh);
  EXPECT_EQ(layout_2d.to_string(),
            "<TensorLayout axes=('model', 'data'), device_mesh=<DeviceMesh shape=(2, 1), "
            "axis_names=['data', 'model']>>");
  const kdist::TensorLayout<M21, "data", replicated, replicated, replicated> replicated_layout_4d(
      mesh);
  EXPECT_EQ(replicated_layout_4d.to_string(),
            "<TensorLayout axes=('data', None, None, None), device_mesh=<DeviceMesh shape=(2, 1), "
            "axis_names=['data', 'model']>>");
  std::ostringstream os;
  os << layout_2d;
  EXPECT_EQ(os.str(), layout_2d.to_string());
}

TEST(Layout, ReprOnADynamicMeshShowsTheActualShape) {
  const kdist::TensorLayout<Dynamic2x4, replicated, "model"> kernel(Dynamic2x4(16));
  EXPECT_EQ(kernel.to_string(),
            "<TensorLayout axes=(None, 'model'), device_mesh=<DeviceMesh shape=(4, 4), "
            "axis_names=['data', 'model']>>");
}

// ---- shard arithmetic on the seeds' 2x4 mesh, static and dynamic --------------------------------

template <class C>
class Layout2x4 : public ::testing::Test {};
using Variants2x4 = kdist_test::Variants<2, 4>;
TYPED_TEST_SUITE(Layout2x4, Variants2x4, kdist_test::Mesh2Name);

// The guide's d1/kernel: (784, 200) with (None, "model"): each device holds 784 x 50, columns
// [50 m, 50 m + 50) for its model coordinate m, replicated over "data".
TYPED_TEST(Layout2x4, KernelColumnParallel) {
  using M = typename TypeParam::type;
  const kdist::TensorLayout<M, replicated, "model"> kernel(TypeParam::make());
  EXPECT_EQ(kernel.shards(0), 1u);
  EXPECT_EQ(kernel.shards(1), 4u);
  for (std::size_t dev = 0; dev < 8; ++dev) {
    const std::size_t m = dev % 4;
    EXPECT_EQ(kernel.local_extents(Shape<2>{784, 200}, dev), (Shape<2>{784, 50}));
    EXPECT_EQ(kernel.offsets(Shape<2>{784, 200}, dev), (Shape<2>{0, 50 * m}));
    EXPECT_EQ(kernel.shard_index(1, kernel.device_mesh().coords_of(dev)), m);
  }
  // Column 60 is in model block 1: devices (0, 1) and (1, 1).
  EXPECT_EQ(kernel.owners(Shape<2>{784, 200}, Shape<2>{0, 60}), (std::vector<std::size_t>{1, 5}));
  EXPECT_EQ(kernel.owners(Shape<2>{784, 200}, Shape<2>{783, 199}),
            (std::vector<std::size_t>{3, 7}));
}

// ('model', 'data') on (8, 6): rows over model (4 blocks of 2), columns over data (2 of 3).
TYPED_TEST(Layout2x4, Layout2dModelData) {
  using M = typename TypeParam::type;
  const kdist::TensorLayout<M, "model", "data"> layout(TypeParam::make());
  for (std::size_t dev = 0; dev < 8; ++dev) {
    const std::size_t d = dev / 4, m = dev % 4;
    EXPECT_EQ(layout.local_extents(Shape<2>{8, 6}, dev), (Shape<2>{2, 3}));
    EXPECT_EQ(layout.offsets(Shape<2>{8, 6}, dev), (Shape<2>{2 * m, 3 * d}));
  }
  EXPECT_EQ(layout.owners(Shape<2>{8, 6}, Shape<2>{5, 4}), (std::vector<std::size_t>{6}));
}

// Uneven sizes: 10 over the 4 model shards -> 3, 3, 3, 1; 2 over 4 -> 1, 1, 0, 0.
TYPED_TEST(Layout2x4, UnevenBias) {
  using M = typename TypeParam::type;
  const kdist::TensorLayout<M, "model"> bias(TypeParam::make());
  const std::array<std::size_t, 4> ext10{3, 3, 3, 1}, off10{0, 3, 6, 9};
  const std::array<std::size_t, 4> ext2{1, 1, 0, 0}, off2{0, 1, 2, 2};
  for (std::size_t dev = 0; dev < 8; ++dev) {
    const std::size_t m = dev % 4;
    EXPECT_EQ(bias.local_extents(Shape<1>{10}, dev)[0], ext10[m]) << "device " << dev;
    EXPECT_EQ(bias.offsets(Shape<1>{10}, dev)[0], off10[m]) << "device " << dev;
    EXPECT_EQ(bias.local_extents(Shape<1>{2}, dev)[0], ext2[m]) << "device " << dev;
    EXPECT_EQ(bias.offsets(Shape<1>{2}, dev)[0], off2[m]) << "device " << dev;
  }
  EXPECT_EQ(bias.owners(Shape<1>{10}, Shape<1>{9}), (std::vector<std::size_t>{3, 7}));
  EXPECT_EQ(bias.owners(Shape<1>{2}, Shape<1>{1}), (std::vector<std::size_t>{1, 5}));
}

// One dimension over both axes: ('data', 'model') is row-major, data major: shard d * 4 + m;
// ('model', 'data') puts model major: shard m * 2 + d.
TYPED_TEST(Layout2x4, OneDimensionOverTwoAxes) {
  using M = typename TypeParam::type;
  const auto mesh = TypeParam::make();
  const kdist::TensorLayout<M, kdist::axes<"data", "model">, replicated> dm(mesh);
  const kdist::TensorLayout<M, kdist::axes<"model", "data">, replicated> md(mesh);
  EXPECT_EQ(dm.shards(0), 8u);
  EXPECT_EQ(md.shards(0), 8u);
  for (std::size_t dev = 0; dev < 8; ++dev) {
    const std::size_t d = dev / 4, m = dev % 4;
    EXPECT_EQ(dm.offsets(Shape<2>{16, 3}, dev), (Shape<2>{2 * (d * 4 + m), 0}));
    EXPECT_EQ(md.offsets(Shape<2>{16, 3}, dev), (Shape<2>{2 * (m * 2 + d), 0}));
    EXPECT_EQ(dm.local_extents(Shape<2>{16, 3}, dev), (Shape<2>{2, 3}));
    // 10 rows over 8 shards: ceil 2 -> 2, 2, 2, 2, 2, 0, 0, 0
    EXPECT_EQ(dm.local_extents(Shape<2>{10, 3}, dev)[0], d * 4 + m < 5 ? 2u : 0u);
  }
  EXPECT_EQ(dm.owners(Shape<2>{16, 3}, Shape<2>{15, 0}), (std::vector<std::size_t>{7}));
  EXPECT_EQ(md.owners(Shape<2>{16, 3}, Shape<2>{15, 0}), (std::vector<std::size_t>{7}));
  EXPECT_EQ(md.owners(Shape<2>{16, 3}, Shape<2>{2, 0}), (std::vector<std::size_t>{4}));
}

TYPED_TEST(Layout2x4, BlockMatchesRuntimeLayout) {
  using M = typename TypeParam::type;
  const kdist::TensorLayout<M, "model", kdist::axes<"data">> layout(TypeParam::make());
  const kdist::RuntimeTensorLayout rt = layout;
  for (std::size_t dev = 0; dev < 8; ++dev) {
    const auto c = layout.device_mesh().coords_of(dev);
    const std::vector<std::size_t> cv(c.begin(), c.end());
    for (std::size_t n : {0u, 1u, 5u, 13u, 200u}) {
      EXPECT_EQ(layout.block(0, n, c), rt.block(0, n, cv));
      EXPECT_EQ(layout.block(1, n, c), rt.block(1, n, cv));
    }
  }
}

TYPED_TEST(Layout2x4, EvenDivisionIsARuntimeErrorOnBadShapes) {
  using M = typename TypeParam::type;
  const kdist::EvenTensorLayout<M, replicated, "model"> kernel(TypeParam::make());
  EXPECT_EQ(kernel.local_extents(Shape<2>{784, 200}, 3), (Shape<2>{784, 50}));
  EXPECT_NO_THROW(kernel.check_shape(Shape<2>{784, 200}));
  try {
    (void)kernel.local_extents(Shape<2>{784, 202}, 0);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::TensorLayout: dimension 1 of shape (784, 202) has extent 202, which the 4 "
                 "shards of 'model' cannot divide evenly, and layout (None, 'model') demands even "
                 "division; use a multiple of 4 or a layout with Division::chunk");
  }
  EXPECT_THROW((void)kernel.offsets(Shape<2>{784, 202}, 0), kdist::ValueError);
  EXPECT_THROW(kernel.check_shape(Shape<2>{784, 6}), kdist::ValueError);
  // The chunk layout accepts the same shape.
  const kdist::TensorLayout<M, replicated, "model"> chunk(TypeParam::make());
  EXPECT_EQ(chunk.local_extents(Shape<2>{784, 202}, 3), (Shape<2>{784, 49}));
}

TYPED_TEST(Layout2x4, StaticAndRuntimeLayoutsCompare) {
  using M = typename TypeParam::type;
  const auto mesh = TypeParam::make();
  const kdist::TensorLayout<M, replicated, "model"> kernel(mesh);
  const kdist::RuntimeTensorLayout same({replicated, "model"}, mesh.to_runtime());
  EXPECT_TRUE(kernel == same);
  EXPECT_TRUE(same == kernel);
  EXPECT_EQ(kernel.to_runtime(), same);
  EXPECT_EQ(kernel.to_runtime().to_string(), kernel.to_string());
  EXPECT_EQ(kernel, (kdist::TensorLayout<M, replicated, "model">(mesh)));

  const kdist::RuntimeTensorLayout other_axes({"model", replicated}, mesh.to_runtime());
  EXPECT_FALSE(kernel == other_axes);
  const kdist::RuntimeTensorLayout other_mesh(
      {replicated, "model"}, kdist::RuntimeDeviceMesh({4, 2}, {"data", "model"}, mesh.devices()));
  EXPECT_FALSE(kernel == other_mesh);
  const kdist::EvenTensorLayout<M, replicated, "model"> even(mesh);
  EXPECT_FALSE(kernel == even.to_runtime());  // same axes, another division rule
  EXPECT_EQ(even.to_runtime().division(), kdist::Division::even);
}

TYPED_TEST(Layout2x4, RuntimeErrorsOfStaticLayouts) {
  using M = typename TypeParam::type;
  const kdist::TensorLayout<M, replicated, "model"> kernel(TypeParam::make());
  // there is no device 8
  EXPECT_THROW((void)kernel.local_extents(Shape<2>{784, 200}, 8), kdist::ValueError);
  try {
    (void)kernel.owners(Shape<2>{784, 200}, Shape<2>{784, 0});
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "kdist::TensorLayout: index (784, 0) is out of range for a tensor of shape "
                 "(784, 200)");
  }
}

TEST(Layout, DefaultConstructibleOnlyOnStaticMeshes) {
  EXPECT_TRUE((std::is_default_constructible_v<kdist::TensorLayout<Static2x4, "model">>));
  EXPECT_FALSE((std::is_default_constructible_v<kdist::TensorLayout<Dynamic2x4, "model">>));
  const kdist::TensorLayout<Static2x4, "model"> bias;
  EXPECT_EQ(bias.device_mesh(), Static2x4());
}

// ---- blocks tile the tensor exactly, on every guide mesh ----------------------------------------

template <class C>
class LayoutTiling : public ::testing::Test {};
TYPED_TEST_SUITE(LayoutTiling, kdist_test::GuideMeshes, kdist_test::Mesh2Name);

// Every element of `shape` lies in the block of exactly `replicas` devices (the product of the
// mesh axes the layout does not use), blocks lie inside the tensor, and owners() names exactly
// the devices whose block holds the element.
template <class Layout, std::size_t R>
void expect_tiling(const Layout& layout, const Shape<R>& shape) {
  const auto& mesh = layout.device_mesh();
  const kdist::RuntimeTensorLayout rt = layout;
  std::size_t replicas = 1;
  for (auto a : rt.replicated_mesh_axes()) replicas *= mesh.extent(a);

  const std::size_t total = kdist::detail::product(shape);
  std::vector<std::vector<std::size_t>> holders(total);
  for (std::size_t dev = 0; dev < mesh.size(); ++dev) {
    const auto off = layout.offsets(shape, dev);
    const auto ext = layout.local_extents(shape, dev);
    std::size_t count = 1;
    for (std::size_t d = 0; d < R; ++d) {
      EXPECT_LE(off[d] + ext[d], shape[d]) << "device " << dev << " dim " << d;
      count *= ext[d];
    }
    Shape<R> local{}, global{};
    for (std::size_t i = 0; i < count; ++i) {
      kdist::detail::unflatten(ext, i, local);
      for (std::size_t d = 0; d < R; ++d) global[d] = off[d] + local[d];
      holders[kdist::detail::flatten(shape, global)].push_back(dev);
    }
  }
  const std::size_t stride = total > 500 ? total / 97 + 1 : 1;  // owners() on a sample if large
  for (std::size_t flat = 0; flat < total; ++flat) {
    ASSERT_EQ(holders[flat].size(), replicas) << layout << " element " << flat;
    if (flat % stride == 0) {
      Shape<R> idx{};
      kdist::detail::unflatten(shape, flat, idx);
      EXPECT_EQ(layout.owners(shape, idx), holders[flat]) << layout << " element " << flat;
    }
  }
}

TYPED_TEST(LayoutTiling, SeedsLayouts) {
  using M = typename TypeParam::type;
  const auto mesh = TypeParam::make();
  expect_tiling(kdist::TensorLayout<M, "model", "data">(mesh), Shape<2>{8, 6});
  expect_tiling(kdist::TensorLayout<M, "model", "data">(mesh), Shape<2>{7, 3});
  expect_tiling(kdist::TensorLayout<M, "data", replicated, replicated, replicated>(mesh),
                Shape<4>{16, 3, 3, 1});
  expect_tiling(kdist::TensorLayout<M, "data", replicated, replicated, replicated>(mesh),
                Shape<4>{5, 2, 2, 1});
  expect_tiling(kdist::TensorLayout<M, replicated, "model">(mesh), Shape<2>{784, 200});
  expect_tiling(kdist::TensorLayout<M, replicated, "model">(mesh), Shape<2>{3, 10});
  expect_tiling(kdist::TensorLayout<M, "model">(mesh), Shape<1>{200});
  expect_tiling(kdist::TensorLayout<M, "model">(mesh), Shape<1>{2});
  expect_tiling(kdist::TensorLayout<M, "data", replicated>(mesh), Shape<2>{128, 10});
  expect_tiling(kdist::TensorLayout<M, "data", replicated>(mesh), Shape<2>{9, 2});
  expect_tiling(kdist::TensorLayout<M, replicated, replicated, replicated, "model">(mesh),
                Shape<4>{3, 3, 2, 10});  // the ModelParallel page's conv2d kernel
}

TYPED_TEST(LayoutTiling, MultiAxisAndReplicatedLayouts) {
  using M = typename TypeParam::type;
  const auto mesh = TypeParam::make();
  expect_tiling(kdist::TensorLayout<M, kdist::axes<"data", "model">, replicated>(mesh),
                Shape<2>{16, 3});
  expect_tiling(kdist::TensorLayout<M, kdist::axes<"data", "model">, replicated>(mesh),
                Shape<2>{11, 2});
  expect_tiling(kdist::TensorLayout<M, replicated, kdist::axes<"model", "data">>(mesh),
                Shape<2>{2, 13});
  expect_tiling(kdist::TensorLayout<M, replicated, replicated>(mesh), Shape<2>{4, 5});
  expect_tiling(kdist::TensorLayout<M, replicated>(mesh), Shape<1>{0});
}

TYPED_TEST(LayoutTiling, EvenLayoutsTileWhenTheyDivide) {
  using M = typename TypeParam::type;
  const auto mesh = TypeParam::make();
  expect_tiling(kdist::EvenTensorLayout<M, "data", "model">(mesh), Shape<2>{16, 8});
  expect_tiling(kdist::EvenTensorLayout<M, kdist::axes<"model", "data">>(mesh), Shape<1>{24});
}

}  // namespace
