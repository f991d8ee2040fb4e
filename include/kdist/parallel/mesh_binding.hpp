#pragma once
//! \file parallel/mesh_binding.hpp
//! `kdist::communicators(mesh)`: a mesh bound to the running MPI processes — its per-axis and
//! per-group communicators, built once per mesh and reused by every tensor and collective on it.
//! The cache is emptied when MPI finalises (an attribute on MPI_COMM_SELF, whose delete callback
//! MPI runs first thing in MPI_Finalize), so no communicator outlives MPI, and when kdist starts on
//! another communicator (kdist::communicator()), whose processes the meshes are then built over.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/parallel/mesh_communicators.hpp>
#include <kdist/parallel/world.hpp>

namespace kdist {

namespace detail {
struct CommunicatorCache {
  std::mutex mutex;
  std::map<std::pair<std::vector<int>, std::vector<std::string>>,
           std::unique_ptr<MeshCommunicators>>
      meshes;
  std::uint64_t generation = 0;  // of kdist's communicator the meshes were built over
  bool hooked = false;
};
inline CommunicatorCache& communicator_cache() {
  static CommunicatorCache cache;
  return cache;
}
inline int free_communicators_at_finalize(MPI_Comm, int, void*, void*) {
  auto& c = communicator_cache();
  std::lock_guard lock(c.mutex);
  c.meshes.clear();
  c.hooked = false;
  return MPI_SUCCESS;
}
}  // namespace detail

//! The communicators of `mesh` over kdist::communicator() (device r = process r). Built on first use —
//! a collective call, so every process must ask for the same meshes in the same order, as SPMD
//! code does — and kept until MPI_Finalize.
//! Errors (on every rank): a mesh whose size differs from the number of processes.
inline const MeshCommunicators& communicators(const RuntimeDeviceMesh& mesh) {
  auto& c = detail::communicator_cache();
  std::vector<int> shape(mesh.shape().begin(), mesh.shape().end());
  auto key = std::make_pair(shape, mesh.axis_names());
  std::lock_guard lock(c.mutex);
  if (!c.hooked) {
    int keyval = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, detail::free_communicators_at_finalize, &keyval,
                           nullptr);
    MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr);
    c.hooked = true;
  }
  if (const auto generation = detail::process_group().generation; c.generation != generation) {
    c.meshes.clear();  // built over the processes kdist ran on before
    c.generation = generation;
  }
  auto it = c.meshes.find(key);
  if (it == c.meshes.end()) {
    auto comms =
        std::make_unique<MeshCommunicators>(shape, mesh.axis_names(), kdist::communicator());
    it = c.meshes.emplace(std::move(key), std::move(comms)).first;
  }
  return *it->second;
}

//! The communicator of mesh axis `Axis` of a typed mesh, the axis checked at compile time:
//! `kdist::comm<"data">(mesh)` is `communicators(mesh).comm("data")`, and `kdist::comm<"dta">(mesh)`
//! does not compile (`kdist::error::axis_not_in_mesh<"dta", "shape=(...), axis_names=[...]">`).
//! Example: `kdist::all_reduce(space, grads, kdist::ReduceOp::sum, kdist::comm<"data">(mesh));`
template <detail::fixed_string Axis, class... Axes>
const mpi::Communicator& comm(const DeviceMesh<Axes...>& mesh) {
  [[maybe_unused]] constexpr std::size_t index = DeviceMesh<Axes...>::template axis_index<Axis>;
  return communicators(static_cast<RuntimeDeviceMesh>(mesh)).comm(Axis.view());
}

}  // namespace kdist
