// GPT trainer (issue 20): a byte-level decoder-only transformer (examples/common/gpt_model.hpp)
// trained on English text — by default the plain-text files of Debian's fortunes package, or
// --text FILE — with a held-out validation split, on any (data, model) mesh, sharded by a LayoutMap
// written the keras-hub way (regexes over Keras paths, printed at start): tensor parallelism on
// "model" (heads, MLP column -> row, vocabulary-parallel embedding, lm_head and loss), --fsdp
// (every kernel also sharded on "data") and --sequence-parallel (blocks' outputs sharded on the
// sequence). AdamW with global-norm clipping; Keras-style progress with tokens/s and the
// validation loss per epoch; checkpoints (--checkpoint-dir, --resume on another mesh); a sample of
// generated text at the end (temperature sampling, the same on every mesh; every byte shown, those
// that are not printable ASCII as \xNN). The map declares the GPT's row-parallel kernels to the
// LayoutMap report, which then flags only contracted-dimension shardings the rules did not mean;
// FSDP's gathers over "data" are one information line; --strict-layout-map makes every variable of
// rank >= 2 that no rule matches an error (keras-hub#2806). E.g.
//   mpiexec -n 2 build/examples/gpt_trainer --mesh 1x2 --epochs 1 --steps 50
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <kdist/io/async_checkpoint.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/loss_scale_optimizer.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/strategy/layout_map_report.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "common/gpt_model.hpp"
#include "common/layout_map_flag.hpp"
#include "common/load_and_say.hpp"
#include "common/text_data.hpp"
#include "common/trainer_flags.hpp"

namespace {

using namespace kdist::examples;
using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;

struct GptOptions {
  std::vector<std::size_t> mesh;
  std::string text;
  double validation_split = 0.1;
  std::size_t epochs = 1, batch_size = 16, max_steps = 0;
  GptConfig model;
  GptSharding sharding;
  std::string layout_map;  // rules from this JSON file instead of gpt_rules (empty: no)
  double learning_rate = 1e-3, weight_decay = 0.004, clipnorm = 1.0;
  std::uint64_t seed = 1337;
  std::string checkpoint_dir;
  std::string load_keras_weights, save_keras_weights;
  bool resume = false, quiet = false, evaluate_only = false;
  bool strict_layout_map = false;  // unmatched variables of rank >= 2 are an error
  bool loss_scale = false;         // Keras' LossScaleOptimizer around AdamW
  std::string prompt = "The ";
  std::size_t sample_tokens = 200;
  double temperature = 0.8;
  double peak_tflops = 0;  // the device's peak, for MFU (0: not printed)
};

//! GPT-2 small's shape (Radford et al. 2019; llm.c's gpt2_124M): 12 blocks, d_model 768, 12
//! heads, sequence 1024; the vocabulary stays kdist's 256 bytes (85M parameters, not 124M).
//! const, not constexpr: GptConfig holds std::strings, literal types from libstdc++ 12 on only (the
//! HIP build compiles against libstdc++ 11's headers, docs/gpu.md).
const GptConfig gpt2_small{
    .vocab = 256, .sequence = 1024, .d_model = 768, .heads = 12, .blocks = 12, .dropout = 0.1};

//! Model FLOPs of one token, forward and backward: 6 per parameter (the matrix products) plus
//! attention's 12 L T d (PaLM, appendix B; the causal mask's half not subtracted, as llm.c counts).
double flops_per_token(const GptConfig& c, std::size_t parameters) {
  return 6.0 * double(parameters) +
         12.0 * double(c.blocks) * double(c.sequence) * double(c.d_model);
}

double positive(const std::string& flag, const std::string& text, bool zero_ok = false) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) ||
      v < 0 || (v == 0 && !zero_ok)) {
    throw CLI::ValidationError(flag + " '" + text + "' is not a finite number " +
                               (zero_ok ? ">= 0" : "> 0"));
  }
  return v;
}

