// A rank-2 layout checked against a static shape of rank 1.
// expect: layout_rank_mismatch<2, 1,
#include <kdist/core/layout.hpp>

using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;
#ifdef KDIST_BAD
static_assert(Kernel::check_static_shape<200>());
#else
static_assert(Kernel::check_static_shape<784, 200>());
#endif
