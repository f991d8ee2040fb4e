#pragma once
//! \file io/keras_weights.hpp
//! `kdist::save_keras_weights(model, path)` and `kdist::load_keras_weights(model, path)`: a
//! Sequential's weights (and optimizer state) in the layout of Keras 3's `model.save_weights` /
//! `model.load_weights` (`*.weights.h5`), so weights trained by kdist load in Keras and weights
//! trained in Keras load into kdist, on any mesh. Like checkpoints (checkpoint.hpp), the file is
//! written and read by every process at once, each moving only its own block of each variable.
//!
//! \code
//! model.fit(data, {.epochs = 5});
//! kdist::save_keras_weights(model, "mlp.weights.h5");  // Keras: model.load_weights(...)
//! // a Keras-trained file into a compiled kdist model of the same architecture, on any mesh:
//! kdist::load_keras_weights(model, "keras_trained.weights.h5");
//! \endcode
//!
//! The layout (Keras 3.15, H5IOStore), checked against Keras in docs/checkpoints.md:
//!  - `/layers/<class>[_<k>]/vars/<j>`: variable j of a layer (Dense, Conv2D: 0 kernel, 1 bias), the
//!    group named after the layer's Keras class in snake case ("dense", "conv2d"), numbered among
//!    the layers of the same class ("dense", "dense_1", ...); attribute `name` = the layer's name
//!    on `vars`. Layers without variables (Flatten, Dropout) have an empty `vars` group.
//!  - `/optimizer/vars/<i>`: 0 the step counter (int32), 1 the learning rate (float32), then the
//!    slots in Keras' order, as the optimizer declares it (`slots().keras_order`; Adam: momentum
//!    and velocity of each variable in turn; RMSprop: every velocity, then every momentum, then
//!    every average gradient; SGD: every momentum); attribute `name` = the optimizer's name in
//!    snake case ("adam", "rm_sprop", "sgd"; AdamW: "adam_w", as Keras 3.15.1 names it).
//!  - Embedding, PositionEmbedding: 0 embeddings; LayerNormalization: 0 gamma, 1 beta.
//!  - MultiHeadAttention (`multi_head_attention[_<k>]`): an empty `vars`, the EinsumDense
//!    sublayers as `<group>/query_dense`, `key_dense`, `value_dense`, `output_dense` (each: vars/0
//!    kernel, vars/1 bias; attribute `name` "query", "key", "value", "attention_output"), and empty
//!    `<group>/_softmax`, `<group>/_dropout_layer`.
//!  - A model with a Residual (`y = x + f(x)`) or a Concatenate (`concatenate([x, f(x)])`) is
//!    Keras' functional model (Keras' Sequential has no skips): `/layers/input_layer` (empty) and
//!    the layers flattened in the functional model's topological order, a Residual being its
//!    inner layers in order, then an `add[_<k>]` group (empty, attribute `name` = the Residual's
//!    name), a Concatenate the same with a `concatenate[_<k>]` group. Keras' counterpart of make_gpt is in
//!    scripts/keras/gpt_keras_side.py.
//!  - `/vars`, empty, attribute `name` = "sequential" ("functional" for a functional model).
//! What Keras does not store (the seed, the epoch, the mesh) is not in the file: for an exact
//! resume on another mesh use kdist::save_checkpoint.

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/io/detail/background_writes.hpp>
#include <kdist/io/detail/hdf5.hpp>
#include <kdist/io/detail/io_watch.hpp>
#include <kdist/io/detail/parallel_hdf5_io.hpp>
#include <kdist/nn/layers/concatenate.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mpi/agree.hpp>