std::optional<GptOptions> parse(int argc, char** argv, bool root) {
  GptOptions o;
  const std::string usage =
      "usage: gpt_trainer [--mesh DATAxMODEL] [--text FILE] [--epochs N] [--batch-size N] "
      "[--steps N] [--seq N] [--d-model N] [--heads N] [--blocks N] [--fsdp] "
      "[--sequence-parallel] [--layout-map FILE] [--strict-layout-map] "
      "[--checkpoint-dir DIR [--resume]] [--prompt TEXT] [--preset gpt2-small] "
      "[--matmul-precision highest|high] [--peak-tflops P] ...";
  CLI::App app(usage);
  std::string mesh_text;
  using kdist::examples::detail::unsigned_flag;
  const std::uint64_t big = std::uint64_t{1} << 31;
  app.add_option("--mesh", mesh_text, "mesh shape DATAxMODEL, e.g. 2x1 (default 1xN)");
  app.add_option("--text", o.text,
                 std::string("a plain-text file to train on (default: ") + debian_fortunes_dir +
                     ", Debian's fortunes)");
  app.add_option_function<std::string>(
      "--validation-split",
      [&](const std::string& t) {
        o.validation_split = positive("--validation-split", t);
        if (o.validation_split >= 1)
          throw CLI::ValidationError("--validation-split must be below 1");
      },
      "fraction of the windows held out (default 0.1)");
  app.add_option_function<std::string>("--epochs", unsigned_flag("--epochs", o.epochs, 1, big),
                                       "epochs (default 1)");
  app.add_option_function<std::string>(
      "--batch-size", unsigned_flag("--batch-size", o.batch_size, 1, big), "global batch (16)");
  app.add_option_function<std::string>("--steps", unsigned_flag("--steps", o.max_steps, 0, big),
                                       "at most this many steps per epoch (0: all)");
  app.add_option_function<std::string>(
      "--seq", unsigned_flag("--seq", o.model.sequence, 1, 1 << 16), "sequence length (128)");
  app.add_option_function<std::string>(
      "--d-model", unsigned_flag("--d-model", o.model.d_model, 1, 1 << 16), "width (128)");
  app.add_option_function<std::string>("--heads", unsigned_flag("--heads", o.model.heads, 1, 4096),
                                       "attention heads (4)");
  app.add_option_function<std::string>(
      "--blocks", unsigned_flag("--blocks", o.model.blocks, 1, 4096), "transformer blocks (4)");
  app.add_option_function<std::string>(
      "--dropout",
      [&](const std::string& t) {
        o.model.dropout = positive("--dropout", t, true);
        if (o.model.dropout >= 1) throw CLI::ValidationError("--dropout must be below 1");
      },
      "dropout rate after each MLP (0.1)");
  app.add_option("--remat", o.model.remat,
                 "recompute the blocks' activations in the backward pass (Keras' RematScope "
                 "modes: full, activations, larger_than)")
      ->check(CLI::IsMember({"full", "activations", "larger_than"}));
  app.add_option("--dtype-policy", o.model.dtype_policy,
                 "Keras' dtype policy: float32 (default), mixed_bfloat16, mixed_float16 (16-bit "
                 "activations, float32 variables; mixed_float16 wants --loss-scale), bfloat16, "
                 "float16 (16-bit variables and optimizer slots too)")
      ->check(kdist::examples::dtype_policy_check);
  app.add_flag("--loss-scale", o.loss_scale,
               "wrap AdamW in Keras' LossScaleOptimizer (dynamic scaling, for mixed_float16)");
  app.add_flag("--fsdp", o.sharding.fsdp, "also shard every kernel on \"data\" (FSDP)");
  app.add_flag("--sequence-parallel", o.sharding.sequence_parallel,
               "shard the blocks' outputs on the sequence over \"model\"");
  app.add_option("--layout-map", o.layout_map,
                 "LayoutMap rules from a JSON file instead of the built-in ones "
                 "(examples/layout_maps/gpt_*.json)");
  app.add_flag("--strict-layout-map", o.strict_layout_map,
               "a variable of rank >= 2 that no rule matches is an error, all named at once, "
               "before anything is allocated (default: replicated, listed in the report)");
  app.add_option_function<std::string>(
      "--learning-rate",
      [&](const std::string& t) { o.learning_rate = positive("--learning-rate", t); },
      "AdamW learning rate (1e-3)");
  app.add_option_function<std::string>(
      "--weight-decay",
      [&](const std::string& t) { o.weight_decay = positive("--weight-decay", t, true); },
      "AdamW weight decay (0.004, Keras' default)");
  app.add_option_function<std::string>(
      "--clipnorm", [&](const std::string& t) { o.clipnorm = positive("--clipnorm", t); },
      "global_clipnorm (1.0)");
  app.add_option_function<std::string>(
      "--seed", unsigned_flag("--seed", o.seed, 0, std::numeric_limits<std::uint64_t>::max()),
      "random seed");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save <dir>/checkpoint.h5 after each epoch");
  app.add_flag("--resume", o.resume, "resume from <checkpoint-dir>/checkpoint.h5 (any mesh)");
  app.add_option("--load-keras-weights", o.load_keras_weights,
                 "start from a Keras .weights.h5 file of the same GPT (weights and AdamW state)");
  app.add_option("--save-keras-weights", o.save_keras_weights,
                 "after training, write a Keras .weights.h5 file (Keras: model.load_weights)");
  app.add_option("--prompt", o.prompt, "the start of the sampled text (\"The \")");
  app.add_option_function<std::string>(
      "--sample-tokens", unsigned_flag("--sample-tokens", o.sample_tokens, 0, 1 << 20),
      "bytes to generate at the end (200; 0: none)");
  app.add_option_function<std::string>(
      "--temperature", [&](const std::string& t) { o.temperature = positive("--temperature", t); },
      "sampling temperature (0.8)");
  app.add_flag("--evaluate-only", o.evaluate_only,
               "no training: the validation loss and a sample of the loaded weights");
  app.add_flag("--quiet", o.quiet, "no progress output");
  std::string preset;
  app.add_option("--preset", preset,
                 "gpt2-small: 12 blocks, d_model 768, 12 heads, sequence 1024 (--seq, --d-model, "
                 "--heads, --blocks given too win)");
  app.add_option_function<std::string>(
      "--matmul-precision",
      [](const std::string& t) {
        kdist::ops::set_matmul_precision(
            kdist::ops::parse_matmul_precision(t, "--matmul-precision"));
      },
      "float32 products on a GPU: highest (float32, the default) or high (TensorFloat-32)");
  app.add_option_function<std::string>(
      "--peak-tflops", [&](const std::string& t) { o.peak_tflops = positive("--peak-tflops", t); },
      "the device's peak TFLOP/s at the training precision: each epoch prints its MFU");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (root) std::printf("%s", app.help().c_str());
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw kdist::ValueError(std::string(e.what()) + "\n" + usage);
  }
  if (app.count("--mesh") > 0) o.mesh = parse_mesh(mesh_text);
  if (preset == "gpt2-small") {
    if (app.count("--seq") == 0) o.model.sequence = gpt2_small.sequence;
    if (app.count("--d-model") == 0) o.model.d_model = gpt2_small.d_model;
    if (app.count("--heads") == 0) o.model.heads = gpt2_small.heads;
    if (app.count("--blocks") == 0) o.model.blocks = gpt2_small.blocks;
  } else if (!preset.empty()) {
    throw kdist::ValueError("--preset is '" + preset + "', not gpt2-small (the only preset)");
  }
  if (o.evaluate_only && o.load_keras_weights.empty() && !o.resume) {
    throw kdist::ValueError(
        "--evaluate-only needs weights: --load-keras-weights FILE or --checkpoint-dir DIR "
        "--resume");
  }
  if (o.resume && o.checkpoint_dir.empty()) {
    throw kdist::ValueError("--resume needs --checkpoint-dir DIR (where checkpoint.h5 is)");
  }
  return o;
}

