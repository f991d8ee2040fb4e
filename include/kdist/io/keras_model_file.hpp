#pragma once
//! \file io/keras_model_file.hpp
//! Keras' model files: `kdist::load_model<T>("model.keras", distribution)` builds, compiles and
//! loads a model a user designed in Keras (`model.save("model.keras")`), and
//! `kdist::save_model(model, "x.keras")` writes one Keras loads (`keras.saving.load_model`).
//! `kdist::model_from_json` / `kdist::model_to_json` do the same for the architecture alone
//! (Keras' `keras.models.model_from_json` / `model.to_json()`).
//!
//! \code
//! auto dist = std::make_shared<kdist::DataParallel>(kdist::list_devices());
//! auto model = kdist::load_model("mnist.keras", dist);  // compiled, with Keras' weights
//! model.fit(data, {.epochs = 2});
//! kdist::save_model(model, "mnist_tuned.keras");        // Keras: keras.saving.load_model(...)
//! \endcode
//!
//! A `.keras` file is a zip archive (Keras writes its members stored, not compressed) of
//! `metadata.json` (the Keras version), `config.json` (the model's class, its layers' configs and
//! the compile config) and `model.weights.h5` (kdist::load_keras_weights' layout,
//! io/keras_weights.hpp). What kdist reads of the config:
//!  - the model: "Sequential", or "Functional" made of one chain from its input to its output
//!    with skips - a tensor used twice, joined again by `Add()([x, f(x)])` (a kdist Residual) or
//!    `Concatenate()([x, f(x)])` (a kdist Concatenate), nested as deep as wanted (a U-Net); its
//!    input shape from the InputLayer's `batch_shape` (or `build_input_shape`); each layer's dtype
//!    policy. kdist writes a model with a Residual or a Concatenate as a Functional one;
//!  - the layers: Dense, Dropout, Flatten, Conv2D/Conv3D, MaxPooling2D/3D, AveragePooling2D/3D,
//!    UpSampling2D/3D (channels_last; padding "valid" or "same"; activations linear, relu,
//!    softmax, gelu). An option kdist does not implement (a regularizer, a constraint, groups, a
//!    causal padding, bilinear upsampling, channels_first...) is a kdist::ValueError naming the
//!    layer, its index and the option, never a silent difference;
//!  - the compile config: optimizers SGD, Adam, AdamW, RMSprop (learning rate, their moments,
//!    weight_decay, global_clipnorm), losses mean_squared_error, categorical_crossentropy and
//!    sparse_categorical_crossentropy (by name, or as a class without from_logits); the metrics
//!    are kdist's own (fit's loss and accuracy).
//! What Keras does not keep (the seed of dropout, the mesh) comes from the arguments. Initializers
//! need not be read: every variable is loaded from the file.
//!
//! Collective over kdist::communicator(): process 0 reads the archive and sends the config to
//! the others, so every process builds the same model or throws the same error. The weights go
//! through a file beside the archive (`<path>.kdist-<pid>.weights.h5`, removed afterwards) that
//! every process reads its blocks of with parallel HDF5, as load_keras_weights does: the
//! archive's directory must be writable and shared by the processes, as a checkpoint's is.

#include <zip.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/layers/concatenate.hpp>
#include <kdist/nn/layers/convolution.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/pooling.hpp>
#include <kdist/nn/layers/position_embedding.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/layers/upsampling.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/world.hpp>

namespace kdist {

//! Options of kdist::load_model.
struct LoadModelOptions {
  //! compile()'s seed (what Keras does not keep: dropout's keys).
  std::uint64_t seed = 0;
  //! How the weights load (e.g. `.optimizer = false`: the weights without the optimizer's state).
  KerasWeightsOptions weights{};
};

namespace detail::keras_model {

using json = nlohmann::json;

//! "layer 2 'dense_1' (Dense)": where in the config a problem is.
inline std::string where(std::size_t index, const json& layer) {
  const json& c = layer.value("config", json::object());
  return "layer " + std::to_string(index) + " '" + c.value("name", std::string("?")) + "' (" +
         layer.value("class_name", std::string("?")) + ")";
}

//! Throws unless `key` of `config` is absent, null or `expected` (an option kdist lacks).
inline void require(const std::string& at, const json& config, const char* key,
                    const json& expected = nullptr, const char* hint = "") {
  if (!config.contains(key) || config[key].is_null() || config[key] == expected) return;
  throw ValueError(at + ": " + key + " = " + config[key].dump() + " is not in kdist" +
                   (expected.is_null() ? "" : " (only " + expected.dump() + ")") + hint);
}

inline layers::Activation activation_of(const std::string& at, const json& config) {
  const json a = config.value("activation", json("linear"));
  if (a.is_null() || a == "linear") return layers::Activation::linear;
  if (a == "relu") return layers::Activation::relu;
  if (a == "softmax") return layers::Activation::softmax;
  if (a == "gelu") return layers::Activation::gelu;
  throw ValueError(at + ": activation " + a.dump() +
                   " is not in kdist (linear, relu, softmax, gelu); follow the layer with an "
                   "Activation kdist has, or train this model in Keras");
}

inline std::string activation_name(layers::Activation a) {
  switch (a) {
    case layers::Activation::relu:
      return "relu";
    case layers::Activation::softmax:
      return "softmax";
    case layers::Activation::gelu:
      return "gelu";
    default:
      return "linear";
  }
}

//! An int or a list of S ints (Keras' `kernel_size=3` or `(3, 3)`).
template <std::size_t S>
std::array<std::size_t, S> extents(const std::string& at, const json& config, const char* key,
                                   std::optional<std::array<std::size_t, S>> absent = {}) {
  std::array<std::size_t, S> out{};
  if (!config.contains(key) || config[key].is_null()) {
    if (absent) return *absent;
    throw ValueError(at + ": no " + key + " in its config");
  }
  const json& v = config[key];
  if (v.is_number_integer() && v.get<long long>() > 0) {
    out.fill(v.get<std::size_t>());
    return out;
  }
  if (v.is_array() && v.size() == S) {
    for (std::size_t a = 0; a < S; ++a) {
      if (!v[a].is_number_integer() || v[a].get<long long>() <= 0) break;
      out[a] = v[a].get<std::size_t>();
      if (a + 1 == S) return out;
    }
  }
  throw ValueError(at + ": " + key + " = " + v.dump() + " is not " + std::to_string(S) +
                   " positive integers");
}

inline layers::Padding padding_of(const std::string& at, const json& config) {
  const std::string p = config.value("padding", std::string("valid"));
  if (p == "valid") return layers::Padding::valid;
  if (p == "same") return layers::Padding::same;
  throw ValueError(at + ": padding \"" + p + "\" is not in kdist (\"valid\", \"same\")");
}

inline std::string padding_name(const std::string& at, layers::Padding p) {
  if (p == layers::Padding::valid) return "valid";
  if (p == layers::Padding::same) return "same";
  throw ValueError(at +
                   ": padding \"periodic\" is kdist's, not Keras'; a Keras file cannot hold it");
}

inline void require_channels_last(const std::string& at, const json& config) {
  require(at, config, "data_format", "channels_last",
          ": give the layer channels_last data (kdist's images are (batch, ..., channels))");
}

//! The options of Dense and convolutions that kdist has no counterpart of.
inline void require_plain_variables(const std::string& at, const json& config) {
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                          "kernel_constraint", "bias_constraint", "quantization_config"}) {
    require(at, config, key);
  }
  require(at, config, "lora_rank");
}

