#pragma once
// Moved to kdist/core/detail/data_type_extents.hpp (std-only, so core/concepts.hpp can name the
// static and run-time data types). Kept only until tensor/matmul.hpp includes the new path;
// include that one.
#include <kdist/core/detail/data_type_extents.hpp>
