#pragma once
//! \file ops/detail/kokkos_math.hpp
//! Math functions callable in Kokkos kernels, spelled the same on Kokkos 3.x (where they live in
//! `Kokkos::Experimental`) and Kokkos 4.x (where they live in `Kokkos`).

#include <Kokkos_Core.hpp>

namespace kdist::detail::kmath {

#if KOKKOS_VERSION >= 40000
using Kokkos::cos;
using Kokkos::exp;
using Kokkos::log;
using Kokkos::pow;
using Kokkos::sqrt;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::log;
using Kokkos::Experimental::pow;
using Kokkos::Experimental::sqrt;
#endif

}  // namespace kdist::detail::kmath
