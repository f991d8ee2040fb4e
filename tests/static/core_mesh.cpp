// Compile-time facts of kdist::DeviceMesh: built = passed.
#include <kdist/core/mesh.hpp>

#include <string_view>

namespace {

using kdist::axis;
using kdist::dynamic_extent;

using Static2x4 = kdist::DeviceMesh<axis<"data", 2>, axis<"model", 4>>;
using DataDyn = kdist::DeviceMesh<axis<"data">, axis<"model", 4>>;
using BothDyn = kdist::DeviceMesh<axis<"data">, axis<"model">>;
using Batch = kdist::DeviceMesh<axis<"batch">>;
using Three = kdist::DeviceMesh<axis<"pipe", 2>, axis<"data">, axis<"model", 4>>;

static_assert(Static2x4::rank() == 2 && Static2x4::rank_dynamic() == 0 && Static2x4::is_static());
static_assert(DataDyn::rank() == 2 && DataDyn::rank_dynamic() == 1 && !DataDyn::is_static());
static_assert(BothDyn::rank_dynamic() == 2);
static_assert(Batch::rank() == 1 && Batch::rank_dynamic() == 1);
static_assert(Three::rank() == 3 && Three::rank_dynamic() == 1);

static_assert(Static2x4::static_extent(0) == 2 && Static2x4::static_extent(1) == 4);
static_assert(DataDyn::static_extent(0) == dynamic_extent && DataDyn::static_extent(1) == 4);
static_assert(Static2x4::static_size() == 8);
static_assert(DataDyn::static_size() == 4);  // the static extents' product
static_assert(BothDyn::static_size() == 1);
static_assert(Three::static_size() == 8);

static_assert(Static2x4::axis_index<"data"> == 0);
static_assert(Static2x4::axis_index<"model"> == 1);
static_assert(kdist::axis_index_v<DataDyn, "model"> == 1);
static_assert(kdist::axis_index_v<Three, "model"> == 2);
static_assert(*Three::find_axis("data") == 1);
static_assert(!Three::find_axis("batch"));

static_assert(Static2x4::axis_names()[0] == std::string_view("data"));
static_assert(Static2x4::axis_names()[1] == std::string_view("model"));
static_assert(Batch::axis_names().size() == 1);

// every guide shape as a static mesh
template <std::size_t D, std::size_t M>
using Guide = kdist::DeviceMesh<axis<"data", D>, axis<"model", M>>;
static_assert(Guide<8, 1>::static_size() == 8 && Guide<4, 2>::static_size() == 8 &&
              Guide<2, 4>::static_size() == 8 && Guide<1, 8>::static_size() == 8 &&
              Guide<2, 1>::static_size() == 2);

static_assert(kdist::is_device_mesh_v<Static2x4> && !kdist::is_device_mesh_v<int>);
static_assert(kdist::is_axis_v<axis<"data", 2>> && !kdist::is_axis_v<Static2x4>);
static_assert(axis<"batch">::is_dynamic && !axis<"data", 2>::is_dynamic);

}  // namespace
