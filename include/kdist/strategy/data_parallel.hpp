#pragma once
//! \file strategy/data_parallel.hpp
//! `kdist::DataParallel`: data parallelism (Keras `keras.distribution.DataParallel`). Variables
//! are replicated on every device; input data is sharded along its first (batch) dimension over
//! the mesh's first axis.

#include <concepts>
#include <cstddef>
#include <kdist/core/error.hpp>
#include <kdist/core/layout_axes.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_concepts.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/strategy/distribution.hpp>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

//! Distribution for data parallelism, built from a mesh, from a list of devices (a 1-D mesh
//! with axis "batch"), or from every device (`kdist::list_devices()`).
//!
//! A mesh of more than one axis works (Keras warns and then fails): the data is sharded over the
//! first axis (or the batch axis named) and replicated over the others, and `num_model_replicas`
//! is that axis' extent (Keras counts every device, which is the same for a 1-D mesh).
//!
//! Errors: ValueError for an empty device list; those of DistributionOptions; more processes
//! than replicas that are not a multiple of them (Keras' ModelParallel text); RuntimeError from
//! `kdist::list_devices()` when MPI is not running (default constructor).
//!
//! \code
//! kdist::DataParallel data_parallel(kdist::list_devices());     // 1-D mesh, axis "batch"
//! kdist::RuntimeDeviceMesh mesh_1d({8}, {"data"}, kdist::list_devices());
//! kdist::DataParallel on_mesh(mesh_1d);                          // batch axis "data"
//! kdist::DeviceMesh<kdist::axis<"model">, kdist::axis<"data">> mesh({2, 4}, devices);
//! kdist::DataParallel second_axis(mesh, "data");                 // checked at compile time
//! \endcode
class DataParallel : public Distribution {
 public:
  //! Every device of the program (`kdist::list_devices()`), as a 1-D mesh with axis "batch".
  explicit DataParallel(DistributionOptions options = {})
      : DataParallel(kdist::list_devices(), options) {}
  //! On `device_mesh`; the batch axis is its first axis.
  explicit DataParallel(RuntimeDeviceMesh device_mesh, DistributionOptions options = {})
      : Distribution(device_mesh, device_mesh.axis_names().at(0), options, "DataParallel") {
    check_processes_divisible();
  }
  //! On a static `kdist::DeviceMesh<...>` (anything convertible to a RuntimeDeviceMesh).
  template <ConvertibleToRuntimeMesh Mesh>
  explicit DataParallel(const Mesh& device_mesh, DistributionOptions options = {})
      : DataParallel(static_cast<RuntimeDeviceMesh>(device_mesh), options) {}
  //! On a static mesh, sharding the data over `batch_dim_name`, an axis written in code and
  //! checked at compile time: `kdist::DataParallel(mesh, "dta")` does not compile
  //! (`kdist::error::axis_name_is_not_an_axis_of_the_mesh`). Keras' DataParallel always takes the
  //! mesh's first axis; this names another (a (model, data) mesh).
  template <StaticMesh Mesh>
  DataParallel(const Mesh& device_mesh, std::type_identity_t<AxisName<Mesh>> batch_dim_name,
               DistributionOptions options = {})
      : Distribution(static_cast<RuntimeDeviceMesh>(device_mesh), batch_dim_name.str(), options,
                     "DataParallel") {
    check_processes_divisible();
  }
  //! The same with the batch axis known at run time (read from a file): a name that is not an
  //! axis of the mesh is a ValueError naming the mesh's axes.
  //! (A template so that neither a braced DistributionOptions nor a typed mesh with a literal
  //! picks it.)
  template <SameUnqualified<RuntimeDeviceMesh> RuntimeMesh, std::convertible_to<std::string> Name>
  DataParallel(RuntimeMesh&& device_mesh, Name&& batch_dim_name, DistributionOptions options = {})
      : Distribution(RuntimeDeviceMesh(std::forward<RuntimeMesh>(device_mesh)),
                     std::string(std::forward<Name>(batch_dim_name)), options, "DataParallel") {
    check_processes_divisible();
  }
  //! On `devices` as a 1-D mesh whose axis is "batch".
  explicit DataParallel(std::vector<std::string> devices, DistributionOptions options = {})
      : DataParallel(mesh_from_devices(std::move(devices)), options) {}

  //! The extent of the batch (first) axis: the number of devices for a 1-D mesh.
  std::size_t num_model_replicas() const override { return batch_axis_extent(); }
  //! (batch axis, None, ...) for data of rank data_shape.size() >= 1.
  RuntimeTensorLayout get_data_layout(std::span<const std::size_t> data_shape) const override {
    return batch_sharded_layout(data_shape);
  }
  using Distribution::get_data_layout;
  //! Replicated: (None, ...) of the variable's rank.
  RuntimeTensorLayout variable_layout(std::string_view,
                                      std::span<const std::size_t> shape) const override {
    return replicated_layout(shape.size());
  }
  //! Nothing: data parallelism leaves intermediate tensors as they are.
  std::optional<RuntimeTensorLayout> get_tensor_layout(std::string_view) const override {
    return std::nullopt;
  }
  std::shared_ptr<const Distribution> clone() const override {
    return std::make_shared<DataParallel>(*this);
  }
  std::string name() const override { return "DataParallel"; }

 private:
  static RuntimeDeviceMesh mesh_from_devices(std::vector<std::string> devices) {
    if (devices.empty()) {
      throw ValueError(
          "kdist::DataParallel: the list of devices is empty; give at least one "
          "device, or use kdist::DataParallel() for every device");
    }
    const std::size_t n = devices.size();
    return RuntimeDeviceMesh({n}, {default_batch_dim_name}, std::move(devices));
  }
};

}  // namespace kdist
