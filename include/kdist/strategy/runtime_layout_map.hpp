#pragma once
//! \file strategy/runtime_layout_map.hpp
//! `kdist::RuntimeLayoutMap`: the LayoutMap checked at run time (rules read from files, meshes
//! known at run time), which the typed `kdist::LayoutMap<Mesh>` (layout_map.hpp) builds on. The
//! lookup rules, the differences from Keras and thread safety are in layout_map.hpp's file comment.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/core/layout_axes.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/runtime_concepts.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>
#include <kdist/strategy/detail/re2.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <ranges>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <kdist/strategy/detail/layout_map_keys.hpp>

namespace kdist {

//! What a LayoutMap's diagnostics saw since construction (or `reset_report`): rules that matched
//! no looked-up path, variables `resolve` replicated because no rule matched them, and kernels
//! whose rule shards a dimension the layer contracts ("contracted-dimension sharding").
//!
//! Contracted-dimension sharding (keras-hub#2807: Gemma's (heads, hidden, head_dim) query rule
//! copied onto Llama's (hidden, heads, head_dim) query kernels shards the hidden dimension) is a
//! warning, not an error: the model trains, but each call of the layer costs communication that
//! the rule did not mean to add. Which dimensions a variable contracts:
//!  1. those declared for its path with `RuntimeLayoutMap::set_contracted_dims(pattern, dims)`
//!     (the first declaration whose pattern matches the whole path wins);
//!  2. otherwise, for a variable whose path ends in "kernel" and whose rank is 2 or more,
//!     dimension 0, by Keras' conventions: Dense (in, out), EinsumDense / MultiHeadAttention
//!     query, key and value (d_model, heads, key_dim), Conv (kh, ...); EXCEPT kernels whose path
//!     matches the row-parallel pattern (`RuntimeLayoutMap::default_row_parallel_pattern`:
//!     attention_output, *_output, *output_dense, ffw_linear, down_proj, o_proj, out_proj, fc2),
//!     where sharding the input dimension is Megatron's row parallelism, paired with a
//!     column-parallel producer, and its all-reduce is the intended one;
//!  3. no dimension for anything else (biases, embeddings, norms...).
//! A contracted dimension is reported when the rule shards it over a mesh axis (of extent > 1
//! when the layout has a mesh).
struct LayoutMapReport {
  //! A variable resolved to "replicated" for want of a rule.
  struct Fallback {
    std::string path;
    std::vector<std::size_t> shape;
    friend bool operator==(const Fallback&, const Fallback&) = default;
  };
  //! A variable whose rule shards a dimension its layer contracts.
  struct ContractedSharding {
    std::string path;
    std::vector<std::size_t> shape;
    //! The key of the rule that matched, and its layout's axes ("('model', 'batch', None)").
    std::string rule;
    std::string layout;
    //! The contracted dimensions the rule shards, and for each the mesh axes it is sharded over.
    std::vector<std::size_t> dims;
    std::vector<std::vector<std::string>> axes;
    friend bool operator==(const ContractedSharding&, const ContractedSharding&) = default;
    //! One line: the variable, its shape, the rule, the dimension and its cost.
    std::string to_string() const {
      std::string dims_text;
      std::vector<std::string> all_axes;
      for (std::size_t i = 0; i < dims.size(); ++i) {
        if (i > 0) dims_text += ", ";
        dims_text += std::to_string(dims[i]) + " (extent " + std::to_string(shape.at(dims[i])) +
                     ") over " + detail::dim_repr(axes[i]);
        for (const auto& a : axes[i])
          if (std::find(all_axes.begin(), all_axes.end(), a) == all_axes.end())
            all_axes.push_back(a);
      }
      const std::string over = detail::join_quoted(all_axes);
      return detail::quote_abbreviated(path) + " shape " + detail::shape_repr(shape) +
             " matches rule " + detail::quote_abbreviated(rule) + " = " + layout +
             ", which shards the contracted (input) dimension " + dims_text +
             ": each call's output is then a partial sum over " + over +
             ", which costs an extra all-reduce of the output per call (or, where those axes "
             "also shard the input's rows, a gather of the kernel); shard an output dimension "
             "instead (the units, or the heads), or declare the layer's contracted dimensions "
             "(set_contracted_dims) or its row-parallel name (set_row_parallel_pattern)";
    }
  };
  //! Keys (in insertion order) that matched none of the paths looked up.
  std::vector<std::string> unused_rules;
  //! Variables (sorted by path) that matched no rule and fell back to replicated.
  std::vector<Fallback> replicated_variables;
  //! Variables (sorted by path) whose rule shards a contracted dimension (see above).
  std::vector<ContractedSharding> contracted_shardings;