std::string axes_text(const std::vector<kdist::DimAxes>& axes) {
  std::string out = "(";
  for (std::size_t i = 0; i < axes.size(); ++i) {
    out += i ? ", " : "";
    out += axes[i].is_replicated() ? "None" : "'" + axes[i].names()[0] + "'";
  }
  return out + (axes.size() == 1 ? ",)" : ")");
}

// `count` bytes generated after `prompt`: each step feeds the last `seq` bytes (left-aligned; the
// causal mask makes the padding after them irrelevant), reads the logits at the last real
// position (gathered: a few KB) and samples with `temperature` from a generator seeded alike on
// every process, so every mesh produces the same text.
std::string sample(kdist::Sequential& model, const GptOptions& o, std::size_t data_shards) {
  const std::size_t seq = o.model.sequence;
  std::string text = o.prompt.empty() ? std::string(" ") : o.prompt;
  std::mt19937_64 gen(o.seed);
  Kokkos::View<float**, Kokkos::LayoutRight> x("kdist::sample/x", 1, seq);  // this shard's row
  auto hx = Kokkos::create_mirror_view(x);
  for (std::size_t t = 0; t < o.sample_tokens; ++t) {
    const std::size_t n = std::min(text.size(), seq);
    const std::string window = text.substr(text.size() - n);
    for (std::size_t j = 0; j < seq; ++j) {
      hx(0, j) = j < n ? static_cast<float>(static_cast<unsigned char>(window[j])) : 0.0f;
    }
    Kokkos::deep_copy(x, hx);
    const auto out = model.predict_step(x, data_shards);  // one row per data shard, all alike
    const auto full = kdist::full_tensor(std::get<kdist::DistributedTensor<float***>>(out));
    std::vector<double> p(o.model.vocab);
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::size_t v = 0; v < p.size(); ++v) top = std::max(top, double(full(0, n - 1, v)));
    for (std::size_t v = 0; v < p.size(); ++v) {
      p[v] = std::exp((double(full(0, n - 1, v)) - top) / o.temperature);
      sum += p[v];
    }
    double u = std::uniform_real_distribution<double>(0.0, sum)(gen);
    std::size_t pick = 0;
    while (pick + 1 < p.size() && u >= p[pick]) u -= p[pick++];
    text.push_back(static_cast<char>(pick));
  }
  return text;
}