namespace kdist {

//! Options of save_keras_weights and load_keras_weights.
struct KerasWeightsOptions {
  //! Save the optimizer's state (step counter, learning rate, slots), as Keras' save_weights
  //! does; on load, restore it when the file's optimizer state has as many variables as the
  //! model's optimizer (Keras' rule; otherwise the weights load and the optimizer is left as it is,
  //! with `LoadedKerasWeights::optimizer_note` saying why). false: weights only.
  bool optimizer = true;
  //! save_keras_weights: the dtype the variables and optimizer slots are written in, as Keras'
  //! save_weights writes them under the dtype policy of that name: "" for each variable's own
  //! (the model's scalars; 16 bits for the variables of layers under "bfloat16" or "float16"),
  //! the model's own ("float32", "float64") for all, "bfloat16" (2-byte opaque values with the
  //! attribute dtype = "bfloat16") or "float16" (IEEE half) for all, each value rounded to
  //! nearest, ties to even. A Keras model under "bfloat16" loads either file. The step counter and
  //! learning rate stay int32 and float32, as in Keras. load_keras_weights ignores it: it reads
  //! whatever the file holds, 16-bit datasets widened exactly (and values rounded to a 16-bit
  //! variable's dtype).
  std::string dtype{};
};

//! What load_keras_weights did (the same on every process).
struct LoadedKerasWeights {
  bool optimizer_loaded = false;  //!< the step counter, learning rate and slots were restored
  std::string optimizer_note;     //!< why not, when they were not
  std::int64_t iterations = 0;    //!< the model's step counter after the load
};

namespace detail::keras_weights {

namespace io = detail::checkpoint;

//! Keras' `naming.to_snake_case` for class names: "Dense" -> "dense", "Conv2D" -> "conv2d",
//! "BatchNormalization" -> "batch_normalization".
inline std::string to_snake_case(const std::string& name) {
  std::string w;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') w += c;
  }
  const auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  const auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  // (.)([A-Z][a-z]+) -> \1_\2, then ([a-z])([A-Z]) -> \1_\2
  std::string a;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (i > 0 && upper(w[i]) && i + 1 < w.size() && lower(w[i + 1])) a += '_';
    a += w[i];
  }
  std::string b;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (i > 0 && upper(a[i]) && lower(a[i - 1])) b += '_';
    b += a[i];
  }
  for (auto& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return b;
}

//! A `vars` group of the file: `<path>/vars`, its attribute `name`, and how many of the model's
//! variables it holds (datasets `<path>/vars/0`, ...).
struct VarsGroup {
  std::string path;   //!< "layers/multi_head_attention/query_dense"
  std::string name;   //!< its `name` attribute: the (sub)layer's name in Keras
  std::size_t count;  //!< its datasets
};

//! One layer of the model as the file names it.
struct LayerEntry {
  std::string group;                  //!< "layers/dense_1"
  std::string name;                   //!< the layer's own name ("d2")
  std::vector<VarsGroup> groups;      //!< the vars groups written for it, its own first
  std::vector<std::size_t> vars;      //!< indices into the model's variables (in order)
  std::vector<std::string> datasets;  //!< the dataset of each of vars
};

//! Keras' MultiHeadAttention writes its EinsumDense sublayers as groups named after its
//! attributes (query_dense, key_dense, value_dense, output_dense; kernel then bias in each), and
//! empty groups for its softmax and dropout sublayers; its own `vars` group is empty.
inline void multi_head_attention_groups(LayerEntry& e, std::size_t n, const char* who) {
  if (n != 8 && n != 4) {
    throw ValueError(std::string(who) + ": layer '" + e.name +
                     "' names the Keras class MultiHeadAttention but has " + std::to_string(n) +
                     " variables, and Keras' has 8 (query, key, value and output kernels and "
                     "biases) or 4 (use_bias=False); give it Keras' variables or name another "
                     "class in its keras_class");
  }
  const std::size_t per = n / 4;
  e.groups.push_back({e.group, e.name, 0});
  e.groups.push_back({e.group + "/_dropout_layer", "dropout", 0});
  e.groups.push_back({e.group + "/_softmax", "softmax", 0});
  static constexpr const char* sub[4][2] = {{"query_dense", "query"},
                                            {"key_dense", "key"},
                                            {"value_dense", "value"},
                                            {"output_dense", "attention_output"}};
  for (const auto& [attr, name] : sub) {
    const std::string g = e.group + "/" + attr;
    e.groups.push_back({g, name, per});
    for (std::size_t j = 0; j < per; ++j) e.datasets.push_back(g + "/vars/" + std::to_string(j));
  }
}

//! The file's groups of a model's layers, in Keras' numbering (each class counted in the order
//! of the layers: "dense", "dense_1", ...). A Residual is Keras' functional `Add()([x, f(x)])`:
//! its inner layers in order (recursively), then an Add with no variables.
template <class T>
struct EntryBuilder {
  const char* who;
  std::map<std::string, int> used;
  std::size_t next_var = 0;
  std::vector<LayerEntry> out;