  //! True when every rule matched something, no variable fell back and no rule shards a
  //! contracted dimension.
  bool empty() const {
    return unused_rules.empty() && replicated_variables.empty() && contracted_shardings.empty();
  }
  //! A human-readable summary, one item per line.
  std::string to_string() const {
    std::string out = "LayoutMap report: " + std::to_string(unused_rules.size()) +
                      " rule(s) matched nothing, " + std::to_string(replicated_variables.size()) +
                      " variable(s) fell back to replicated";
    if (!contracted_shardings.empty()) {
      out += ", " + std::to_string(contracted_shardings.size()) +
             " variable(s) shard a contracted dimension";
    }
    out += "\n";
    for (const auto& k : unused_rules)
      out += "  unused rule: " + detail::quote_abbreviated(k) + "\n";
    for (const auto& f : replicated_variables) {
      out += "  replicated: " + detail::quote_abbreviated(f.path) + " shape " +
             detail::shape_repr(f.shape) + "\n";
    }
    for (const auto& c : contracted_shardings)
      out += "  contracted-dimension sharding (warning): " + c.to_string() + "\n";
    return out;
  }
  friend std::ostream& operator<<(std::ostream& os, const LayoutMapReport& r) {
    return os << r.to_string();
  }
};

//! A dict-like map from regular-expression keys to tensor layouts (Keras `LayoutMap`); the
//! lookup rules, differences from Keras and thread-safety are in the file comment above.
//!
//! Errors (`kdist::ValueError`): a key that exists ("<key> already exist in the LayoutMap with
//! value ..."), a key that is not a valid RE2 regular expression (naming the key and RE2's
//! error), a layout that does not fit the map's mesh (nothing is inserted), a path that matches
//! more than one key ("Path '<path>' matches multiple layout specification keys: [...]"), and the
//! diagnostics of `resolve`.
class RuntimeLayoutMap {
 public:
  using value_type = std::pair<std::string, RuntimeTensorLayout>;
  using const_iterator = std::vector<value_type>::const_iterator;
  using iterator = const_iterator;

  //! Default maximum number of cached paths; when full, the cache is emptied and refilled.
  static constexpr std::size_t default_cache_capacity = std::size_t{1} << 16;
  //! Paths longer than this are resolved but not cached.
  static constexpr std::size_t max_cached_path_length = 4096;

  //! A map without a mesh: layouts keep the mesh they have (or none).
  RuntimeLayoutMap() : RuntimeLayoutMap(std::optional<RuntimeDeviceMesh>{}) {}
  //! A map whose mesh is given to every inserted layout that has none (Keras
  //! `LayoutMap(device_mesh)`).
  explicit RuntimeLayoutMap(std::optional<RuntimeDeviceMesh> device_mesh)
      : mesh_(std::move(device_mesh)), state_(std::make_unique<State>()) {}
  //! From a static `kdist::DeviceMesh<...>` (or anything convertible to a RuntimeDeviceMesh).
  //! (A std::optional<RuntimeDeviceMesh> does not convert to a mesh: it takes the constructor
  //! above.)
  template <ConvertibleToRuntimeMesh Mesh>
  explicit RuntimeLayoutMap(const Mesh& mesh)
      : RuntimeLayoutMap(std::optional<RuntimeDeviceMesh>(static_cast<RuntimeDeviceMesh>(mesh))) {}

  //! Copies the rules, the strict flag and the diagnostics; the copy has its own cache.
  RuntimeLayoutMap(const RuntimeLayoutMap& other)
      : mesh_(other.mesh_),
        items_(other.items_),
        is_literal_(other.is_literal_),
        index_(other.index_),
        strict_(other.strict_),
        set_max_mem_(other.set_max_mem_),
        contracted_decls_(other.contracted_decls_),
        row_parallel_(other.row_parallel_),
        state_(std::make_unique<State>()) {
    std::shared_lock lock(other.state_->mutex);
    state_->used = other.state_->used;
    state_->fallbacks = other.state_->fallbacks;
    state_->contracted = other.state_->contracted;
    state_->cache_capacity = other.state_->cache_capacity;
  }
  RuntimeLayoutMap(RuntimeLayoutMap&& other) noexcept
      : mesh_(std::move(other.mesh_)),
        items_(std::move(other.items_)),
        is_literal_(std::move(other.is_literal_)),
        index_(std::move(other.index_)),
        strict_(other.strict_),
        set_max_mem_(other.set_max_mem_),
        contracted_decls_(std::move(other.contracted_decls_)),
        row_parallel_(std::move(other.row_parallel_)),
        state_(std::exchange(other.state_, std::make_unique<State>())) {
    other.items_.clear();
    other.is_literal_.clear();
    other.index_.clear();
  }
  RuntimeLayoutMap& operator=(const RuntimeLayoutMap& other) {
    if (this != &other) *this = RuntimeLayoutMap(other);
    return *this;
  }
  RuntimeLayoutMap& operator=(RuntimeLayoutMap&& other) noexcept {
    if (this != &other) {
      mesh_ = std::move(other.mesh_);
      items_ = std::move(other.items_);
      is_literal_ = std::move(other.is_literal_);
      index_ = std::move(other.index_);
      strict_ = other.strict_;
      set_max_mem_ = other.set_max_mem_;
      contracted_decls_ = std::move(other.contracted_decls_);
      row_parallel_ = std::move(other.row_parallel_);
      state_ = std::exchange(other.state_, std::make_unique<State>());
      other.items_.clear();
      other.is_literal_.clear();
      other.index_.clear();
    }
    return *this;
  }
  ~RuntimeLayoutMap() = default;

  //! The mesh given to layouts inserted without one (Keras `layout_map.device_mesh`).
  const std::optional<RuntimeDeviceMesh>& device_mesh() const { return mesh_; }

  // ---- insertion --------------------------------------------------------------------------------

