// ModelParallel over a typed LayoutMap<Mesh> with a batch axis written in code that the mesh does
// not have: a compile error naming the rule and "dta" (issue 10), not a run-time ValueError.
// expect: (dta.*axis_name_is_not_an_axis_of_the_mesh|axis_name_is_not_an_axis_of_the_mesh.*dta)
#include <kdist/strategy/model_parallel.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

void distribution() {
  kdist::LayoutMap layout_map(Mesh{});
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
#ifdef KDIST_BAD
  kdist::ModelParallel model_parallel(layout_map, "dta", {.num_processes = 8, .process_id = 0});
#else
  kdist::ModelParallel model_parallel(layout_map, "data", {.num_processes = 8, .process_id = 0});
#endif
}
