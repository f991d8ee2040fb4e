// An EvenTensorLayout demands that the shards divide each static extent: 202 over 4 'model' shards.
// expect: extent_not_divisible<1, 202, 4,
#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Kernel = kdist::EvenTensorLayout<Mesh, kdist::replicated, "model">;
#ifdef KDIST_BAD
static_assert(Kernel::check_static_shape<784, 202>());
#else
static_assert(Kernel::check_static_shape<784, 200>());
#endif
