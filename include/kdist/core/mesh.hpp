#pragma once
//! \file core/mesh.hpp
//! `kdist::DeviceMesh<Axes...>`: the device mesh as a type. Axis names are always static; each
//! extent is static or dynamic (like `std::extents`). Observers use the mdspan vocabulary.

#include <array>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/axis.hpp>
#include <kdist/core/detail/fixed_string.hpp>
#include <kdist/core/detail/mesh_rules.hpp>
#include <kdist/core/detail/row_major.hpp>
#include <kdist/core/error.hpp>

namespace kdist {

// core/runtime_mesh.hpp: the value form, which converts from every mesh.
class RuntimeDeviceMesh;

namespace error {
//! `kdist::DeviceMesh<>` has no axes: a mesh needs at least one, e.g.
//! `kdist::DeviceMesh<kdist::axis<"batch">>`.
template <class Mesh>
struct mesh_has_no_axes;
//! The axis `AxisName` appears more than once in the mesh `Mesh` (its shape and axis names, a
//! dynamic extent as `?`): give every mesh axis its own name.
template <class AxisName, class Mesh>
struct duplicate_axis_name;
//! `AxisName` is not an axis of the mesh `Mesh` (`"shape=(?, 4), axis_names=['data', 'model']"`):
//! check the spelling, or add the axis to the mesh.
template <class AxisName, class Mesh>
struct axis_not_in_mesh;
//! A `kdist::DeviceMesh` template argument is not a `kdist::axis<"name", extent>`.
template <class NotAnAxis>
struct mesh_argument_is_not_an_axis;
}  // namespace error

namespace detail {
//! Name and static extent of a mesh template argument; a non-axis reads as "?" of extent 1, so
//! that its own diagnostic (mesh_argument_is_not_an_axis) is the only error.
template <class A>
struct axis_traits {
  static constexpr std::string_view name = "?";
  static constexpr std::size_t static_extent = 1;
  static constexpr bool is_dynamic = false;
};

//! A private base of DeviceMesh that holds (empty) objects of its axis types, so that each axis'
//! own checks (empty name, zero extent) run, once, when the mesh is instantiated; non-axes are
//! diagnosed by the mesh and held as an empty struct. (A base rather than a static_assert: clang
//! would report a second error reading a member of an axis that failed its checks.)
struct not_an_axis {};
template <std::size_t I, class A>
struct axis_slot {
  [[no_unique_address]] std::conditional_t<is_axis_v<A>, A, not_an_axis> axis_;
};
template <class Seq, class... Axes>
struct instantiate_axes;
template <std::size_t... I, class... Axes>
struct instantiate_axes<std::index_sequence<I...>, Axes...> : axis_slot<I, Axes>... {};
template <axis_type A>
struct axis_traits<A> {
  // An axis' members are its template arguments; one that failed its own checks (empty name,
  // zero extent) still has them, so nothing fails again here.
  static constexpr std::string_view name = A::name.view();
  static constexpr std::size_t static_extent = A::static_extent;
  static constexpr bool is_dynamic = A::is_dynamic;
};

template <class... Axes>
inline constexpr std::array<std::string_view, sizeof...(Axes)> axis_name_views{
    axis_traits<Axes>::name...};

template <class... Axes>
constexpr std::size_t find_axis(std::string_view name) {
  constexpr auto& names = axis_name_views<Axes...>;
  return find_name(names, name).value_or(names.size());
}

//! Writes `shape=(?, 4), axis_names=['data', 'model']` (a dynamic extent as `?`, as the run-time
//! messages print it) to `out` when it is not null; returns its length.
template <class... Axes>
constexpr std::size_t write_mesh_repr(char* out) {
  std::size_t n = 0;
  auto put = [&](std::string_view s) {
    for (char c : s) {
      if (out) out[n] = c;
      ++n;
    }
  };
  auto put_extent = [&](std::size_t e) { n += write_extent(e, out ? out + n : nullptr); };
  std::size_t i = 0;
  put("shape=(");
  ((put(i++ == 0 ? "" : ", "),
    put_extent(axis_traits<Axes>::is_dynamic ? dynamic_extent : axis_traits<Axes>::static_extent)),
   ...);
  if (sizeof...(Axes) == 1) put(",");
  put("), axis_names=[");
  i = 0;
  ((put(i++ == 0 ? "'" : ", '"), put(axis_traits<Axes>::name), put("'")), ...);
  put("]");
  return n;
}
//! The mesh of `Axes` as a `fixed_string`, for diagnostics: compilers print a dynamic extent in
//! a type as 18446744073709551615, this prints `?`.
template <class... Axes>
constexpr auto mesh_repr_string() {
  constexpr std::size_t n = write_mesh_repr<Axes...>(nullptr);
  char buf[n + 1]{};
  write_mesh_repr<Axes...>(buf);
  return fixed_string<n + 1>(std::string_view(buf, n));
}

//! The duplicate-name check. `diagnostic` is a complete type (void) unless two axes share a name,
//! so an empty mesh or a non-axis argument (diagnosed on their own) do not trip it.
template <class... Axes>
struct mesh_checks {
  static constexpr std::size_t dup = first_repeated_name(axis_name_views<Axes...>);
  static constexpr bool unique = !(is_axis_v<Axes> && ...) || dup == sizeof...(Axes);
  template <bool Unique, int = 0>
  struct error_for {
    using type = void;
  };
  template <int Dummy>
  struct error_for<false, Dummy> {
    using type = error::duplicate_axis_name<
        diagnostic_name<fixed_string<axis_name_views<Axes...>[dup].size() + 1>(
            axis_name_views<Axes...>[dup])>,
        diagnostic_name<mesh_repr_string<Axes...>()>>;
  };
  using diagnostic = typename error_for<unique>::type;
};
}  // namespace detail

//! A device mesh whose axis names and (static) extents are part of its type.
//!
//! Compile errors: no axes, a template argument that is not a `kdist::axis`, a duplicated axis
//! name (Keras does not check this), a zero extent (in `kdist::axis`).
//! Run-time errors (`kdist::ValueError`): a device count that does not fit the static extents, or
//! that leaves more than one dynamic extent undetermined.
//!
//! Example (the guide's 2x4 mesh):
//! \code
//! using Mesh = kdist::DeviceMesh<kdist::axis<"data", 2>, kdist::axis<"model", 4>>;
//! Mesh mesh(kdist::list_devices());          // 8 devices, row-major
//! static_assert(Mesh::axis_index<"model"> == 1);
//! \endcode
template <class... Axes>
class DeviceMesh : private detail::instantiate_axes<std::index_sequence_for<Axes...>, Axes...> {
  static_assert(detail::diagnose<(sizeof...(Axes) > 0), error::mesh_has_no_axes<DeviceMesh>>::value,
                "kdist::DeviceMesh: a mesh needs at least one axis");
  static_assert(
      (detail::diagnose<is_axis_v<Axes>, error::mesh_argument_is_not_an_axis<Axes>>::value && ...),
      "kdist::DeviceMesh: every template argument must be a kdist::axis<\"name\", extent>");
  static_assert(detail::diagnose<detail::mesh_checks<Axes...>::unique,
                                 typename detail::mesh_checks<Axes...>::diagnostic>::value,
                "kdist::DeviceMesh: an axis name is used twice; axis names must be unique");