  std::string number(std::string group) {
    if (auto it = used.find(group); it == used.end()) {
      used[group] = 0;
    } else {
      group += "_" + std::to_string(++it->second);
    }
    return "layers/" + group;
  }
  void variable_free(const std::string& cls, const std::string& name) {
    LayerEntry e{number(cls), name, {}, {}, {}};
    e.groups.push_back({e.group, name, 0});
    out.push_back(std::move(e));
  }
  void add(AnyLayer<T>& layer) {
    if (auto* r = layer.template get_if<layers::BasicResidual<T>>()) {
      for (auto& inner : r->layers()) add(inner);
      variable_free("add", r->name());
      return;
    }
    if (auto* c = layer.template get_if<layers::BasicConcatenate<T>>()) {
      for (auto& inner : c->layers()) add(inner);
      variable_free("concatenate", c->name());
      return;
    }
    const std::size_t n = layer.variables().size();
    const std::string cls = layer.keras_class();
    if (cls.empty()) {
      if (n > 0) {
        throw ValueError(std::string(who) + ": layer '" + layer.name() +
                         "' names no Keras class, so its group in a Keras weights file is "
                         "unknown; give its type `static constexpr std::string_view keras_class = "
                         "\"<the Keras class it mirrors>\";`");
      }
      return;
    }
    LayerEntry e{number(to_snake_case(cls)), layer.name(), {}, {}, {}};
    if (cls == "MultiHeadAttention") {
      multi_head_attention_groups(e, n, who);
    } else {
      e.groups.push_back({e.group, e.name, n});
      for (std::size_t j = 0; j < n; ++j)
        e.datasets.push_back(e.group + "/vars/" + std::to_string(j));
    }
    for (std::size_t j = 0; j < n; ++j) e.vars.push_back(next_var++);
    out.push_back(std::move(e));
  }
};

//! Whether the model is written as Keras' functional model (it has a Residual or a Concatenate:
//! Keras has no Sequential form of `x + f(x)` or `concatenate([x, f(x)])`) rather than as a
//! Sequential.
template <class Model>
bool is_functional(Model& model) {
  using T = typename Model::value_type;
  for (auto& layer : model.layers()) {
    if (layer.template get_if<layers::BasicResidual<T>>() != nullptr ||
        layer.template get_if<layers::BasicConcatenate<T>>() != nullptr) {
      return true;
    }
  }
  return false;
}

//! The file's group of every layer. A layer whose class Keras does not know (no `keras_class`) is
//! an error if it has variables and is left out otherwise. A functional model's file also has
//! Keras' InputLayer (`layers/input_layer`, no variables) first.
template <class Model>
std::vector<LayerEntry> layer_entries(Model& model, const char* who) {
  EntryBuilder<typename Model::value_type> b{who, {}, 0, {}};
  if (is_functional(model)) b.variable_free("input_layer", "input_layer");
  for (auto& layer : model.layers()) b.add(layer);
  return std::move(b.out);
}

//! What a save and a load both check and need: the model compiled, one path on every process, the
//! layers' groups and the optimizer.
struct ModelEntries {
  std::vector<LayerEntry> layers;
  io::OptimizerRecord optimizer;
};
template <class Model>
ModelEntries model_entries(Model& model, const std::string& path, const char* who) {
  io::require_compiled(model, who);
  io::require_same_path(path, who);
  return {layer_entries(model, who), io::describe(model.optimizer())};
}

//! The optimizer's name attribute in Keras: its class name in snake case, as Keras 3.15.1 names
//! its optimizers (`keras.optimizers.AdamW().name` is "adam_w", RMSprop's "rm_sprop").
inline std::string optimizer_name(const io::OptimizerRecord& opt) {
  return to_snake_case(opt.name);
}

//! The slots in Keras' order: (variable index, kdist slot index) per optimizer variable after the
//! step counter and the learning rate. Keras' build creates each group of slots the optimizer
//! declares (`slots().keras_order`) for every variable in turn.
inline std::vector<std::pair<std::size_t, std::size_t>> keras_slot_order(
    const io::OptimizerRecord& opt, std::size_t variables) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& group : opt.keras_groups) {
    for (std::size_t v = 0; v < variables; ++v) {
      for (std::size_t k : group) out.emplace_back(v, k);
    }
  }
  return out;
}

//! The index (2, 3, ...) of slot k of variable v among the inner optimizer's variables: Keras'
//! order.
inline std::map<std::pair<std::size_t, std::size_t>, std::size_t> slot_datasets(
    const io::OptimizerRecord& opt, std::size_t variables) {
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> out;
  const auto order = keras_slot_order(opt, variables);
  for (std::size_t i = 0; i < order.size(); ++i) out[order[i]] = 2 + i;
  return out;
}

inline std::size_t variable_count(const std::vector<LayerEntry>& layers) {
  std::size_t n = 0;
  for (const auto& l : layers) n += l.vars.size();
  return n;
}

//! The dataset of each of the model's variables, in the model's order.
inline std::vector<std::string> variable_datasets(const std::vector<LayerEntry>& layers) {
  std::vector<std::string> out;
  for (const auto& l : layers) out.insert(out.end(), l.datasets.begin(), l.datasets.end());
  return out;
}
inline std::string optimizer_dataset(std::size_t i) {
  return "optimizer/vars/" + std::to_string(i);
}
//! Where the inner optimizer's variables (step counter, learning rate, slots) start among
//! `/optimizer/vars`: after a LossScaleOptimizer's own four (Keras 3.15.1: its iteration, which
//! Keras never advances, its learning rate 0, step_counter, dynamic_scale), else at 0.
inline std::size_t inner_offset(const io::OptimizerRecord& opt) {
  return opt.loss_scaled() ? 4 : 0;
}

