#pragma once
//! \file strategy/layout_map.hpp
//! `kdist::LayoutMap`: Keras' `LayoutMap` (keys are regular expressions, values are tensor
//! layouts) with Keras 3.14+ lookup rules, a linear-time regex engine (RE2), one-pass matching of
//! every rule (RE2::Set), a per-path result cache, and the diagnostics Keras users ask for.
//!
//! Lookup of a path (a variable's or tensor's path, e.g. "dense_1/kernel"):
//!  1. a key equal to the path wins;
//!  2. otherwise every key is tried as a regular expression matching the WHOLE path (Python's
//!     `re.fullmatch`); exactly one match gives its layout;
//!  3. more than one match is a `kdist::ValueError` naming the path and every matching key;
//!  4. no match means "no rule": `get` returns nothing (the distribution replicates).
//!
//! Where kdist differs from Keras, on purpose:
//!  - `contains(key)` is an exact-key test (Keras' `in` is always true, because its `__getitem__`
//!    returns None instead of raising KeyError);
//!  - a list of axis names is accepted as a layout (Keras rejects lists although its docs accept
//!    them), as is a brace list: `map["d1/kernel"] = {kdist::replicated, "model"}`;
//!  - a bad regular expression is an error at insertion, naming the key and RE2's message (Keras
//!    finds it at the first lookup); RE2 has no backreferences and no lookaround, and those are
//!    errors at insertion too;
//!  - the engine is RE2 (linear time in the path's length, no recursion over the text), so a key
//!    like `(a+)+$` cannot hang on a long path and a 1 MB path cannot overflow the stack.
//!
//! Thread safety: const member functions (`get`, `find`, `resolve`, `check_variables`,
//! `operator[] const`, `report`, iteration) may be called from many threads at once; the lookup
//! cache, the compiled RE2::Set and the diagnostics behind them are guarded by a
//! `std::shared_mutex` (a cached lookup takes it shared). Changing the map (`insert`, assignment
//! through `operator[]`, `erase`, `pop`, `set_strict`, `set_contracted_dims`,
//! `set_row_parallel_pattern`, `reset_report`) must not run concurrently with any other use of
//! the same map, as for a standard container.
//!
//! \code
//! kdist::RuntimeDeviceMesh mesh({2, 4}, {"data", "model"}, 8);
//! kdist::LayoutMap layout_map(mesh);
//! layout_map["d1/kernel"] = {kdist::replicated, "model"};   // Keras: (None, "model")
//! layout_map["d1/bias"] = {"model"};
//! layout_map[".*conv2d.*kernel"] =
//!     {kdist::replicated, kdist::replicated, kdist::replicated, "model"};
//! std::optional<kdist::RuntimeTensorLayout> l = layout_map.get("d1/kernel");  // (None, 'model')
//! \endcode

#include <cstddef>
#include <kdist/core/layout.hpp>
#include <kdist/core/layout_axes.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_concepts.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/strategy/runtime_layout_map.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kdist {

//! Keras' `LayoutMap`, typed by its mesh. `LayoutMap<Mesh>` for a static `kdist::DeviceMesh<...>`
//! checks the rules written in code at compile time: in `layout_map["d1/kernel"] =
//! {kdist::replicated, "modle"}` the name "modle" is a compile error naming it and the mesh's
//! axes (kdist::LayoutAxes). Rules known only at run time (read from a file) go through the
//! explicit run-time form, `insert(key, std::vector<DimAxes>)` or `runtime()[key] = ...`, checked
//! when inserted. `LayoutMap<>` (= `LayoutMap<RuntimeDeviceMesh>`) is the run-time map itself.
//! Both are RuntimeLayoutMaps: every lookup, strict mode and diagnostic is shared, and
//! ModelParallel takes either. The constructor's argument picks the type:
//! `kdist::LayoutMap layout_map(mesh)` is typed when `mesh` is a static mesh.
template <class Mesh = RuntimeDeviceMesh>
class LayoutMap : public RuntimeLayoutMap {
  static_assert(is_device_mesh_v<Mesh>,
                "kdist::LayoutMap<Mesh>: Mesh must be a kdist::DeviceMesh<kdist::axis<...>...> "
                "(or RuntimeDeviceMesh, the default, for a map checked at run time)");