//! The layer of config `layer` (index `index` of the model's layers).
template <class T>
AnyLayer<T> layer_from_config(std::size_t index, const json& layer) {
  const std::string at = "kdist::model_from_json: " + where(index, layer);
  const std::string cls = layer.value("class_name", std::string());
  const json& c = layer.value("config", json::object());
  const std::string name = c.value("name", std::string());
  if (name.empty()) throw ValueError(at + ": the layer has no name");
  auto with_policy = [&](AnyLayer<T> l) {
    if (c.contains("dtype") && c["dtype"].is_object()) {
      const std::string policy = c["dtype"].value("config", json::object()).value("name", "");
      if (!policy.empty() && policy != "float32") l.set_dtype_policy(DTypePolicy(policy));
    } else if (c.contains("dtype") && c["dtype"].is_string() && c["dtype"] != "float32") {
      l.set_dtype_policy(DTypePolicy(c["dtype"].get<std::string>()));
    }
    return l;
  };
  if (cls == "Dense") {
    require_plain_variables(at, c);
    return with_policy(layers::BasicDense<T>(c.at("units").get<std::size_t>(), activation_of(at, c),
                                             c.value("use_bias", true), name));
  }
  if (cls == "Dropout") {
    require(at, c, "noise_shape");
    return with_policy(layers::BasicDropout<T>(c.at("rate").get<double>(), name));
  }
  if (cls == "Flatten") {
    require_channels_last(at, c);
    return with_policy(layers::BasicFlatten<T>(name));
  }
  auto convolution = [&]<std::size_t S>(std::integral_constant<std::size_t, S>) {
    require_plain_variables(at, c);
    require_channels_last(at, c);
    require(at, c, "groups", 1);
    layers::ConvOptions<S> o;
    o.strides = extents<S>(at, c, "strides", o.strides);
    o.dilation_rate = extents<S>(at, c, "dilation_rate", o.dilation_rate);
    o.padding = padding_of(at, c);
    return with_policy(layers::BasicConvolution<T, S>(
        c.at("filters").get<std::size_t>(), extents<S>(at, c, "kernel_size"), activation_of(at, c),
        c.value("use_bias", true), name, o));
  };
  if (cls == "Conv2D") return convolution(std::integral_constant<std::size_t, 2>{});
  if (cls == "Conv3D") return convolution(std::integral_constant<std::size_t, 3>{});
  auto pooling = [&]<ops::PoolingKind K, std::size_t S>(std::integral_constant<ops::PoolingKind, K>,
                                                        std::integral_constant<std::size_t, S>) {
    require_channels_last(at, c);
    layers::PoolingOptions<S> o;
    const auto pool = extents<S>(at, c, "pool_size");
    o.strides = extents<S>(at, c, "strides", pool);
    o.padding = padding_of(at, c);
    return with_policy(layers::BasicPooling<T, K, S>(pool, name, o));
  };
  using Max = std::integral_constant<ops::PoolingKind, ops::PoolingKind::max>;
  using Average = std::integral_constant<ops::PoolingKind, ops::PoolingKind::average>;
  using Two = std::integral_constant<std::size_t, 2>;
  using Three = std::integral_constant<std::size_t, 3>;
  if (cls == "MaxPooling2D") return pooling(Max{}, Two{});
  if (cls == "MaxPooling3D") return pooling(Max{}, Three{});
  if (cls == "AveragePooling2D") return pooling(Average{}, Two{});
  if (cls == "AveragePooling3D") return pooling(Average{}, Three{});
  auto upsampling = [&]<std::size_t S>(std::integral_constant<std::size_t, S>) {
    require_channels_last(at, c);
    require(at, c, "interpolation", "nearest");
    return with_policy(layers::BasicUpSampling<T, S>(extents<S>(at, c, "size"), name));
  };
  if (cls == "UpSampling2D") return upsampling(Two{});
  if (cls == "UpSampling3D") return upsampling(Three{});
  // a language model's layers (a GPT in Keras' functional API)
  if (cls == "Embedding") {
    for (const char* key : {"embeddings_regularizer", "activity_regularizer",
                            "embeddings_constraint", "quantization_config"}) {
      require(at, c, key);
    }
    require(at, c, "mask_zero", false);
    return with_policy(layers::BasicEmbedding<T>(c.at("input_dim").get<std::size_t>(),
                                                 c.at("output_dim").get<std::size_t>(), name));
  }
  if (cls == "LayerNormalization") {
    for (const char* key :
         {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"}) {
      require(at, c, key);
    }
    require(at, c, "rms_scaling", false);
    const json axis = c.value("axis", json(-1));
    if (axis != json(-1) && axis != json::array({-1})) {
      throw ValueError(at + ": axis = " + axis.dump() + " is not in kdist (only -1: the features)");
    }
    return with_policy(layers::BasicLayerNormalization<T>(
        name, c.value("epsilon", 1e-3), c.value("center", true), c.value("scale", true)));
  }
  if (cls == "MultiHeadAttention") {
    for (const char* key :
         {"output_shape", "sliding_window", "kernel_regularizer", "bias_regularizer",
          "activity_regularizer", "kernel_constraint", "bias_constraint"}) {
      require(at, c, key);
    }
    require(at, c, "use_gate", false);
    require(at, c, "dropout", 0.0, ": kdist's attention has no dropout of its probabilities");
    const auto key_dim = c.at("key_dim").get<std::size_t>();
    if (c.contains("value_dim") && !c["value_dim"].is_null() &&
        c["value_dim"].get<std::size_t>() != key_dim) {
      throw ValueError(at + ": value_dim = " + c["value_dim"].dump() +
                       " is not in kdist (only key_dim, " + std::to_string(key_dim) + ")");
    }
    const json axes = c.value("attention_axes", json());
    if (!axes.is_null() && axes != json::array({1})) {
      throw ValueError(at + ": attention_axes = " + axes.dump() +
                       " is not in kdist (only the sequence: null or [1])");
    }
    // Keras keeps the mask with the call: mha(h, h, use_causal_mask=True)
    bool causal = false;
    for (const json& node : layer.value("inbound_nodes", json::array())) {
      const json& kw = node.value("kwargs", json::object());
      causal = kw.value("use_causal_mask", false);
      for (const auto& [key, value] : kw.items()) {
        if (key != "use_causal_mask" && !value.is_null()) {
          throw ValueError(at + ": it is called with " + key + " = " + value.dump() +
                           ", which kdist's MultiHeadAttention does not take (it attends from "
                           "a sequence to itself: mha(x, x, use_causal_mask=...))");
        }
      }
    }
    return with_policy(layers::BasicMultiHeadAttention<T>(
        c.at("num_heads").get<std::size_t>(), key_dim, name, c.value("use_bias", true), causal));
  }
  if (cls == "PositionEmbedding") {
    const std::string registered = layer.value("registered_name", json()).is_string()
                                       ? layer["registered_name"].get<std::string>()
                                       : std::string();
    if (registered.rfind("keras_hub>", 0) == 0) {
      throw ValueError(at +
                       ": keras-hub's PositionEmbedding returns its table, to be added "
                       "(Add()([x, PositionEmbedding(s)(x)])), which kdist's model files do not "
                       "read yet; use the PositionEmbedding that adds it, registered as "
                       "\"kdist>PositionEmbedding\" (scripts/keras/gpt_keras_side.py)");
    }
    return with_policy(
        layers::BasicPositionEmbedding<T>(c.at("sequence_length").get<std::size_t>(), name));
  }
  throw ValueError(
      at + ": kdist has no layer of class \"" + cls +
      "\" in model files yet (Dense, Dropout, Flatten, Conv2D, Conv3D, MaxPooling2D/3D, "
      "AveragePooling2D/3D, UpSampling2D/3D, Embedding, PositionEmbedding, LayerNormalization, "
      "MultiHeadAttention); build this model in C++ and load its weights with "
      "kdist::load_keras_weights");
}

//! The input shape of a Sequential config (without the batch).
inline Shape input_shape_of(const json& config) {
  const auto from = [](const json& batch_shape) -> std::optional<Shape> {
    if (!batch_shape.is_array() || batch_shape.size() < 2) return std::nullopt;
    Shape s;
    for (std::size_t i = 1; i < batch_shape.size(); ++i) {
      if (!batch_shape[i].is_number_integer()) return std::nullopt;
      s.push_back(batch_shape[i].get<std::size_t>());
    }
    return s;
  };
  const json& layers = config.at("layers");
  if (!layers.empty() && layers[0].value("class_name", "") == "InputLayer") {
    const json& c = layers[0].value("config", json::object());
    if (auto s = from(c.value("batch_shape", c.value("batch_input_shape", json())))) return *s;
  }
  if (auto s = from(config.value("build_input_shape", json()))) return *s;
  throw ValueError(
      "kdist::model_from_json: the model has no input shape (no InputLayer with a batch_shape "
      "of known extents, no build_input_shape); give the Keras model an keras.Input(shape) with "
      "every extent known");
}

//! A Functional config as kdist's layers: a chain from the input to the output, where a tensor
//! that feeds two layers is a skip, the branch from one of them joining it again in an `Add`
//! (a kdist Residual) or a `Concatenate` with the skip first (a kdist Concatenate); skips nest.
template <class T>
class FunctionalGraph {
 public:
  explicit FunctionalGraph(const json& config) {
    const json& list = config.at("layers");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const json& l = list[i];
      Node n{i, l, l.value("class_name", std::string()), {}};
      const std::string name = l.value("name", l.value("config", json::object()).value("name", ""));
      for (const json& node : l.value("inbound_nodes", json::array())) {
        collect(node.value("args", json::array()), n.inputs);
      }
      if (n.inputs.size() > 1 && n.cls != "Add" && n.cls != "Concatenate" &&
          std::all_of(n.inputs.begin(), n.inputs.end(),
                      [&](const std::string& x) { return x == n.inputs.front(); })) {
        n.inputs.resize(1);  // e.g. attention(x, x): one input
      }
      for (const auto& from : n.inputs) consumers_[from].push_back(name);
      order_.push_back(name);
      nodes_.emplace(name, std::move(n));
    }
    input_ = single(config.value("input_layers", json()), "input");
    output_ = single(config.value("output_layers", json()), "output");
  }
  const std::string& input() const { return input_; }
  //! The layers from the input to the output.
  std::vector<AnyLayer<T>> layers() { return walk(input_, output_, ""); }
  //! The non-input layers in the config's order (Keras' model.layers: its weights file's order).
  std::vector<std::string> order() const {
    std::vector<std::string> out;
    for (const auto& n : order_) {
      if (nodes_.at(n).cls != "InputLayer") out.push_back(n);
    }
    return out;
  }

 private:
  struct Node {
    std::size_t index;
    json layer;
    std::string cls;
    std::vector<std::string> inputs;  // the layers whose outputs it takes, in order
  };

  static void collect(const json& args, std::vector<std::string>& out) {
    for (const json& a : args) {
      if (a.is_array()) {
        collect(a, out);
      } else if (a.is_object() && a.value("class_name", "") == "__keras_tensor__") {
        out.push_back(a.at("config").at("keras_history").at(0).get<std::string>());
      }
    }
  }
  static std::string single(const json& ends, const char* what) {
    const json& e =
        ends.is_array() && !ends.empty() && ends[0].is_array() && ends.size() == 1 ? ends[0] : ends;
    if (!e.is_array() || e.empty() || !e[0].is_string()) {
      throw ValueError(std::string("kdist::model_from_json: the Functional model has ") +
                       (ends.is_array() ? std::to_string(ends.size()) : std::string("no")) + " " +
                       what + "s; kdist's models take one input and give one output");
    }
    return e[0].get<std::string>();
  }
  std::string at(const Node& n) const { return where(n.index, n.layer); }

  //! The layers after tensor `from` up to tensor `to` (the output of layer `to`); `first`, when
  //! given, is the consumer of `from` to follow (a skip's branch).
  std::vector<AnyLayer<T>> walk(std::string from, const std::string& to, std::string first) {
    const std::string who = "kdist::model_from_json: ";
    std::vector<AnyLayer<T>> out;
    while (from != to) {
      std::vector<std::string> next =
          first.empty() ? consumers_[from] : std::vector<std::string>{first};
      first.clear();
      if (next.empty()) {
        throw ValueError(who + "the output of '" + from +
                         "' leads nowhere (the model's output is '" + to +
                         "'); kdist's models are one chain from the input to the output");
      }
      if (next.size() == 1) {
        const Node& n = nodes_.at(next.front());
        if (n.inputs.size() != 1) {
          throw ValueError(who + at(n) + " joins '" + join(n.inputs) +
                           "', which do not branch from one tensor just before it; kdist takes "
                           "skips x -> Add()([x, f(x)]) and Concatenate()([x, f(x)])");
        }
        out.push_back(layer_from_config<T>(n.index, n.layer));
        from = next.front();
        continue;
      }
      // a skip: one consumer joins `from` with the end of a branch that starts at the other
      const Node* merge = nullptr;
      const Node* branch = nullptr;
      if (next.size() == 2) {
        for (int k = 0; k < 2; ++k) {
          const Node& m = nodes_.at(next[static_cast<std::size_t>(k)]);
          if ((m.cls == "Add" || m.cls == "Concatenate") && m.inputs.size() == 2) {
            merge = &m;
            branch = &nodes_.at(next[static_cast<std::size_t>(1 - k)]);
          }
        }
      }
      if (merge == nullptr) {
        throw ValueError(who + "the output of '" + from + "' feeds " + join(next) +
                         "; kdist takes a tensor used twice only as a skip joined by an Add or a "
                         "Concatenate of two inputs");
      }
      const std::string name = merge->layer.value("name", std::string());
      const std::string end = merge->inputs[0] == from ? merge->inputs[1] : merge->inputs[0];
      if (merge->inputs[0] != from && merge->inputs[1] != from) {
        throw ValueError(who + at(*merge) + " does not take the skip '" + from + "'");
      }
      const json& mc = merge->layer.value("config", json::object());
      if (merge->cls == "Concatenate") {
        if (merge->inputs[0] != from) {
          throw ValueError(who + at(*merge) + " takes the branch '" + end + "' before the skip '" +
                           from +
                           "'; kdist's Concatenate puts the skip first: "
                           "Concatenate()([x, f(x)])");
        }
        if (const json axis = mc.value("axis", json(-1)); axis != -1) {
          throw ValueError(who + at(*merge) + ": axis = " + axis.dump() +
                           " is not in kdist (only -1: the channels)");
        }
      }
      auto inner = walk(from, end, branch->layer.value("name", std::string()));
      if (merge->cls == "Add") {
        out.push_back(layers::BasicResidual<T>(name, std::move(inner)));
      } else {
        out.push_back(layers::BasicConcatenate<T>(name, std::move(inner)));
      }
      from = name;
    }
    return out;
  }
  static std::string join(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
    return s;
  }

  std::map<std::string, Node> nodes_;
  std::map<std::string, std::vector<std::string>> consumers_;
  std::vector<std::string> order_;
  std::string input_, output_;
};