inline hdf5::Group make_group(hid_t loc, const std::string& name) {
  return hdf5::Group(
      hdf5::check(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                  "H5Gcreate2 '" + name + "'"));
}

//! Creates group `path` and those above it that do not exist yet (collective).
inline void make_groups(hid_t loc, const std::string& path) {
  for (std::size_t i = path.find('/');; i = path.find('/', i + 1)) {
    const std::string prefix = path.substr(0, i);
    if (!hdf5::path_exists(loc, prefix)) make_group(loc, prefix);
    if (i == std::string::npos) break;
  }
}

//! The attribute that holds a scalar dataset's checksum (a scalar cannot be chunked, so it has
//! no Fletcher32 filter): Fletcher-32 of its stored bytes (little-endian).
inline constexpr const char* scalar_checksum_attribute = "kdist_fletcher32";

//! Fletcher-32 of `bytes` (16-bit little-endian words; an odd last byte padded with zero).
inline std::uint32_t fletcher32(const unsigned char* bytes, std::size_t n) {
  std::uint32_t a = 0xffff, b = 0xffff;
  for (std::size_t i = 0; i < n; i += 2) {
    const std::uint32_t word = bytes[i] | (i + 1 < n ? std::uint32_t{bytes[i + 1]} << 8 : 0u);
    a = (a + word) % 0xffff;
    b = (b + a) % 0xffff;
  }
  return (b << 16) | a;
}
//! The checksum of a scalar as it is stored (`T` is int32 or float32, stored little-endian).
template <class T>
std::uint32_t scalar_checksum(T value) {
  static_assert(sizeof(T) == 4);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  const unsigned char le[4] = {
      static_cast<unsigned char>(bits), static_cast<unsigned char>(bits >> 8),
      static_cast<unsigned char>(bits >> 16), static_cast<unsigned char>(bits >> 24)};
  return fletcher32(le, 4);
}

//! A scalar dataset written by process 0 (the others join the collective call with nothing),
//! with its checksum as an attribute (the same value on every process: process 0's).
template <class T>
void write_scalar_dataset(hid_t file, const std::string& name, hid_t file_type, T value,
                          hid_t dxpl) {
  auto space = hdf5::Dataspace(hdf5::check(H5Screate(H5S_SCALAR), "H5Screate"));
  hdf5::ParallelDataset ds(hdf5::check(
      H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      "H5Dcreate2 '" + name + "'"));
  auto sel = hdf5::Dataspace(hdf5::check(H5Screate(H5S_SCALAR), "H5Screate"));
  if (kdist::process_id() != 0) hdf5::check(H5Sselect_none(sel.get()), "H5Sselect_none");
  hdf5::check(H5Dwrite(ds.get(), hdf5::native_type<T>(), sel.get(), sel.get(), dxpl, &value),
              "H5Dwrite '" + name + "'");
  if (checkpoint::write_checksums) {
    std::uint64_t sum = scalar_checksum(value);
    kdist::broadcast(sum, 0, kdist::communicator());
    hdf5::write_scalar<std::uint64_t>(ds.get(), scalar_checksum_attribute, sum);
  }
  hdf5::check(ds.close(), "H5Dclose '" + name + "'");
}

//! A scalar dataset read by every process, checked against its checksum attribute when it has
//! one (files of Keras and of kdist before checksums have none); a failure is recorded in `log`.
template <class T>
T read_scalar_dataset(hid_t file, const std::string& name, const std::string& what, hid_t dxpl,
                      checkpoint::ReadLog& log) {
  hdf5::ParallelDataset ds(
      hdf5::check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "H5Dopen2 '" + name + "'"));
  T value{};
  const bool ok = H5Dread(ds.get(), hdf5::native_type<T>(), H5S_ALL, H5S_ALL, dxpl, &value) >= 0;
  const std::string why = ok ? std::string() : hdf5::error_text();
  std::uint64_t sum = 0;
  const bool mismatch = ok && hdf5::read_scalar(ds.get(), scalar_checksum_attribute, sum) &&
                        sum != scalar_checksum(value);
  log.record(ok && !mismatch, name, what, mismatch,
             mismatch ? "the value's Fletcher-32 is " + std::to_string(scalar_checksum(value)) +
                            ", its attribute " + scalar_checksum_attribute + " says " +
                            std::to_string(sum)
                      : why);
  hdf5::check(ds.close(), "H5Dclose '" + name + "'");
  return value;
}

