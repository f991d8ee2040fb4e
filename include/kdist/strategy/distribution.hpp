#pragma once
//! \file strategy/distribution.hpp
//! `kdist::Distribution`, the base of the distribution strategies (Keras
//! `keras.distribution.Distribution`), the global distribution (`kdist::set_distribution`,
//! `kdist::distribution()`), scopes, and `kdist::VariableInfo`. The strategies are in
//! data_parallel.hpp (`kdist::DataParallel`) and model_parallel.hpp (`kdist::ModelParallel`).
//!
//! A distribution knows its mesh, the mesh axis the batch is sharded over, how many processes
//! run and which one this is, and from those the number of data shards and this process's data
//! shard (Keras' formulas, below). It gives the layout of input data, of each variable, and of
//! intermediate tensors.
//!
//! The global distribution is one per program (Keras keeps one per Python thread): any thread may
//! read it while another sets it and sees either the old or the new value, never a torn one.

#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <kdist/core/concepts.hpp>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/parallel/world.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

//! Keras' default batch axis name, used by `DataParallel` built from devices.
inline constexpr const char* default_batch_dim_name = "batch";

//! Options every distribution accepts.
//!
//! `num_processes` / `process_id`: by default the MPI world's (kdist::process_count(),
//! kdist::process_id()) when MPI is running, else 1 and 0 (as Keras without a multi-process
//! backend). Giving them simulates another process of a multi-process run, which single-process
//! tests use to cover Keras' multi-process formulas. Errors (ValueError): num_processes of 0, a
//! process_id not below num_processes.
//!
//! `auto_shard_dataset`: shard the input data among processes (Keras' `auto_shard_dataset`);
//! false when each process already reads its own part.
struct DistributionOptions {
  std::optional<std::size_t> num_processes;
  std::optional<std::size_t> process_id;
  bool auto_shard_dataset = true;
};

//! A variable's description for `Distribution::get_variable_layout`: its path, its shape and,
//! optionally, a layout given explicitly (which then wins over any rule, as a Keras variable's
//! `_layout`). Any type with `path()` and `shape()` (and optionally `layout()`) works too.
class VariableInfo {
 public:
  VariableInfo(std::string path, std::vector<std::size_t> shape,
               std::optional<RuntimeTensorLayout> layout = {})
      : path_(std::move(path)), shape_(std::move(shape)), layout_(std::move(layout)) {}
  const std::string& path() const { return path_; }
  const std::vector<std::size_t>& shape() const { return shape_; }
  const std::optional<RuntimeTensorLayout>& layout() const { return layout_; }

 private:
  std::string path_;
  std::vector<std::size_t> shape_;
  std::optional<RuntimeTensorLayout> layout_;
};

//! What `get_variable_layout` needs of a variable: `path()` (a string) and `shape()` (a range of
//! integers). A `layout()` returning something convertible to `std::optional<RuntimeTensorLayout>`
//! (or to RuntimeTensorLayout) is an explicit layout.
template <class V>
concept Variable = requires(const V& v) {
  { v.path() } -> std::convertible_to<std::string_view>;
  requires std::ranges::input_range<decltype(v.shape())>;
  requires std::integral<std::ranges::range_value_t<decltype(v.shape())>>;
};

namespace detail {

template <class V>
std::optional<RuntimeTensorLayout> explicit_layout(const V& v) {
  if constexpr (requires { v.layout(); }) {
    using L = decltype(v.layout());
    if constexpr (std::convertible_to<L, std::optional<RuntimeTensorLayout>>) {
      return static_cast<std::optional<RuntimeTensorLayout>>(v.layout());
    } else if constexpr (std::convertible_to<L, RuntimeTensorLayout>) {
      return static_cast<RuntimeTensorLayout>(v.layout());
    } else {
      return std::nullopt;
    }
  } else {
    return std::nullopt;
  }
}

template <class R>
std::vector<std::size_t> to_shape(const R& r) {
  std::vector<std::size_t> out;
  for (auto e : r) out.push_back(static_cast<std::size_t>(e));
  return out;
}

//! The number N in a device name "type:N", or nothing.
inline std::optional<std::size_t> device_number(std::string_view device) {
  const auto colon = device.rfind(':');
  if (colon == std::string_view::npos || colon + 1 >= device.size()) return std::nullopt;
  std::size_t n = 0;
  const char* first = device.data() + colon + 1;
  const char* last = device.data() + device.size();
  auto [ptr, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || ptr != last) return std::nullopt;
  return n;
}

}  // namespace detail

class DistributionScope;