//! The names of a model's layers as Keras' model.layers lists them (a Residual's and a
//! Concatenate's inner layers, then the merge).
template <class T>
void flattened_names(std::vector<AnyLayer<T>>& layers, std::vector<std::string>& out) {
  for (auto& l : layers) {
    if (auto* r = l.template get_if<layers::BasicResidual<T>>()) {
      flattened_names(r->layers(), out);
    } else if (auto* c = l.template get_if<layers::BasicConcatenate<T>>()) {
      flattened_names(c->layers(), out);
    }
    out.push_back(l.name());
  }
}

template <class T>
BasicSequential<T> sequential_from_config(const json& model) {
  const std::string cls = model.value("class_name", std::string());
  if (cls == "Functional" || cls == "Model") {
    const json& config = model.at("config");
    FunctionalGraph<T> graph(config);
    auto layers = graph.layers();
    // Keras' weights file numbers the layers in the config's order: kdist's must be the same
    std::vector<std::string> names;
    flattened_names(layers, names);
    if (names != graph.order()) {
      throw ValueError(
          "kdist::model_from_json: the Functional model lists its layers in another order than "
          "kdist walks them (a branch created before the layers it follows?); build it in C++ "
          "and load its weights with kdist::load_keras_weights");
    }
    json inputs = json::object();
    for (const json& l : config.at("layers")) {
      if (l.value("name", "") == graph.input()) inputs = json{{"layers", json::array({l})}};
    }
    return BasicSequential<T>(input_shape_of(inputs), std::move(layers));
  }
  if (cls != "Sequential") {
    throw ValueError("kdist::model_from_json: the model is a \"" + cls +
                     "\"; kdist reads Sequential and Functional models");
  }
  const json& config = model.at("config");
  std::vector<AnyLayer<T>> layers;
  const json& list = config.at("layers");
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i].value("class_name", "") == "InputLayer") continue;
    layers.push_back(layer_from_config<T>(i, list[i]));
  }
  return BasicSequential<T>(input_shape_of(config), std::move(layers));
}