  //! Inserts `layout` under `key` (a regular expression). A layout without mesh receives the
  //! map's mesh, validated then. Strong guarantee: on any error nothing changes.
  //! Errors (ValueError): the key exists; the key is not a valid RE2 regex; the layout's axes do
  //! not fit the map's mesh.
  void insert(std::string key, RuntimeTensorLayout layout) {
    if (auto it = index_.find(key); it != index_.end()) {
      throw ValueError(
          "kdist::LayoutMap: " + abbreviated(key) + " already exist in the LayoutMap with value " +
          items_[it->second].second.to_string() + ". Please make sure to not use duplicated keys.");
    }
    validate_key(key);
    if (!layout.device_mesh() && mesh_) {
      try {
        layout.set_device_mesh(*mesh_);
      } catch (const ValueError& e) {
        throw ValueError("kdist::LayoutMap: the layout " + layout.axes_repr() + " for key " +
                         detail::quote_abbreviated(key) + " does not fit the map's mesh " +
                         mesh_->to_string() + ": " + e.what() + "; nothing was inserted");
      }
    }
    // Commit: make room first so that nothing below can throw halfway. Room grows geometrically
    // (a reserve of size() + 1 per insert made loading N rules quadratic: 610 s for 100,000).
    reserve_for(1);
    const std::size_t pos = items_.size();
    index_.emplace(key, pos);
    is_literal_.push_back(is_literal_key(key) ? char{1} : char{0});
    items_.emplace_back(std::move(key), std::move(layout));
    changed();
  }
  //! Inserts every rule of `other`, in its order, after this map's rules; other is left empty.
  //! Rules whose layout already has this map's mesh (or which have none, in a map without one)
  //! are moved without checking their keys again. Strong guarantee: on any error (a key this map
  //! has already; the errors of insert) nothing changes.
  void insert_all(RuntimeLayoutMap&& other) {
    for (const auto& [key, layout] : other.items_) {
      if (auto it = index_.find(key); it != index_.end()) {
        throw ValueError("kdist::LayoutMap: " + abbreviated(key) +
                         " already exist in the LayoutMap with value " +
                         items_[it->second].second.to_string() +
                         ". Please make sure to not use duplicated keys.");
      }
    }
    if (other.mesh_ != mesh_) {  // layouts to give this map's mesh: one by one, then commit
      RuntimeLayoutMap checked(mesh_);
      for (auto& [key, layout] : other.items_) checked.insert(key, layout);
      other = std::move(checked);
    }
    reserve_for(other.items_.size());
    for (std::size_t i = 0; i < other.items_.size(); ++i) {
      index_.emplace(other.items_[i].first, items_.size());
      is_literal_.push_back(other.is_literal_[i]);
      items_.push_back(std::move(other.items_[i]));
    }
    other.items_.clear();
    other.is_literal_.clear();
    other.index_.clear();
    other.changed();
    changed();
  }
  //! Inserts a static `kdist::TensorLayout<...>` or anything convertible to a RuntimeTensorLayout.
  template <ConvertibleToRuntimeLayout Layout>
  void insert(std::string key, Layout&& layout) {
    insert(std::move(key), static_cast<RuntimeTensorLayout>(std::forward<Layout>(layout)));
  }
  //! Keras' shortcut: the axes alone, `map.insert("d1/kernel", {kdist::replicated, "model"})`.
  void insert(std::string key, std::initializer_list<DimAxes> axes) {
    insert(std::move(key), RuntimeTensorLayout(std::vector<DimAxes>(axes)));
  }
  //! A list of axes (each an axis name, a list of names, or replicated), e.g. read from a config.
  void insert(std::string key, std::vector<DimAxes> axes) {
    insert(std::move(key), RuntimeTensorLayout(std::move(axes)));
  }

  // ---- lookup -----------------------------------------------------------------------------------

  //! The layout for `path` by the lookup rules, or nothing when no key matches. Errors
  //! (ValueError): more than one key matches, naming the path and every matching key.
  std::optional<RuntimeTensorLayout> get(std::string_view path) const {
    if (const auto* l = find(path)) return *l;
    return std::nullopt;
  }
  //! As get, without copying: a pointer to the stored layout (valid until the map changes), or
  //! nullptr when no key matches.
  const RuntimeTensorLayout* find(std::string_view path) const {
    const std::size_t i = lookup(path);
    return i == no_match ? nullptr : &items_[i].second;
  }
  //! The key whose layout `path` gets (the exact key, or the one matching regex), or nothing.
  std::optional<std::string> matching_key(std::string_view path) const {
    const std::size_t i = lookup(path);
    if (i == no_match) return std::nullopt;
    return items_[i].first;
  }
  //! Every key matching `path`, in insertion order, exact key included: never throws for
  //! several matches (a tool to debug rules).
  std::vector<std::string> matching_keys(std::string_view path) const {
    std::vector<std::string> out;
    for (auto i : all_matches(path)) out.push_back(items_[i].first);
    return out;
  }

