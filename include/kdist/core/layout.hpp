#pragma once
//! \file core/layout.hpp
//! `kdist::TensorLayout<Mesh, Dims...>`: how a tensor is laid out on a mesh, checked against the
//! mesh type at compile time. Each Dim is `kdist::replicated` (Keras' None), an axis name
//! (`"model"`) or several (`kdist::axes<"data", "model">`).

#include <array>
#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/detail/fixed_string.hpp>
#include <kdist/core/detail/layout_rules.hpp>
#include <kdist/core/detail/shard_math.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/mesh.hpp>

namespace kdist {

// core/runtime_layout.hpp: the value form, which converts from every layout.
class RuntimeTensorLayout;

namespace error {
//! `Mesh` is not a `kdist::DeviceMesh<...>`: the first argument of TensorLayout is the mesh type.
template <class Mesh>
struct layout_mesh_is_not_a_device_mesh;
//! Tensor dimension `Dim` of the layout names more than 4 mesh axes or an axis name longer than
//! 31 characters (the limits of a compile-time DimSpec); use a RuntimeTensorLayout instead.
template <std::size_t Dim>
struct dim_spec_over_limits;
//! Mesh axis `AxisName` shards two tensor dimensions (or one twice) in layout `Layout`: a mesh
//! axis can shard one dimension only. Replicate one of them (kdist::replicated).
template <class AxisName, class Layout>
struct mesh_axis_used_twice_in_layout;
//! A layout of rank `LayoutRank` (axes `Layout`) is applied to a tensor of rank `TensorRank`:
//! give the layout one entry per tensor dimension.
template <std::size_t LayoutRank, std::size_t TensorRank, class Layout>
struct layout_rank_mismatch;
//! Dimension `Dim` has static extent `Extent`, which the `Shards` shards of the layout `Layout`
//! cannot divide, and the layout demands even division (EvenTensorLayout): change the extent
//! or use TensorLayout (ceil-division blocks).
template <std::size_t Dim, std::size_t Extent, std::size_t Shards, class Layout>
struct extent_not_divisible;
//! Static shard arithmetic (static_local_extents) on dimension `Dim` of layout `Layout`, which
//! is sharded over a mesh axis of dynamic extent: use the run-time local_extents instead.
template <std::size_t Dim, class Layout>
struct dimension_uses_a_dynamic_mesh_axis;
}  // namespace error

namespace detail {

//! Writes the Python repr of dims, e.g. (None, 'model'), into out (if not null); returns length.
template <std::size_t N>
constexpr std::size_t write_axes_repr(const std::array<DimSpec, N>& dims, char* out) {
  std::size_t n = 0;
  auto put = [&](std::string_view s) {
    for (char c : s) {
      if (out) out[n] = c;
      ++n;
    }
  };
  put("(");
  for (std::size_t d = 0; d < N; ++d) {
    if (d) put(", ");
    const DimSpec& s = dims[d];
    if (s.size() == 0) put("None");
    if (s.size() > 1) put("(");
    for (std::size_t k = 0; k < s.size(); ++k) {
      if (k) put(", ");
      put("'");
      put(s.axis(k));
      put("'");
    }
    if (s.size() > 1) put(")");
  }
  if (N == 1) put(",");
  put(")");
  return n;
}

template <DimSpec... Dims>
inline constexpr std::array<DimSpec, sizeof...(Dims)> dim_array{Dims...};

template <DimSpec... Dims>
constexpr auto axes_repr_string() {
  constexpr std::size_t n = write_axes_repr(dim_array<Dims...>, nullptr);
  char buf[n + 1]{};
  write_axes_repr(dim_array<Dims...>, buf);
  return fixed_string<n + 1>(std::string_view(buf, n));
}

template <DimSpec D, std::size_t K>
inline constexpr auto dim_axis_name = fixed_string<(K < D.size() ? D.axis(K).size() : 0) + 1>(
    K < D.size() ? D.axis(K) : std::string_view{});

// Specialized on the mesh alone: nvcc cannot deduce a `fixed_string` from a partial
// specialization's pattern (see is_axis_v).
template <class Mesh>
struct axis_not_in_mesh_error_of;
template <class... Axes>
struct axis_not_in_mesh_error_of<DeviceMesh<Axes...>> {
  template <fixed_string Name>
  using type =
      error::axis_not_in_mesh<diagnostic_name<Name>, diagnostic_name<mesh_repr_string<Axes...>()>>;
};
template <class Mesh, fixed_string Name>
struct axis_not_in_mesh_error {
  using type = typename axis_not_in_mesh_error_of<Mesh>::template type<Name>;
};

struct DimAxisRef {
  std::size_t dim = 0, k = 0;
  bool found = false;
};

//! The static facts of a layout: per dimension, the mesh axes it uses; the first rule broken.
template <class Mesh, DimSpec... Dims>
struct layout_facts {
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr std::array<DimSpec, rank> dims{Dims...};

