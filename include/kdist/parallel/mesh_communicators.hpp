#pragma once
//! \file parallel/mesh_communicators.hpp
//! `kdist::MeshCommunicators`: a device mesh bound to the running MPI processes, with one MPI
//! sub-communicator per mesh axis (and, on demand, per group of axes).
//!
//! Device r is MPI rank r of the parent communicator, laid out row-major over the mesh shape, as
//! Keras builds a mesh with `np.reshape(devices, shape)`: on a (2, 4) mesh ("data", "model"),
//! rank 6 has coordinates (1, 2). The communicator of an axis joins the ranks that differ only in
//! that axis' coordinate; a rank's rank in it is its coordinate on the axis.
//!
//! \code
//! kdist::MeshCommunicators mesh({2, 4}, {"data", "model"});       // under mpiexec -n 8
//! const kdist::mpi::Communicator& model = mesh.comm("model");     // 4 ranks: same "data"
//! coordinate kdist::all_reduce(space, grads, kdist::ReduceOp::mean, mesh.comm("data")); \endcode

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <kdist/core/detail/mesh_rules.hpp>
#include <kdist/core/error.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/world.hpp>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kdist {

namespace detail::mesh_comm {

//! "(2, 4)", as Python prints a tuple (detail::py_tuple, the printer of every kdist shape).
inline std::string format_shape(const std::vector<int>& shape) {
  std::vector<std::string> extents;
  for (int e : shape) extents.push_back(std::to_string(e));
  return py_tuple(extents);
}

//! "(data, model)".
inline std::string format_names(const std::vector<std::string>& names) {
  std::string out = "(";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) {
      out += ", ";
    }
    out += names[i];
  }
  return out + ")";
}

}  // namespace detail::mesh_comm

