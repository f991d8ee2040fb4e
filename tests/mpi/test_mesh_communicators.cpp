// kdist-mpi-ranks: 1 2 4 8
// kdist/parallel/mesh_communicators.hpp: row-major coordinates, one communicator per axis, groups of axes,
// errors on every rank. Collectives at 8 ranks cost ~50-90 ms on 2 cores: each shape is built once.
#include <gtest/gtest.h>
#include <mpi.h>
#include "mpi_test_util.hpp"

#include <kdist/parallel/initialize.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mesh_communicators.hpp>
#include <numeric>
#include <string>
#include <vector>

namespace {

using kdist::test::world_rank;
using kdist::test::world_size;

// Row-major coordinates of `index` in `shape` (numpy's unravel_index).
std::vector<int> unravel(int index, const std::vector<int>& shape) {
  std::vector<int> c(shape.size());
  for (std::size_t a = shape.size(); a-- > 0;) {
    c[a] = index % shape[a];
    index /= shape[a];
  }
  return c;
}
int ravel(const std::vector<int>& coords, const std::vector<int>& shape) {
  int index = 0;
  for (std::size_t a = 0; a < shape.size(); ++a) {
    index = index * shape[a] + coords[a];
  }
  return index;
}

// The world ranks of the members of `comm`, in comm's rank order (one MPI_Allgather).
std::vector<int> members(const kdist::mpi::Communicator& comm) {
  std::vector<int> out(static_cast<std::size_t>(comm.size()));
  const int me = world_rank();
  MPI_Allgather(&me, 1, MPI_INT, out.data(), 1, MPI_INT, comm.get());
  return out;
}

// The world ranks a group communicator over `group` (axis indices, in order) should hold,
// ranked row-major over the group.
std::vector<int> expected_members(const std::vector<int>& shape,
                                  const std::vector<std::size_t>& group,
                                  const std::vector<int>& my_coords) {
  std::vector<int> group_shape;
  for (auto a : group) {
    group_shape.push_back(shape[a]);
  }
  const int n = std::accumulate(group_shape.begin(), group_shape.end(), 1, std::multiplies<>());
  std::vector<int> out;
  for (int k = 0; k < n; ++k) {
    auto c = my_coords;
    const auto g = unravel(k, group_shape);
    for (std::size_t i = 0; i < group.size(); ++i) {
      c[group[i]] = g[i];
    }
    out.push_back(ravel(c, shape));
  }
  return out;
}

std::vector<std::string> names_for(std::size_t rank) {
  const std::vector<std::string> all = {"data", "model", "pipe"};
  return {all.begin(), all.begin() + static_cast<std::ptrdiff_t>(rank)};
}

// Every shape of the issue (and a 1-D and a 3-D one) that fits the world.
std::vector<std::vector<int>> shapes_for(int n) {
  const std::vector<std::vector<int>> all = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {2, 4},   {4, 2},
                                             {8, 1}, {1, 8}, {4},    {8},    {2, 2, 2}};
  std::vector<std::vector<int>> out;
  for (const auto& s : all) {
    if (std::accumulate(s.begin(), s.end(), 1, std::multiplies<>()) == n) {
      out.push_back(s);
    }
  }
  return out;
}

