#pragma once
//! \file common/trainer_flags.hpp
//! The example trainers' command line, parsed strictly with CLI11 (Debian libcli11-dev): integers
//! as integers in their range (no sign, no exponent, no trailing junk, no overflow), a learning
//! rate as a finite positive number, names from their lists. Every bad flag is a
//! kdist::ValueError that names the flag, the value and what is accepted.

#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <kdist/core/error.hpp>
#include <kdist/nn/dtype_policy.hpp>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kdist::examples {

struct TrainerOptions {
  std::vector<std::size_t> mesh;  // empty: the trainer's default
  std::size_t epochs = 5;
  std::size_t batch_size = 128;
  double learning_rate = 0.001;
  std::string optimizer = "adam";
  std::string loss = "crossentropy";
  std::uint64_t seed = 1337;
  std::size_t max_steps = 0;  // per epoch; 0: all
  bool quiet = false;
  bool drop_remainder = false;      // drop each epoch's partial last batch (Keras keeps it)
  std::string checkpoint_dir;       // empty: no checkpoints
  std::size_t save_every = 1;       // epochs between checkpoints (and after the last)
  bool resume = false;              // start from <checkpoint_dir>/checkpoint.h5
  std::string load_keras_weights;   // start from a Keras .weights.h5 file (empty: no)
  std::string save_keras_weights;   // after training, write a Keras .weights.h5 file (empty: no)
  std::string keras_weights_dtype;  // its variables' dtype: "" (each its own), float32, ...
  bool evaluate_only = false;       // no training: evaluate the loaded weights
  std::string layout_map;           // LayoutMap rules from this JSON file (empty: the trainer's)
  std::string dtype_policy;         // Keras' dtype policy of the layers (empty: float32)
};

//! Limits of the trainers' integer flags.
inline constexpr std::uint64_t max_epochs = 1'000'000;
inline constexpr std::uint64_t max_batch_size = std::uint64_t{1} << 31;
inline constexpr std::uint64_t max_mesh_extent = std::uint64_t{1} << 31;