inline json parse(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ValueError(source + ": not JSON (" + e.what() + ")");
  }
}

//! Keras' optimizer of a compile config.
template <class T>
AnyOptimizer<T> optimizer_from_config(const json& o) {
  const std::string at = "kdist::load_model: the optimizer";
  const std::string cls = o.value("class_name", std::string());
  const json& c = o.value("config", json::object());
  for (const char* key : {"clipnorm", "clipvalue", "loss_scale_factor",
                          "gradient_accumulation_steps", "ema_overwrite_frequency"}) {
    require(at + " (" + cls + ")", c, key);
  }
  require(at + " (" + cls + ")", c, "use_ema", false);
  if (c.contains("learning_rate") && !c["learning_rate"].is_number()) {
    throw ValueError(
        at + " (" + cls + "): its learning_rate is a schedule (" + c["learning_rate"].dump() +
        "); kdist reads a number: set the rate in C++ (Sequential::set_learning_rate)");
  }
  const auto number = [&](const char* key, double otherwise) {
    return c.contains(key) && c[key].is_number() ? c[key].get<double>() : otherwise;
  };
  const double lr = number("learning_rate", 0.001);
  auto finish = [&](auto opt) -> AnyOptimizer<T> {
    if (number("weight_decay", 0.0) != 0.0 && cls != "AdamW") {
      opt.set_weight_decay(number("weight_decay", 0.0));
    }
    if (c.contains("global_clipnorm") && c["global_clipnorm"].is_number()) {
      opt.set_global_clipnorm(c["global_clipnorm"].get<double>());
    }
    return opt;
  };
  if (cls == "SGD") {
    return finish(
        SGD(number("learning_rate", 0.01), number("momentum", 0.0), c.value("nesterov", false)));
  }
  if (cls == "Adam" || cls == "AdamW") {
    require(at + " (" + cls + ")", c, "amsgrad", false);
    if (cls == "Adam") {
      return finish(
          Adam(lr, number("beta_1", 0.9), number("beta_2", 0.999), number("epsilon", 1e-7)));
    }
    return finish(AdamW(lr, number("weight_decay", 0.004), number("beta_1", 0.9),
                        number("beta_2", 0.999), number("epsilon", 1e-7)));
  }
  if (cls == "RMSprop") {
    return finish(RMSprop(lr, number("rho", 0.9), number("momentum", 0.0), number("epsilon", 1e-7),
                          c.value("centered", false)));
  }
  throw ValueError(at + " is \"" + cls +
                   "\"; kdist has SGD, Adam, AdamW and RMSprop: compile the model with one of them "
                   "in Keras, or build it in C++");
}