template <class F>
std::string value_error_of(F&& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no kdist::ValueError";
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(MeshCommunicators, CoordinatesAxisAndGroupCommunicatorsForEveryShape) {
  const int n = world_size();
  const auto shapes = shapes_for(n);
  ASSERT_FALSE(shapes.empty());
  for (const auto& shape : shapes) {
    SCOPED_TRACE("shape of rank " + std::to_string(shape.size()) + ", extent0 " +
                 std::to_string(shape[0]));
    const auto names = names_for(shape.size());
    kdist::MeshCommunicators mesh(shape, names);
    EXPECT_EQ(mesh.shape(), shape);
    EXPECT_EQ(mesh.axis_names(), names);
    EXPECT_EQ(mesh.size(), n);
    EXPECT_EQ(mesh.rank(), world_rank());  // no reordering: device r is rank r
    EXPECT_EQ(mesh.world().size(), n);
    EXPECT_EQ(mesh.coords(), unravel(world_rank(), shape));  // row-major, like np.reshape
    for (std::size_t a = 0; a < shape.size(); ++a) {
      const auto& c = mesh.comm(names[a]);
      EXPECT_EQ(c.size(), shape[a]) << names[a];
      EXPECT_EQ(c.rank(), mesh.coords()[a]) << names[a];
      EXPECT_EQ(mesh.coord(names[a]), mesh.coords()[a]);
      EXPECT_EQ(mesh.axis_index(names[a]), a);
      EXPECT_EQ(&mesh.comm(names[a]), &c);  // built once
      if (n <= 4 || a == 0) {               // keep collectives at 8 ranks few
        EXPECT_EQ(members(c), expected_members(shape, {a}, mesh.coords())) << names[a];
      }
    }
    if (shape.size() >= 2) {
      // All axes in mesh order: the whole mesh.
      EXPECT_EQ(&mesh.comm(std::span<const std::string>(names)), &mesh.world());
      // Reversed order: ranked by the last axis first.
      const std::vector<std::string> reversed(names.rbegin(), names.rend());
      const auto& r = mesh.comm(std::span<const std::string>(reversed));
      std::vector<std::size_t> group;
      for (std::size_t a = shape.size(); a-- > 0;) {
        group.push_back(a);
      }
      EXPECT_EQ(r.size(), n);
      EXPECT_EQ(members(r), expected_members(shape, group, mesh.coords()));
      EXPECT_EQ(&mesh.comm(std::span<const std::string>(reversed)), &r);  // cached
    }
    if (shape.size() == 3) {
      const auto& dp = mesh.comm({"data", "pipe"});
      EXPECT_EQ(dp.size(), shape[0] * shape[2]);
      EXPECT_EQ(members(dp), expected_members(shape, {0, 2}, mesh.coords()));
      const auto& pd = mesh.comm({"pipe", "data"});
      EXPECT_EQ(members(pd), expected_members(shape, {2, 0}, mesh.coords()));
    }
    // No axis: this process alone.
    const auto& none = mesh.comm(std::span<const std::string>());
    EXPECT_EQ(none.size(), 1);
    EXPECT_EQ(none.rank(), 0);
  }
}

TEST(MeshCommunicators, MovingKeepsReferencesValid) {
  const int n = world_size();
  kdist::MeshCommunicators mesh({n, 1}, {"data", "model"});
  const auto* data = &mesh.comm("data");
  const auto* world = &mesh.world();
  const MPI_Comm raw = data->get();
  kdist::MeshCommunicators moved(std::move(mesh));
  EXPECT_EQ(&moved.comm("data"), data);
  EXPECT_EQ(&moved.world(), world);
  EXPECT_EQ(moved.comm("data").get(), raw);
  EXPECT_EQ(moved.comm("data").size(), n);
}

TEST(MeshCommunicators, OverASubCommunicator) {
  const int n = world_size();
  if (n < 2) {
    GTEST_SKIP() << "needs 2 ranks";
  }
  // Two halves, each its own (n/2)-device mesh.
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() / (n / 2), world_rank(), &half);
  auto owned = kdist::mpi::Communicator::adopt(half);
  kdist::MeshCommunicators mesh({1, n / 2}, {"data", "model"}, owned.get());
  EXPECT_EQ(mesh.size(), n / 2);
  EXPECT_EQ(mesh.rank(), world_rank() % (n / 2));
  EXPECT_EQ(mesh.comm("model").size(), n / 2);
  EXPECT_EQ(mesh.coords(), (std::vector<int>{0, world_rank() % (n / 2)}));
}

TEST(MeshCommunicators, SizeMismatchIsAnErrorOnEveryRank) {
  const int n = world_size();
  for (const auto& shape : {std::vector<int>{n + 1, 1}, std::vector<int>{2 * n, 4}}) {
    const int devices = shape[0] * shape[1];
    const auto m = value_error_of([&] { kdist::MeshCommunicators mesh(shape, {"data", "model"}); });
    EXPECT_TRUE(contains(m, "has " + std::to_string(devices) + " devices, but there are " +
                                std::to_string(n) + " MPI processes"))
        << m;
    EXPECT_TRUE(contains(m, "mpiexec -n " + std::to_string(devices))) << m;
  }
}