//! CLI11's check of --dtype-policy: "" for a name Keras knows, else kdist::DTypePolicy's error.
inline std::string dtype_policy_check(const std::string& name) {
  try {
    (void)kdist::DTypePolicy(name);
    return {};
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
}

namespace detail {

//! A decimal unsigned integer: digits only (no sign, blanks, exponent or base prefix) in
//! [lo, hi]; nullopt otherwise.
inline std::optional<std::uint64_t> parse_unsigned(std::string_view text, std::uint64_t lo,
                                                   std::uint64_t hi) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

//! A CLI11 option reader for the unsigned integer flag `flag` in [lo, hi].
template <class T>
auto unsigned_flag(const char* flag, T& target, std::uint64_t lo, std::uint64_t hi) {
  return [flag, &target, lo, hi](const std::string& text) {
    const auto v = parse_unsigned(text, lo, hi);
    if (!v) {
      throw CLI::ValidationError(std::string(flag) + " '" + text + "' is not a whole number in [" +
                                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    target = static_cast<T>(*v);
  };
}

}  // namespace detail

//! "2x4" -> {2, 4}: extents >= 1, separated by 'x'. Errors: kdist::ValueError naming the text.
inline std::vector<std::size_t> parse_mesh(const std::string& text) {
  std::vector<std::size_t> shape;
  std::size_t start = 0;
  while (true) {
    const std::size_t x = text.find('x', start);
    const auto part = std::string_view(text).substr(start, x == std::string::npos ? x : x - start);
    const auto v = detail::parse_unsigned(part, 1, max_mesh_extent);
    if (!v) {
      throw ValueError("--mesh '" + text +
                       "' does not parse: give extents from 1 to 2^31 separated by 'x', e.g. "
                       "--mesh 2x4");
    }
    shape.push_back(static_cast<std::size_t>(*v));
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return shape;
}

//! Parses the trainers' flags; nullopt after printing the help (--help), which the trainer then
//! ends with exit status 0. `usage` heads the help and the errors.
inline std::optional<TrainerOptions> parse_options(int argc, char** argv, const char* usage,
                                                   bool print_help = true) {
  TrainerOptions o;
  CLI::App app(usage);
  std::string mesh_text;
  app.add_option("--mesh", mesh_text, "mesh shape, e.g. 2x4 (data x model)");
  app.add_option_function<std::string>(
      "--epochs", detail::unsigned_flag("--epochs", o.epochs, 1, max_epochs), "epochs (1 to 10^6)");
  app.add_option_function<std::string>(
      "--batch-size", detail::unsigned_flag("--batch-size", o.batch_size, 1, max_batch_size),
      "global batch size (1 to 2^31)");
  app.add_option_function<std::string>(
      "--learning-rate",
      [&o](const std::string& text) {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
            !std::isfinite(v) || v <= 0) {
          throw CLI::ValidationError("--learning-rate '" + text + "' is not a finite number > 0");
        }
        o.learning_rate = v;
      },
      "learning rate (> 0)");
  app.add_option("--optimizer", o.optimizer, "adam, rmsprop or sgd")
      ->check(CLI::IsMember({"adam", "rmsprop", "sgd"}));
  app.add_option("--loss", o.loss, "crossentropy or mse")
      ->check(CLI::IsMember({"crossentropy", "mse"}));
  app.add_option_function<std::string>(
      "--seed",
      detail::unsigned_flag("--seed", o.seed, 0, std::numeric_limits<std::uint64_t>::max()),
      "random seed (0 to 2^64 - 1)");
  app.add_option_function<std::string>(
      "--steps",
      detail::unsigned_flag("--steps", o.max_steps, 0, std::numeric_limits<std::int64_t>::max()),
      "at most this many steps per epoch (0: all)");
  app.add_flag("--quiet", o.quiet, "no progress output");
  app.add_option("--layout-map", o.layout_map,
                 "LayoutMap rules from a JSON file {\"regex\": [\"axis\" | null, ...]} instead of "
                 "the trainer's own (examples/layout_maps/)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "save <dir>/checkpoint.h5 (sharded parallel HDF5) every --save-every epochs");
  app.add_option_function<std::string>(
      "--save-every", detail::unsigned_flag("--save-every", o.save_every, 1, max_epochs),
      "epochs between checkpoints (1 to 10^6; default 1)");
  app.add_flag("--resume", o.resume,
               "resume from <checkpoint-dir>/checkpoint.h5, saved on any mesh");
  app.add_option("--load-keras-weights", o.load_keras_weights,
                 "start from the weights (and optimizer state) of a Keras .weights.h5 file");
  app.add_option("--save-keras-weights", o.save_keras_weights,
                 "after training, write the weights as a Keras .weights.h5 file "
                 "(Keras: model.load_weights)");
  app.add_option("--keras-weights-dtype", o.keras_weights_dtype,
                 "the dtype --save-keras-weights writes the variables in, as Keras does under "
                 "that dtype policy: float32, bfloat16, float16 (default: each variable's own, "
                 "16 bits under --dtype-policy bfloat16 or float16)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_flag("--evaluate-only", o.evaluate_only,
               "do not train: evaluate the weights of --load-keras-weights or --resume");
  app.add_option("--dtype-policy", o.dtype_policy,
                 "Keras' dtype policy of the layers: float32 (default), mixed_bfloat16, "
                 "mixed_float16 (16-bit activations, float32 variables), bfloat16, float16 "
                 "(16-bit variables and optimizer slots too)")
      ->check(dtype_policy_check);
  app.add_flag("--drop-remainder", o.drop_remainder,
               "drop each epoch's partial last batch (default: train on it, as Keras)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print_help) std::printf("%s", app.help().c_str());
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw ValueError(std::string(e.what()) + "\n" + usage);
  }
  if (!mesh_text.empty() || app.count("--mesh") > 0) o.mesh = parse_mesh(mesh_text);
  // the layers the trainer creates from now on take it (Keras' set_global_policy)
  if (!o.dtype_policy.empty()) kdist::mixed_precision::set_global_policy(o.dtype_policy);
  if ((o.resume || app.count("--save-every") > 0) && o.checkpoint_dir.empty()) {
    throw ValueError(std::string(o.resume ? "--resume" : "--save-every") +
                     " needs --checkpoint-dir DIR (where checkpoint.h5 is)\n" + usage);
  }
  if (o.evaluate_only && o.load_keras_weights.empty() && !o.resume) {
    throw ValueError(std::string("--evaluate-only needs weights to evaluate: --load-keras-weights "
                                 "FILE or --checkpoint-dir DIR --resume\n") +
                     usage);
  }
  return o;
}

}  // namespace kdist::examples
