// A rule written in code on a typed LayoutMap<Mesh> that names an axis the mesh does not have:
// guide 03's `layout_map["d1/kernel"] = {kdist::replicated, "modle"}` is a compile error naming
// "modle", the mesh type and the rule (issue 10), not a run-time ValueError.
// expect: (modle.*layout_names_an_axis_that_is_not_in_the_mesh|layout_names_an_axis_that_is_not_in_the_mesh.*modle)
#include <kdist/strategy/layout_map.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

void rules() {
  kdist::LayoutMap layout_map(Mesh{});
#ifdef KDIST_BAD
  layout_map["d1/kernel"] = {kdist::replicated, "modle"};
#else
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
#endif
}