  static constexpr DimAxisRef first_overflow() {
    for (std::size_t d = 0; d < rank; ++d) {
      if (dims[d].overflow) return {d, 0, true};
    }
    return {};
  }
  // The rules are detail/layout_rules.hpp's, which RuntimeTensorLayout applies too.
  static constexpr std::size_t count(std::size_t d) { return dims[d].size(); }
  static constexpr std::string_view name(std::size_t d, std::size_t k) { return dims[d].axis(k); }
  static constexpr std::optional<std::size_t> find(std::string_view n) {
    return Mesh::find_axis(n);
  }
  static constexpr DimAxisRef first_unknown_axis() {
    const auto r = detail::first_unknown_axis(rank, count, name, find);
    return {r.dim, r.k, r.found};
  }
  static constexpr DimAxisRef first_reused_axis() {
    const auto r = detail::first_reused_axis(rank, count, name, find);
    return {r.dim, r.k, r.found};
  }
  static constexpr DimAxisRef overflow = first_overflow();
  static constexpr DimAxisRef unknown = overflow.found ? DimAxisRef{} : first_unknown_axis();
  static constexpr DimAxisRef reused =
      (overflow.found || unknown.found) ? DimAxisRef{} : first_reused_axis();
  static constexpr bool valid = !overflow.found && !unknown.found && !reused.found;

  static constexpr DimSpec dim_or_replicated(std::size_t d) {
    return d < rank ? dims[d] : DimSpec{};
  }

  //! Mesh axis indices of each dimension (valid layouts only).
  struct AxisIndices {
    std::array<std::size_t, DimSpec::max_axes> idx{};
    std::size_t count = 0;
  };
  static constexpr std::array<AxisIndices, rank> axis_indices() {
    std::array<AxisIndices, rank> out{};
    if constexpr (valid) {
      for (std::size_t d = 0; d < rank; ++d) {
        for (std::size_t k = 0; k < dims[d].size(); ++k) {
          out[d].idx[k] = *Mesh::find_axis(dims[d].axis(k));
        }
        out[d].count = dims[d].size();
      }
    }
    return out;
  }
};

//! Stands in for a first argument that is not a DeviceMesh (a layout of replicated dimensions on
//! a one-axis mesh), so that layout_mesh_is_not_a_device_mesh is the only error.
using placeholder_mesh = DeviceMesh<axis<"?", 1>>;
template <DimSpec>
inline constexpr DimSpec replicated_dim{};
template <class Mesh, DimSpec... Dims>
using checked_layout_facts =
    std::conditional_t<is_device_mesh_v<Mesh>, layout_facts<Mesh, Dims...>,
                       layout_facts<placeholder_mesh, replicated_dim<Dims>...>>;

}  // namespace detail

//! A layout whose mesh type and per-dimension sharding are part of its type; see TensorLayout and
//! EvenTensorLayout, the two spellings users write.
//!
//! Compile errors, each naming the offender: a first argument that is not a DeviceMesh, an axis
//! the mesh does not have (listing the mesh's axes), a mesh axis used twice, an application to a
//! tensor of another static rank, a static extent an EvenTensorLayout cannot divide.
template <class Mesh, Division Div, DimSpec... Dims>
class BasicTensorLayout {
  static_assert(detail::diagnose<is_device_mesh_v<Mesh>,
                                 error::layout_mesh_is_not_a_device_mesh<Mesh>>::value,
                "kdist::TensorLayout: the first template argument must be a kdist::DeviceMesh");
  // Mesh_ is Mesh, or a placeholder when Mesh is not a mesh (diagnosed above, nothing else fails).
  using Mesh_ = std::conditional_t<is_device_mesh_v<Mesh>, Mesh, detail::placeholder_mesh>;
  using facts = detail::checked_layout_facts<Mesh, Dims...>;
  static_assert(detail::diagnose<!facts::overflow.found,
                                 error::dim_spec_over_limits<facts::overflow.dim>>::value,
                "kdist::TensorLayout: a dimension names too many mesh axes or too long a name");
  static_assert(detail::diagnose<
                    !facts::unknown.found,
                    typename detail::axis_not_in_mesh_error<
                        Mesh_, detail::dim_axis_name<facts::dim_or_replicated(facts::unknown.dim),
                                                     facts::unknown.k>>::type>::value,
                "kdist::TensorLayout: the layout names an axis that is not an axis of the mesh");
  static_assert(
      detail::diagnose<!facts::reused.found,
                       error::mesh_axis_used_twice_in_layout<
                           detail::diagnostic_name<detail::dim_axis_name<
                               facts::dim_or_replicated(facts::reused.dim), facts::reused.k>>,
                           detail::diagnostic_name<detail::axes_repr_string<Dims...>()>>>::value,
      "kdist::TensorLayout: a mesh axis is used twice; a mesh axis can shard one dimension only");

