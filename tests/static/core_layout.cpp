// Compile-time facts of kdist::TensorLayout: reprs, static shards, constexpr shard arithmetic on
// static meshes. Built = passed.
#include <kdist/core/layout.hpp>

#include <array>
#include <string_view>

namespace {

using kdist::axes;
using kdist::axis;
using kdist::Block;
using kdist::replicated;

using Mesh = kdist::DeviceMesh<axis<"data", 2>, axis<"model", 4>>;
using DataDyn = kdist::DeviceMesh<axis<"data">, axis<"model", 4>>;
template <std::size_t R>
using Shape = std::array<std::size_t, R>;

// The seeds' layouts, printed as Keras prints their axes.
static_assert(kdist::TensorLayout<Mesh, "model", "data">::axes_repr() == "('model', 'data')");
static_assert(kdist::TensorLayout<Mesh, "data", replicated, replicated, replicated>::axes_repr() ==
              "('data', None, None, None)");
static_assert(kdist::TensorLayout<Mesh, replicated, "model">::axes_repr() == "(None, 'model')");
static_assert(kdist::TensorLayout<Mesh, "model">::axes_repr() == "('model',)");
static_assert(kdist::TensorLayout<Mesh, "data", replicated>::axes_repr() == "('data', None)");
static_assert(kdist::TensorLayout<Mesh, axes<"data", "model">>::axes_repr() ==
              "(('data', 'model'),)");

// Kernel (784, 200), layout (None, "model") on the 2x4 mesh: 784 x 50 per device.
using Kernel = kdist::TensorLayout<Mesh, replicated, "model">;
static_assert(Kernel::rank() == 2);
static_assert(Kernel::static_shards(0) == 1 && Kernel::static_shards(1) == 4);
static_assert(Kernel::mesh_axis_count(1) == 1 && Kernel::mesh_axis(1, 0) == 1);
static_assert(Kernel::check_static_shape<784, 200>());
static_assert(Kernel::static_local_extents<784, 200>({0, 0}) == Shape<2>{784, 50});
static_assert(Kernel::static_local_extents<784, 200>({1, 3}) == Shape<2>{784, 50});
static_assert(Kernel::static_block(1, 200, {0, 2}) == Block{100, 50});
static_assert(Kernel::static_block(0, 784, {1, 2}) == Block{0, 784});

// Uneven: 10 over 4 -> 3, 3, 3, 1 at offsets 0, 3, 6, 9; 2 over 4 -> 1, 1, 0, 0.
using Bias = kdist::TensorLayout<Mesh, "model">;
static_assert(Bias::static_block(0, 10, {0, 0}) == Block{0, 3});
static_assert(Bias::static_block(0, 10, {0, 1}) == Block{3, 3});
static_assert(Bias::static_block(0, 10, {1, 2}) == Block{6, 3});
static_assert(Bias::static_block(0, 10, {1, 3}) == Block{9, 1});
static_assert(Bias::static_block(0, 2, {0, 1}) == Block{1, 1});
static_assert(Bias::static_block(0, 2, {0, 2}) == Block{2, 0});
static_assert(Bias::static_block(0, 2, {0, 3}) == Block{2, 0});

// One dimension over two axes, row-major in the order listed.
using DM = kdist::TensorLayout<Mesh, axes<"data", "model">>;
using MD = kdist::TensorLayout<Mesh, axes<"model", "data">>;
static_assert(DM::static_shards(0) == 8 && MD::static_shards(0) == 8);
static_assert(DM::static_block(0, 16, {1, 2}) == Block{12, 2});  // shard 1 * 4 + 2 = 6
static_assert(MD::static_block(0, 16, {1, 2}) == Block{10, 2});  // shard 2 * 2 + 1 = 5

// Even division, checked at compile time.
using EvenKernel = kdist::EvenTensorLayout<Mesh, replicated, "model">;
static_assert(EvenKernel::division() == kdist::Division::even);
static_assert(EvenKernel::check_static_shape<784, 200>());
static_assert(EvenKernel::check_static_shape<3, 8>());
// on a dynamic "data" axis, only the static "model" axis is checked
static_assert(kdist::EvenTensorLayout<DataDyn, "data", "model">::check_static_shape<7, 8>());

// The dynamic mesh: static shards where the axes are static.
static_assert(kdist::TensorLayout<DataDyn, "data">::static_shards(0) == kdist::dynamic_extent);
static_assert(kdist::TensorLayout<DataDyn, replicated, "model">::static_local_extents<784, 200>(
                  {5, 1}) == Shape<2>{784, 50});

// Every guide mesh: the kernel's local columns are 200 / model-extent.
template <std::size_t D, std::size_t M>
using GuideKernel =
    kdist::TensorLayout<kdist::DeviceMesh<axis<"data", D>, axis<"model", M>>, replicated, "model">;
static_assert(GuideKernel<8, 1>::static_local_extents<784, 200>({7, 0}) == Shape<2>{784, 200});
static_assert(GuideKernel<4, 2>::static_local_extents<784, 200>({3, 1}) == Shape<2>{784, 100});
static_assert(GuideKernel<2, 4>::static_local_extents<784, 200>({1, 3}) == Shape<2>{784, 50});
static_assert(GuideKernel<1, 8>::static_local_extents<784, 200>({0, 7}) == Shape<2>{784, 25});
static_assert(GuideKernel<2, 1>::static_local_extents<784, 200>({1, 0}) == Shape<2>{784, 200});

static_assert(kdist::is_tensor_layout_v<Kernel> && kdist::is_tensor_layout_v<EvenKernel>);
static_assert(!kdist::is_tensor_layout_v<Mesh>);
static_assert(!std::is_same_v<Kernel, EvenKernel>);

// kdist::axes<...> in a dependent context (a GCC 12 crash, avoided by the alias' helper).
template <class M>
constexpr std::size_t shards_over_both() {
  return kdist::TensorLayout<M, axes<"data", "model">, replicated>::static_shards(0);
}
static_assert(shards_over_both<Mesh>() == 8);

}  // namespace