//! Base of the distribution strategies (Keras `Distribution`): a mesh, a batch axis, the
//! processes, and the layouts of data, variables and tensors.
//!
//! Keras' formulas: `num_data_shards = min(num_model_replicas, num_processes)`;
//! `data_shard_id = process_id` when `num_model_replicas >= num_processes`, else
//! `process_id / (num_processes / num_model_replicas)`. One refinement: when there is one
//! process per mesh device (kdist's model: process r drives device "cpu:r"/"gpu:r") the data shard
//! is the process's device coordinate along the batch axis. Both agree when the batch axis is the
//! mesh's first axis; for a batch axis elsewhere Keras' formula would hand a process the rows of
//! another device.
//!
//! The base class can be built (as in Keras) but its strategy-specific members throw
//! kdist::RuntimeError ("not implemented"): use DataParallel or ModelParallel, or derive and
//! override `num_model_replicas`, `get_data_layout`, `variable_layout`, `get_tensor_layout`,
//! `name` and `clone`.
class Distribution : public std::enable_shared_from_this<Distribution> {
 public:
  //! `batch_dim_name`, when given, must be an axis of the mesh (ValueError otherwise).
  explicit Distribution(RuntimeDeviceMesh device_mesh,
                        std::optional<std::string> batch_dim_name = {},
                        DistributionOptions options = {})
      : Distribution(std::move(device_mesh), std::move(batch_dim_name), options, "Distribution") {}
  Distribution(const Distribution& other)
      : std::enable_shared_from_this<Distribution>(),
        mesh_(other.mesh_),
        batch_dim_name_(other.batch_dim_name_),
        num_processes_(other.num_processes_),
        process_id_(other.process_id_),
        auto_shard_dataset_(other.auto_shard_dataset_),
        kind_for_errors_(other.kind_for_errors_) {}
  Distribution& operator=(const Distribution& other) {
    mesh_ = other.mesh_;
    batch_dim_name_ = other.batch_dim_name_;
    num_processes_ = other.num_processes_;
    process_id_ = other.process_id_;
    auto_shard_dataset_ = other.auto_shard_dataset_;
    kind_for_errors_ = other.kind_for_errors_;
    return *this;
  }
  virtual ~Distribution() = default;

  //! The mesh (Keras `device_mesh`).
  const RuntimeDeviceMesh& device_mesh() const { return mesh_; }
  //! The mesh axis the batch dimension of the data is sharded over; nothing for a bare
  //! Distribution built without one.
  const std::optional<std::string>& batch_dim_name() const { return batch_dim_name_; }
  //! Total number of processes (Keras `num_processes`).
  std::size_t num_processes() const { return num_processes_; }
  //! This process's id in [0, num_processes).
  std::size_t process_id() const { return process_id_; }
  //! More than one process.
  bool is_multi_process() const { return num_processes_ > 1; }
  //! Shard the input data among processes (Keras `auto_shard_dataset`).
  bool auto_shard_dataset() const { return auto_shard_dataset_; }
  //! Not synchronised: set it before the distribution is shared with other threads.
  void set_auto_shard_dataset(bool value) { auto_shard_dataset_ = value; }

  //! Number of model replicas (copies of the model that see different data).
  virtual std::size_t num_model_replicas() const { throw not_implemented("num_model_replicas"); }
  //! Number of data shards: min(num_model_replicas, num_processes).
  std::size_t num_data_shards() const { return std::min(num_model_replicas(), num_processes()); }
  //! This process's data shard, in [0, num_data_shards()) (see the class comment).
  std::size_t data_shard_id() const {
    const std::size_t replicas = num_model_replicas();
    const std::size_t processes = num_processes();
    if (replicas >= processes) return process_id_;
    if (auto coord = batch_coordinate_of_process()) return *coord;
    const std::size_t per_replica = processes / replicas;
    return process_id_ / per_replica;
  }

  //! Layout of input data of `data_shape`: the first dimension over the batch axis, the others
  //! replicated.
  virtual RuntimeTensorLayout get_data_layout(std::span<const std::size_t> data_shape) const {
    (void)data_shape;
    throw not_implemented("get_data_layout");
  }
  RuntimeTensorLayout get_data_layout(std::initializer_list<std::size_t> data_shape) const {
    return get_data_layout(std::span<const std::size_t>(data_shape.begin(), data_shape.size()));
  }
  template <ShapeRange Shape>
  RuntimeTensorLayout get_data_layout(const Shape& data_shape) const {
    const auto s = detail::to_shape(data_shape);
    return get_data_layout(std::span<const std::size_t>(s));
  }

