// DataParallel on a typed mesh with a batch axis written in code that the mesh does not have: a
// compile error naming "dta" (issue 10), not a run-time ValueError.
// expect: (dta.*axis_name_is_not_an_axis_of_the_mesh|axis_name_is_not_an_axis_of_the_mesh.*dta)
#include <kdist/strategy/data_parallel.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"model", 2>, kdist::axis<"data", 4>>;

void distribution(const Mesh& mesh) {
#ifdef KDIST_BAD
  kdist::DataParallel data_parallel(mesh, "dta", {.num_processes = 8, .process_id = 0});
#else
  kdist::DataParallel data_parallel(mesh, "data", {.num_processes = 8, .process_id = 0});
#endif
}