//! A compile config's loss: kdist's, and whether Keras computes it from logits (kdist's
//! sparse_categorical_crossentropy of a language model's (batch, sequence, vocabulary) outputs).
struct LossConfig {
  Loss loss;
  bool from_logits = false;
};

inline LossConfig loss_from_config(const json& l) {
  const std::string at = "kdist::load_model: the loss";
  std::string name;
  bool from_logits = false;
  if (l.is_string()) {
    name = l.get<std::string>();
  } else if (l.is_object()) {
    const json& c = l.value("config", json::object());
    const std::string cls = l.value("class_name", std::string());
    if (cls != "SparseCategoricalCrossentropy") {
      require(at, c, "from_logits", false,
              ": kdist's losses take probabilities; end the model in a softmax");
    }
    from_logits = c.value("from_logits", false);
    require(at, c, "label_smoothing", 0);
    require(at, c, "ignore_class");
    name = cls == "MeanSquaredError"                ? "mean_squared_error"
           : cls == "CategoricalCrossentropy"       ? "categorical_crossentropy"
           : cls == "SparseCategoricalCrossentropy" ? "sparse_categorical_crossentropy"
                                                    : cls;
  }
  if (name == "mean_squared_error" || name == "mse") return {Loss::mean_squared_error};
  if (name == "categorical_crossentropy") return {Loss::categorical_crossentropy};
  if (name == "sparse_categorical_crossentropy") {
    return {Loss::sparse_categorical_crossentropy, from_logits};
  }
  throw ValueError(at + " is " + l.dump() +
                   "; kdist has mean_squared_error, categorical_crossentropy and "
                   "sparse_categorical_crossentropy");
}

//! Whether `model` (compiled) gives a language model's (batch, sequence, vocabulary) logits,
//! which kdist's sparse_categorical_crossentropy takes as logits (Keras' from_logits=True).
template <class T>
bool gives_sequence_logits(BasicSequential<T>& model) {
  return model.output_shape().size() == 2 && model.loss().takes_sequence_logits();
}

//! What every layer's Keras config holds: its name, trainable, its dtype policy.
template <class T>
json base_config(const AnyLayer<T>& layer) {
  return {{"name", layer.name()},
          {"trainable", true},
          {"dtype",
           {{"module", "keras"},
            {"class_name", "DTypePolicy"},
            {"config", {{"name", layer.dtype_policy().name()}}},
            {"registered_name", nullptr}}}};
}

//! Keras' config of a layer kdist can write (with the dtype policy the layer has).
template <class T>
json layer_config(std::size_t index, AnyLayer<T>& layer) {
  const std::string at =
      "kdist::model_to_json: layer " + std::to_string(index) + " '" + layer.name() + "'";
  json c = base_config(layer);
  const auto list = [](const auto& a) {
    return json(std::vector<std::size_t>(a.begin(), a.end()));
  };
  const json glorot = {{"module", "keras.initializers"},
                       {"class_name", "GlorotUniform"},
                       {"config", {{"seed", nullptr}}},
                       {"registered_name", nullptr}};
  const json zeros = {{"module", "keras.initializers"},
                      {"class_name", "Zeros"},
                      {"config", json::object()},
                      {"registered_name", nullptr}};
  std::string cls = layer.keras_class();
  if (auto* d = layer.template get_if<layers::BasicDense<T>>()) {
    c["units"] = d->units();
    c["activation"] = activation_name(d->activation());
    c["use_bias"] = d->use_bias();
    c["kernel_initializer"] = glorot;
    c["bias_initializer"] = zeros;
  } else if (auto* r = layer.template get_if<layers::BasicDropout<T>>()) {
    c["rate"] = r->rate();
    c["seed"] = nullptr;
    c["noise_shape"] = nullptr;
  } else if (layer.template get_if<layers::BasicFlatten<T>>() != nullptr) {
    c["data_format"] = "channels_last";
  } else if (auto* e = layer.template get_if<layers::BasicEmbedding<T>>()) {
    c["input_dim"] = e->input_dim();
    c["output_dim"] = e->output_dim();
    c["embeddings_initializer"] = {
        {"module", "keras.initializers"},
        {"class_name", "RandomUniform"},
        {"config", {{"seed", nullptr}, {"minval", -0.05}, {"maxval", 0.05}}},
        {"registered_name", nullptr}};
    c["mask_zero"] = false;
  } else if (auto* n = layer.template get_if<layers::BasicLayerNormalization<T>>()) {
    c["axis"] = json::array({-1});
    c["epsilon"] = n->epsilon();
    c["center"] = n->center();
    c["scale"] = n->scale();
    c["rms_scaling"] = false;
  } else if (auto* a = layer.template get_if<layers::BasicMultiHeadAttention<T>>()) {
    c["num_heads"] = a->num_heads();
    c["key_dim"] = a->key_dim();
    c["value_dim"] = a->key_dim();
    c["dropout"] = 0.0;
    c["use_bias"] = a->use_bias();
    c["output_shape"] = nullptr;
    c["attention_axes"] = json::array({1});
    c["kernel_initializer"] = glorot;
    c["bias_initializer"] = zeros;
  } else if (auto* pe = layer.template get_if<layers::BasicPositionEmbedding<T>>()) {
    // kdist's PositionEmbedding adds its table: the Keras layer "kdist>PositionEmbedding"
    // (scripts/keras/gpt_keras_side.py), not keras-hub's, which returns it
    c["sequence_length"] = pe->sequence_length();
    return {{"module", "kdist"},
            {"class_name", "PositionEmbedding"},
            {"config", std::move(c)},
            {"registered_name", "kdist>PositionEmbedding"}};
  } else {
    bool found = false;
    auto convolution = [&]<std::size_t S>(std::integral_constant<std::size_t, S>) {
      if (auto* v = layer.template get_if<layers::BasicConvolution<T, S>>()) {
        c["filters"] = v->filters();
        c["kernel_size"] = list(v->kernel_size());
        c["strides"] = list(v->options().strides);
        c["padding"] = padding_name(at, v->options().padding);
        c["data_format"] = "channels_last";
        c["dilation_rate"] = list(v->options().dilation_rate);
        c["groups"] = 1;
        c["activation"] = activation_name(v->activation());
        c["use_bias"] = v->use_bias();
        c["kernel_initializer"] = glorot;
        c["bias_initializer"] = zeros;
        found = true;
      }
    };
    auto pooling = [&]<ops::PoolingKind K, std::size_t S>(
                       std::integral_constant<ops::PoolingKind, K>,
                       std::integral_constant<std::size_t, S>) {
      if (auto* p = layer.template get_if<layers::BasicPooling<T, K, S>>()) {
        c["pool_size"] = list(p->pool_size());
        c["strides"] = list(p->options().strides);
        c["padding"] = padding_name(at, p->options().padding);
        c["data_format"] = "channels_last";
        found = true;
      }
    };
    auto upsampling = [&]<std::size_t S>(std::integral_constant<std::size_t, S>) {
      if (auto* u = layer.template get_if<layers::BasicUpSampling<T, S>>()) {
        c["size"] = list(u->size());
        c["data_format"] = "channels_last";
        c["interpolation"] = "nearest";
        found = true;
      }
    };
    using Max = std::integral_constant<ops::PoolingKind, ops::PoolingKind::max>;
    using Average = std::integral_constant<ops::PoolingKind, ops::PoolingKind::average>;
    using Two = std::integral_constant<std::size_t, 2>;
    using Three = std::integral_constant<std::size_t, 3>;
    convolution(Two{});
    convolution(Three{});
    pooling(Max{}, Two{});
    pooling(Max{}, Three{});
    pooling(Average{}, Two{});
    pooling(Average{}, Three{});
    upsampling(Two{});
    upsampling(Three{});
    if (!found) {
      throw ValueError(at + " (" + (cls.empty() ? "a user layer" : cls) +
                       ") cannot be written to a Keras file yet: kdist writes Dense, Dropout, "
                       "Flatten, Conv2D/3D, MaxPooling2D/3D, AveragePooling2D/3D and "
                       "UpSampling2D/3D; save its weights with kdist::save_keras_weights");
    }
  }
  return {{"module", "keras.layers"},
          {"class_name", cls},
          {"config", std::move(c)},
          {"registered_name", nullptr}};
}

