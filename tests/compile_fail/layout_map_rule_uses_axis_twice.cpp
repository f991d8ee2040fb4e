// A rule written in code on a typed LayoutMap<Mesh> that shards two dimensions over one mesh
// axis (Keras raises this at run time, when the layout is first used).
// expect: layout_uses_a_mesh_axis_twice
#include <kdist/strategy/layout_map.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;

void rules() {
  kdist::LayoutMap layout_map(Mesh{});
#ifdef KDIST_BAD
  layout_map.insert("d2/kernel", {"model", kdist::axes<"data", "model">});
#else
  layout_map.insert("d2/kernel", {"model", kdist::axes<"data">});
#endif
}
