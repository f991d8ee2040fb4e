// The communicator of a mesh axis named in code, on a typed mesh: a misspelt axis is a compile
// error naming it and the mesh (issue 10: "comm("data") is a run-time check"), not a run-time
// ValueError on every rank.
// expect: axis_not_in_mesh<.*("dta"|'d', 't', 'a').*(shape=\(\?, 4\)|'s', 'h', 'a', 'p', 'e', '=', '\(', '\?')
#include <kdist/parallel/mesh_binding.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;

const kdist::mpi::Communicator& data_comm(const Mesh& mesh) {
#ifdef KDIST_BAD
  return kdist::comm<"dta">(mesh);
#else
  return kdist::comm<"data">(mesh);
#endif
}