 public:
  using mesh_type = Mesh;
  class Proxy;

  explicit LayoutMap(const Mesh& mesh) : RuntimeLayoutMap(mesh) {}

  //! Inserts a rule written in code, checked at compile time (see the class comment).
  void insert(std::string key, LayoutAxes<Mesh> axes) {
    RuntimeLayoutMap::insert(std::move(key), axes.to_runtime());
  }
  //! A static layout on this map's mesh type.
  template <DimSpec... Dims>
  void insert(std::string key, const TensorLayout<Mesh, Dims...>& layout) {
    RuntimeLayoutMap::insert(std::move(key), static_cast<RuntimeTensorLayout>(layout));
  }
  //! The run-time forms, for rules read at run time (checked when inserted): a
  //! `std::vector<DimAxes>` or a RuntimeTensorLayout, named as such (braces are the checked form).
  template <RuntimeLayoutRule Runtime>
  void insert(std::string key, Runtime&& rule) {
    RuntimeLayoutMap::insert(std::move(key), std::forward<Runtime>(rule));
  }

  //! `layout_map[key] = {...}` checked at compile time; reading looks `key` up as a path.
  Proxy operator[](std::string_view key);
  using RuntimeLayoutMap::operator[];  // the const lookup
  //! The same map, run-time checked: `layout_map.runtime()["d1/kernel"] = axes_from_a_file`.
  RuntimeLayoutMap& runtime() { return *this; }
  const RuntimeLayoutMap& runtime() const { return *this; }
};

//! The run-time map: every rule checked when inserted.
template <>
class LayoutMap<RuntimeDeviceMesh> : public RuntimeLayoutMap {
 public:
  using mesh_type = RuntimeDeviceMesh;
  using RuntimeLayoutMap::RuntimeLayoutMap;
  LayoutMap() = default;
  LayoutMap(const RuntimeLayoutMap& map) : RuntimeLayoutMap(map) {}                 // NOLINT
  LayoutMap(RuntimeLayoutMap&& map) noexcept : RuntimeLayoutMap(std::move(map)) {}  // NOLINT
  RuntimeLayoutMap& runtime() { return *this; }
  const RuntimeLayoutMap& runtime() const { return *this; }
};

LayoutMap()->LayoutMap<RuntimeDeviceMesh>;
LayoutMap(RuntimeDeviceMesh)->LayoutMap<RuntimeDeviceMesh>;
LayoutMap(std::optional<RuntimeDeviceMesh>)->LayoutMap<RuntimeDeviceMesh>;
template <class... Axes>
LayoutMap(DeviceMesh<Axes...>) -> LayoutMap<DeviceMesh<Axes...>>;

//! What `layout_map[key]` returns on a typed map: assignment from braces is checked at compile
//! time; everything else is the run-time proxy's.
template <class Mesh>
class LayoutMap<Mesh>::Proxy : public RuntimeLayoutMap::Proxy {
 public:
  Proxy(LayoutMap& map, std::string_view key)
      : RuntimeLayoutMap::Proxy(map, key), typed_(&map), key_(key) {}
  //! `layout_map["d1/kernel"] = {kdist::replicated, "model"}`, checked at compile time.
  Proxy& operator=(LayoutAxes<Mesh> axes) {
    typed_->insert(key_, axes);
    return *this;
  }
  template <DimSpec... Dims>
  Proxy& operator=(const TensorLayout<Mesh, Dims...>& layout) {
    typed_->insert(key_, layout);
    return *this;
  }
  template <RuntimeLayoutRule Runtime>
  Proxy& operator=(Runtime&& rule) {
    typed_->insert(key_, std::forward<Runtime>(rule));
    return *this;
  }
  Proxy& operator=(const Proxy& other) {
    typed_->insert(key_, other.value());
    return *this;
  }
  Proxy(const Proxy&) = default;

 private:
  LayoutMap* typed_;
  std::string key_;
};

template <class Mesh>
typename LayoutMap<Mesh>::Proxy LayoutMap<Mesh>::operator[](std::string_view key) {
  return Proxy(*this, key);
}

}  // namespace kdist