  static constexpr auto axis_indices_ = facts::axis_indices();
  static constexpr auto repr_ = detail::axes_repr_string<Dims...>();

 public:
  using mesh_type = Mesh;

  //! Rank of the tensors this layout applies to.
  static constexpr std::size_t rank() { return sizeof...(Dims); }
  static constexpr Division division() { return Div; }
  static constexpr std::array<DimSpec, sizeof...(Dims)> dims() { return {Dims...}; }
  //! (None, 'model') as Keras prints a layout's axes.
  static constexpr std::string_view axes_repr() { return repr_.view(); }
  //! The same as a `detail::fixed_string`, for diagnostics that name the layout.
  static constexpr auto axes_repr_string() { return repr_; }
  //! Number of mesh axes dimension d is sharded over, and the k-th one's index in the mesh.
  static constexpr std::size_t mesh_axis_count(std::size_t d) { return axis_indices_[d].count; }
  static constexpr std::size_t mesh_axis(std::size_t d, std::size_t k) {
    return axis_indices_[d].idx[k];
  }
  //! Shards of dimension d when the mesh axes it uses are static, else kdist::dynamic_extent.
  static constexpr std::size_t static_shards(std::size_t d) {
    std::size_t p = 1;
    for (std::size_t k = 0; k < axis_indices_[d].count; ++k) {
      const std::size_t e = Mesh_::static_extent(axis_indices_[d].idx[k]);
      if (e == dynamic_extent) return dynamic_extent;
      p *= e;
    }
    return p;
  }

  //! The local extent of dimension d when its global extent is `global`, known at compile time
  //! (the same on every device): when `global` and the mesh axes of d are static and the shards
  //! divide `global`. Else kdist::dynamic_extent (ceil-division blocks differ across devices).
  static constexpr std::size_t static_local_extent(std::size_t d, std::size_t global) {
    const std::size_t shards = static_shards(d);
    if (global == dynamic_extent || shards == dynamic_extent || global % shards != 0) {
      return dynamic_extent;
    }
    return global / shards;
  }

  //! Checks a tensor of static shape Shape... against the layout at compile time: the rank and,
  //! for EvenTensorLayout on static mesh axes, even division (kdist::dynamic_extent in Shape: a
  //! run-time extent, checked at run time).
  template <std::size_t... Shape>
  static constexpr bool check_static_shape() {
    static_assert(
        detail::diagnose<sizeof...(Shape) == rank(),
                         error::layout_rank_mismatch<rank(), sizeof...(Shape),
                                                     detail::diagnostic_name<repr_>>>::value,
        "kdist::TensorLayout: the layout's rank differs from the tensor's rank");
    if constexpr (sizeof...(Shape) == rank() && Div == Division::even) {
      return check_even_division<Shape...>(std::make_index_sequence<rank()>{});
    }
    return true;
  }

  //! Block of dimension d (global extent `global`) held at mesh `coords`, computed at compile
  //! time when the mesh axes of d are static.
  static constexpr Block static_block(std::size_t d, std::size_t global,
                                      const std::array<std::size_t, Mesh_::rank()>& coords) {
    std::array<std::size_t, Mesh_::rank()> ext{};
    for (std::size_t r = 0; r < Mesh_::rank(); ++r) ext[r] = Mesh_::static_extent(r);
    return block_on(d, global, ext, coords);
  }
  //! Local extents at mesh `coords` of a tensor of static shape Shape... (static mesh axes only).
  template <std::size_t... Shape>
  static constexpr std::array<std::size_t, rank()> static_local_extents(
      const std::array<std::size_t, Mesh_::rank()>& coords) {
    static_assert(check_static_shape<Shape...>());
    static_assert(all_static_shards(std::make_index_sequence<rank()>{}));
    std::array<std::size_t, rank()> out{};
    if constexpr (sizeof...(Shape) == rank()) {  // else diagnosed above
      constexpr std::array<std::size_t, rank()> shape{Shape...};
      for (std::size_t d = 0; d < rank(); ++d) out[d] = static_block(d, shape[d], coords).extent;
    }
    return out;
  }