//! The number of links (datasets or groups) in group `name`, or -1 if it is not a group.
inline long long links_in(hid_t root, const std::string& name) {
  if (!hdf5::path_exists(root, name)) return -1;
  H5G_info_t g{};  // (fails on a dataset)
  if (H5Gget_info_by_name(root, name.c_str(), &g, H5P_DEFAULT) < 0) return -1;
  return static_cast<long long>(g.nlinks);
}

//! The number of datasets in group `name` and the groups under it (0 if it is not a group).
inline std::size_t datasets_under(hid_t root, const std::string& name) {
  if (links_in(root, name) < 0) return 0;
  std::vector<std::string> children;
  {
    hdf5::Group g(H5Gopen2(root, name.c_str(), H5P_DEFAULT));
    if (!g.valid()) return 0;
    H5Literate(
        g.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
        [](hid_t, const char* child, const H5L_info_t*, void* out) -> herr_t {
          static_cast<std::vector<std::string>*>(out)->push_back(child);
          return 0;
        },
        &children);
  }
  std::size_t n = 0;
  for (const auto& c : children) {
    const std::string path = name + "/" + c;
    n += links_in(root, path) < 0 ? 1 : datasets_under(root, path);
  }
  return n;
}

//! What process 0 decided about the file (broadcast to every process).
struct Plan {
  std::string problem;  //!< the error, or ""
  bool load_optimizer = false;
  std::string optimizer_note;
};

//! Checks the file against the model on process 0 alone: every layer's group holds as many
//! float datasets as the layer has variables, of the variables' shapes; no group of a layer the
//! model lacks; the optimizer's state, when asked, has the model optimizer's variable count.
template <class Model>
Plan check_file(const std::string& path, Model& model, const std::vector<LayerEntry>& layers,
                const io::OptimizerRecord& opt, bool optimizer) {
  Plan plan;
  const std::string who = "kdist::load_keras_weights: '" + path + "'";
  hdf5::QuietErrors quiet;
  hdf5::File file;
  const io::FileKind kind{"a Keras weights file", "a Keras weights file",
                          "Keras' model.save_weights or kdist::save_keras_weights",
                          "so not a Keras weights file (expected a '.weights.h5' file written "
                          "by Keras' model.save_weights or kdist::save_keras_weights)"};
  if (auto p = io::open_to_check(path, who, kind, file); !p.empty()) {
    plan.problem = p;
    return plan;
  }
  const hid_t root = file.get();
  if (links_in(root, "layers") < 0) {
    plan.problem = who +
                   " is an HDF5 file but not a Keras weights file: it has no group '/layers' "
                   "(Keras 3 writes /layers/<layer>/vars/<i>; a Keras 2 '.h5' file is not read)";
    return plan;
  }
  std::vector<std::vector<std::size_t>> shapes;
  model.for_each_variable([&](auto& v) {
    const auto shape = v.shape();  // (a value: begin and end of one copy)
    shapes.emplace_back(shape.begin(), shape.end());
  });
  for (const auto& l : layers) {
    std::size_t k = 0;  // the layer's variable (and dataset) index
    for (const auto& g : l.groups) {
      const long long n = links_in(root, g.path + "/vars");
      const std::string layer = "layer '" + l.name + "' (group '/" + g.path + "')";
      if (n < 0 && g.count > 0) {
        plan.problem = who + ": " + layer + " is not in the file; the file holds the weights of " +
                       "another model (Keras numbers the groups of layers of one class in order: " +
                       "dense, dense_1, ...)";
        return plan;
      }
      if (n >= 0 && static_cast<std::size_t>(n) != g.count) {
        plan.problem = who + ": " + layer + " has " + std::to_string(g.count) +
                       " variable(s) in the model but " + std::to_string(n) +
                       " in the file; the file holds the weights of another model";
        return plan;
      }
      for (std::size_t j = 0; j < g.count; ++j, ++k) {
        const auto p = io::check_float_dataset(root, l.datasets[k],
                                               "variable " + std::to_string(j) + " of " + layer,
                                               shapes[l.vars[k]], 0, "file");
        if (!p.empty()) {
          plan.problem = who + ": " + p.text +
                         (p.other_shape ? "; the file holds the weights of another model"
                                        : "; the file is damaged");
          return plan;
        }
      }
    }
  }
  // a layer group the model has no layer for
  std::vector<std::string> groups;
  {
    hdf5::Group g(H5Gopen2(root, "layers", H5P_DEFAULT));
    H5Literate(
        g.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
        [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
          static_cast<std::vector<std::string>*>(out)->push_back(name);
          return 0;
        },
        &groups);
  }
  for (const auto& g : groups) {
    const bool known = std::any_of(layers.begin(), layers.end(),
                                   [&](const LayerEntry& l) { return l.group == "layers/" + g; });
    if (!known && datasets_under(root, "layers/" + g) > 0) {
      plan.problem = who + ": the file has weights for layer group '/layers/" + g +
                     "', which the model has no layer for; the file holds the weights of another "
                     "model";
      return plan;
    }
  }
  if (!optimizer) return plan;
  const std::size_t at = inner_offset(opt);
  const std::size_t want = at + 2 + opt.slot_count * shapes.size();
  const long long have = links_in(root, "optimizer/vars");
  if (have < 0) {
    plan.optimizer_note = "the file has no optimizer state (saved without it)";
    return plan;
  }
  if (static_cast<std::size_t>(have) != want) {
    plan.optimizer_note = "the file's optimizer has " + std::to_string(have) +
                          " variables but the model's " + opt.name + " has " +
                          std::to_string(want) +
                          " (another optimizer or setting, or one that had not taken a step); "
                          "the optimizer was left as it is, as Keras does";
    return plan;
  }
  for (std::size_t i = 0; i < at + 2; ++i) {
    hdf5::Dataset ds(H5Dopen2(root, optimizer_dataset(i).c_str(), H5P_DEFAULT));
    hdf5::Dataspace space(ds.valid() ? H5Dget_space(ds.get()) : H5I_INVALID_HID);
    if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) {
      static constexpr const char* scaling[] = {"own step counter", "own learning rate",
                                                "loss scale's step counter", "loss scale"};
      plan.problem = who + ": dataset '/" + optimizer_dataset(i) + "' (the optimizer's " +
                     (i < at    ? scaling[i]
                      : i == at ? "step counter"
                                : "learning rate") +
                     ") is not a scalar; the file is damaged";
      return plan;
    }
  }
  const auto order = keras_slot_order(opt, shapes.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto [v, k] = order[i];
    const auto p = io::check_float_dataset(
        root, optimizer_dataset(at + 2 + i),
        "optimizer slot '" + opt.slot_names.at(k) + "' of variable " + std::to_string(v), shapes[v],
        0, "file");
    if (!p.empty()) {
      plan.problem = who + ": " + p.text +
                     (p.other_shape ? "; the file's optimizer state is of another model"
                                    : "; the file is damaged");
      return plan;
    }
  }
  plan.load_optimizer = true;
  return plan;
}