 public:
  static constexpr std::size_t rank() { return sizeof...(Axes); }
  static constexpr std::size_t rank_dynamic() {
    return ((detail::axis_traits<Axes>::is_dynamic ? 1 : 0) + ... + 0);
  }
  //! The static extent of axis r, or kdist::dynamic_extent.
  static constexpr std::size_t static_extent(std::size_t r) { return static_extents_[r]; }
  //! True when every extent is static.
  static constexpr bool is_static() { return rank_dynamic() == 0; }
  //! Product of the static extents (the device count when is_static()).
  static constexpr std::size_t static_size() {
    std::size_t p = 1;
    for (auto e : static_extents_) p *= (e == dynamic_extent ? 1 : e);
    return p;
  }
  static constexpr std::array<std::string_view, sizeof...(Axes)> axis_names() {
    return detail::axis_name_views<Axes...>;
  }
  //! Index of the axis called Name, at compile time; naming a missing axis is a compile error.
  template <detail::fixed_string Name>
  static constexpr std::size_t axis_index = [] {
    constexpr std::size_t i = detail::find_axis<Axes...>(Name.view());
    static_assert(
        detail::diagnose<(i < sizeof...(Axes)),
                         error::axis_not_in_mesh<
                             detail::diagnostic_name<Name>,
                             detail::diagnostic_name<detail::mesh_repr_string<Axes...>()>>>::value,
        "kdist::DeviceMesh::axis_index: no axis of that name in the mesh");
    return i;
  }();
  //! Index of the axis called `name`, or nullopt.
  static constexpr std::optional<std::size_t> find_axis(std::string_view name) {
    std::size_t i = detail::find_axis<Axes...>(name);
    if (i == rank()) return std::nullopt;
    return i;
  }