  //! A layout on a mesh of static extents (no mesh object needed).
  BasicTensorLayout() requires(Mesh_::is_static()) : mesh_() {}
  explicit BasicTensorLayout(Mesh_ mesh) : mesh_(std::move(mesh)) {}

  const Mesh_& device_mesh() const { return mesh_; }

  std::size_t shards(std::size_t d) const {
    return detail::group_size(axis_indices_[d].idx, axis_indices_[d].count, mesh_extents());
  }
  std::size_t shard_index(std::size_t d,
                          const std::array<std::size_t, Mesh_::rank()>& coords) const {
    return detail::group_index(axis_indices_[d].idx, axis_indices_[d].count, mesh_extents(),
                               coords);
  }
  Block block(std::size_t d, std::size_t global,
              const std::array<std::size_t, Mesh_::rank()>& coords) const {
    return block_on(d, global, mesh_extents(), coords);
  }

  //! Local extents of the block device `device` holds of a tensor of global `shape`. A shape of
  //! another rank is a compile error; an even-division violation a ValueError.
  template <std::size_t R>
  std::array<std::size_t, R> local_extents(const std::array<std::size_t, R>& shape,
                                           std::size_t device) const {
    return per_dim<R>(shape, device, [](Block b) { return b.extent; });
  }
  //! Global offsets of that block.
  template <std::size_t R>
  std::array<std::size_t, R> offsets(const std::array<std::size_t, R>& shape,
                                     std::size_t device) const {
    return per_dim<R>(shape, device, [](Block b) { return b.offset; });
  }
  //! Devices holding element `index` of a tensor of global `shape` (all replicas).
  template <std::size_t R>
  std::vector<std::size_t> owners(const std::array<std::size_t, R>& shape,
                                  const std::array<std::size_t, R>& index) const {
    static_assert(check_rank<R>());
    check_shape(shape);
    detail::check_index_in_shape(shape, index);
    std::vector<std::size_t> out;
    for (std::size_t device = 0; device < mesh_.size(); ++device) {
      const auto coords = mesh_.coords_of(device);
      bool holds = true;
      for (std::size_t d = 0; d < R && holds; ++d) {
        holds = detail::chunk_owner(shape[d], shards(d), index[d]) == shard_index(d, coords);
      }
      if (holds) out.push_back(device);
    }
    return out;
  }
  //! Run-time check of a global shape (rank is checked at compile time).
  template <std::size_t R>
  void check_shape(const std::array<std::size_t, R>& shape) const {
    static_assert(check_rank<R>());
    if constexpr (Div == Division::even) {
      for (std::size_t d = 0; d < R; ++d) {
        if (shape[d] % shards(d) != 0) {
          constexpr std::array<DimSpec, sizeof...(Dims)> dims{Dims...};
          std::vector<std::string_view> names;
          for (std::size_t k = 0; k < dims[d].size(); ++k) names.push_back(dims[d].axis(k));
          detail::throw_not_evenly_divisible(d, shape, shards(d), detail::dim_repr(names),
                                             axes_repr());
        }
      }
    }
  }

  //! The same layout as a value. The conversion is RuntimeTensorLayout's converting constructor
  //! (core/runtime_layout.hpp, which a caller of to_runtime includes): the static layout does not
  //! depend on its value form, as mdspan's extents convert in the target.
  template <class Runtime = RuntimeTensorLayout>
  Runtime to_runtime() const {
    return Runtime(*this);
  }

  //! `<TensorLayout axes=('model', 'data'), device_mesh=<DeviceMesh ...>>`, as Keras prints it.
  std::string to_string() const {
    return "<TensorLayout axes=" + std::string(axes_repr()) + ", device_mesh=" + mesh_.to_string() +
           ">";
  }
  friend std::ostream& operator<<(std::ostream& os, const BasicTensorLayout& l) {
    return os << l.to_string();
  }
  friend bool operator==(const BasicTensorLayout& a, const BasicTensorLayout& b) {
    return a.mesh_ == b.mesh_;
  }

