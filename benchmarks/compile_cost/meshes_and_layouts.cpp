// Compile-cost benchmark: KDIST_CC_MESHES distinct mesh types (default 100), each with its own
// axis names, and 5 layouts on each (the guide's ('model', 'data'), ('data', None, None, None),
// (None, 'model'), ('model',), and an even layout with one dimension over both axes), each used
// the way code uses a layout: repr, static and run-time shard arithmetic, conversion to the
// run-time layout. Timed against baseline.cpp (same includes, nothing instantiated) by
// benchmarks/compile_cost.sh.
#include <array>
#include <cstddef>
#include <string_view>
#include <utility>

#include <kdist/core/layout.hpp>
#include <kdist/core/runtime_layout.hpp>

#ifndef KDIST_CC_MESHES
#define KDIST_CC_MESHES 100
#endif

namespace {

using kdist::replicated;

//! The axis name P followed by the digits of I ("d17", "m17"): distinct names for every mesh.
template <char P, std::size_t I>
constexpr auto indexed_name() {
  constexpr std::size_t digits = I < 10 ? 1 : I < 100 ? 2 : I < 1000 ? 3 : 4;
  char buf[digits + 1]{};
  buf[0] = P;
  std::size_t v = I;
  for (std::size_t k = digits; k > 0; --k, v /= 10) buf[k] = static_cast<char>('0' + v % 10);
  return kdist::detail::fixed_string<digits + 2>(std::string_view(buf, digits + 1));
}

template <std::size_t I>
inline constexpr auto data_name = indexed_name<'d', I>();
template <std::size_t I>
inline constexpr auto model_name = indexed_name<'m', I>();

// Static extents vary too: (1..4) x 2.
template <std::size_t I>
using Mesh = kdist::DeviceMesh<kdist::axis<data_name<I>, 1 + I % 4>, kdist::axis<model_name<I>, 2>>;

template <class Layout, std::size_t R>
std::size_t use_layout(const Layout& layout, const std::array<std::size_t, R>& shape) {
  const auto extents = layout.local_extents(shape, 1);
  const auto offsets = layout.offsets(shape, 0);
  return extents[0] + offsets[0] + Layout::axes_repr().size() + layout.to_runtime().rank();
}

template <std::size_t I>
std::size_t use_mesh() {
  using M = Mesh<I>;
  constexpr kdist::DimSpec d = kdist::axes<data_name<I>>;
  constexpr kdist::DimSpec m = kdist::axes<model_name<I>>;
  constexpr kdist::DimSpec dm = kdist::axes<data_name<I>, model_name<I>>;
  const M mesh;
  std::size_t sum = mesh.to_string().size();
  sum += use_layout(kdist::TensorLayout<M, m, d>(mesh), std::array<std::size_t, 2>{8, 6});
  sum += use_layout(kdist::TensorLayout<M, d, replicated, replicated, replicated>(mesh),
                    std::array<std::size_t, 4>{16, 28, 28, 1});
  sum +=
      use_layout(kdist::TensorLayout<M, replicated, m>(mesh), std::array<std::size_t, 2>{784, 200});
  sum += use_layout(kdist::TensorLayout<M, m>(mesh), std::array<std::size_t, 1>{200});
  using Even = kdist::EvenTensorLayout<M, dm, replicated>;
  static_assert(Even::template check_static_shape<48, 10>());
  sum += use_layout(Even(mesh), std::array<std::size_t, 2>{48, 10});
  sum += kdist::TensorLayout<M, replicated, m>::template static_local_extents<784, 200>({0, 1})[1];
  return sum;
}

template <std::size_t... I>
std::size_t use_all(std::index_sequence<I...>) {
  return (use_mesh<I>() + ...);
}

}  // namespace

std::size_t kdist_compile_cost() {
  return use_all(std::make_index_sequence<KDIST_CC_MESHES>{});
}