  //! Resolves a variable: its layout from the map, checked against its shape, with the path in
  //! every message. Records the rule as used, or the variable as a replicated fallback (see
  //! `report`).
  //! Errors (ValueError): several keys match; the rule's layout rank differs from the variable's
  //! rank; a dimension the layout's shards cannot divide when the layout demands even division
  //! (Division::even) or the map is strict; in strict mode, a variable of rank 2 or more that
  //! matches no rule.
  std::optional<RuntimeTensorLayout> resolve(std::string_view path,
                                             std::span<const std::size_t> shape) const {
    const std::size_t i = lookup(path);
    if (i == no_match) {
      if (strict_ && shape.size() >= 2) {
        throw ValueError("kdist::LayoutMap (strict): variable " + detail::quote_abbreviated(path) +
                         " of shape " + detail::shape_repr(shape) +
                         " matches no rule, and strict mode replicates no variable of rank 2 or "
                         "more; add a rule for it (layout_map[<key matching the path>] = {...}) or "
                         "turn strict mode off (set_strict(false)); check_variables(<every "
                         "variable>) lists every unmatched variable at once");
      }
      record_fallback(path, shape);
      return std::nullopt;
    }
    const auto& [key, layout] = items_[i];
    check_against_shape(path, key, layout, shape);
    check_contracted(path, key, layout, shape);
    return layout;
  }
  //! As above, for any shape given as a range of integers (`std::vector<int>`, `std::array`...).
  template <ShapeRange Shape>
  std::optional<RuntimeTensorLayout> resolve(std::string_view path, const Shape& shape) const {
    std::vector<std::size_t> s;
    for (auto e : shape) s.push_back(static_cast<std::size_t>(e));
    return resolve(path, std::span<const std::size_t>(s));
  }
  std::optional<RuntimeTensorLayout> resolve(std::string_view path,
                                             std::initializer_list<std::size_t> shape) const {
    return resolve(path, std::span<const std::size_t>(shape.begin(), shape.size()));
  }

  //! Resolves every variable of `variables` (a range of objects with `path()` and `shape()`, as
  //! kdist::VariableInfo, or with data members `path` and `shape`, as the model's
  //! VariableSummary), as `resolve` does each, and returns their layouts in order (nothing: no
  //! rule). The single check point of strict mode: when the map is strict, every variable of rank
  //! 2 or more that matches no rule is named, with its shape, in ONE ValueError, raised before any
  //! variable is resolved. The layouts are computed alike
  //! on every process, so every process raises the same error.
  //! Errors (ValueError): strict mode and unmatched variables ("kdist::LayoutMap (strict): 2
  //! variable(s) of rank 2 or more match no rule: 'd2/kernel' (200, 10), ..."); every error of
  //! `resolve`.
  template <std::ranges::input_range Variables>
  std::vector<std::optional<RuntimeTensorLayout>> check_variables(
      const Variables& variables) const {
    std::vector<std::pair<std::string, std::vector<std::size_t>>> vars;
    for (const auto& v : variables) vars.emplace_back(variable_path(v), variable_shape(v));
    if (strict_) {
      std::vector<std::string> unmatched;
      for (const auto& [path, shape] : vars) {
        if (shape.size() >= 2 && lookup(path) == no_match)
          unmatched.push_back(detail::quote_abbreviated(path) + " " + detail::shape_repr(shape));
      }
      if (!unmatched.empty()) {
        std::string list;
        for (std::size_t k = 0; k < unmatched.size(); ++k)
          list += (k > 0 ? ", " : "") + unmatched[k];
        throw ValueError("kdist::LayoutMap (strict): " + std::to_string(unmatched.size()) +
                         " variable(s) of rank 2 or more match no rule: " + list +
                         "; strict mode replicates no variable of rank 2 or more (a replicated "
                         "large kernel is the out-of-memory error of keras-hub#2806); add a rule "
                         "for each (layout_map[<key matching the path>] = {...}) or turn strict "
                         "mode off (set_strict(false))");
      }
    }
    std::vector<std::optional<RuntimeTensorLayout>> out;
    out.reserve(vars.size());
    for (const auto& [path, shape] : vars) out.push_back(resolve(path, shape));
    return out;
  }

  // ---- Keras' dict interface --------------------------------------------------------------------

  class Proxy;
  //! Keras' `layout_map[key]`: assigning inserts (`map["d1/kernel"] = {kdist::replicated,
  //! "model"}`), reading looks the key up as a path (`std::optional<RuntimeTensorLayout> l =
  //! map["d1/kernel"]`).
  Proxy operator[](std::string_view key);
  //! Lookup of `path` (as get).
  std::optional<RuntimeTensorLayout> operator[](std::string_view path) const { return get(path); }