template <class T>
json optimizer_config(const AnyOptimizer<T>& optimizer) {
  const std::string cls = optimizer.name();
  if (cls != "SGD" && cls != "Adam" && cls != "AdamW" && cls != "RMSprop") {
    throw ValueError("kdist::save_model: the optimizer " + cls +
                     " has no Keras counterpart kdist writes (SGD, Adam, AdamW, RMSprop); save the "
                     "weights with kdist::save_keras_weights");
  }
  json c = {{"name", detail::keras_weights::to_snake_case(cls)}};
  for (const auto& [key, value] : optimizer.hyperparameters()) {
    if (key == "nesterov" || key == "centered" || key == "amsgrad") {
      c[key] = value != 0.0;
    } else {
      c[key] = value;
    }
  }
  return {{"module", "keras.optimizers"},
          {"class_name", cls},
          {"config", std::move(c)},
          {"registered_name", nullptr}};
}

//! A functional config's reference to the output of layer `from`, of `shape` (per example).
inline json tensor_of(const std::string& from, const Shape& shape) {
  json s = json::array({nullptr});
  for (const auto e : shape) s.push_back(e);
  return {{"class_name", "__keras_tensor__"},
          {"config",
           {{"shape", std::move(s)},
            {"dtype", "float32"},
            {"keras_history", json::array({from, 0, 0})}}}};
}

//! The output shape (per example) of a layer kdist writes to Keras files, from its input's, by
//! Keras' rules (a functional config names each tensor's shape).
template <class T>
Shape shape_after(AnyLayer<T>& layer, Shape in) {
  const auto windowed = [&](std::size_t a, std::size_t extent, std::size_t stride,
                            layers::Padding p) {
    in[a] = p == layers::Padding::valid ? (in[a] >= extent ? (in[a] - extent) / stride + 1 : 0)
                                        : (in[a] + stride - 1) / stride;
  };
  if (auto* d = layer.template get_if<layers::BasicDense<T>>()) {
    in.back() = d->units();
  } else if (layer.template get_if<layers::BasicFlatten<T>>() != nullptr) {
    std::size_t n = 1;
    for (const auto e : in) n *= e;
    in = Shape{n};
  } else if (auto* e = layer.template get_if<layers::BasicEmbedding<T>>()) {
    in.push_back(e->output_dim());  // (sequence,) token ids -> (sequence, features)
  } else {
    auto spatial = [&]<std::size_t S>(std::integral_constant<std::size_t, S>) {
      if (auto* c = layer.template get_if<layers::BasicConvolution<T, S>>()) {
        const auto& o = c->options();
        for (std::size_t a = 0; a < S; ++a) {
          windowed(a, o.dilation_rate[a] * (c->kernel_size()[a] - 1) + 1, o.strides[a], o.padding);
        }
        in.back() = c->filters();
      }
      auto pooled = [&](auto* p) {
        if (p == nullptr) return;
        for (std::size_t a = 0; a < S; ++a) {
          windowed(a, p->pool_size()[a], p->options().strides[a], p->options().padding);
        }
      };
      pooled(layer.template get_if<layers::BasicPooling<T, ops::PoolingKind::max, S>>());
      pooled(layer.template get_if<layers::BasicPooling<T, ops::PoolingKind::average, S>>());
      if (auto* u = layer.template get_if<layers::BasicUpSampling<T, S>>()) {
        for (std::size_t a = 0; a < S; ++a) in[a] *= u->size()[a];
      }
    };
    if (in.size() == 3) spatial(std::integral_constant<std::size_t, 2>{});
    if (in.size() == 4) spatial(std::integral_constant<std::size_t, 3>{});
  }
  return in;
}
inline json called_on(std::vector<json> inputs, bool merge, json kwargs = json::object()) {
  json args = json::array();
  if (merge) {
    args.push_back(json(std::move(inputs)));
  } else {
    for (auto& i : inputs) args.push_back(std::move(i));
  }
  return json::array({{{"args", std::move(args)}, {"kwargs", std::move(kwargs)}}});
}

//! The layers of a functional config, after tensor `t` (left at the last layer's output): a
//! Residual is its inner layers then an Add of its input and theirs, a Concatenate the same with
//! a Concatenate; `index` numbers the layers for messages.
template <class T>
void functional_layers(std::vector<AnyLayer<T>>& list, std::string& t, Shape& shape, json& out,
                       std::size_t& index) {
  for (auto& l : list) {
    auto* r = l.template get_if<layers::BasicResidual<T>>();
    auto* c = l.template get_if<layers::BasicConcatenate<T>>();
    if (r != nullptr || c != nullptr) {
      const std::string start = t;
      const Shape start_shape = shape;
      functional_layers(r != nullptr ? r->layers() : c->layers(), t, shape, out, index);
      json config = base_config(l);
      if (c != nullptr) config["axis"] = -1;
      out.push_back({{"module", "keras.layers"},
                     {"class_name", r != nullptr ? "Add" : "Concatenate"},
                     {"config", std::move(config)},
                     {"registered_name", nullptr},
                     {"name", l.name()},
                     {"inbound_nodes",
                      called_on({tensor_of(start, start_shape), tensor_of(t, shape)}, true)}});
      if (c != nullptr) shape.back() += start_shape.back();
      t = l.name();
      ++index;
      continue;
    }
    json e = layer_config(index++, l);
    e["name"] = l.name();
    if (auto* a = l.template get_if<layers::BasicMultiHeadAttention<T>>()) {
      // self-attention: mha(x, x, use_causal_mask=...)
      e["inbound_nodes"] = called_on({tensor_of(t, shape), tensor_of(t, shape)}, false,
                                     {{"use_causal_mask", a->causal()}});
    } else {
      e["inbound_nodes"] = called_on({tensor_of(t, shape)}, false);
    }
    out.push_back(std::move(e));
    shape = shape_after(l, shape);
    t = l.name();
  }
}