//! MPI communicators of a device mesh: the whole mesh (`world()`), one per axis (`comm(axis)`,
//! built once, at construction) and one per group of axes (`comm(axes)`, built on first use and
//! kept). All are freed by RAII. Non-copyable, movable (references returned by comm() stay valid
//! across a move).
class MeshCommunicators {
 public:
  //! Binds a mesh of `shape` with `axis_names` to the processes of `parent` (default
  //! kdist::communicator(), parallel/world.hpp). Collective over `parent`.
  //!
  //! Errors (kdist::ValueError, thrown on every rank of `parent` alike): shape and axis_names of
  //! different lengths, an empty mesh, an extent below 1, an empty or repeated axis name, a mesh
  //! whose device count differs from the number of processes of `parent` (the message names both
  //! numbers and the `mpiexec -n` to use), shapes or names that differ between ranks.
  //! kdist::RuntimeError when MPI is not running.
  MeshCommunicators(std::vector<int> shape, std::vector<std::string> axis_names,
                    MPI_Comm parent = kdist::communicator())
      : shape_(std::move(shape)), names_(std::move(axis_names)) {
    kdist::detail::require_mpi("kdist::MeshCommunicators");
    int parent_size = 0;
    mpi::detail::check_mpi(MPI_Comm_size(parent, &parent_size),
                           "kdist::MeshCommunicators: MPI_Comm_size");

    const std::string problem = local_problem(parent_size);
    // Every rank must throw when any does, or the others wait forever in MPI_Cart_create. The
    // fingerprint catches ranks that were given different meshes.
    const std::int64_t print = fingerprint();
    std::int64_t extremes[2] = {print, -print};
    mpi::detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT64_T, MPI_MIN, parent),
                           "kdist::MeshCommunicators: MPI_Allreduce");
    const bool same_everywhere = extremes[0] == -extremes[1];
    mpi::agree<ValueError>(parent, problem.empty() && same_everywhere,
                           !problem.empty()
                               ? problem
                               : "kdist::MeshCommunicators: the ranks were given different meshes; "
                                 "this rank has shape " +
                                     detail::mesh_comm::format_shape(shape_) + " with axes " +
                                     detail::mesh_comm::format_names(names_) +
                                     ": build the mesh from the same values on every rank");

    const int rank = static_cast<int>(shape_.size());
    std::vector<int> periods(shape_.size(), 0);
    MPI_Comm cart = MPI_COMM_NULL;
    mpi::detail::check_mpi(
        MPI_Cart_create(parent, rank, shape_.data(), periods.data(), /*reorder=*/0, &cart),
        "kdist::MeshCommunicators: MPI_Cart_create");
    world_ = std::make_unique<mpi::Communicator>(mpi::Communicator::adopt(cart));
    // Names for the stuck-collective watchdog's messages (detail/watchdog.hpp).
    name_comm(cart, "mesh " + detail::mesh_comm::format_names(names_));
    coords_.resize(shape_.size());
    mpi::detail::check_mpi(MPI_Cart_coords(cart, world_->rank(), rank, coords_.data()),
                           "kdist::MeshCommunicators: MPI_Cart_coords");
    axes_.reserve(shape_.size());
    for (std::size_t a = 0; a < shape_.size(); ++a) {
      std::vector<int> remain(shape_.size(), 0);
      remain[a] = 1;
      MPI_Comm sub = MPI_COMM_NULL;
      mpi::detail::check_mpi(MPI_Cart_sub(cart, remain.data(), &sub),
                             "kdist::MeshCommunicators: MPI_Cart_sub");
      name_comm(sub, "mesh axis '" + names_[a] + "'");
      axes_.push_back(mpi::Communicator::adopt(sub));
    }
  }

  MeshCommunicators(const MeshCommunicators&) = delete;
  MeshCommunicators& operator=(const MeshCommunicators&) = delete;
  MeshCommunicators(MeshCommunicators&&) noexcept = default;
  MeshCommunicators& operator=(MeshCommunicators&&) noexcept = default;
  ~MeshCommunicators() = default;

  //! The mesh shape.
  [[nodiscard]] const std::vector<int>& shape() const noexcept { return shape_; }
  //! The axis names, in mesh order.
  [[nodiscard]] const std::vector<std::string>& axis_names() const noexcept { return names_; }
  //! The number of devices (processes) in the mesh.
  [[nodiscard]] int size() const noexcept { return world_->size(); }
  //! This process' device index in the mesh (its rank in world(), equal to its rank in the parent).
  [[nodiscard]] int rank() const noexcept { return world_->rank(); }
  //! This process' coordinates in the mesh, one per axis, row-major from its rank.
  [[nodiscard]] const std::vector<int>& coords() const noexcept { return coords_; }
  //! This process' coordinate along `axis`. Errors: kdist::ValueError for an unknown axis.
  [[nodiscard]] int coord(std::string_view axis) const { return coords_[axis_index(axis)]; }

  //! The communicator of the whole mesh (a Cartesian communicator, ranks as in the parent).
  [[nodiscard]] const mpi::Communicator& world() const noexcept { return *world_; }

  //! The position of `axis` in axis_names(). Errors: kdist::ValueError for an unknown axis.
  [[nodiscard]] std::size_t axis_index(std::string_view axis) const {
    if (auto i = detail::find_name(names_, axis)) return *i;
    throw ValueError("kdist::MeshCommunicators: \"" + std::string(axis) +
                     "\" is not an axis of the mesh " + detail::mesh_comm::format_names(names_));
  }

  //! The communicator of one axis: the processes whose coordinates differ only on `axis`; a
  //! process' rank in it is its coordinate on `axis`. Built at construction; not collective.
  //! Errors: kdist::ValueError for an unknown axis.
  [[nodiscard]] const mpi::Communicator& comm(std::string_view axis) const {
    return axes_[axis_index(axis)];
  }

  //! The communicator of a group of axes: the processes whose coordinates differ only on those
  //! axes, ranked row-major over the group's axes in the order given (so {"model", "data"} ranks
  //! by model coordinate first). One axis gives comm(axis); every axis in mesh order gives world();
  //! no axis gives a communicator of this process alone.
  //!
  //! **Collective** the first time a group is asked for (it is built then, by MPI_Comm_split over
  //! world(), and kept): every process of the mesh must ask for the same new groups in the same
  //! order. Later calls are lookups. Not thread-safe.
  //! Errors: kdist::ValueError for an unknown or repeated axis (before any communication).
  [[nodiscard]] const mpi::Communicator& comm(std::span<const std::string> axes) const {
    std::vector<std::size_t> group;
    group.reserve(axes.size());
    for (const auto& a : axes) {
      group.push_back(axis_index(a));
    }
    return group_comm(group);
  }
  //! comm(axes) for a braced list: `mesh.comm({"data", "model"})`.
  [[nodiscard]] const mpi::Communicator& comm(std::initializer_list<std::string_view> axes) const {
    std::vector<std::size_t> group;
    group.reserve(axes.size());
    for (auto a : axes) {
      group.push_back(axis_index(a));
    }
    return group_comm(group);
  }

 private:
  static void name_comm(MPI_Comm comm, const std::string& name) {
    mpi::detail::check_mpi(MPI_Comm_set_name(comm, name.c_str()),
                           "kdist::MeshCommunicators: MPI_Comm_set_name");
  }

  [[nodiscard]] std::string local_problem(int parent_size) const {
    const std::string who = "kdist::MeshCommunicators: ";
    // The rules every mesh obeys (detail/mesh_rules.hpp), then this one's: one device per process.
    if (auto problem = detail::shape_problem(shape_, names_)) return who + *problem;
    const std::size_t devices = *detail::checked_product(shape_);
    if (devices != static_cast<std::size_t>(parent_size)) {
      return who + "the mesh shape " + detail::mesh_comm::format_shape(shape_) + " with axes " +
             detail::mesh_comm::format_names(names_) + " has " + std::to_string(devices) +
             " devices, but there are " + std::to_string(parent_size) +
             " MPI processes (one device per process); run with mpiexec -n " +
             std::to_string(devices) + ", or use a mesh of " + std::to_string(parent_size) +
             " devices";
    }
    return {};
  }

  [[nodiscard]] std::int64_t fingerprint() const {
    std::size_t h = std::hash<std::size_t>{}(shape_.size());
    const auto mix = [&h](std::size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    for (int e : shape_) {
      mix(std::hash<int>{}(e));
    }
    for (const auto& n : names_) {
      mix(std::hash<std::string>{}(n));
    }
    // Keep it away from INT64_MIN so that negating it is defined.
    return static_cast<std::int64_t>(h >> 1);
  }

  [[nodiscard]] const mpi::Communicator& group_comm(const std::vector<std::size_t>& group) const {
    for (std::size_t i = 0; i < group.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (group[i] == group[j]) {
          throw ValueError("kdist::MeshCommunicators::comm: the axis \"" + names_[group[i]] +
                           "\" appears twice in the group; name each axis once");
        }
      }
    }
    if (group.size() == 1) {
      return axes_[group[0]];
    }
    bool mesh_order = group.size() == shape_.size();
    for (std::size_t i = 0; mesh_order && i < group.size(); ++i) {
      mesh_order = group[i] == i;
    }
    if (mesh_order) {
      return *world_;
    }
    if (auto found = groups_.find(group); found != groups_.end()) {
      return found->second;
    }
    // color: row-major index over the axes outside the group; key: row-major over the group.
    std::vector<bool> in_group(shape_.size(), false);
    for (auto a : group) {
      in_group[a] = true;
    }
    int color = 0;
    for (std::size_t a = 0; a < shape_.size(); ++a) {
      if (!in_group[a]) {
        color = color * shape_[a] + coords_[a];
      }
    }
    int key = 0;
    for (auto a : group) {
      key = key * shape_[a] + coords_[a];
    }
    auto sub = world_->split(color, key);
    std::vector<std::string> group_names;
    for (auto a : group) group_names.push_back(names_[a]);
    name_comm(sub.get(), "mesh axes " + detail::mesh_comm::format_names(group_names));
    return groups_.emplace(group, std::move(sub)).first->second;
  }

  std::vector<int> shape_;
  std::vector<std::string> names_;
  std::vector<int> coords_;
  std::unique_ptr<mpi::Communicator> world_;  // on the heap: references survive a move
  std::vector<mpi::Communicator> axes_;
  mutable std::map<std::vector<std::size_t>, mpi::Communicator> groups_;
};

}  // namespace kdist