  //! Whether `key` is a key of the map (exact, never a regex match).
  bool contains(std::string_view key) const { return index_.find(key) != index_.end(); }
  //! The layout stored under exactly `key`; ValueError when there is none.
  const RuntimeTensorLayout& at(std::string_view key) const {
    auto it = index_.find(key);
    if (it == index_.end()) throw missing_key(key);
    return items_[it->second].second;
  }
  //! Removes the rule with exactly `key` (never a regex match); returns 1, or 0 when absent.
  std::size_t erase(std::string_view key) {
    auto it = index_.find(key);
    if (it == index_.end()) return 0;
    remove_at(it->second);
    return 1;
  }
  //! Removes the rule with exactly `key` and returns its layout (Keras `pop`); ValueError when
  //! there is none (Keras raises KeyError).
  RuntimeTensorLayout pop(std::string_view key) {
    auto it = index_.find(key);
    if (it == index_.end()) throw missing_key(key);
    const std::size_t pos = it->second;
    RuntimeTensorLayout layout = items_[pos].second;
    remove_at(pos);
    return layout;
  }
  //! Number of rules.
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  //! Rules as (key, layout) pairs in insertion order.
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  //! The keys in insertion order (Keras `layout_map.keys()`).
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const auto& [k, v] : items_) out.push_back(k);
    return out;
  }

  // ---- diagnostics ------------------------------------------------------------------------------

  //! Strict mode: `resolve` rejects variables of rank >= 2 that match no rule, and shapes a
  //! layout's shards do not divide evenly (whatever the layout's Division).
  void set_strict(bool strict) { strict_ = strict; }
  bool strict() const { return strict_; }

  //! Rules that matched no looked-up path so far, variables `resolve` replicated, and variables
  //! whose rule shards a contracted dimension (LayoutMapReport's comment says which).
  LayoutMapReport report() const {
    LayoutMapReport r;
    std::shared_lock lock(state_->mutex);
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (i >= state_->used.size() || !state_->used[i]) r.unused_rules.push_back(items_[i].first);
    }
    for (const auto& [path, shape] : state_->fallbacks)
      r.replicated_variables.push_back({path, shape});
    for (const auto& [path, c] : state_->contracted) r.contracted_shardings.push_back(c);
    return r;
  }
  //! Forgets what the report has recorded.
  void reset_report() {
    std::unique_lock lock(state_->mutex);
    std::fill(state_->used.begin(), state_->used.end(), char{0});
    state_->fallbacks.clear();
    state_->contracted.clear();
  }

  //! Kernels whose path matches this (RE2, the whole path) are row-parallel: sharding their
  //! input dimension is intended (Megatron), and the report does not flag it. Keras and
  //! keras-hub names of the layers after a column-parallel one.
  static constexpr const char* default_row_parallel_pattern =
      ".*(attention_output|_output|output_dense|ffw_linear|down_proj|o_proj|out_proj|fc2)/kernel";
  //! Replaces the row-parallel pattern (an empty pattern: no kernel is row-parallel by name).
  //! Errors (ValueError): not a valid RE2 regular expression.
  void set_row_parallel_pattern(std::string pattern) {
    row_parallel_ = pattern.empty() ? nullptr : compile_key(pattern);
  }
  //! The row-parallel pattern in use ("" when none).
  std::string row_parallel_pattern() const { return row_parallel_ ? row_parallel_->pattern() : ""; }
  //! Declares that variables whose path matches `pattern` (RE2, the whole path) contract
  //! dimensions `dims` (a layer that knows its einsum says it), instead of the default rule
  //! (LayoutMapReport's comment); `{}` declares that they contract nothing the report should
  //! check. Gemma's (heads, hidden, head_dim) query kernels:
  //! `set_contracted_dims(".*attention/(query|key|value)/kernel", {1})`. Declarations are tried
  //! in the order made; the first match wins. A declared dimension past a variable's rank is an
  //! error when that variable is resolved.
  //! Errors (ValueError): not a valid RE2 regular expression.
  void set_contracted_dims(std::string pattern, std::vector<std::size_t> dims) {
    auto re = compile_key(pattern);
    contracted_decls_.push_back({std::move(re), std::move(dims)});
  }
  //! The dimensions the report takes a variable of `path` and `rank` to contract (see
  //! LayoutMapReport's comment).
  std::vector<std::size_t> contracted_dims(std::string_view path, std::size_t rank) const {
    for (const auto& d : contracted_decls_) {
      if (detail::re2_full_match(path, *d.pattern)) return d.dims;
    }
    const std::string_view suffix = "kernel";
    const bool kernel =
        path.size() >= suffix.size() && path.substr(path.size() - suffix.size()) == suffix;
    if (!kernel || rank < 2) return {};
    if (row_parallel_ && detail::re2_full_match(path, *row_parallel_)) return {};
    return {0};
  }

  //! Maximum number of cached paths (default 65536); 0 disables the cache.
  void set_cache_capacity(std::size_t capacity) {
    std::unique_lock lock(state_->mutex);
    state_->cache_capacity = capacity;
    state_->cache.clear();
  }
  //! Memory budget, in bytes, of the RE2::Set that matches every key in one pass; 0 (the
  //! default) means 64 MiB plus 64 KiB per key. When the keys do not fit, lookups match key by
  //! key instead (same results, slower). Invalidates the compiled set and the cache.
  void set_match_memory_budget(std::int64_t bytes) {
    set_max_mem_ = bytes < 0 ? 0 : bytes;
    changed();
  }
  std::int64_t match_memory_budget() const { return set_max_mem_; }
  //! Whether the keys are matched in one pass by an RE2::Set (false: key by key, because the
  //! set did not fit its memory budget). Builds the set if needed.
  bool uses_regex_set() const {
    if (items_.empty()) return false;
    std::unique_lock lock(state_->mutex);
    if (!state_->matcher) state_->matcher = build_matcher();
    return state_->matcher->ok;
  }
  //! Number of paths currently cached.
  std::size_t cache_size() const {
    std::shared_lock lock(state_->mutex);
    return state_->cache.size();
  }

 private:
  static constexpr std::size_t no_match = static_cast<std::size_t>(-1);
  static constexpr std::size_t multiple_matches = static_cast<std::size_t>(-2);

  //! The compiled RE2::Set of every key (anchored at both ends), immutable once built.
  struct Matcher {
    explicit Matcher(std::int64_t max_mem)
        : set(detail::layout_map_re2_options(max_mem), RE2::ANCHOR_BOTH) {}
    RE2::Set set;
    std::vector<std::size_t> rule;  // the item of each of the Set's patterns (regex keys only)
    bool ok = false;                // compiled; false means "match each key's own RE2"
  };

  //! Everything const lookups change, behind one shared_mutex.
  struct State {
    mutable std::shared_mutex mutex;
    std::shared_ptr<const Matcher> matcher;  // built lazily after each change
    std::shared_ptr<const std::vector<std::shared_ptr<const RE2>>> regexes;  // key_regexes()
    std::unordered_map<std::string, std::size_t, detail::string_hash, std::equal_to<>> cache;
    std::size_t cache_capacity = default_cache_capacity;
    std::vector<char> used;  // per rule: matched a looked-up path
    std::map<std::string, std::vector<std::size_t>, std::less<>> fallbacks;
    std::map<std::string, LayoutMapReport::ContractedSharding, std::less<>> contracted;
  };

  //! A `set_contracted_dims` declaration.
  struct ContractedDecl {
    std::shared_ptr<const RE2> pattern;
    std::vector<std::size_t> dims;
  };

  static std::shared_ptr<const RE2> default_row_parallel() {
    static const std::shared_ptr<const RE2> re = compile_key(default_row_parallel_pattern);
    return re;
  }

  template <class V>
  static std::string variable_path(const V& v) {
    if constexpr (requires { v.path(); }) {
      return std::string(v.path());
    } else {
      return std::string(v.path);
    }
  }
  template <class V>
  static std::vector<std::size_t> variable_shape(const V& v) {
    std::vector<std::size_t> out;
    if constexpr (requires { v.shape(); }) {
      for (auto e : v.shape()) out.push_back(static_cast<std::size_t>(e));
    } else {
      for (auto e : v.shape) out.push_back(static_cast<std::size_t>(e));
    }
    return out;
  }

  static std::shared_ptr<const RE2> compile_key(const std::string& key) {
    auto re = std::make_shared<const RE2>(
        key, detail::layout_map_re2_options(detail::layout_map_key_max_mem));
    if (!re->ok()) {
      throw ValueError("kdist::LayoutMap: key " + detail::quote_abbreviated(key) +
                       " is not a valid regular expression: " + re->error() +
                       " (keys use RE2 syntax: Python's re without backreferences or "
                       "lookaround; escape a literal '.', '(' or '[' with '\\')");
    }
    return re;
  }

  static std::string abbreviated(std::string_view s) {
    const std::string q = detail::quote_abbreviated(s);
    return s.size() <= 200 ? std::string(s) : q;
  }

  static ValueError missing_key(std::string_view key) {
    return ValueError("kdist::LayoutMap: no key " + detail::quote_abbreviated(key) +
                      " in the LayoutMap (erase, pop and at take an exact key, not a path "
                      "matched against the regexes)");
  }

  void remove_at(std::size_t pos) {
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(pos));
    is_literal_.erase(is_literal_.begin() + static_cast<std::ptrdiff_t>(pos));
    index_.clear();
    for (std::size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    {
      std::unique_lock lock(state_->mutex);
      if (pos < state_->used.size()) {
        state_->used.erase(state_->used.begin() + static_cast<std::ptrdiff_t>(pos));
      }
    }
    changed();
  }

  //! Any change: drop the compiled set, the keys' regexes and the cache (the diagnostics stay).
  void changed() {
    std::unique_lock lock(state_->mutex);
    state_->matcher.reset();
    state_->regexes.reset();
    if (!state_->cache.empty()) state_->cache.clear();  // clear() costs the bucket count
    state_->used.resize(items_.size(), char{0});
  }

  //! Room for `n` more rules, growing geometrically.
  void reserve_for(std::size_t n) {
    const std::size_t want = items_.size() + n;
    if (want > items_.capacity()) {
      const std::size_t grown = std::max(want, 2 * items_.capacity());
      items_.reserve(grown);
      is_literal_.reserve(grown);
    }
    const double buckets_hold =
        static_cast<double>(index_.bucket_count()) * index_.max_load_factor();
    if (static_cast<double>(want) > buckets_hold) index_.reserve(2 * want);
  }

  //! A key without regex metacharacters matches exactly the path equal to it, which the exact-key
  //! index finds: it needs no RE2 (an RE2 object is ~4 KB; 100,000 generated per-variable rules
  //! were 430 MB of them) and stays out of the RE2::Set.
  static bool is_literal_key(std::string_view key) {
    // (a key longer than a cached path goes through RE2, whose budget refuses a huge pattern)
    if (key.size() > max_cached_path_length) return false;
    for (const char c : key) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u >= 0x7f) return false;  // RE2 checks its UTF-8 and control characters
    }
    return key.find_first_of("\\.^$|?*+()[]{}") == std::string_view::npos;
  }
  //! Checks that `key` is a valid RE2 regular expression (compiled, then dropped: the keys'
  //! regexes are built only when a lookup needs them, `key_regexes`).
  static void validate_key(const std::string& key) {
    if (!is_literal_key(key)) (void)compile_key(key);
  }

  //! Every key's own RE2 (nullptr for a literal key), built on first need after each change:
  //! only the debugging and fallback paths match key by key.
  using KeyRegexes = std::vector<std::shared_ptr<const RE2>>;
  std::shared_ptr<const KeyRegexes> key_regexes() const {
    std::unique_lock lock(state_->mutex);
    if (!state_->regexes) {
      auto all = std::make_shared<KeyRegexes>(items_.size());
      for (std::size_t i = 0; i < items_.size(); ++i) {
        if (!is_literal_[i]) (*all)[i] = compile_key(items_[i].first);
      }
      state_->regexes = std::move(all);
    }
    return state_->regexes;
  }
  //! The regex matches of `path` key by key (literal keys: only an equal path), insertion order.
  std::vector<std::size_t> matches_key_by_key(std::string_view path) const {
    const auto regexes = key_regexes();
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      const bool hit =
          (*regexes)[i] ? detail::re2_full_match(path, *(*regexes)[i]) : items_[i].first == path;
      if (hit) out.push_back(i);
    }
    return out;
  }

  std::shared_ptr<const Matcher> build_matcher() const {
    std::size_t regex_keys = 0;
    for (char literal : is_literal_) regex_keys += literal ? 0 : 1;
    auto m = std::make_shared<Matcher>(
        set_max_mem_ > 0 ? set_max_mem_ : detail::layout_map_set_max_mem(regex_keys));
    bool ok = true;
    for (std::size_t i = 0; i < items_.size(); ++i) {
      if (is_literal_[i]) continue;
      std::string error;
      if (m->set.Add(items_[i].first, &error) < 0) {
        ok = false;  // cannot happen: each key compiled alone with the same options
        break;
      }
      m->rule.push_back(i);
    }
    m->ok = ok && (m->rule.empty() || m->set.Compile());
    return m;
  }

  //! Indices (insertion order) of every rule matching `path`, the exact key included.
  std::vector<std::size_t> all_matches(std::string_view path) const {
    return matches_key_by_key(path);
  }

  //! The regex matches of `path` (no exact-key step), in insertion order.
  std::vector<std::size_t> regex_matches(std::string_view path, const Matcher& m) const {
    std::vector<std::size_t> out;
    if (m.ok) {
      if (m.rule.empty()) return out;  // literal keys only: the exact-key index decided
      std::vector<int> hits;
      RE2::Set::ErrorInfo info{RE2::Set::kNoError};
      if (m.set.Match(path, &hits, &info)) {
        for (int h : hits) out.push_back(m.rule[static_cast<std::size_t>(h)]);
        std::sort(out.begin(), out.end());
        return out;
      }
      if (info.kind == RE2::Set::kNoError) return out;  // no key matches
      // The Set's DFA could not run (out of memory: a single DFA state larger than its budget;
      // RE2 2022-06 never reports this for budgets the Set compiled in, but later releases may):
      // match key by key below.
    }
    return regex_matches_for_error(path);
  }

  //! Index of the rule for `path`, no_match, or throws for several matches. Cached.
  std::size_t lookup(std::string_view path) const {
    if (items_.empty()) return no_match;
    State& st = *state_;
    std::shared_ptr<const Matcher> matcher;
    {
      std::shared_lock lock(st.mutex);
      if (auto it = st.cache.find(path); it != st.cache.end()) {
        const std::size_t r = it->second;
        if (r != multiple_matches) return r;
        lock.unlock();
        throw_multiple(path, regex_matches_for_error(path));
      }
      matcher = st.matcher;
    }
    std::size_t result = no_match;
    std::vector<std::size_t> matches;
    if (auto it = index_.find(path); it != index_.end()) {
      result = it->second;
    } else {
      if (!matcher) {
        std::unique_lock lock(st.mutex);
        if (!st.matcher) st.matcher = build_matcher();
        matcher = st.matcher;
      }
      matches = regex_matches(path, *matcher);
      if (matches.size() == 1) result = matches[0];
      if (matches.size() > 1) result = multiple_matches;
    }
    {
      std::unique_lock lock(st.mutex);
      if (result < items_.size()) st.used[result] = 1;
      if (st.cache_capacity > 0 && path.size() <= max_cached_path_length) {
        if (st.cache.size() >= st.cache_capacity) st.cache.clear();
        st.cache.emplace(std::string(path), result);
      }
    }
    if (result == multiple_matches) throw_multiple(path, matches);
    return result;
  }

  //! The regex matches of `path` key by key, literal keys left out (the lookup reaches this only
  //! for a path that is no key).
  std::vector<std::size_t> regex_matches_for_error(std::string_view path) const {
    auto out = matches_key_by_key(path);
    std::erase_if(out, [&](std::size_t i) { return is_literal_[i] != 0; });
    return out;
  }

  [[noreturn]] void throw_multiple(std::string_view path,
                                   const std::vector<std::size_t>& matches) const {
    std::vector<std::string> keys;
    for (auto i : matches) keys.push_back(items_[i].first);
    throw ValueError("kdist::LayoutMap: Path " + detail::quote_abbreviated(path) +
                     " matches multiple layout specification keys: " + detail::quoted_keys(keys) +
                     ". Please make sure each tensor/variable path only matches at most one "
                     "layout specification key in the LayoutMap.");
  }

  void check_against_shape(std::string_view path, const std::string& key,
                           const RuntimeTensorLayout& layout,
                           std::span<const std::size_t> shape) const {
    const std::string who = "kdist::LayoutMap: variable " + detail::quote_abbreviated(path) +
                            " of shape " + detail::shape_repr(shape) + " matches key " +
                            detail::quote_abbreviated(key);
    if (layout.rank() != shape.size()) {
      throw ValueError(who + ", whose layout " + layout.axes_repr() + " has rank " +
                       std::to_string(layout.rank()) + ", but the variable has rank " +
                       std::to_string(shape.size()) +
                       "; give the rule one entry per dimension of the variables it matches, or "
                       "narrow its key");
    }
    if (!layout.device_mesh()) return;  // no mesh, no shard counts to check
    const bool even = strict_ || layout.division() == Division::even;
    if (!even) return;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const std::size_t n = layout.shards(d);
      if (n > 1 && shape[d] % n != 0) {
        throw ValueError(who + ", whose layout " + layout.axes_repr() + " splits dimension " +
                         std::to_string(d) + " (extent " + std::to_string(shape[d]) + ") into " +
                         std::to_string(n) + " shards over " + layout.axes()[d].repr() +
                         ", which do not divide it evenly" +
                         (strict_ ? " (strict mode demands even division)"
                                  : " (the layout demands even division)") +
                         "; use an extent that is a multiple of " + std::to_string(n) +
                         ", or shard that dimension over fewer devices");
      }
    }
  }

  //! Records the variable when its rule shards a dimension it contracts.
  void check_contracted(std::string_view path, const std::string& key,
                        const RuntimeTensorLayout& layout,
                        std::span<const std::size_t> shape) const {
    if (layout.is_fully_replicated()) return;
    const auto dims = contracted_dims(path, shape.size());
    LayoutMapReport::ContractedSharding found;
    for (auto d : dims) {
      if (d >= shape.size()) {
        throw ValueError("kdist::LayoutMap: variable " + detail::quote_abbreviated(path) +
                         " of shape " + detail::shape_repr(shape) +
                         " is declared (set_contracted_dims) to contract dimension " +
                         std::to_string(d) + ", past its rank " + std::to_string(shape.size()) +
                         "; declare dimensions below the rank of the variables the pattern "
                         "matches, or narrow the pattern");
      }
      const auto& axes = layout.axes()[d];
      if (axes.is_replicated()) continue;
      if (layout.device_mesh() && layout.shards(d) <= 1) continue;  // axes of extent 1: free
      found.dims.push_back(d);
      found.axes.push_back(axes.names());
    }
    if (found.dims.empty()) return;
    found.path = std::string(path);
    found.shape.assign(shape.begin(), shape.end());
    found.rule = key;
    found.layout = layout.axes_repr();
    std::unique_lock lock(state_->mutex);
    state_->contracted.insert_or_assign(std::string(path), std::move(found));
  }

  void record_fallback(std::string_view path, std::span<const std::size_t> shape) const {
    std::unique_lock lock(state_->mutex);
    auto it = state_->fallbacks.find(path);
    if (it == state_->fallbacks.end()) {
      state_->fallbacks.emplace(std::string(path),
                                std::vector<std::size_t>(shape.begin(), shape.end()));
    } else {
      it->second.assign(shape.begin(), shape.end());
    }
  }

  std::optional<RuntimeDeviceMesh> mesh_;
  std::vector<value_type> items_;  // insertion order
  std::vector<char> is_literal_;   // per item: a key without regex metacharacters
  std::unordered_map<std::string, std::size_t, detail::string_hash, std::equal_to<>> index_;
  bool strict_ = false;
  std::int64_t set_max_mem_ = 0;                  // 0: detail::layout_map_set_max_mem(size())
  std::vector<ContractedDecl> contracted_decls_;  // set_contracted_dims, in order
  std::shared_ptr<const RE2> row_parallel_ = default_row_parallel();
  std::unique_ptr<State> state_;
};

