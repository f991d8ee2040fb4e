#pragma once
// Host access to Views that may live in device memory. Under Kokkos CUDA or HIP the default
// memory space is the device's and the host must never index it: tests read results through a
// host copy and write inputs through a host mirror that is then copied back. On a host backend
// these are no copies at all (the View itself).
#include <Kokkos_Core.hpp>

#include <utility>

namespace kdist::test {

// v's values in host memory, to read (v itself when it already lives on the host: do not write
// to it expecting a copy).
template <class View>
auto host_copy(const View& v) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

// A tensor's local block in host memory, to read.
template <class Tensor>
auto local_on_host(const Tensor& t) {
  return host_copy(t.local());
}

// Runs f on a host mirror of v that holds v's values, then copies the mirror back into v.
template <class View, class F>
void edit_on_host(const View& v, F&& f) {
  auto h = host_copy(v);
  std::forward<F>(f)(h);
  Kokkos::deep_copy(v, h);
}

// A View of the default memory space with host View h's extents, layout and values (h itself
// when the default memory space is the host's).
template <class HostView>
auto to_default_space(const HostView& h) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::DefaultExecutionSpace::memory_space(), h);
}

}  // namespace kdist::test