  //! Layout of a variable: its explicit layout when it has one, else the strategy's choice
  //! (`variable_layout(path, shape)`).
  template <Variable V>
  RuntimeTensorLayout get_variable_layout(const V& variable) const {
    if (auto l = detail::explicit_layout(variable)) return *std::move(l);
    const auto shape = detail::to_shape(variable.shape());
    return variable_layout(std::string_view(variable.path()), shape);
  }
  //! The strategy's layout for a variable of `path` and `shape` without explicit layout.
  virtual RuntimeTensorLayout variable_layout(std::string_view path,
                                              std::span<const std::size_t> shape) const {
    (void)path;
    (void)shape;
    throw not_implemented("get_variable_layout");
  }
  //! Layout of an intermediate tensor of `path` (e.g. "d2/output"), or nothing to leave it as
  //! it is.
  virtual std::optional<RuntimeTensorLayout> get_tensor_layout(std::string_view path) const {
    (void)path;
    throw not_implemented("get_tensor_layout");
  }

  //! Makes this distribution the global one until the returned guard is destroyed, then restores
  //! the previous one; scopes nest. When this object is owned by a std::shared_ptr, that very
  //! object becomes global; otherwise a copy does (`clone()`).
  //! \code
  //! { auto scope = data_parallel.scope();  /* kdist::distribution() is data_parallel */ }
  //! \endcode
  [[nodiscard]] DistributionScope scope() const;

  //! This object as a shared_ptr: itself when owned by one, else a copy.
  std::shared_ptr<const Distribution> share() const {
    if (auto self = weak_from_this().lock()) return self;
    return clone();
  }
  //! A copy of the most-derived object.
  virtual std::shared_ptr<const Distribution> clone() const {
    return std::make_shared<Distribution>(*this);
  }
  //! The class name Keras prints ("DataParallel").
  virtual std::string name() const { return "Distribution"; }
  //! `<DataParallel device_mesh=<DeviceMesh shape=(8,), axis_names=['batch']>>`, as Keras.
  std::string to_string() const { return "<" + name() + " device_mesh=" + mesh_.to_string() + ">"; }
  friend std::ostream& operator<<(std::ostream& os, const Distribution& d) {
    return os << d.to_string();
  }

 protected:
  //! Derived classes name themselves in the base's constructor errors.
  Distribution(RuntimeDeviceMesh device_mesh, std::optional<std::string> batch_dim_name,
               DistributionOptions options, const char* kind)
      : mesh_(std::move(device_mesh)),
        batch_dim_name_(std::move(batch_dim_name)),
        auto_shard_dataset_(options.auto_shard_dataset),
        kind_for_errors_(kind) {
    if (batch_dim_name_ && !mesh_.find_axis(*batch_dim_name_)) {
      throw ValueError("kdist::" + std::string(kind) + ": batch_dim_name " +
                       detail::py_str(*batch_dim_name_) + " is not an axis of the mesh " +
                       mesh_.to_string() +
                       "; valid axis names: " + detail::join_quoted(mesh_.axis_names()));
    }
    set_processes(options);
  }

  //! The layout (batch axis, None, ...) of rank data_shape.size() on the mesh.
  RuntimeTensorLayout batch_sharded_layout(std::span<const std::size_t> data_shape) const {
    if (data_shape.empty()) {
      throw ValueError("kdist::" + name() +
                       "::get_data_layout: data of shape () has no batch "
                       "dimension to shard; input data has rank 1 or more, the batch first");
    }
    std::vector<DimAxes> axes(data_shape.size());
    axes[0] = DimAxes(*batch_dim_name_);
    return RuntimeTensorLayout(std::move(axes), mesh_);
  }
  //! The fully replicated layout of rank `rank` on the mesh.
  RuntimeTensorLayout replicated_layout(std::size_t rank) const {
    return RuntimeTensorLayout(std::vector<DimAxes>(rank), mesh_);
  }
  //! Extent of the batch axis.
  std::size_t batch_axis_extent() const { return mesh_.extent(mesh_.axis_index(*batch_dim_name_)); }
  //! Keras' check: more processes than replicas must be a multiple of them.
  void check_processes_divisible() const {
    const std::size_t replicas = num_model_replicas();
    if (is_multi_process() && num_processes_ > replicas && num_processes_ % replicas != 0) {
      throw ValueError("kdist::" + name() +
                       ": If `num_processes` is greater than `num_model_replicas`, "
                       "`num_processes` must be divisible by `num_model_replicas`. Got "
                       "num_processes=" +
                       std::to_string(num_processes_) +
                       ", num_model_replicas=" + std::to_string(replicas) + ".");
    }
  }

 private:
  RuntimeError not_implemented(const char* what) const {
    return RuntimeError("kdist::" + name() + "::" + what +
                        " is not implemented (Keras: NotImplementedError); use "
                        "kdist::DataParallel or kdist::ModelParallel, or derive from "
                        "kdist::Distribution and override it");
  }

