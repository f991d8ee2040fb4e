// kdist/core/runtime_mesh.hpp: RuntimeDeviceMesh, a mesh as a value (Keras DeviceMesh(shape,
// axis_names, devices)), and its errors.
#include <kdist/core/runtime_mesh.hpp>

#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kdist::RuntimeDeviceMesh;

std::vector<std::string> cpus(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("cpu:" + std::to_string(i));
  return out;
}

// Runs `f`, which must throw a kdist::ValueError whose message contains `part`.
template <class F>
void expect_value_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << part;
  }
}

TEST(RuntimeDeviceMesh, TheGuides2x4Mesh) {
  const RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, cpus(8));
  EXPECT_EQ(mesh.rank(), 2u);
  EXPECT_EQ(mesh.extent(0), 2u);
  EXPECT_EQ(mesh.extent(1), 4u);
  EXPECT_EQ(mesh.size(), 8u);
  EXPECT_EQ(mesh.shape(), (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(mesh.axis_names(), (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(mesh.devices(), cpus(8));
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>");
  std::ostringstream os;
  os << mesh;
  EXPECT_EQ(os.str(), mesh.to_string());
}

TEST(RuntimeDeviceMesh, EveryGuideShape) {
  const std::vector<std::array<std::size_t, 2>> shapes{{8, 1}, {4, 2}, {2, 4}, {1, 8}, {2, 1}};
  for (const auto& s : shapes) {
    const std::size_t n = s[0] * s[1];
    const RuntimeDeviceMesh mesh({s[0], s[1]}, {"data", "model"}, cpus(n));
    EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(" + std::to_string(s[0]) + ", " +
                                    std::to_string(s[1]) + "), axis_names=['data', 'model']>");
    for (std::size_t i = 0; i < n; ++i) {
      const auto c = mesh.coords_of(i);
      EXPECT_EQ(c, (std::vector<std::size_t>{i / s[1], i % s[1]}));  // row-major
      EXPECT_EQ(mesh.device_index(c), i);
      EXPECT_EQ(mesh.index_of_device(mesh.devices()[i]), i);
    }
  }
}

TEST(RuntimeDeviceMesh, OneDimensional) {
  const RuntimeDeviceMesh mesh({8}, {"data"}, cpus(8));
  EXPECT_EQ(mesh.to_string(), "<DeviceMesh shape=(8,), axis_names=['data']>");
  EXPECT_EQ(mesh.coords_of(5), (std::vector<std::size_t>{5}));
}

TEST(RuntimeDeviceMesh, FromACount) {
  const RuntimeDeviceMesh mesh({2, 1}, {"data", "model"}, 2);
  EXPECT_EQ(mesh.devices(), (std::vector<std::string>{"device:0", "device:1"}));
}

TEST(RuntimeDeviceMesh, AxisLookup) {
  const RuntimeDeviceMesh mesh({2, 4}, {"batch", "model"}, 8);
  EXPECT_EQ(mesh.find_axis("model"), std::optional<std::size_t>(1));
  EXPECT_EQ(mesh.find_axis("data"), std::nullopt);
  EXPECT_EQ(mesh.axis_index("batch"), 0u);
  expect_value_error([&] { (void)mesh.axis_index("data"); },
                     "\"data\" is not an axis of the mesh; valid axis names: ['batch', 'model']");
}

TEST(RuntimeDeviceMesh, Equality) {
  const RuntimeDeviceMesh a({2, 4}, {"data", "model"}, cpus(8));
  const RuntimeDeviceMesh copy = a;
  EXPECT_EQ(a, copy);
  EXPECT_EQ(a, RuntimeDeviceMesh({2, 4}, {"data", "model"}, cpus(8)));
  EXPECT_FALSE(a == RuntimeDeviceMesh({4, 2}, {"data", "model"}, cpus(8)));
  EXPECT_FALSE(a == RuntimeDeviceMesh({2, 4}, {"batch", "model"}, cpus(8)));
  EXPECT_FALSE(a == RuntimeDeviceMesh({2, 4}, {"data", "model"}, 8));  // other devices
}

TEST(RuntimeDeviceMesh, ConstructionErrors) {
  expect_value_error([] { RuntimeDeviceMesh({}, {}, 0); },
                     "kdist::DeviceMesh: shape and axis_names cannot be empty");
  expect_value_error(
      [] {
        RuntimeDeviceMesh({2, 4}, {"data"}, 8);
      },
      "shape and axis_names should have the same size, got shape=(2, 4) and "
      "axis_names=['data']");
  expect_value_error(
      [] {
        RuntimeDeviceMesh({2, 4}, {"data", ""}, 8);
      },
      "axis 1 has an empty name; give every axis a name");
  expect_value_error(
      [] {
        RuntimeDeviceMesh({2, 4}, {"data", "data"}, 8);
      },
      "axis name 'data' is used twice in ['data', 'data']; axis names must be "
      "unique");
  expect_value_error(
      [] {
        RuntimeDeviceMesh({2, 0}, {"data", "model"}, 0);
      },
      "axis 'model' has extent 0; every axis holds at least one device");
  // Keras: "Shape does not match the number of devices"; here with both numbers.
  expect_value_error(
      [] {
        RuntimeDeviceMesh({2, 4}, {"data", "model"}, 6);
      },
      "shape does not match the number of devices: shape (2, 4) holds 8 devices, "
      "but 6 were given");
}

// Extents whose product wraps around 2^64 (2^32 x 2^32 wraps to 0) used to pass the device-count
// check for 0 devices and then divide by zero; the check is a checked multiplication now.
TEST(RuntimeDeviceMesh, ShapesBeyondA64BitCountAreErrors) {
  constexpr std::size_t two_32 = std::size_t{1} << 32;
  expect_value_error(
      [] {
        RuntimeDeviceMesh({two_32, two_32}, {"data", "model"}, 0);
      },
      "shape (4294967296, 4294967296) holds more devices than a 64-bit count can "
      "hold");
  expect_value_error(
      [] {
        RuntimeDeviceMesh({two_32, two_32, 2}, {"a", "b", "c"}, 0);
      },
      "holds more devices than a 64-bit count can hold");
  // The largest product that fits is still a plain count mismatch.
  expect_value_error(
      [] {
        RuntimeDeviceMesh({two_32 - 1, two_32 + 1}, {"data", "model"}, 8);
      },
      "holds 18446744073709551615 devices, but 8 were given");
}

// A mesh for 2^40 devices is checked before its 2^40 device names are made: an error, at once,
// not a bad_alloc after minutes.
TEST(RuntimeDeviceMesh, HugeMeshesAreValidatedBeforeAllocating) {
  constexpr std::size_t two_40 = std::size_t{1} << 40;
  expect_value_error([] { RuntimeDeviceMesh({two_40}, {"data"}, 8); },
                     "holds 1099511627776 devices, but 8 were given");
  expect_value_error(
      [] {
        RuntimeDeviceMesh({two_40, 2}, {"data", "model"}, two_40);
      },
      "holds 2199023255552 devices, but 1099511627776 were given");
}

TEST(RuntimeDeviceMesh, IndexErrors) {
  const RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, cpus(8));
  expect_value_error([&] { (void)mesh.coords_of(8); },
                     "device index 8 is out of range for a mesh of 8 devices");
  const std::vector<std::size_t> three{0, 0, 0};
  expect_value_error([&] { (void)mesh.device_index(three); },
                     "3 coordinates given for a mesh of rank 2");
  const std::vector<std::size_t> bad{2, 0};
  expect_value_error([&] { (void)mesh.device_index(bad); },
                     "coordinate 2 is out of range for axis 'data' of extent 2");
  expect_value_error([&] { (void)mesh.index_of_device("gpu:0"); },
                     "device 'gpu:0' is not in the mesh <DeviceMesh shape=(2, 4)");
}

TEST(RuntimeDeviceMesh, ExtentOfAMissingAxis) {
  RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, 8);
  EXPECT_EQ(mesh.extent(1), 4u);
  expect_value_error([&] { (void)mesh.extent(2); },
                     "axis 2 does not exist in <DeviceMesh shape=(2, 4)");
}

TEST(RuntimeDeviceMesh, ErrorsAreKdistErrors) {
  try {
    RuntimeDeviceMesh({2, 4}, {"data", "model"}, 6);
    FAIL() << "no error";
  } catch (const kdist::Error&) {
    SUCCEED();
  }
}

}  // namespace
