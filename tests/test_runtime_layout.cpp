// kdist/core/runtime_layout.hpp: RuntimeTensorLayout (Keras TensorLayout(axes, device_mesh)) and
// DimAxes, validated against a mesh at run time; every error path.
#include <kdist/core/runtime_layout.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using kdist::DimAxes;
using kdist::RuntimeDeviceMesh;
using kdist::RuntimeTensorLayout;
using Sizes = std::vector<std::size_t>;

RuntimeDeviceMesh mesh_2x4() {
  return RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8);
}

// Runs `f`, which must throw a kdist::ValueError whose message matches `pattern` (a search).
template <class F>
void expect_value_error(F&& f, const std::string& pattern) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one matching: " << pattern;
  } catch (const kdist::ValueError& e) {
    EXPECT_TRUE(std::regex_search(e.what(), std::regex(pattern)))
        << "message: " << e.what() << "\nexpected to match: " << pattern;
  }
}

// ---- DimAxes ------------------------------------------------------------------------------------

TEST(DimAxes, Conversions) {
  EXPECT_TRUE(DimAxes().is_replicated());
  EXPECT_TRUE(DimAxes(std::nullopt).is_replicated());
  EXPECT_TRUE(DimAxes(kdist::replicated).is_replicated());
  EXPECT_EQ(DimAxes("model").names(), (std::vector<std::string>{"model"}));
  EXPECT_EQ(DimAxes(std::string("model")), DimAxes("model"));
  EXPECT_EQ(DimAxes(std::string_view("model")), DimAxes("model"));
  EXPECT_EQ(DimAxes(kdist::DimSpec("model")), DimAxes("model"));
  const DimAxes two{"data", "model"};
  EXPECT_EQ(two.size(), 2u);
  EXPECT_EQ(two, DimAxes(std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(two, DimAxes(kdist::axes<"data", "model">));
  EXPECT_NE(two, DimAxes({"model", "data"}));
}

TEST(DimAxes, Repr) {
  EXPECT_EQ(DimAxes().repr(), "None");
  EXPECT_EQ(DimAxes("model").repr(), "'model'");
  EXPECT_EQ(DimAxes({"data", "model"}).repr(), "('data', 'model')");
}

// ---- the guide's layouts ------------------------------------------------------------------------

TEST(RuntimeTensorLayout, GuideLayoutsPrintAsKeras) {
  const RuntimeDeviceMesh mesh({2, 1}, {"data", "model"}, 2);
  const RuntimeTensorLayout layout_2d({"model", "data"}, mesh);
  EXPECT_EQ(layout_2d.to_string(),
            "<TensorLayout axes=('model', 'data'), device_mesh=<DeviceMesh shape=(2, 1), "
            "axis_names=['data', 'model']>>");
  const RuntimeTensorLayout replicated_layout_4d({"data", std::nullopt, std::nullopt, std::nullopt},
                                                 mesh);
  EXPECT_EQ(replicated_layout_4d.to_string(),
            "<TensorLayout axes=('data', None, None, None), device_mesh=<DeviceMesh shape=(2, 1), "
            "axis_names=['data', 'model']>>");
  std::ostringstream os;
  os << layout_2d;
  EXPECT_EQ(os.str(), layout_2d.to_string());

  EXPECT_EQ(RuntimeTensorLayout({kdist::replicated, "model"}).axes_repr(), "(None, 'model')");
  EXPECT_EQ(RuntimeTensorLayout({"model"}).axes_repr(), "('model',)");
  EXPECT_EQ(RuntimeTensorLayout({"data", kdist::replicated}).axes_repr(), "('data', None)");
  EXPECT_EQ(RuntimeTensorLayout({DimAxes{"data", "model"}, kdist::replicated}).axes_repr(),
            "(('data', 'model'), None)");
}

TEST(RuntimeTensorLayout, WithoutAMesh) {
  const RuntimeTensorLayout bias({"model"});
  EXPECT_FALSE(bias.device_mesh().has_value());
  EXPECT_EQ(bias.to_string(), "<TensorLayout axes=('model',), device_mesh=None>");
  EXPECT_EQ(bias.rank(), 1u);
  EXPECT_EQ(bias.division(), kdist::Division::chunk);
  EXPECT_FALSE(bias.is_fully_replicated());
  EXPECT_TRUE(RuntimeTensorLayout({kdist::replicated, kdist::replicated}).is_fully_replicated());
  // Rank is checked without a mesh; even division cannot be.
  EXPECT_NO_THROW(bias.check_shape(Sizes{10}));
  EXPECT_THROW(bias.check_shape(Sizes{10, 2}), kdist::ValueError);
}

TEST(RuntimeTensorLayout, ShardArithmeticNeedsAMesh) {
  const RuntimeTensorLayout bias({"model"});
  const std::string no_mesh = "layout \\('model',\\) has no device mesh; give it one";
  expect_value_error([&] { (void)bias.shards(0); }, no_mesh);
  expect_value_error([&] { (void)bias.mesh_axes_of(0); }, no_mesh);
  expect_value_error([&] { (void)bias.replicated_mesh_axes(); }, no_mesh);
  expect_value_error([&] { (void)bias.local_extents(Sizes{10}, 0); }, no_mesh);
  expect_value_error([&] { (void)bias.offsets(Sizes{10}, 0); }, no_mesh);
  expect_value_error([&] { (void)bias.owners(Sizes{10}, Sizes{3}); }, no_mesh);
  expect_value_error([&] { (void)bias.block(0, 10, Sizes{0, 0}); }, no_mesh);
}

TEST(RuntimeTensorLayout, SetAndWithDeviceMesh) {
  RuntimeTensorLayout kernel({kdist::replicated, "model"});
  const RuntimeTensorLayout on_mesh = kernel.with_device_mesh(mesh_2x4());
  EXPECT_FALSE(kernel.device_mesh().has_value());  // with_ copies
  ASSERT_TRUE(on_mesh.device_mesh().has_value());
  EXPECT_EQ(*on_mesh.device_mesh(), mesh_2x4());
  kernel.set_device_mesh(mesh_2x4());
  EXPECT_EQ(kernel, on_mesh);
  EXPECT_NO_THROW(kernel.validate(mesh_2x4()));
}

TEST(RuntimeTensorLayout, InvalidAxisNames) {
  // Keras: "Invalid axis names for Layout. Valid axis names: ..., Got ..."
  expect_value_error(
      [] {
        RuntimeTensorLayout({kdist::replicated, "modle"}, mesh_2x4());
      },
      "^kdist::TensorLayout: Invalid axis names for Layout\\. Valid axis names: "
      "\\['data', 'model'\\], Got \\['modle'\\] in layout \\(None, 'modle'\\)$");
  expect_value_error(
      [] {
        RuntimeTensorLayout({"batch", DimAxes{"x", "model"}}, mesh_2x4());
      },
      "Got \\['batch', 'x'\\]");
  // A failed set_device_mesh leaves the layout as it was.
  RuntimeTensorLayout layout({"batch"});
  const RuntimeDeviceMesh good({8}, {"batch"}, 8);
  layout.set_device_mesh(good);
  expect_value_error([&] { layout.set_device_mesh(mesh_2x4()); }, "Got \\['batch'\\]");
  ASSERT_TRUE(layout.device_mesh().has_value());
  EXPECT_EQ(*layout.device_mesh(), good);
  EXPECT_EQ(layout.shards(0), 8u);
  expect_value_error([&] { layout.validate(mesh_2x4()); }, "Invalid axis names");
}

TEST(RuntimeTensorLayout, MeshAxisUsedTwice) {
  expect_value_error(
      [] {
        RuntimeTensorLayout({"model", "model"}, mesh_2x4());
      },
      "mesh axis 'model' is used twice in \\('model', 'model'\\) \\(dimensions 0 "
      "and 1\\); a mesh axis can shard one dimension only");
  expect_value_error(
      [] {
        RuntimeTensorLayout({DimAxes{"data", "data"}}, mesh_2x4());
      },
      "mesh axis 'data' is used twice .*\\(dimensions 0 and 0\\)");
}

// ---- shard arithmetic ---------------------------------------------------------------------------

TEST(RuntimeTensorLayout, MeshAxes) {
  const RuntimeTensorLayout l({DimAxes{"model", "data"}, kdist::replicated}, mesh_2x4());
  EXPECT_EQ(l.mesh_axes_of(0), (Sizes{1, 0}));
  EXPECT_EQ(l.mesh_axes_of(1), Sizes{});
  EXPECT_EQ(l.replicated_mesh_axes(), Sizes{});
  const RuntimeTensorLayout kernel({kdist::replicated, "model"}, mesh_2x4());
  EXPECT_EQ(kernel.replicated_mesh_axes(), Sizes{0});  // replicated over "data"
  const RuntimeTensorLayout none({kdist::replicated}, mesh_2x4());
  EXPECT_EQ(none.replicated_mesh_axes(), (Sizes{0, 1}));
}

TEST(RuntimeTensorLayout, KernelBlocks) {
  const RuntimeTensorLayout kernel({kdist::replicated, "model"}, mesh_2x4());
  EXPECT_EQ(kernel.shards(0), 1u);
  EXPECT_EQ(kernel.shards(1), 4u);
  for (std::size_t dev = 0; dev < 8; ++dev) {
    EXPECT_EQ(kernel.local_extents(Sizes{784, 200}, dev), (Sizes{784, 50}));
    EXPECT_EQ(kernel.offsets(Sizes{784, 200}, dev), (Sizes{0, 50 * (dev % 4)}));
    EXPECT_EQ(kernel.shard_index(1, Sizes{dev / 4, dev % 4}), dev % 4);
    EXPECT_EQ(kernel.shard_index(0, Sizes{dev / 4, dev % 4}), 0u);
  }
  EXPECT_EQ(kernel.block(1, 200, Sizes{1, 2}), (kdist::Block{100, 50}));
  EXPECT_EQ(kernel.owners(Sizes{784, 200}, Sizes{5, 199}), (Sizes{3, 7}));
}

TEST(RuntimeTensorLayout, UnevenSizes) {
  const RuntimeTensorLayout bias({"model"}, mesh_2x4());
  const Sizes ext10{3, 3, 3, 1}, off10{0, 3, 6, 9}, ext2{1, 1, 0, 0}, off2{0, 1, 2, 2};
  for (std::size_t dev = 0; dev < 8; ++dev) {
    EXPECT_EQ(bias.local_extents(Sizes{10}, dev)[0], ext10[dev % 4]);
    EXPECT_EQ(bias.offsets(Sizes{10}, dev)[0], off10[dev % 4]);
    EXPECT_EQ(bias.local_extents(Sizes{2}, dev)[0], ext2[dev % 4]);
    EXPECT_EQ(bias.offsets(Sizes{2}, dev)[0], off2[dev % 4]);
  }
}

TEST(RuntimeTensorLayout, MultiAxisRowMajor) {
  const RuntimeTensorLayout dm({DimAxes{"data", "model"}}, mesh_2x4());
  const RuntimeTensorLayout md({DimAxes{"model", "data"}}, mesh_2x4());
  for (std::size_t dev = 0; dev < 8; ++dev) {
    const std::size_t d = dev / 4, m = dev % 4;
    EXPECT_EQ(dm.offsets(Sizes{16}, dev)[0], 2 * (d * 4 + m));
    EXPECT_EQ(md.offsets(Sizes{16}, dev)[0], 2 * (m * 2 + d));
  }
}

TEST(RuntimeTensorLayout, EvenDivision) {
  const RuntimeTensorLayout even({kdist::replicated, "model"}, mesh_2x4(), kdist::Division::even);
  EXPECT_EQ(even.division(), kdist::Division::even);
  EXPECT_NO_THROW(even.check_shape(Sizes{784, 200}));
  expect_value_error(
      [&] {
        even.check_shape(Sizes{784, 202});
      },
      "dimension 1 of shape \\(784, 202\\) has extent 202, which the 4 shards of "
      "'model' cannot divide evenly, and layout \\(None, 'model'\\) demands even "
      "division; use a multiple of 4");
  expect_value_error([&] { (void)even.local_extents(Sizes{784, 202}, 0); }, "cannot divide evenly");
  expect_value_error([&] { (void)even.offsets(Sizes{784, 202}, 0); }, "cannot divide evenly");
  expect_value_error(
      [&] {
        (void)even.owners(Sizes{784, 202}, Sizes{0, 0});
      },
      "cannot divide evenly");
  // The chunk rule accepts it.
  const RuntimeTensorLayout chunk({kdist::replicated, "model"}, mesh_2x4());
  EXPECT_EQ(chunk.local_extents(Sizes{784, 202}, 3), (Sizes{784, 49}));
}

TEST(RuntimeTensorLayout, ShapeAndIndexErrors) {
  const RuntimeTensorLayout kernel({kdist::replicated, "model"}, mesh_2x4());
  expect_value_error([&] { kernel.check_shape(Sizes{784}); },
                     "^kdist::TensorLayout: a layout of rank 2 \\(None, 'model'\\) cannot be "
                     "applied to a tensor of shape \\(784,\\) \\(rank 1\\); give one entry per "
                     "tensor dimension$");
  expect_value_error([&] { (void)kernel.local_extents(Sizes{1, 2, 3}, 0); }, "a layout of rank 2");
  expect_value_error(
      [&] {
        (void)kernel.owners(Sizes{784, 200}, Sizes{0, 200});
      },
      "index \\(0, 200\\) is out of range for a tensor of shape \\(784, 200\\)");
  expect_value_error(
      [&] {
        (void)kernel.owners(Sizes{784, 200}, Sizes{0});
      },
      "index \\(0,\\) is out of range");
  expect_value_error(
      [&] {
        (void)kernel.local_extents(Sizes{784, 200}, 8);
      },
      "device index 8 is out of range for a mesh of 8 devices");
  expect_value_error([&] { (void)kernel.shard_index(1, Sizes{0}); },
                     "1 mesh coordinates given for a mesh of rank 2");
  expect_value_error(
      [&] {
        (void)kernel.block(1, 200, Sizes{0, 0, 0});
      },
      "3 mesh coordinates given for a mesh of rank 2");
}

TEST(RuntimeTensorLayout, MeshAxesOfAMissingDimension) {
  kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, 8);
  kdist::RuntimeTensorLayout layout({kdist::replicated, "model"}, mesh);
  EXPECT_EQ(layout.mesh_axes_of(1), (std::vector<std::size_t>{1}));
  try {
    (void)layout.mesh_axes_of(2);
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("dimension 2 does not exist in layout (None, 'model')"),
              std::string::npos)
        << e.what();
  }
}

TEST(RuntimeTensorLayout, EqualityMeansTheSameThing) {
  const RuntimeTensorLayout a({kdist::replicated, "model"}, mesh_2x4());
  EXPECT_EQ(a, RuntimeTensorLayout({std::nullopt, std::string("model")}, mesh_2x4()));
  EXPECT_EQ(a, RuntimeTensorLayout(std::vector<DimAxes>{DimAxes(), DimAxes("model")}, mesh_2x4()));
  EXPECT_FALSE(a == RuntimeTensorLayout({"model", kdist::replicated}, mesh_2x4()));
  EXPECT_FALSE(a == RuntimeTensorLayout({kdist::replicated, "model"}));  // no mesh
  EXPECT_FALSE(a == RuntimeTensorLayout({kdist::replicated, "model"},
                                        RuntimeDeviceMesh({4, 2}, {"data", "model"}, 8)));
  EXPECT_FALSE(
      a == RuntimeTensorLayout({kdist::replicated, "model"}, mesh_2x4(), kdist::Division::even));
  EXPECT_EQ(RuntimeTensorLayout({"model"}), RuntimeTensorLayout({"model"}));
}

}  // namespace