//! A zip archive, closed (discarding what was not committed) when it goes.
struct Zip {
  zip_t* z = nullptr;
  ~Zip() {
    if (z != nullptr) zip_discard(z);
  }
};

//! Member `name` of the open archive.
inline std::string read_member(zip_t* z, const std::string& path, const char* name) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(z, name, 0, &st) != 0 || (st.valid & ZIP_STAT_SIZE) == 0) {
    throw ValueError(path + ": the archive has no " + name +
                     "; a Keras model file holds config.json, metadata.json and model.weights.h5 "
                     "(keras' model.save(\"x.keras\"))");
  }
  std::string out(st.size, '\0');
  zip_file_t* f = zip_fopen(z, name, 0);
  const bool read =
      f != nullptr && zip_fread(f, out.data(), st.size) == static_cast<zip_int64_t>(st.size);
  if (f != nullptr) zip_fclose(f);
  if (!read) throw ValueError(path + ": cannot read its " + name + " (" + zip_strerror(z) + ")");
  return out;
}

//! Removes `path` (on process 0) when it goes.
struct RemovedAfterwards {
  std::string path;
  ~RemovedAfterwards() {
    if (!path.empty() && kdist::process_id() == 0) std::remove(path.c_str());
  }
};

//! `<path>.kdist-<pid of process 0>.weights.h5`, the same on every process.
inline std::string weights_beside(const std::string& path) {
  std::string name;
  if (kdist::process_id() == 0) {
    name = path + ".kdist-" + std::to_string(static_cast<long>(getpid())) + ".weights.h5";
  }
  broadcast(name, 0, kdist::communicator());
  return name;
}

}  // namespace detail::keras_model

//! The uncompiled model of Keras' `model.to_json()` text (Keras' `model_from_json`): a Sequential
//! or a Functional model of skips. Errors: kdist::ValueError for text that is not JSON, a model
//! that is neither or a graph that is not a chain of skips (naming the layers), a layer,
//! option or activation kdist lacks (naming the layer, its index and the option), no input shape.
template <class T = float>
BasicSequential<T> model_from_json(const std::string& text) {
  return detail::keras_model::sequential_from_config<T>(
      detail::keras_model::parse(text, "kdist::model_from_json"));
}

namespace detail::keras_model {
//! The model of a parsed config, compiled with its compile_config on `dist` (`source` names the
//! text in messages).
template <class T>
BasicSequential<T> compiled_from_config(const json& parsed,
                                        std::shared_ptr<const Distribution> dist,
                                        std::uint64_t seed, const std::string& source,
                                        const char* fix) {
  auto model = sequential_from_config<T>(parsed);
  if (!parsed.contains("compile_config") || parsed["compile_config"].is_null()) {
    throw ValueError(source + " holds a model saved without compile (no optimizer, no loss); " +
                     fix);
  }
  const auto& compile = parsed["compile_config"];
  const LossConfig loss = loss_from_config(compile.value("loss", json()));
  model.compile(std::move(dist), loss.loss,
                optimizer_from_config<T>(compile.value("optimizer", json::object())), seed);
  if (loss.from_logits != gives_sequence_logits(model)) {
    throw ValueError(
        "kdist::load_model: the loss: from_logits = " +
        std::string(loss.from_logits ? "true" : "false") + " for outputs of shape " +
        kdist::detail::shape_repr(model.output_shape()) +
        "; kdist's sparse_categorical_crossentropy takes logits (from_logits=True) for a "
        "language model's (sequence, vocabulary) outputs, ending in a Dense without "
        "activation, and probabilities (a final softmax) otherwise");
  }
  return model;
}
}  // namespace detail::keras_model

//! The model of Keras' JSON of a compiled model (`model.to_json()` holds its compile_config),
//! compiled with that optimizer and loss on `dist`, its variables initialised from `seed` (what
//! the C API's kdist_model_from_json builds). Errors: those of model_from_json above, and a
//! kdist::ValueError for JSON without a compile_config (compile the uncompiled model yourself).
template <class T = float>
BasicSequential<T> model_from_json(const std::string& text,
                                   std::shared_ptr<const Distribution> dist,
                                   std::uint64_t seed = 0) {
  namespace km = detail::keras_model;
  return km::compiled_from_config<T>(
      km::parse(text, "kdist::model_from_json"), std::move(dist), seed,
      "kdist::model_from_json: the JSON",
      "compile the model in Keras before model.to_json() (its JSON then holds the compile_config), "
      "or build it with kdist::model_from_json(text) and compile it in C++");
}