//! What `layout_map[key]` returns on a non-const map: assignment inserts under `key`; reading
//! looks `key` up as a path by the map's rules.
class RuntimeLayoutMap::Proxy {
 public:
  Proxy(RuntimeLayoutMap& map, std::string_view key) : map_(&map), key_(key) {}

  //! Inserts under the key (errors as RuntimeLayoutMap::insert).
  Proxy& operator=(RuntimeTensorLayout layout) {
    map_->insert(key_, std::move(layout));
    return *this;
  }
  template <ConvertibleToRuntimeLayout Layout>
  requires DifferentFrom<Layout, Proxy> Proxy& operator=(Layout&& layout) {
    map_->insert(key_, static_cast<RuntimeTensorLayout>(std::forward<Layout>(layout)));
    return *this;
  }
  //! `map["d1/kernel"] = {kdist::replicated, "model"}`.
  Proxy& operator=(std::initializer_list<DimAxes> axes) {
    map_->insert(key_, axes);
    return *this;
  }
  Proxy& operator=(std::vector<DimAxes> axes) {
    map_->insert(key_, std::move(axes));
    return *this;
  }
  //! `map["b"] = map["a"]` inserts under "b" the layout "a" resolves to.
  Proxy& operator=(const Proxy& other) {
    map_->insert(key_, other.value());
    return *this;
  }
  Proxy(const Proxy&) = default;

