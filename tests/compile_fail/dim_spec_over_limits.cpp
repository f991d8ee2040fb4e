// A compile-time dimension spec holds at most 4 mesh axes (of at most 31 characters each).
// expect: dim_spec_over_limits<1>
#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"a", 1>, kdist::axis<"b", 1>, kdist::axis<"c", 1>,
                               kdist::axis<"d", 1>, kdist::axis<"e", 1>>;
#ifdef KDIST_BAD
using Layout = kdist::TensorLayout<Mesh, kdist::replicated, kdist::axes<"a", "b", "c", "d", "e">>;
#else
using Layout = kdist::TensorLayout<Mesh, "e", kdist::axes<"a", "b", "c", "d">>;
#endif
[[maybe_unused]] constexpr std::size_t rank = Layout::rank();