// The rules of every mesh type (detail/mesh_rules.hpp), in RuntimeDeviceMesh's words.
TEST(MeshCommunicators, BadShapesAndNamesAreErrorsOnEveryRank) {
  const int n = world_size();
  auto m = value_error_of([&] { kdist::MeshCommunicators mesh({n, 1}, {"data"}); });
  EXPECT_TRUE(contains(m,
                       "kdist::MeshCommunicators: shape and axis_names should have the same "
                       "size, got shape=(" +
                           std::to_string(n) + ", 1) and axis_names=['data']"))
      << m;
  m = value_error_of([&] { kdist::MeshCommunicators mesh({n, 1}, {"data", "data"}); });
  EXPECT_TRUE(contains(m, "axis name 'data' is used twice in ['data', 'data']")) << m;
  m = value_error_of([&] { kdist::MeshCommunicators mesh({n, 0}, {"data", "model"}); });
  EXPECT_TRUE(contains(m, "axis 'model' has extent 0; every axis holds at least one device")) << m;
  m = value_error_of([&] { kdist::MeshCommunicators mesh({n, -2}, {"data", "model"}); });
  EXPECT_TRUE(contains(m, "axis 'model' has extent -2")) << m;
  m = value_error_of([&] { kdist::MeshCommunicators mesh({n, 1}, {"data", ""}); });
  EXPECT_TRUE(contains(m, "axis 1 has an empty name")) << m;
  m = value_error_of([&] { kdist::MeshCommunicators mesh({}, {}); });
  EXPECT_TRUE(contains(m, "shape and axis_names cannot be empty")) << m;
}

TEST(MeshCommunicators, DifferentMeshesOnDifferentRanksAreAnErrorOnEveryRank) {
  const int n = world_size();
  if (n < 2) {
    GTEST_SKIP() << "needs 2 ranks";
  }
  // Each shape is fine on its own; rank 0 has another one than the others.
  const std::vector<int> shape =
      world_rank() == 0 ? std::vector<int>{n, 1} : std::vector<int>{1, n};
  const auto m = value_error_of([&] { kdist::MeshCommunicators mesh(shape, {"data", "model"}); });
  EXPECT_TRUE(contains(m, "the ranks were given different meshes")) << m;
}

TEST(MeshCommunicators, UnknownOrRepeatedAxisIsAValueError) {
  const int n = world_size();
  kdist::MeshCommunicators mesh({1, n}, {"data", "model"});
  auto m = value_error_of([&] { (void)mesh.comm("modle"); });
  EXPECT_TRUE(contains(m, "\"modle\" is not an axis of the mesh (data, model)")) << m;
  m = value_error_of([&] { (void)mesh.comm({"model", "batch"}); });
  EXPECT_TRUE(contains(m, "\"batch\" is not an axis")) << m;
  m = value_error_of([&] { (void)mesh.comm({"model", "model"}); });
  EXPECT_TRUE(contains(m, "\"model\" appears twice in the group")) << m;
  m = value_error_of([&] { (void)mesh.coord("x"); });
  EXPECT_TRUE(contains(m, "\"x\" is not an axis")) << m;
}

// kdist::comm<"axis">(mesh) on a typed mesh: the axis is checked at compile time
// (tests/compile_fail/typed_comm_axis_not_in_mesh.cpp); the communicator is the cached one of
// communicators(mesh), grouping the processes that differ only along that axis.
TEST(MeshCommunicators, TypedAxisCommunicatorIsTheAxisOne) {
  const int n = kdist::test::world_size();
  kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 1>> mesh(kdist::list_devices());
  const auto& data = kdist::comm<"data">(mesh);
  const auto& model = kdist::comm<"model">(mesh);
  EXPECT_EQ(data.size(), n);
  EXPECT_EQ(data.rank(), kdist::test::world_rank());
  EXPECT_EQ(model.size(), 1);
  EXPECT_EQ(&data, &kdist::communicators(kdist::RuntimeDeviceMesh(mesh)).comm("data"));
}