  //! The layout the key resolves to as a path, or nothing.
  std::optional<RuntimeTensorLayout> get() const { return map_->get(key_); }
  operator std::optional<RuntimeTensorLayout>() const { return get(); }  // NOLINT
  //! True when the key resolves to a layout.
  bool has_value() const { return map_->find(key_) != nullptr; }
  explicit operator bool() const { return has_value(); }
  //! The layout the key resolves to; ValueError when no rule matches.
  const RuntimeTensorLayout& value() const {
    if (const auto* l = map_->find(key_)) return *l;
    throw ValueError("kdist::LayoutMap: no rule matches " + detail::quote_abbreviated(key_));
  }
  const RuntimeTensorLayout* operator->() const { return &value(); }
  const RuntimeTensorLayout& operator*() const { return value(); }

  friend bool operator==(const Proxy& p, const RuntimeTensorLayout& l) {
    const auto* found = p.map_->find(p.key_);
    return found && *found == l;
  }
  friend bool operator==(const Proxy& p, std::nullopt_t) { return !p.has_value(); }

 private:
  RuntimeLayoutMap* map_;
  std::string key_;
};

inline RuntimeLayoutMap::Proxy RuntimeLayoutMap::operator[](std::string_view key) {
  return Proxy(*this, key);
}

}  // namespace kdist
