#pragma once
//! \file parallel/profiling_region.hpp
//! kdist::detail::ProfilingRegion: a Kokkos profiling region for the lifetime of a scope, so an
//! exception leaves the region stack balanced (never a raw pushRegion ... popRegion around code that
//! can throw). Every entry point of parallel/, tensor/, nn/ and io/ opens one named "kdist::<fn>".

#include <string>

#include <Kokkos_Core.hpp>

namespace kdist::detail {

//! Pushes `name` on construction, pops it on destruction (also when the scope is left by a throw).
class ProfilingRegion {
 public:
  explicit ProfilingRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ProfilingRegion(const ProfilingRegion&) = delete;
  ProfilingRegion& operator=(const ProfilingRegion&) = delete;
  ~ProfilingRegion() { Kokkos::Profiling::popRegion(); }
};

}  // namespace kdist::detail
