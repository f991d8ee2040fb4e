#pragma once
//! \file parallel/devices.hpp
//! The global devices: `kdist::list_devices`, `kdist::get_device_count`, `kdist::default_space_is_gpu`.
//! One device per process (parallel/world.hpp): process r drives device r, named "cpu:r", or
//! "gpu:r" when Kokkos' default execution space is a GPU. Needs Kokkos and MPI, not the start-up
//! machinery (parallel/initialize.hpp), so strategies can include it.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cctype>
#include <kdist/core/error.hpp>
#include <kdist/parallel/world.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kdist {
namespace detail::runtime {

//! kdist::default_space_is_gpu: Kokkos' default execution space cannot run on host memory.
inline constexpr bool default_space_is_gpu =
    !Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible;

//! Lower-case copy.
inline std::string to_lower_ascii(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

//! The device type list_devices() uses for `device_type`: "cpu" or "gpu". Errors as documented
//! there.
inline std::string resolve_device_type(const std::optional<std::string>& device_type,
                                       std::string_view who) {
  const std::string available = default_space_is_gpu ? "\"cpu\", \"gpu\"" : "\"cpu\"";
  const std::string space =
      std::string("Kokkos' default execution space is ") + Kokkos::DefaultExecutionSpace::name();
  if (!device_type) {
    return default_space_is_gpu ? "gpu" : "cpu";
  }
  const std::string type = to_lower_ascii(*device_type);
  if (type == "cpu") {
    return type;
  }
  if (type == "gpu") {
    if (!default_space_is_gpu) {
      throw RuntimeError(std::string(who) + ": no \"gpu\" devices: " + space +
                         ", a host space; available device types: " + available +
                         ". Build kdist against a Kokkos with CUDA, HIP or SYCL enabled for GPUs");
    }
    return type;
  }
  if (type == "tpu") {
    throw RuntimeError(std::string(who) +
                       ": no \"tpu\" devices: kdist runs on Kokkos, which has no TPU backend (" +
                       space + "); available device types: " + available);
  }
  throw ValueError(
      std::string(who) + ": unknown device_type \"" + *device_type +
      "\"; valid types are \"cpu\", \"gpu\" and \"tpu\" (any case), or none for the default");
}

}  // namespace detail::runtime

//! True when Kokkos' default execution space is a GPU (it cannot run on host memory): CUDA, HIP,
//! SYCL, OpenMPTarget. Then list_devices() names the devices "gpu:N".
inline constexpr bool default_space_is_gpu = detail::runtime::default_space_is_gpu;

//! The global devices, one per process, like `keras.distribution.list_devices`: `"cpu:0"` ...
//! `"cpu:N-1"`, or `"gpu:0"` ... when the type is "gpu". Device r is driven by MPI rank r.
//!
//! `device_type`: "cpu", "gpu" or "tpu", any case; by default "gpu" when Kokkos' default execution
//! space is a GPU, else "cpu". "cpu" is always available (every process has a host).
//! Errors: kdist::RuntimeError for a type this build has no devices of ("gpu" on a host-only
//! Kokkos, "tpu" always), naming what is available, or when MPI is not running;
//! kdist::ValueError for an unknown type, listing the valid ones.
//!
//! \code
//! auto devices = kdist::list_devices();        // {"cpu:0", "cpu:1"} under mpiexec -n 2
//! auto same = kdist::list_devices("CPU");      // any case
//! \endcode
[[nodiscard]] inline std::vector<std::string> list_devices(
    std::optional<std::string> device_type = {}) {
  const std::string type = detail::runtime::resolve_device_type(device_type, "kdist::list_devices");
  const int n = process_count();
  std::vector<std::string> devices;
  devices.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    devices.push_back(type + ":" + std::to_string(i));
  }
  return devices;
}

//! The number of global devices of `device_type` (`list_devices(device_type).size()`), like
//! `keras.distribution.get_device_count`. Same defaults and errors as list_devices.
[[nodiscard]] inline int get_device_count(std::optional<std::string> device_type = {}) {
  (void)detail::runtime::resolve_device_type(device_type, "kdist::get_device_count");
  return process_count();
}

}  // namespace kdist