 private:
  //! The mesh's extents, static ones as constants (so shard arithmetic on static axes folds).
  std::array<std::size_t, Mesh_::rank()> mesh_extents() const {
    std::array<std::size_t, Mesh_::rank()> e{};
    for (std::size_t r = 0; r < Mesh_::rank(); ++r) e[r] = mesh_.extent(r);
    return e;
  }
  template <std::size_t R>
  static constexpr bool check_rank() {
    static_assert(
        detail::diagnose<R == rank(), error::layout_rank_mismatch<
                                          rank(), R, detail::diagnostic_name<repr_>>>::value,
        "kdist::TensorLayout: the layout's rank differs from the tensor's rank");
    return true;  // the static_assert above is the one error; callers need not repeat it
  }
  template <std::size_t... D>
  static constexpr bool all_static_shards(std::index_sequence<D...>) {
    static_assert(
        (detail::diagnose<
             static_shards(D) != dynamic_extent,
             error::dimension_uses_a_dynamic_mesh_axis<D, detail::diagnostic_name<repr_>>>::value &&
         ...),
        "kdist::TensorLayout: static shard arithmetic needs static mesh extents");
    return true;
  }
  template <std::size_t... Shape, std::size_t... D>
  static constexpr bool check_even_division(std::index_sequence<D...>) {
    constexpr std::array<std::size_t, rank()> shape{Shape...};
    static_assert(
        (detail::diagnose < static_shards(D) == dynamic_extent || shape[D] == dynamic_extent ||
             shape[D] % static_shards(D) == 0,
         error::extent_not_divisible < D, shape[D], static_shards(D),
         detail::diagnostic_name<repr_> >> ::value && ...),
        "kdist::EvenTensorLayout: a static extent is not divisible by its number of shards");
    return true;
  }
  template <class Extents, class Coords>
  static constexpr Block block_on(std::size_t d, std::size_t global, const Extents& ext,
                                  const Coords& coords) {
    const auto& a = axis_indices_[d];
    return detail::chunk_block(global, detail::group_size(a.idx, a.count, ext),
                               detail::group_index(a.idx, a.count, ext, coords));
  }
  template <std::size_t R, class F>
  std::array<std::size_t, R> per_dim(const std::array<std::size_t, R>& shape, std::size_t device,
                                     F f) const {
    static_assert(check_rank<R>());
    if constexpr (R != rank()) {
      return {};  // diagnosed above
    } else {
      if constexpr (Div == Division::even) {
        for (std::size_t d = 0; d < R; ++d) {
          if (shape[d] % shards(d) != 0) check_shape(shape);  // throws its message
        }
      }
      const auto coords = mesh_.coords_of(device);
      // One block() per dimension with a constant d, so static mesh extents fold.
      return [&]<std::size_t... D>(std::index_sequence<D...>) {
        return std::array<std::size_t, R>{f(block(D, shape[D], coords))...};
      }
      (std::make_index_sequence<R>{});
    }
  }

  Mesh_ mesh_;
};

//! A layout with ceil-division blocks for sizes the shards do not divide (torch.chunk): a
//! BasicTensorLayout<Mesh, Division::chunk, Dims...> (its base; function templates deduce it).
//!
//! Example (the guide's kernel layout): `kdist::TensorLayout<Mesh, kdist::replicated, "model">`.
//!
//! (A class, not an alias of BasicTensorLayout: nvcc's front end spells an alias template over a
//! DimSpec pack, named as a template argument in host code, with objects the host compiler never
//! sees ('__T0'), and GCC 12 crashes on such an alias in dependent contexts.)
template <class Mesh, DimSpec... Dims>
class TensorLayout : public BasicTensorLayout<Mesh, Division::chunk, Dims...> {
 public:
  using BasicTensorLayout<Mesh, Division::chunk, Dims...>::BasicTensorLayout;
};

//! A layout that demands even division: a static_assert where extents are static
//! (check_static_shape), a ValueError at run time otherwise. A BasicTensorLayout<Mesh,
//! Division::even, Dims...> (its base).
template <class Mesh, DimSpec... Dims>
class EvenTensorLayout : public BasicTensorLayout<Mesh, Division::even, Dims...> {
 public:
  using BasicTensorLayout<Mesh, Division::even, Dims...>::BasicTensorLayout;
};

template <class T>
inline constexpr bool is_tensor_layout_v = false;
template <class Mesh, Division Div, DimSpec... Dims>
inline constexpr bool is_tensor_layout_v<BasicTensorLayout<Mesh, Div, Dims...>> = true;
template <class Mesh, DimSpec... Dims>
inline constexpr bool is_tensor_layout_v<TensorLayout<Mesh, Dims...>> = true;
template <class Mesh, DimSpec... Dims>
inline constexpr bool is_tensor_layout_v<EvenTensorLayout<Mesh, Dims...>> = true;

}  // namespace kdist