//! Keras' `model.to_json()` of a model (layers, input shape, dtype policies; compiled: the
//! optimizer and the loss). Errors: kdist::ValueError for a layer or optimizer Keras' files
//! cannot hold from kdist (a user layer, "periodic" padding).
template <class T>
std::string model_to_json(BasicSequential<T>& model) {
  namespace km = detail::keras_model;
  using json = km::json;
  json shape = json::array({nullptr});
  for (const auto e : model.input_shape()) shape.push_back(e);
  const bool starts_with_embedding =
      !model.layers().empty() &&
      model.layers().front().template get_if<layers::BasicEmbedding<T>>() != nullptr;
  json layers = json::array();
  layers.push_back({{"module", "keras.layers"},
                    {"class_name", "InputLayer"},
                    {"config",
                     {{"batch_shape", shape},
                      {"dtype", starts_with_embedding ? "int32" : "float32"},  // token ids
                      {"sparse", false},
                      {"name", "input_layer"}}},
                    {"registered_name", nullptr}});
  json out;
  if (detail::keras_weights::is_functional(model)) {
    // a Residual or a Concatenate: Keras' Functional model (its Sequential has no skips)
    layers[0]["name"] = "input_layer";
    layers[0]["inbound_nodes"] = json::array();
    std::string t = "input_layer";
    Shape tensor_shape = model.input_shape();
    std::size_t index = 1;
    km::functional_layers(model.layers(), t, tensor_shape, layers, index);
    out = {{"module", "keras.src.models.functional"},
           {"class_name", "Functional"},
           {"config",
            {{"name", "functional"},
             {"trainable", true},
             {"layers", std::move(layers)},
             {"input_layers", json::array({"input_layer", 0, 0})},
             {"output_layers", json::array({t, 0, 0})}}},
           {"registered_name", "Functional"},
           {"build_config", {{"input_shape", nullptr}}}};
  } else {
    for (std::size_t i = 0; i < model.layers().size(); ++i) {
      layers.push_back(km::layer_config(i + 1, model.layers()[i]));
    }
    out = {{"module", "keras"},
           {"class_name", "Sequential"},
           {"config",
            {{"name", "sequential"},
             {"trainable", true},
             {"layers", std::move(layers)},
             {"build_input_shape", shape}}},
           {"registered_name", nullptr},
           {"build_config", {{"input_shape", shape}}}};
  }
  if (model.compiled()) {
    // a language model's loss takes its logits: Keras' from_logits=True
    const json loss = km::gives_sequence_logits(model)
                          ? json{{"module", "keras.losses"},
                                 {"class_name", "SparseCategoricalCrossentropy"},
                                 {"config",
                                  {{"name", "sparse_categorical_crossentropy"},
                                   {"reduction", "sum_over_batch_size"},
                                   {"from_logits", true},
                                   {"ignore_class", nullptr}}},
                                 {"registered_name", nullptr}}
                          : json(model.loss().name());
    out["compile_config"] = {{"optimizer", km::optimizer_config(model.optimizer())},
                             {"loss", loss},
                             {"loss_weights", nullptr},
                             {"metrics", nullptr},
                             {"weighted_metrics", nullptr},
                             {"run_eagerly", false},
                             {"steps_per_execution", 1},
                             {"jit_compile", false}};
  }
  return out.dump();
}

//! The model of Keras file `path` (`.keras`), compiled with the file's optimizer and loss on
//! `dist` and holding the file's weights and optimizer state (collective; see the file's comment).
//! Errors (kdist::ValueError, the same on every process): a file that cannot be read or is not a
//! Keras model file, what model_from_json rejects, a model saved without compile (no optimizer:
//! build it with model_from_json, compile it and call load_keras_weights), and what
//! load_keras_weights rejects.
template <class T = float>
BasicSequential<T> load_model(const std::string& path, std::shared_ptr<const Distribution> dist,
                              LoadModelOptions options = {}) {
  namespace km = detail::keras_model;
  const auto weights = km::weights_beside(path);
  km::RemovedAfterwards remove{kdist::process_id() == 0 ? weights : std::string()};
  std::string config, failure;
  if (kdist::process_id() == 0) {
    try {
      int error = 0;
      km::Zip zip{zip_open(path.c_str(), ZIP_RDONLY, &error)};
      if (zip.z == nullptr) {
        zip_error_t e;
        zip_error_init_with_code(&e, error);
        failure = "kdist::load_model: '" + path + "' cannot be opened as a Keras model file (" +
                  zip_error_strerror(&e) + ")";
        zip_error_fini(&e);
      } else {
        config = km::read_member(zip.z, path, "config.json");
        const std::string h5 = km::read_member(zip.z, path, "model.weights.h5");
        std::FILE* out = std::fopen(weights.c_str(), "wb");
        const bool written =
            out != nullptr && std::fwrite(h5.data(), 1, h5.size(), out) == h5.size();
        if (out != nullptr && std::fclose(out) != 0) failure = "close";
        if (!written || !failure.empty()) {
          failure = "kdist::load_model: cannot write the weights beside '" + path + "' ('" +
                    weights + "'); its directory must be writable by process 0";
        }
      }
    } catch (const Error& e) {
      failure = std::string("kdist::load_model: ") + e.what();
    }
  }
  mpi::agree<ValueError>(kdist::communicator(), failure.empty(), failure);
  broadcast(config, 0, kdist::communicator());
  const auto parsed = km::parse(config, "kdist::load_model: '" + path + "' config.json");
  auto model = km::compiled_from_config<T>(
      parsed, std::move(dist), options.seed, "kdist::load_model: '" + path + "'",
      "build it with kdist::model_from_json, compile it, and load the weights with "
      "kdist::load_keras_weights");
  load_keras_weights(model, weights, options.weights);
  return model;
}

//! Writes `model` (compiled) to Keras file `path` (`.keras`): its config, Keras' metadata and its
//! weights with the optimizer's state (collective; see the file's comment). Errors: what
//! model_to_json rejects, a model not compiled, a file that cannot be written (the same
//! kdist::ValueError on every process).
template <class T>
void save_model(BasicSequential<T>& model, const std::string& path) {
  namespace km = detail::keras_model;
  if (!model.compiled()) {
    throw ValueError(
        "kdist::save_model: the model is not compiled; compile it first (a Keras "
        "file holds the variables and the optimizer)");
  }
  const std::string config = model_to_json(model);
  const auto weights = km::weights_beside(path);
  km::RemovedAfterwards remove{kdist::process_id() == 0 ? weights : std::string()};
  save_keras_weights(model, weights);
  std::string failure;
  if (kdist::process_id() == 0) {
    // Keras' metadata: the version whose format kdist writes (checked against it), the date
    // as Keras writes it
    char date[32] = "";
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", std::localtime(&now));
    const std::string metadata = km::json{{"keras_version", "3.15.1"}, {"date_saved", date}}.dump();
    int error = 0;
    km::Zip zip{zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error)};
    auto add = [&](const char* name, zip_source_t* source) {
      if (source == nullptr) return false;
      const zip_int64_t i = zip_file_add(zip.z, name, source, ZIP_FL_OVERWRITE);
      if (i < 0) {
        zip_source_free(source);
        return false;
      }
      return zip_set_file_compression(zip.z, static_cast<zip_uint64_t>(i), ZIP_CM_STORE, 0) == 0;
    };
    const bool ok =
        zip.z != nullptr &&
        add("metadata.json", zip_source_buffer(zip.z, metadata.data(), metadata.size(), 0)) &&
        add("config.json", zip_source_buffer(zip.z, config.data(), config.size(), 0)) &&
        add("model.weights.h5", zip_source_file(zip.z, weights.c_str(), 0, -1)) &&
        zip_close(zip.z) == 0;
    if (ok) {
      zip.z = nullptr;
    } else {
      failure = "kdist::save_model: cannot write '" + path + "' (" +
                (zip.z != nullptr ? zip_strerror(zip.z) : "cannot create it") + ")";
    }
  }
  mpi::agree<ValueError>(kdist::communicator(), failure.empty(), failure);
}

}  // namespace kdist