  //! A mesh of static extents over devices "device:0"... (only when every extent is static).
  DeviceMesh() requires(is_static()) : DeviceMesh(static_size()) {}
  //! Devices "device:0" ... "device:N-1"; a dynamic extent is inferred from N.
  explicit DeviceMesh(std::size_t device_count)
      : extents_(infer_extents(device_count)), devices_(detail::numbered_devices(device_count)) {}
  //! The given devices, row-major over the mesh; at most one dynamic extent is inferred.
  explicit DeviceMesh(std::vector<std::string> devices)
      : extents_(infer_extents(devices.size())), devices_(std::move(devices)) {}
  //! Explicit extents (they must agree with the static ones) and the devices.
  DeviceMesh(const std::array<std::size_t, rank()>& shape, std::vector<std::string> devices)
      : extents_(check_shape(shape, devices.size())), devices_(std::move(devices)) {}
  DeviceMesh(const std::array<std::size_t, rank()>& shape, std::size_t device_count)
      : extents_(check_shape(shape, device_count)),
        devices_(detail::numbered_devices(device_count)) {}

  //! Extent of axis r (the static extent where there is one: a constant the compiler can fold).
  std::size_t extent(std::size_t r) const {
    return static_extents_[r] != dynamic_extent ? static_extents_[r] : extents_[r];
  }
  const std::array<std::size_t, rank()>& extents() const { return extents_; }
  std::size_t size() const { return devices_.size(); }
  const std::vector<std::string>& devices() const { return devices_; }

  //! Mesh coordinates of device `index`, row-major (as np.reshape(devices, shape)).
  std::array<std::size_t, rank()> coords_of(std::size_t index) const {
    if (index >= size()) detail::throw_device_index_out_of_range(index, size());
    std::array<std::size_t, rank()> e{}, c{};
    for (std::size_t r = 0; r < rank(); ++r) e[r] = extent(r);  // static extents fold
    detail::unflatten(e, index, c);
    return c;
  }
  //! Device index at mesh `coords` (inverse of coords_of); a ValueError when out of range.
  std::size_t device_index(const std::array<std::size_t, rank()>& coords) const {
    for (std::size_t r = 0; r < rank(); ++r) {
      if (coords[r] >= extents_[r]) {
        throw ValueError("kdist::DeviceMesh: coordinate " + std::to_string(coords[r]) +
                         " is out of range for axis '" + std::string(axis_names()[r]) +
                         "' of extent " + std::to_string(extents_[r]));
      }
    }
    return detail::flatten(extents_, coords);
  }

  //! The same mesh as a value (axis names as strings). The conversion is RuntimeDeviceMesh's
  //! converting constructor (core/runtime_mesh.hpp, which a caller of to_runtime includes): the
  //! static mesh does not depend on its value form, as mdspan's extents convert in the target.
  template <class Runtime = RuntimeDeviceMesh>
  Runtime to_runtime() const {
    return Runtime(*this);
  }

  //! `<DeviceMesh shape=(2, 4), axis_names=['data', 'model']>`, as Keras prints it.
  std::string to_string() const { return detail::mesh_repr(extents_, axis_names()); }
  friend std::ostream& operator<<(std::ostream& os, const DeviceMesh& m) {
    return os << m.to_string();
  }
  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    return a.extents_ == b.extents_ && a.devices_ == b.devices_;
  }