// The sampled bytes as one readable text: printable ASCII, newlines and tabs as they are, a
// backslash as \\, every other byte (a zero byte included) as \xNN, so nothing cuts the text short
// and nothing reaches the terminal as a control byte.
std::string escaped(const std::string& bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f)) {
      out += ch;
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The LayoutMap report as the GPT reads it, from process 0. A kernel whose contracted dimension
// is sharded over the batch axis only is FSDP's (--fsdp, or a file's FSDP rules): it is gathered
// over that axis before use, on purpose, so those are counted in one information line; every
// other contracted-dimension sharding stays a warning. Variables of rank 1 that no rule names
// (biases, norms: replicated, as keras-hub leaves them) are counted in one line, so the report
// lists by name only the unmatched variables of rank >= 2, which --strict-layout-map refuses.
void print_layout_map_report(const kdist::Distribution& dist, const std::string& batch_axis) {
  auto report = kdist::layout_map_report(dist);
  if (!report) return;
  const auto fsdp_gather = [&](const kdist::LayoutMapReport::ContractedSharding& c) {
    return std::ranges::all_of(c.axes, [&](const std::vector<std::string>& a) {
      return a.size() == 1 && a[0] == batch_axis;
    });
  };
  const std::size_t gathered = std::erase_if(report->contracted_shardings, fsdp_gather);
  const std::size_t rank1 =
      std::erase_if(report->replicated_variables, [](const auto& f) { return f.shape.size() < 2; });
  if (!report->empty()) {
    std::cout << *report;
    if (!report->replicated_variables.empty()) {
      std::cout << "  (--strict-layout-map makes the replicated variables above an error)\n";
    }
  }
  if (rank1 > 0) {
    std::cout << "LayoutMap: " << rank1
              << " variable(s) of rank 1 (biases, norms) match no rule: replicated\n";
  }
  if (gathered > 0) {
    const bool one = gathered == 1;
    std::cout << "FSDP: " << gathered << (one ? " kernel shards its" : " kernels shard their")
              << " contracted dimension over '" << batch_axis << "' and " << (one ? "is" : "are")
              << " gathered over it before use (expected)\n";
  }
}

int train(const GptOptions& o) {
  const bool root = kdist::process_id() == 0;
  const auto devices = kdist::list_devices();
  const std::vector<std::size_t> shape =
      o.mesh.empty() ? std::vector<std::size_t>{1, devices.size()} : o.mesh;
  if (shape.size() != 2) throw kdist::ValueError("--mesh needs two extents (data x model)");
  const Mesh mesh({shape[0], shape[1]}, devices);

  // Flags that contradict each other are reported before any data is read.
  if (!o.layout_map.empty() && (o.sharding.fsdp || o.sharding.sequence_parallel)) {
    throw kdist::ValueError(
        "--layout-map replaces the built-in rules that --fsdp and --sequence-parallel choose; "
        "give either the file (with its FSDP or sequence rules) or those flags");
  }
  const auto splits = text_windows(load_text(o.text), o.model.sequence, o.validation_split);
  auto model = make_gpt(o.model);
  auto layout_map =
      o.layout_map.empty() ? gpt_layout_map(mesh, o.sharding) : kdist::LayoutMap(mesh);
  if (!o.layout_map.empty()) {
    declare_gpt_kernels(layout_map);  // a file's rules shard the same GPT's row-parallel kernels
    read_layout_map_flag(o.layout_map, layout_map);
  }
  layout_map.set_strict(o.strict_layout_map);
  const kdist::ModelParallel model_parallel(layout_map, "data");  // "data" checked at compile time
  auto dist = std::make_shared<kdist::ModelParallel>(model_parallel);
  kdist::set_distribution(dist);
  // Strict: every unmatched variable of rank >= 2 named in ONE error on every process, before
  // compile allocates anything (compile alone would stop at the first).
  const auto variables = gpt_variables(o.model);
  if (o.strict_layout_map) kdist::check_variable_layouts(*dist, variables);
  const auto adamw = kdist::AdamW(o.learning_rate, o.weight_decay).with_global_clipnorm(o.clipnorm);
  if (o.loss_scale) {
    model.compile(dist, kdist::Loss::sparse_categorical_crossentropy,
                  kdist::LossScaleOptimizer(adamw), o.seed);
  } else {
    model.compile(dist, kdist::Loss::sparse_categorical_crossentropy, adamw, o.seed);
  }
  if (o.strict_layout_map) {  // gpt_variables must list what make_gpt builds
    const auto built = model.variables();
    const bool same = std::ranges::equal(built, variables, [](const auto& a, const auto& b) {
      return a.path == b.path() && a.shape == b.shape();
    });
    if (!same) throw kdist::RuntimeError("gpt_variables() does not list make_gpt's variables");
  }
  std::size_t parameters = 0;
  for (const auto& v : model.variables()) {
    std::size_t n = 1;
    for (auto e : v.shape) n *= e;
    parameters += n;
  }
  if (root && !o.quiet) {
    std::cout << "GPT on " << dist->device_mesh() << ": " << o.model.blocks << " blocks, d_model "
              << o.model.d_model << ", " << o.model.heads << " heads, sequence " << o.model.sequence
              << ", vocabulary " << o.model.vocab << " (bytes)\n"
              << "text: " << (o.text.empty() ? debian_fortunes_dir : o.text) << ", "
              << splits.train.size() << " training and " << splits.validation.size()
              << " validation windows\nlayout_map (keras-hub style"
              << (o.layout_map.empty() ? "" : ", from " + o.layout_map) << "):\n";
    for (const auto& [key, layout] : layout_map) {
      std::cout << "  layout_map[\"" << key << "\"] = " << axes_text(layout.axes()) << "\n";
    }
    std::cout << "model FLOPs: " << flops_per_token(o.model, parameters) * 1e-6
              << " MFLOP per token (forward and backward); float32 products on a GPU: "
              << kdist::ops::to_string(kdist::ops::matmul_precision()) << "\n"
              << parameters << " parameters\n";
    print_layout_map_report(*dist, "data");
  }
  const std::string ckpt =
      o.checkpoint_dir.empty()
          ? std::string()
          : (std::filesystem::path(o.checkpoint_dir) / "checkpoint.h5").string();
  kdist::FitOptions fit{.batch_size = o.batch_size,
                        .epochs = o.epochs,
                        .shuffle = true,
                        .steps_per_epoch = o.max_steps,
                        .verbose = o.quiet ? 0 : 1};
  // What was loaded is said even with --quiet: the losses that follow are of these weights.
  if (!o.load_keras_weights.empty()) {
    load_keras_weights_and_say(model, o.load_keras_weights, root);
  }
  if (o.resume) {
    fit.initial_epoch =
        load_checkpoint_and_say(model, ckpt, o.evaluate_only ? "Loaded checkpoint" : "Resumed from",
                                root)
            .epoch;
  }
  if (!ckpt.empty()) {
    std::error_code ignored;
    std::filesystem::create_directories(o.checkpoint_dir, ignored);
  }
  const kdist::BatchPlan plan(splits.train.size(), o.batch_size, *dist);
  const std::size_t steps =
      o.max_steps && o.max_steps < plan.steps_per_epoch() ? o.max_steps : plan.steps_per_epoch();
  auto start = std::chrono::steady_clock::now();
  kdist::AsyncCheckpointer checkpointer;
  fit.on_epoch_end = [&](std::size_t done, const kdist::Metrics& m) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens = double(m.examples) * double(o.model.sequence);
    const auto val = model.evaluate(splits.validation, {.batch_size = o.batch_size, .verbose = 0});
    if (root && !o.quiet) {
      const double tflops = tokens / secs * flops_per_token(o.model, parameters) * 1e-12;
      std::printf("epoch %zu: loss %.4f - val_loss %.4f - %.0f tokens/s, %.3f TFLOP/s", done,
                  m.loss, val.loss, tokens / secs, tflops);
      if (o.peak_tflops > 0) std::printf(", MFU %.2f%%", 100.0 * tflops / o.peak_tflops);
      std::printf(" (%zu steps)\n", steps);
    }
    if (!ckpt.empty()) {  // written in the background while the next epoch trains
      checkpointer.save(model, ckpt, {.epoch = done, .loss = m.loss}, [=, say = root && !o.quiet] {
        if (!say) return;
        std::printf("Saved %s (epoch %zu)\n", ckpt.c_str(), done);
        std::fflush(stdout);
      });
    }
    start = std::chrono::steady_clock::now();
  };
  if (!o.evaluate_only && fit.initial_epoch < fit.epochs) model.fit(splits.train, fit);
  checkpointer.wait();  // the last checkpoint is published (or its error raised)
  const auto val = model.evaluate(splits.validation, {.batch_size = o.batch_size, .verbose = 0});
  if (root) std::printf("Validation loss: %.4f\n", val.loss);
  if (!o.save_keras_weights.empty()) {
    kdist::save_keras_weights(model, o.save_keras_weights);
    if (root && !o.quiet) std::printf("Saved Keras weights to %s\n", o.save_keras_weights.c_str());
  }
  if (o.sample_tokens > 0) {
    const std::string text = sample(model, o, shape[0]);
    if (root) {  // every byte, escaped where it is not printable (a zero byte no longer ends it)
      std::printf(
          "Sample (temperature %.2f, %zu bytes; \\xNN: a byte that is not printable):\n%s\n",
          o.temperature, text.size(), escaped(text).c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::run(argc, argv, [](int ac, char** av) -> int {
    const auto o = parse(ac, av, kdist::process_id() == 0);
    if (!o) return 0;  // --help
    return train(*o);
  });
}
