#pragma once
//! \file strategy/model_parallel.hpp
//! `kdist::ModelParallel`: variables sharded by a LayoutMap, data sharded over a batch axis
//! (Keras `keras.distribution.ModelParallel`).

#include <cstddef>
#include <kdist/core/concepts.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kdist {

//! Distribution that shards model variables by a LayoutMap (any LayoutMap<...> is a RuntimeLayoutMap), on its mesh.
//!
//! Each variable gets its explicit layout if it has one, else the map's layout for its path
//! (resolved with `LayoutMap::resolve`: rank and even-division checks, strict mode, report), else
//! it is replicated. Intermediate tensors get the map's layout for their path, or nothing. The
//! data is sharded over `batch_dim_name`, by default the mesh's first axis.
//!
//! The distribution keeps its own copy of the map (or shares the one given as a shared_ptr):
//! read its diagnostics with `layout_map().report()`.
//!
//! Errors (ValueError): a map without mesh; a batch_dim_name that is not an axis of the mesh;
//! "If `num_processes` is greater than `num_model_replicas`, `num_processes` must be divisible by
//! `num_model_replicas`. Got num_processes=4, num_model_replicas=3." (Keras' text).
//!
//! \code
//! kdist::RuntimeDeviceMesh mesh({2, 4}, {"batch", "model"}, kdist::list_devices());
//! kdist::LayoutMap layout_map(mesh);
//! layout_map[".*dense.*kernel"] = {kdist::replicated, "model"};
//! layout_map[".*dense.*bias"] = {"model"};
//! kdist::ModelParallel model_parallel(layout_map, "batch");
//! kdist::set_distribution(model_parallel);
//! \endcode
class ModelParallel : public Distribution {
 public:
  //! From a copy of `layout_map`; batch axis `batch_dim_name`, or the mesh's first axis.
  explicit ModelParallel(RuntimeLayoutMap layout_map,
                         std::optional<std::string> batch_dim_name = {},
                         DistributionOptions options = {})
      : ModelParallel(std::make_shared<const RuntimeLayoutMap>(std::move(layout_map)),
                      std::move(batch_dim_name), options) {}
  //! From a copy of a map typed by a static mesh, with the batch axis written in code and checked
  //! at compile time: `kdist::ModelParallel(layout_map, "dta")` does not compile
  //! (`kdist::error::axis_name_is_not_an_axis_of_the_mesh`). A batch axis known only at run time
  //! (a std::string) takes the constructor above.
  template <StaticMesh Mesh>
  ModelParallel(const LayoutMap<Mesh>& layout_map,
                std::type_identity_t<AxisName<Mesh>> batch_dim_name,
                DistributionOptions options = {})
      : ModelParallel(static_cast<const RuntimeLayoutMap&>(layout_map), batch_dim_name.str(),
                      options) {}
  //! Sharing `layout_map` (whose diagnostics then show this distribution's lookups).
  explicit ModelParallel(std::shared_ptr<const RuntimeLayoutMap> layout_map,
                         std::optional<std::string> batch_dim_name = {},
                         DistributionOptions options = {})
      : Distribution(mesh_of(layout_map), batch_axis(layout_map, std::move(batch_dim_name)),
                     options, "ModelParallel"),
        layout_map_(std::move(layout_map)) {
    check_processes_divisible();
  }

  //! The layout map (Keras `_layout_map`).
  const RuntimeLayoutMap& layout_map() const { return *layout_map_; }

  //! The extent of the batch axis (Keras `num_model_replicas`).
  std::size_t num_model_replicas() const override { return batch_axis_extent(); }
  //! (batch axis, None, ...) for data of rank data_shape.size() >= 1.
  RuntimeTensorLayout get_data_layout(std::span<const std::size_t> data_shape) const override {
    return batch_sharded_layout(data_shape);
  }
  using Distribution::get_data_layout;
  //! The map's layout for `path` (checked against `shape`), else replicated.
  RuntimeTensorLayout variable_layout(std::string_view path,
                                      std::span<const std::size_t> shape) const override {
    if (auto l = layout_map_->resolve(path, shape)) return *std::move(l);
    return replicated_layout(shape.size());
  }
  //! The map's layout for `path`, or nothing.
  std::optional<RuntimeTensorLayout> get_tensor_layout(std::string_view path) const override {
    return layout_map_->get(path);
  }
  std::shared_ptr<const Distribution> clone() const override {
    return std::make_shared<ModelParallel>(*this);
  }
  std::string name() const override { return "ModelParallel"; }

 private:
  static RuntimeDeviceMesh mesh_of(const std::shared_ptr<const RuntimeLayoutMap>& layout_map) {
    if (!layout_map)
      throw ValueError("kdist::ModelParallel: You must specify a layout_map argument.");
    if (!layout_map->device_mesh()) {
      throw ValueError(
          "kdist::ModelParallel: the layout_map has no device mesh; build it with "
          "one: kdist::LayoutMap layout_map(mesh)");
    }
    return *layout_map->device_mesh();
  }
  static std::string batch_axis(const std::shared_ptr<const RuntimeLayoutMap>& layout_map,
                                std::optional<std::string> batch_dim_name) {
    if (batch_dim_name) return std::move(*batch_dim_name);
    return mesh_of(layout_map).axis_names().at(0);
  }

  std::shared_ptr<const RuntimeLayoutMap> layout_map_;
};

}  // namespace kdist