//! The storage KerasWeightsOptions::dtype names for a model of `T`. Errors: kdist::ValueError
//! for another name (the same on every process: each checks its own, equal, options).
template <class T>
io::StoredAs stored_as(const std::string& dtype) {
  const std::string own = io::dtype_name<T>();
  if (dtype.empty() || dtype == own) return io::StoredAs::native;
  if (dtype == "bfloat16") return io::StoredAs::bfloat16;
  if (dtype == "float16") return io::StoredAs::float16;
  throw ValueError("kdist::save_keras_weights: KerasWeightsOptions::dtype is '" + dtype +
                   "'; Keras writes variables as \"" + own +
                   "\" (the model's own, also \"\"), \"bfloat16\" or \"float16\"");
}

inline void broadcast(Plan& plan) {
  int load = plan.load_optimizer ? 1 : 0;
  kdist::broadcast(load, 0, kdist::communicator());
  plan.load_optimizer = load != 0;
  io::broadcast_string(plan.optimizer_note);
}

}  // namespace detail::keras_weights

//! Writes `model`'s weights (and, by default, its optimizer state) to `path` in Keras 3's
//! `.weights.h5` layout (see the file comment), replacing the file atomically. Collective: every
//! process calls it with the same path and writes only its own blocks (replicated blocks once).
//! Errors: kdist::ValueError if the model is not compiled, or has a layer with variables that
//! names no Keras class; kdist::RuntimeError if the file cannot be written.
template <class T>
void save_keras_weights(BasicSequential<T>& model, const std::string& path,
                        KerasWeightsOptions options = {}) {
  namespace kw = detail::keras_weights;
  namespace io = detail::checkpoint;
  namespace h5 = detail::hdf5;
  constexpr const char* who = "kdist::save_keras_weights";
  io::finish_background_writes();  // an AsyncCheckpointer's save in flight: HDF5 is ours after it
  detail::ProfilingRegion region(who);
  const auto entries = kw::model_entries(model, path, who);
  const auto& layers = entries.layers;  // (named, not bound: clang 14 cannot capture bindings)
  const auto& opt = entries.optimizer;
  const double lr = opt.learning_rate;
  const bool functional = kw::is_functional(model);
  // each variable's own dtype (a 16-bit policy's variables in 16 bits), or the one asked for
  const std::optional<io::StoredAs> asked =
      options.dtype.empty() ? std::nullopt : std::optional(kw::stored_as<T>(options.dtype));
  const auto stored = [&](DType d) { return asked ? *asked : io::stored_as(d); };
  Kokkos::fence();  // the model's last step is complete before its blocks are read
  io::write_atomically(path, who, kdist::communicator(), [&](hid_t file) {
    auto dxpl = h5::collective_transfer();
    {
      auto layers_group = kw::make_group(file, "layers");
      for (const auto& l : layers) {
        for (const auto& g : l.groups) {
          kw::make_groups(file, g.path);
          auto vg = kw::make_group(file, g.path + "/vars");
          h5::write_string(vg.get(), "name", g.name);
        }
      }
    }
    const auto names = kw::variable_datasets(layers);
    std::size_t v = 0;
    model.for_each_variable([&](auto& var) {
      io::write_tensor(file, names.at(v++), var.value, dxpl.get(), kdist::communicator(),
                       /*annotate=*/false, stored(var.dtype));
    });
    if (options.optimizer) {
      auto og = kw::make_group(file, "optimizer");
      auto vg = kw::make_group(file, "optimizer/vars");
      h5::write_string(vg.get(), "name", kw::optimizer_name(opt));
      const auto slot_index = kw::slot_datasets(opt, kw::variable_count(layers));
      // the inner optimizer's variables, from dataset `at` of `group`
      const auto write_inner = [&](const std::string& group, std::size_t at) {
        const auto dataset = [&](std::size_t i) { return group + "/" + std::to_string(at + i); };
        kw::write_scalar_dataset<std::int32_t>(file, dataset(0), H5T_STD_I32LE,
                                               static_cast<std::int32_t>(model.iterations()),
                                               dxpl.get());
        kw::write_scalar_dataset<float>(file, dataset(1), H5T_IEEE_F32LE, static_cast<float>(lr),
                                        dxpl.get());
        std::size_t i = 0;
        model.for_each_variable_with_slots([&](auto& var, auto& s) {
          for (std::size_t k = 0; k < opt.slot_count; ++k) {
            io::write_tensor(file, dataset(slot_index.at({i, k})), s.at(k), dxpl.get(),
                             kdist::communicator(), /*annotate=*/false, stored(var.dtype));
          }
          ++i;
        });
      };
      if (opt.loss_scaled()) {  // Keras' LossScaleOptimizer: its own four, then the inner's
        kw::write_scalar_dataset<std::int32_t>(file, kw::optimizer_dataset(0), H5T_STD_I32LE, 0,
                                               dxpl.get());
        kw::write_scalar_dataset<float>(file, kw::optimizer_dataset(1), H5T_IEEE_F32LE, 0.0F,
                                        dxpl.get());
        kw::write_scalar_dataset<std::int32_t>(
            file, kw::optimizer_dataset(2), H5T_STD_I32LE,
            static_cast<std::int32_t>(opt.loss_scale_step_counter), dxpl.get());
        kw::write_scalar_dataset<float>(file, kw::optimizer_dataset(3), H5T_IEEE_F32LE,
                                        static_cast<float>(opt.loss_scale), dxpl.get());
        // and, as Keras writes them too, the inner optimizer's alone in its own group
        auto ig = kw::make_group(file, "optimizer/inner_optimizer");
        auto ivg = kw::make_group(file, "optimizer/inner_optimizer/vars");
        h5::write_string(ivg.get(), "name", kw::to_snake_case(opt.inner_name));
        write_inner("optimizer/inner_optimizer/vars", 0);
      }
      write_inner("optimizer/vars", kw::inner_offset(opt));
    }
    auto root_vars = kw::make_group(file, "vars");
    h5::write_string(root_vars.get(), "name", functional ? "functional" : "sequential");
  });
}