  void set_processes(const DistributionOptions& options) {
    std::size_t count = 1;
    std::size_t id = 0;
    if ((!options.num_processes || !options.process_id) && detail::mpi_running()) {
      count = static_cast<std::size_t>(kdist::process_count());
      id = static_cast<std::size_t>(kdist::process_id());
    }
    if (options.num_processes) count = *options.num_processes;
    if (options.process_id) id = *options.process_id;
    if (count == 0) {
      throw ValueError("kdist::" + std::string(kind_for_errors_) +
                       ": num_processes must be at least 1, got 0");
    }
    if (id >= count) {
      throw ValueError("kdist::" + std::string(kind_for_errors_) + ": process_id " +
                       std::to_string(id) +
                       " is out of range for num_processes=" + std::to_string(count) +
                       "; it must be in [0, " + std::to_string(count) + ")");
    }
    num_processes_ = count;
    process_id_ = id;
  }

  //! With one process per device, this process's coordinate along the batch axis.
  std::optional<std::size_t> batch_coordinate_of_process() const {
    if (!batch_dim_name_ || num_processes_ != mesh_.size()) return std::nullopt;
    // Process r drives global device r: find the mesh position of the device numbered r.
    std::size_t position = process_id_;
    const auto& devices = mesh_.devices();
    for (std::size_t p = 0; p < devices.size(); ++p) {
      if (detail::device_number(devices[p]) == process_id_) {
        position = p;
        break;
      }
    }
    return mesh_.coords_of(position)[mesh_.axis_index(*batch_dim_name_)];
  }

  RuntimeDeviceMesh mesh_;
  std::optional<std::string> batch_dim_name_;
  std::size_t num_processes_ = 1;
  std::size_t process_id_ = 0;
  bool auto_shard_dataset_ = true;
  const char* kind_for_errors_ = "Distribution";
};

namespace detail {
//! The global distribution: a shared_ptr behind a mutex, so a reader always copies a whole value.
struct GlobalDistribution {
  std::mutex mutex;
  std::shared_ptr<const Distribution> value;
};
inline GlobalDistribution& global_distribution() {
  static GlobalDistribution g;
  return g;
}
//! The innermost open `scope()` of this thread, or nullptr. Scopes are per thread (Keras keeps
//! its distribution in per-thread global state): scopes opened and closed by several threads at
//! once cannot leave another thread's distribution behind.
inline std::shared_ptr<const Distribution>& scoped_distribution() {
  thread_local std::shared_ptr<const Distribution> scoped;
  return scoped;
}
}  // namespace detail

//! The current distribution (Keras `keras.distribution.distribution()`): this thread's innermost
//! open `scope()`, else the global one set by set_distribution, else nullptr.
//! Thread-safe: the returned pointer keeps the distribution alive even if another thread sets a
//! new one meanwhile.
inline std::shared_ptr<const Distribution> distribution() {
  if (const auto& scoped = detail::scoped_distribution()) return scoped;
  auto& g = detail::global_distribution();
  std::lock_guard lock(g.mutex);
  return g.value;
}

//! Sets the global distribution (Keras `set_distribution`); nullptr clears it. Returns the
//! previous one. Thread-safe.
inline std::shared_ptr<const Distribution> set_distribution(
    std::shared_ptr<const Distribution> value) {
  auto& g = detail::global_distribution();
  std::lock_guard lock(g.mutex);
  std::swap(g.value, value);
  return value;
}
//! Sets `value` itself when a std::shared_ptr owns it, else a copy.
inline std::shared_ptr<const Distribution> set_distribution(const Distribution& value) {
  return set_distribution(value.share());
}

//! RAII guard returned by `Distribution::scope()`: makes `value` this thread's distribution
//! until destroyed, then restores the thread's previous scope (the global distribution is not
//! touched). Destroy scopes on the thread that opened them, innermost first.
class DistributionScope {
 public:
  explicit DistributionScope(std::shared_ptr<const Distribution> value)
      : previous_(std::exchange(detail::scoped_distribution(), std::move(value))) {}
  DistributionScope(DistributionScope&& other) noexcept
      : previous_(std::move(other.previous_)), active_(std::exchange(other.active_, false)) {}
  DistributionScope(const DistributionScope&) = delete;
  DistributionScope& operator=(const DistributionScope&) = delete;
  DistributionScope& operator=(DistributionScope&&) = delete;
  ~DistributionScope() {
    if (active_) detail::scoped_distribution() = std::move(previous_);
  }

 private:
  std::shared_ptr<const Distribution> previous_;
  bool active_ = true;
};

inline DistributionScope Distribution::scope() const {
  return DistributionScope(share());
}

}  // namespace kdist