 private:
  static constexpr std::array<std::size_t, sizeof...(Axes)> static_extents_{
      detail::axis_traits<Axes>::static_extent...};

  static std::string names_repr() {
    std::vector<std::string> names;
    for (auto n : axis_names()) names.emplace_back(n);
    return detail::join_quoted(names);
  }
  static std::string static_shape_repr() {
    std::string out = "(";
    for (std::size_t r = 0; r < rank(); ++r) {
      if (r) out += ", ";
      out += static_extents_[r] == dynamic_extent ? "?" : std::to_string(static_extents_[r]);
    }
    return out + (rank() == 1 ? ",)" : ")");
  }

  static std::array<std::size_t, rank()> infer_extents(std::size_t device_count) {
    std::array<std::size_t, rank()> e = static_extents_;
    const std::size_t fixed = static_size();
    if constexpr (rank_dynamic() == 0) {
      if (device_count != fixed) {
        throw ValueError("kdist::DeviceMesh: shape does not match the number of devices: shape " +
                         static_shape_repr() + " with axis_names " + names_repr() + " holds " +
                         std::to_string(fixed) + " devices, but " + std::to_string(device_count) +
                         " were given");
      }
    } else if constexpr (rank_dynamic() == 1) {
      if (device_count == 0 || device_count % fixed != 0) {
        throw ValueError("kdist::DeviceMesh: shape does not match the number of devices: " +
                         std::to_string(device_count) + " devices cannot fill shape " +
                         static_shape_repr() + " with axis_names " + names_repr() +
                         " (the static extents multiply to " + std::to_string(fixed) +
                         ", which must divide the device count)");
      }
      for (auto& x : e) {
        if (x == dynamic_extent) x = device_count / fixed;
      }
    } else {
      throw ValueError("kdist::DeviceMesh: shape " + static_shape_repr() + " with axis_names " +
                       names_repr() + " has " + std::to_string(rank_dynamic()) +
                       " dynamic extents; a device count alone determines at most one. Pass the "
                       "shape: DeviceMesh({...}, devices)");
    }
    return e;
  }

  static std::array<std::size_t, rank()> check_shape(const std::array<std::size_t, rank()>& shape,
                                                     std::size_t device_count) {
    for (std::size_t r = 0; r < rank(); ++r) {
      if (static_extents_[r] != dynamic_extent && static_extents_[r] != shape[r]) {
        throw ValueError("kdist::DeviceMesh: axis '" + std::string(axis_names()[r]) +
                         "' has static extent " + std::to_string(static_extents_[r]) + ", but " +
                         std::to_string(shape[r]) + " was given");
      }
    }
    // The names passed their checks at compile time; the extents and the count meet the rules
    // every mesh type shares.
    if (auto problem = detail::shape_problem(shape, axis_names(), device_count)) {
      throw ValueError("kdist::DeviceMesh: " + *problem);
    }
    return shape;
  }

  std::array<std::size_t, rank()> extents_;
  std::vector<std::string> devices_;
};

template <class T>
inline constexpr bool is_device_mesh_v = false;
template <class... Axes>
inline constexpr bool is_device_mesh_v<DeviceMesh<Axes...>> = true;

//! `kdist::axis_index_v<Mesh, "model">`: index of an axis by name, at compile time.
template <class Mesh, detail::fixed_string Name>
inline constexpr std::size_t axis_index_v = Mesh::template axis_index<Name>;

namespace detail {
//! `Mesh` as `shape=(?, 4), axis_names=['data', 'model']` (a `fixed_string`), for diagnostics
//! that name a mesh type; `?` for what is not a DeviceMesh.
template <class Mesh>
struct mesh_repr_of {
  static constexpr fixed_string<2> value{std::string_view("?")};
};
template <class... Axes>
struct mesh_repr_of<DeviceMesh<Axes...>> {
  static constexpr auto value = mesh_repr_string<Axes...>();
};
}  // namespace detail

}  // namespace kdist