//! Reads the Keras 3 `.weights.h5` file `path` (Keras' model.save_weights, or save_keras_weights)
//! into the compiled `model`, whatever its mesh and layouts: each process reads only the part of
//! each dataset its block covers. The model must have Keras' architecture: its layers in the same
//! order, each of the class its group names, with variables of the same shapes. The optimizer's
//! state (step counter, learning rate, slots) is restored when `options.optimizer` and the file's
//! state has as many variables as the model's optimizer; otherwise it is left as it is (Keras' rule)
//! and the result says why.
//!
//! The file is checked by process 0 first, and every process throws the same kdist::ValueError when
//! it is wrong: missing, a directory, not HDF5, damaged, not a Keras weights file, a layer's group
//! missing or with another number of variables, a variable of another shape, weights for a layer
//! the model lacks; each message names the file and the layer (docs/errors.md); the model is then
//! unchanged. kdist::ValueError when data fails its checksum (a file kdist wrote, since corrupted;
//! Keras' files have none and are read unchecked), kdist::RuntimeError for an I/O failure while
//! reading: both on every process, leaving the model partly loaded.
template <class T>
LoadedKerasWeights load_keras_weights(BasicSequential<T>& model, const std::string& path,
                                      KerasWeightsOptions options = {}) {
  namespace kw = detail::keras_weights;
  namespace io = detail::checkpoint;
  namespace h5 = detail::hdf5;
  constexpr const char* who = "kdist::load_keras_weights";
  io::finish_background_writes();  // an AsyncCheckpointer's save in flight: HDF5 is ours after it
  detail::ProfilingRegion region(who);
  const auto entries = kw::model_entries(model, path, who);
  const auto& layers = entries.layers;  // (named, not bound: clang 14 cannot capture bindings)
  const auto& opt = entries.optimizer;
  kw::Plan plan;
  // Every call below has a deadline (io_watch.hpp): a process stopped midway ends the job.
  detail::io_watch::IoWatch watch(who, path, kdist::communicator());
  detail::io_watch::IoWatch::Scope watching(watch);
  if (kdist::process_id() == 0) {
    const auto checking = detail::io_watch::operation("checking the file (process 0)", false);
    plan = kw::check_file(path, model, layers, opt, options.optimizer);
  }
  mpi::agree<ValueError>(kdist::communicator(), plan.problem.empty(), plan.problem);
  kw::broadcast(plan);

  Kokkos::fence();
  std::vector<std::function<void()>> commit;
  std::int32_t iterations = 0, scale_step_counter = 0;
  float learning_rate = 0, scale = 0;
  const std::size_t at = kw::inner_offset(opt);
  {
    h5::QuietErrors quiet;
    h5::ParallelFile file = io::open_on_every_process(path, who);
    io::ReadLog log;
    try {
      const auto reading = detail::io_watch::operation("reading '" + path + "'");
      auto dxpl = h5::independent_transfer();  // each process its own block
      const auto names = kw::variable_datasets(layers);
      const auto slot_index = kw::slot_datasets(opt, kw::variable_count(layers));
      std::size_t v = 0;
      model.for_each_variable_with_slots([&](auto& var, auto& s) {
        commit.push_back(io::read_tensor(file.get(), names.at(v), "variable '" + var.path + "'",
                                         var.value, dxpl.get(), log));
        // a slot may be a copy (sharded or 16-bit state) that goes back into the state when
        // this returns: its values are in it by then
        for (std::size_t k = 0; plan.load_optimizer && k < opt.slot_count; ++k) {
          io::read_tensor(file.get(), kw::optimizer_dataset(at + slot_index.at({v, k})),
                          "optimizer slot " + std::to_string(k) + " of '" + var.path + "'", s.at(k),
                          dxpl.get(), log)();
        }
        ++v;
      });
      if (plan.load_optimizer) {
        iterations = kw::read_scalar_dataset<std::int32_t>(
            file.get(), kw::optimizer_dataset(at), "the optimizer's step counter", dxpl.get(), log);
        learning_rate =
            kw::read_scalar_dataset<float>(file.get(), kw::optimizer_dataset(at + 1),
                                           "the optimizer's learning rate", dxpl.get(), log);
        if (opt.loss_scaled()) {
          scale_step_counter = kw::read_scalar_dataset<std::int32_t>(
              file.get(), kw::optimizer_dataset(2), "the loss scale's step counter", dxpl.get(),
              log);
          scale = kw::read_scalar_dataset<float>(file.get(), kw::optimizer_dataset(3),
                                                 "the loss scale", dxpl.get(), log);
        }
      }
    } catch (const RuntimeError& e) {
      throw RuntimeError(std::string(who) + ": reading '" + path + "': " + e.what());
    }
    // a chunk that failed its checksum on some process: the same error on every process
    try {
      io::reads_agree(log, who, path, "restore the file from a copy, or save the weights again");
    } catch (const Error&) {
      (void)file.close();  // every process throws the same: it may close collectively
      throw;
    }
    const auto closing = detail::io_watch::operation("closing the file (H5Fclose)");
    h5::check(file.close(), std::string(who) + ": closing '" + path + "'");
  }
  for (auto& c : commit) c();
  detail::round_variables_to_their_dtypes(model.layers());  // as Keras' assign casts
  Kokkos::fence();
  LoadedKerasWeights out;
  if (plan.load_optimizer) {
    model.set_iterations(iterations);
    model.set_learning_rate(learning_rate);
    if (auto* scaling = model.loss_scaling()) scaling->set_scale_state(scale, scale_step_counter);
    out.optimizer_loaded = true;
  } else {
    out.optimizer_note = options.optimizer ? plan.optimizer_note : "not asked for";
  }
  out.iterations = model.iterations();
  return out;
}

}  // namespace kdist
