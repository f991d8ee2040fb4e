// The example GPT (examples/common/gpt_model.hpp, GptConfig's defaults: vocabulary 256, sequence
// 128, d_model 128, 4 heads, 4 blocks, dropout 0.1) trained by kdist::Sequential::train_step
// (AdamW, the vocabulary-parallel sparse cross-entropy) on a global batch of 16 sequences: speed,
// memory and communication under the example's keras-hub-style LayoutMap (docs/benchmarks.md,
// section "GPT (issue 20)").
//
//   build/benchmarks/bench_gpt                    # 1 process
//   mpiexec -n 2 build/benchmarks/bench_gpt       # (1,2) tensor parallel, (2,1) data parallel,
//                                                 # (2,1) FSDP, (1,2) sequence parallel, (2,1)
//                                                 # data parallel with ZeRO-1 optimizer state
//   ... --benchmark_filter=BM_gpt_step            # only the timings
//   ... --benchmark_filter=BM_gpt_save_every      # checkpoints every 10 steps: none, synchronous,
//                                                 # asynchronous (KDIST_BENCH_DIR: where; /tmp)
//
// BM_gpt_step/<config>: one train_step per iteration, its time the slowest rank's (manual time);
//   counters: tokens_per_s (16 x 128 tokens over the step's time), state_bytes_per_rank (the
//   largest rank's local blocks of every variable and its two AdamW slots), state_bytes_1proc
//   (the same on one process: the global sizes), state_ratio (their quotient; target <= 0.55 for
//   the sharded configurations), grad_bytes_per_rank, load_begin / load_end (/proc/loadavg's
//   1-minute load when the benchmark started and ended: the machine is shared).
// BM_gpt_remat/<config>: the GPT plain, with selective attention recompute, with the tiled
//   attention kernels and with RematScope "full" on every block, a step of each per iteration; counters ms_<variant>, act_bytes_<variant>
//   (peak bytes of two steps above weights, gradients and slots, kdist::AllocationCounters; the
//   largest rank's), time_ratio_<variant> and act_ratio_<variant> (over plain; targets: full
//   act <= 0.3, time <= 1.4; selective time <= 1.1).
// BM_gpt_mixed_precision/<config>: the GPT under "float32", "mixed_bfloat16" and "bfloat16",
//   measured as BM_gpt_remat's variants: ms_, act_bytes_, state_bytes_ (weights, gradients and
//   the slots as stored), time_ratio_, act_ratio_ (mixed_bfloat16: target <= 0.55) and
//   state_ratio_ (bfloat16: its slots in 16 bits).
// BM_gpt_save_every_10_steps/<config>: ms per step with a checkpoint every 10 steps, none /
//   kdist::save_checkpoint / kdist::AsyncCheckpointer in the same run; counters sync_cost and
//   async_cost (per-step time over the no-save time, less 1; target for async: <= 0.05),
//   snapshot_ms (save()'s time: the copy), write_ms (the background write), snapshot_bytes_per_rank.
// BM_gpt_profile/<config>: a few steps under instrumentation (not a speed figure); rank 0 prints
//   after the runs
//   - where a step's time goes by layer: an instrumented step built from the model's public
//     pieces (layers()[i].forward / backward, kdist::sparse_categorical_crossentropy), each layer
//     fenced and timed (the slowest rank's time per row), and "optimizer + rest" = the median
//     train_step minus the instrumented forward, loss and backward;
//   - where train_step's time goes by Kokkos kernel (Kokkos Tools begin/end callbacks; Serial
//     kernels are synchronous) and in MPI, the rest being host code outside kernels: Eigen's
//     GEMMs (ops::matmul on host memory is not a Kokkos kernel), allocations, copies;
//   - every MPI call of one step, per layer, per kind and per message size: this binary wraps the
//     MPI collectives kdist calls through the MPI profiling interface (PMPI_*) and names each call
//     by the kdist profiling regions it runs in ("kdist::redistribute", "kdist::all_reduce", ...,
//     counted with Kokkos::Tools::Experimental::set_push_region_callback).
//
// Every rank runs the same fixed iteration counts (train_step is collective). Inputs are
// deterministic token ids; a step's cost does not depend on them.
#include <benchmark/benchmark.h>

#include <mpi.h>
#include "mpi_benchmark_main.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <kdist/io/async_checkpoint.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/nn/sparse_categorical_crossentropy.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/allocation_counters.hpp>

#include "common/gpt_model.hpp"

// ---------------------------------------------------------------------------------------------
// Counting MPI calls: the collectives kdist calls, wrapped through the MPI profiling interface,
// attributed to the current "where" label and to the stack of kdist profiling regions.
namespace gptbench {

struct CallKey {
  std::string where;   // the layer and pass, or "train_step"
  std::string region;  // kdist regions, outermost first, e.g. "redistribute/all_reduce"
  std::string call;    // the MPI function
  long long bytes;     // see record()
  bool operator<(const CallKey& o) const {
    return std::tie(where, region, call, bytes) < std::tie(o.where, o.region, o.call, o.bytes);
  }
};
struct CallStats {
  long long count = 0;
  double seconds = 0;
};

struct Recorder {
  bool on = false;
  std::string where;
  std::vector<std::string> regions;  // the open kdist profiling regions
  std::map<CallKey, CallStats> calls;
  // kernels: name -> (calls, seconds); open kernels by id
  bool kernels_on = false;
  std::map<std::string, CallStats> kernels;
  std::vector<std::pair<std::string, double>> open_kernels;
};
inline Recorder& recorder() {
  static Recorder r;
  return r;
}

inline std::string region_path() {
  std::string out;
  for (const auto& r : recorder().regions) {
    std::string n = r.rfind("kdist::", 0) == 0 ? r.substr(7) : r;
    if (n == "Sequential::train_step" || n == "plan_redistribute") continue;
    out += (out.empty() ? "" : "/") + n;
  }
  return out.empty() ? "-" : out;
}

inline void record(const char* call, long long bytes, double seconds) {
  auto& r = recorder();
  if (!r.on) return;
  auto& s = r.calls[{r.where, region_path(), call, bytes}];
  ++s.count;
  s.seconds += seconds;
}

inline long long type_bytes(MPI_Datatype t) {
  int n = 0;
  PMPI_Type_size(t, &n);
  return n;
}

inline void push_region(const char* name) {
  recorder().regions.emplace_back(name);
}
inline void pop_region() {
  if (!recorder().regions.empty()) recorder().regions.pop_back();
}
inline void begin_kernel(const char* name, const std::uint32_t, std::uint64_t* id) {
  auto& r = recorder();
  *id = r.open_kernels.size();
  r.open_kernels.emplace_back(name, PMPI_Wtime());
}
inline void end_kernel(const std::uint64_t id) {
  auto& r = recorder();
  if (id >= r.open_kernels.size()) return;
  const auto& [name, start] = r.open_kernels[id];
  if (r.kernels_on) {
    auto& s = r.kernels[name];
    ++s.count;
    s.seconds += PMPI_Wtime() - start;
  }
  if (id + 1 == r.open_kernels.size()) r.open_kernels.pop_back();
}

//! Region and kernel callbacks on (counting) or off (timing runs: no callbacks at all).
inline void set_tools(bool on) {
  namespace kt = Kokkos::Tools::Experimental;
  kt::set_push_region_callback(on ? &push_region : nullptr);
  kt::set_pop_region_callback(on ? &pop_region : nullptr);
  kt::set_begin_parallel_for_callback(on ? &begin_kernel : nullptr);
  kt::set_end_parallel_for_callback(on ? &end_kernel : nullptr);
  kt::set_begin_parallel_reduce_callback(on ? &begin_kernel : nullptr);
  kt::set_end_parallel_reduce_callback(on ? &end_kernel : nullptr);
  kt::set_begin_parallel_scan_callback(on ? &begin_kernel : nullptr);
  kt::set_end_parallel_scan_callback(on ? &end_kernel : nullptr);
  recorder().regions.clear();
  recorder().open_kernels.clear();
}

}  // namespace gptbench

// The wrapped MPI functions (every collective kdist's headers call). Bytes: all-reduce and
// broadcast the buffer; all-gather the gathered result; reduce-scatter the input (its result
// times the communicator size); all-to-all(v) what this rank sends to the others.
extern "C" {
int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Allreduce(s, r, n, t, op, c);
  gptbench::record("MPI_Allreduce", n * gptbench::type_bytes(t), PMPI_Wtime() - t0);
  return rc;
}
int MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt,
                  MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Allgather(s, sn, st, r, rn, rt, c);
  int size = 1;
  PMPI_Comm_size(c, &size);
  gptbench::record("MPI_Allgather", 1LL * rn * size * gptbench::type_bytes(rt), PMPI_Wtime() - t0);
  return rc;
}
int MPI_Reduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Reduce_scatter_block(s, r, n, t, op, c);
  int size = 1;
  PMPI_Comm_size(c, &size);
  gptbench::record("MPI_Reduce_scatter_block", 1LL * n * size * gptbench::type_bytes(t),
                   PMPI_Wtime() - t0);
  return rc;
}
int MPI_Bcast(void* b, int n, MPI_Datatype t, int root, MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Bcast(b, n, t, root, c);
  gptbench::record("MPI_Bcast", n * gptbench::type_bytes(t), PMPI_Wtime() - t0);
  return rc;
}
int MPI_Alltoall(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt,
                 MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Alltoall(s, sn, st, r, rn, rt, c);
  int size = 1;
  PMPI_Comm_size(c, &size);
  gptbench::record("MPI_Alltoall", 1LL * sn * (size - 1) * gptbench::type_bytes(st),
                   PMPI_Wtime() - t0);
  return rc;
}
int MPI_Alltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r,
                  const int rc_[], const int rd[], MPI_Datatype rt, MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Alltoallv(s, sc, sd, st, r, rc_, rd, rt, c);
  int size = 1, me = 0;
  PMPI_Comm_size(c, &size);
  PMPI_Comm_rank(c, &me);
  long long sent = 0;
  for (int k = 0; k < size; ++k) {
    if (k != me) sent += sc[k];
  }
  gptbench::record("MPI_Alltoallv", sent * gptbench::type_bytes(st), PMPI_Wtime() - t0);
  return rc;
}
int MPI_Barrier(MPI_Comm c) {
  const double t0 = PMPI_Wtime();
  const int rc = PMPI_Barrier(c);
  gptbench::record("MPI_Barrier", 0, PMPI_Wtime() - t0);
  return rc;
}
}

namespace {

using T = float;
using Model = kdist::BasicSequential<T>;
using Tokens3 = kdist::DistributedTensor<T***>;
constexpr std::size_t kBatch = 16;
constexpr std::uint64_t kSeed = 2024;
constexpr int kIterations = 8;
constexpr int kRepetitions = 3;
constexpr int kProfileSteps = 4;

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

struct Config {
  const char* name;
  std::size_t data, model;
  bool fsdp, sequence_parallel;
  bool shard_state = false;  // GradientSyncOptions::shard_optimizer_state (ZeRO-1)
};
const std::vector<Config>& configs() {
  static const std::vector<Config> c{
      {"1proc", 1, 1, false, false},  {"tp_1x2", 1, 2, false, false},
      {"dp_2x1", 2, 1, false, false}, {"fsdp_2x1", 2, 1, true, false},
      {"sp_1x2", 1, 2, false, true},  {"zero1_2x1", 2, 1, false, false, true},
  };
  return c;
}

std::shared_ptr<const kdist::Distribution> make_dist(const Config& c) {
  kdist::RuntimeDeviceMesh mesh({c.data, c.model}, {"data", "model"}, kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(
      kdist::examples::gpt_layout_map(mesh, {c.fsdp, c.sequence_parallel}), "data");
}

//! The model, compiled, and this process's rows of a deterministic global batch.
struct GptStep {
  kdist::examples::GptConfig cfg;
  Model model = kdist::examples::make_gpt<T>(cfg);
  std::size_t global = kBatch;
  std::size_t row0 = 0;  // this process's first row
  Kokkos::View<T**, Kokkos::LayoutRight> x, y;
  std::vector<std::int32_t> targets;  // host copy, (rows, seq)

  //! `remat`: the RematScope mode the blocks are created in ("" for none); `policy`: the dtype
  //! policy of the layers ("" for float32).
  explicit GptStep(const Config& c, std::string remat = {}, std::string policy = {})
      : cfg{.remat = std::move(remat), .dtype_policy = std::move(policy)},
        model(kdist::examples::make_gpt<T>(cfg)) {
    if (c.shard_state) {
      auto options = kdist::GradientSyncOptions::from_environment();
      options.shard_optimizer_state = true;
      model.set_gradient_sync(options);
    }
    model.compile(make_dist(c), kdist::Loss::sparse_categorical_crossentropy, kdist::AdamW(1e-3),
                  kSeed);
    const std::vector<std::size_t> shape{global, cfg.sequence};
    const auto layout = model.input_layout(global);
    const auto ext = layout.local_extents(shape, static_cast<std::size_t>(world_rank()));
    row0 = layout.offsets(shape, static_cast<std::size_t>(world_rank()))[0];
    x = decltype(x)("x", ext[0], cfg.sequence);
    y = decltype(y)("y", ext[0], cfg.sequence);
    auto hx = Kokkos::create_mirror_view(x);
    auto hy = Kokkos::create_mirror_view(y);
    targets.resize(ext[0] * cfg.sequence);
    auto token = [&](std::size_t i) { return static_cast<int>((i * 7919 + i / 3) % cfg.vocab); };
    for (std::size_t r = 0; r < ext[0]; ++r) {
      for (std::size_t j = 0; j < cfg.sequence; ++j) {
        const std::size_t at = (row0 + r) * (cfg.sequence + 1) + j;
        hx(r, j) = static_cast<T>(token(at));
        hy(r, j) = static_cast<T>(token(at + 1));
        targets[r * cfg.sequence + j] = token(at + 1);
      }
    }
    Kokkos::deep_copy(x, hx);
    Kokkos::deep_copy(y, hy);
  }
  void operator()() { benchmark::DoNotOptimize(model.train_step(x, y, global)); }
  double tokens() const { return static_cast<double>(global * cfg.sequence); }
};

//! Weights, optimizer slots and gradients: bytes of this process's blocks, and the global sizes.
struct StateBytes {
  double weights = 0, slots = 0, grads = 0, global = 0;
};
StateBytes state_bytes(Model& model) {
  StateBytes b;
  model.for_each_variable_with_slots([&](auto& v, auto& slots) {
    const double sz = sizeof(typename std::decay_t<decltype(v.value)>::value_type);
    // the slots of a 16-bit variable ("bfloat16" policy) are stored in 16 bits
    const double slot_sz = kdist::is_sixteen_bit(v.dtype) ? 2.0 : sz;
    b.weights += sz * static_cast<double>(v.value.local().size());
    b.grads += sz * static_cast<double>(v.grad.local().size());
    // A sharded optimizer state (ZeRO-1) holds this process's part; the slots here are gathered.
    const auto part = model.optimizer_state_part(v.path);
    for (const auto& s : slots) {
      b.slots += slot_sz * static_cast<double>(part ? part->second : s.local().size());
    }
    b.global += (sz + slot_sz * static_cast<double>(slots.size())) *
                static_cast<double>(v.value.global_size());
  });
  return b;
}

double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

void gpt_step(benchmark::State& state, const Config& c) {
  const double load_begin = load_average();
  GptStep op(c);
  for (int i = 0; i < 2; ++i) op();  // warm-up: allocations, page faults, communicators
  MPI_Barrier(MPI_COMM_WORLD);
  double total = 0;
  for (auto _ : state) {
    const double start = MPI_Wtime();
    op();
    const double elapsed = kdist::bench::slowest_rank(MPI_Wtime() - start);
    total += elapsed;
    state.SetIterationTime(elapsed);
  }
  const double per_step = total / static_cast<double>(state.iterations());
  const StateBytes b = state_bytes(op.model);
  const double mine = max_over_ranks(b.weights + b.slots);
  state.counters["tokens_per_s"] = op.tokens() / per_step;
  kdist::bench::report_device_graph(state, op.model);
  state.counters["state_bytes_per_rank"] = mine;
  state.counters["state_bytes_1proc"] = b.global;
  state.counters["state_ratio"] = mine / b.global;
  state.counters["grad_bytes_per_rank"] = max_over_ranks(b.grads);
  state.counters["ranks"] = world_size();
  state.counters["load_begin"] = load_begin;
  state.counters["load_end"] = load_average();
}

// ---------------------------------------------------------------------------------------------
// Rematerialisation (issue 37): the GPT as it is; with selective recompute of attention
// (Megatron's: the (batch, heads, seq, seq) probabilities computed again in backward from the kept
// projections, MultiHeadAttention::set_recompute_attention); with the tiled kernels (which never
// keep them; slower than Eigen's GEMMs on a CPU); with its blocks created in a RematScope "full".
// Each is built and warmed up under kdist::AllocationCounters, then a step of each runs in turn
// per iteration (the manual time is the plain model's).
struct RematVariant {
  const char* name;
  const char* remat;        // RematScope mode of the blocks
  int attention;            // 0: as is, 1: selective recompute, 2: tiled kernels
  const char* policy = "";  // dtype policy of the layers ("": float32)
};
constexpr RematVariant kRematVariants[] = {
    {"plain", "", 0}, {"selective", "", 1}, {"tiled", "", 2}, {"full", "full", 0}};

//! Peak bytes of two steps above the weights and gradients (allocated by compile) and the
//! optimizer's slots (by the first step): the activations and the step's other buffers.
std::unique_ptr<GptStep> built_and_measured(const Config& c, const RematVariant& v,
                                            double& activation_bytes) {
  kdist::detail::ViewArena::for_this_thread()->clear();  // another model's remat buffers
  kdist::AllocationCounters counters;
  auto op = std::make_unique<GptStep>(c, v.remat, v.policy);
  if (v.attention != 0) {
    for (auto& layer : op->model.layers()) {
      auto* block = layer.get_if<kdist::layers::BasicResidual<T>>();
      if (block == nullptr) continue;
      for (auto& inner : block->layers()) {
        auto* mha = inner.get_if<kdist::layers::BasicMultiHeadAttention<T>>();
        if (mha != nullptr && v.attention == 1) mha->set_recompute_attention(true);
        if (mha != nullptr && v.attention == 2) {
          mha->set_attention_kernel(kdist::ops::AttentionKernel::tiled);
        }
      }
    }
  }
  const std::size_t compiled = counters.live_bytes();
  for (int i = 0; i < 2; ++i) (*op)();
  const StateBytes b = state_bytes(op->model);
  activation_bytes =
      max_over_ranks(static_cast<double>(counters.peak_bytes() - compiled) - b.slots);
  return op;
}

//! Each variant built and measured, then a step of each in turn per iteration; counters ms_,
//! act_bytes_, state_bytes_ (weights, gradients and slots) and time_ratio_ / act_ratio_ /
//! state_ratio_ over the first variant.
template <std::size_t n>
void gpt_variants(benchmark::State& state, const Config& c, const RematVariant (&variants)[n]) {
  const double load_begin = load_average();
  std::array<std::unique_ptr<GptStep>, n> ops;
  std::array<double, n> bytes{}, seconds{};
  for (std::size_t i = 0; i < n; ++i) ops[i] = built_and_measured(c, variants[i], bytes[i]);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    for (std::size_t i = 0; i < n; ++i) {
      const double start = MPI_Wtime();
      (*ops[i])();
      const double elapsed = kdist::bench::slowest_rank(MPI_Wtime() - start);
      seconds[i] += elapsed;
      if (i == 0) state.SetIterationTime(elapsed);
    }
  }
  const double iterations = static_cast<double>(state.iterations());
  std::array<double, n> held{};
  for (std::size_t i = 0; i < n; ++i) {
    const StateBytes b = state_bytes(ops[i]->model);
    held[i] = max_over_ranks(b.weights + b.grads + b.slots);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::string name = variants[i].name;
    state.counters["ms_" + name] = seconds[i] / iterations * 1e3;
    state.counters["act_bytes_" + name] = bytes[i];
    state.counters["state_bytes_" + name] = held[i];
    if (i > 0) {
      state.counters["time_ratio_" + name] = seconds[i] / seconds[0];
      state.counters["act_ratio_" + name] = bytes[i] / bytes[0];
      state.counters["state_ratio_" + name] = held[i] / held[0];
    }
  }
  state.counters["load_begin"] = load_begin;
  state.counters["load_end"] = load_average();
}

void gpt_remat(benchmark::State& state, const Config& c) {
  gpt_variants(state, c, kRematVariants);
}

// Mixed precision (issue 37): the GPT under Keras' "float32", "mixed_bfloat16" and "bfloat16"
// policies (kdist/nn/autocast.hpp: 16-bit activations kept and flowing, float32 variables and
// slots; kdist/nn/sixteen_bit_variables.hpp: bfloat16 variables, their slots stored in 16 bits).
constexpr RematVariant kPolicyVariants[] = {{"float32", "", 0, "float32"},
                                            {"mixed_bfloat16", "", 0, "mixed_bfloat16"},
                                            {"bfloat16", "", 0, "bfloat16"}};
void gpt_mixed_precision(benchmark::State& state, const Config& c) {
  gpt_variants(state, c, kPolicyVariants);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints every 10 steps (issue 35): blocks of 10 train_steps each followed by no save, a
// kdist::save_checkpoint or a kdist::AsyncCheckpointer::save of the same file, each mode for
// kCheckpointBlocks blocks in turn, the modes in turn in every iteration. Time per step: a mode's
// blocks, the slowest rank's, until its last save returned (the asynchronous one's last write is
// then waited for outside the time: in a long run the next block hides it as it hid the others).
constexpr int kSaveEvery = 10;
constexpr int kCheckpointBlocks = 3;

std::string checkpoint_scratch() {
  const char* dir = std::getenv("KDIST_BENCH_DIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/bench_gpt_checkpoint.h5";
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void gpt_checkpointing(benchmark::State& state, const Config& c) {
  const double load_begin = load_average();
  GptStep op(c);
  const std::string path = checkpoint_scratch();
  kdist::AsyncCheckpointer checkpointer;
  for (int i = 0; i < 2; ++i) op();        // warm-up
  kdist::save_checkpoint(op.model, path);  // and the file system's
  enum Mode { none, sync, async };
  std::vector<double> per_step[3], snapshot, write;
  for (auto _ : state) {
    for (int mode : {none, sync, async}) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      for (int b = 0; b < kCheckpointBlocks; ++b) {
        for (int s = 0; s < kSaveEvery; ++s) op();
        if (mode == sync) kdist::save_checkpoint(op.model, path);
        if (mode == async) {
          checkpointer.save(op.model, path);
          snapshot.push_back(max_over_ranks(checkpointer.stats().snapshot_seconds));
        }
      }
      const double elapsed = kdist::bench::slowest_rank(MPI_Wtime() - start);
      per_step[mode].push_back(elapsed / (kCheckpointBlocks * kSaveEvery));
      if (mode == async) {
        checkpointer.wait();
        write.push_back(max_over_ranks(checkpointer.stats().write_seconds));
      }
    }
    state.SetIterationTime(per_step[async].back());
  }
  const double base = median_of(per_step[none]);
  state.counters["ms_per_step_no_saves"] = 1e3 * base;
  state.counters["ms_per_step_sync"] = 1e3 * median_of(per_step[sync]);
  state.counters["ms_per_step_async"] = 1e3 * median_of(per_step[async]);
  state.counters["sync_cost"] = median_of(per_step[sync]) / base - 1;
  state.counters["async_cost"] = median_of(per_step[async]) / base - 1;
  state.counters["snapshot_ms"] = 1e3 * median_of(snapshot);
  state.counters["write_ms"] = 1e3 * median_of(write);
  state.counters["snapshot_bytes_per_rank"] =
      max_over_ranks(static_cast<double>(checkpointer.stats().snapshot_bytes));
  state.counters["load_begin"] = load_begin;
  state.counters["load_end"] = load_average();
}

// ---------------------------------------------------------------------------------------------
// Profile: per-layer times, kernel times, MPI calls. Results for rank 0's printout.
struct Row {
  std::string what;
  double forward = 0, backward = 0, mpi = 0;  // seconds per step
};
struct Profile {
  std::string config;
  double step = 0;          // median train_step seconds (slowest rank)
  double instrumented = 0;  // median forward + loss + backward seconds (slowest rank)
  double adamw = 0;         // median seconds of AdamW's update of as many parameters as a rank's
  double load = 0;
  std::vector<Row> layers;
  std::vector<std::pair<std::string, gptbench::CallStats>> kernels;  // per step
  std::map<gptbench::CallKey, gptbench::CallStats> calls;            // per step
};
std::vector<Profile>& profiles() {
  static std::vector<Profile> p;
  return p;
}

//! The kind of a layer: its name with the block number replaced by '*'.
std::string kind_of(const std::string& name) {
  if (name.rfind("block", 0) != 0) return name;
  const auto slash = name.find('/');
  return "block*" + name.substr(slash);
}

double now_fenced() {
  Kokkos::fence();
  return MPI_Wtime();
}

//! One forward, loss and backward built from the model's public pieces (as train_step runs
//! them, without the optimizer's update), each layer timed; seconds per layer kind in `rows`
//! (forward, backward, MPI inside); returns the total.
double instrumented_step(GptStep& s, std::vector<Row>& rows, std::map<std::string, int>& index) {
  auto& rec = gptbench::recorder();
  auto row = [&](const std::string& what) -> Row& {
    auto [it, fresh] = index.try_emplace(what, static_cast<int>(rows.size()));
    if (fresh) rows.push_back({what});
    return rows[static_cast<std::size_t>(it->second)];
  };
  auto mpi_seconds = [&] {
    double t = 0;
    for (const auto& [k, v] : rec.calls) t += v.seconds;
    return t;
  };
  auto& layers = s.model.layers();
  const kdist::StepContext ctx{true, s.model.seed(),
                               static_cast<std::uint64_t>(s.model.iterations()), false};
  const double begin = now_fenced();
  kdist::LayerTensor<T> h = kdist::DistributedTensor<T**>::from_local(
      s.x, {s.global, s.cfg.sequence}, s.model.input_layout(s.global));
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string name = layers[i].name();
    rec.where = kind_of(name) + " forward";
    const double m0 = mpi_seconds(), t0 = now_fenced();
    h = layers[i].forward(h, ctx);
    const double t1 = now_fenced();
    auto& r = row(kind_of(name));
    r.forward += t1 - t0;
    r.mpi += mpi_seconds() - m0;
  }
  {  // the loss: this process's targets of its logits block, then the vocabulary-parallel loss
    rec.where = "loss";
    const double m0 = mpi_seconds(), t0 = now_fenced();
    const auto& logits = std::get<Tokens3>(h);
    const auto ext = logits.local_extents();
    const std::size_t r0 = logits.offsets()[0] - s.row0, c0 = logits.offsets()[1];
    Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Tokens3::memory_space> t("t", ext[0], ext[1]);
    auto ht = Kokkos::create_mirror_view(t);
    for (std::size_t i = 0; i < ext[0]; ++i) {
      for (std::size_t j = 0; j < ext[1]; ++j) {
        ht(i, j) = s.targets[(r0 + i) * s.cfg.sequence + c0 + j];
      }
    }
    Kokkos::deep_copy(t, ht);
    auto result = kdist::sparse_categorical_crossentropy(logits, t);
    benchmark::DoNotOptimize(result.loss);
    h = std::move(result.dlogits);
    const double t1 = now_fenced();
    auto& r = row("loss");
    r.forward += t1 - t0;
    r.mpi += mpi_seconds() - m0;
  }
  for (std::size_t i = layers.size(); i-- > 0;) {
    const std::string name = layers[i].name();
    rec.where = kind_of(name) + " backward";
    const double m0 = mpi_seconds(), t0 = now_fenced();
    kdist::Gradients<T> grads;
    auto dx = layers[i].backward(h, i > 0, grads);
    grads.resolve();  // each gradient's sum, blocking: counted in the layer's backward
    if (dx) h = std::move(*dx);
    const double t1 = now_fenced();
    auto& r = row(kind_of(name));
    r.backward += t1 - t0;
    r.mpi += mpi_seconds() - m0;
  }
  return now_fenced() - begin;
}

//! The optimizer alone: kdist::AdamW::update on one flat block of `n` parameters (what
//! apply_gradients does per variable block), the median of a few, the slowest rank's.
double adamw_seconds(std::size_t n) {
  using V = Kokkos::View<T*, Kokkos::LayoutRight>;
  V param("p", n), grad("g", n), m("m", n), v("v", n);
  Kokkos::deep_copy(param, T(0.5));
  Kokkos::deep_copy(grad, T(0.01));
  const kdist::AdamW opt(1e-3);
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const double t0 = now_fenced();
    opt.update(param, grad, m, v);
    t.push_back(max_over_ranks(now_fenced() - t0));
  }
  return kdist::bench::median(t);
}

void gpt_profile(benchmark::State& state, const Config& c) {
  GptStep op(c);
  for (int i = 0; i < 2; ++i) op();
  auto& rec = gptbench::recorder();
  Profile p;
  p.config = c.name;
  p.load = load_average();
  std::vector<Row> rows;
  std::map<std::string, int> index;
  std::vector<double> steps, instrumented;
  std::map<gptbench::CallKey, gptbench::CallStats> calls;
  int n = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    gptbench::set_tools(true);
    rec.calls.clear();
    rec.on = true;
    const double t_inst = instrumented_step(op, rows, index);
    for (const auto& [k, v] : rec.calls) {
      auto& a = calls[k];
      a.count += v.count;
      a.seconds += v.seconds;
    }
    rec.calls.clear();
    rec.on = false;
    MPI_Barrier(MPI_COMM_WORLD);  // the benchmark's own: not counted
    rec.where = "train_step";
    rec.on = true;
    rec.kernels_on = true;
    const double t0 = now_fenced();
    op();
    const double t_step = now_fenced() - t0;
    rec.kernels_on = false;
    rec.on = false;
    for (const auto& [k, v] : rec.calls) {
      auto& a = calls[k];
      a.count += v.count;
      a.seconds += v.seconds;
    }
    gptbench::set_tools(false);
    steps.push_back(max_over_ranks(t_step));
    instrumented.push_back(max_over_ranks(t_inst));
    state.SetIterationTime(steps.back());
    ++n;
  }
  // The slowest rank's per-layer times (every rank has the same rows in the same order).
  for (auto& r : rows) {
    r.forward = max_over_ranks(r.forward) / n;
    r.backward = max_over_ranks(r.backward) / n;
    r.mpi = max_over_ranks(r.mpi) / n;
  }
  p.layers = rows;
  p.step = kdist::bench::median(steps);
  p.instrumented = kdist::bench::median(instrumented);
  {
    const StateBytes b = state_bytes(op.model);
    p.adamw = adamw_seconds(static_cast<std::size_t>(max_over_ranks(b.weights) / sizeof(T)));
  }
  for (const auto& [name, s] : rec.kernels) {
    p.kernels.push_back({name, {s.count / n, s.seconds / n}});
  }
  std::sort(p.kernels.begin(), p.kernels.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  for (auto& [k, v] : calls) {
    p.calls[k] = {v.count / n, v.seconds / n};
  }
  rec.kernels.clear();
  state.counters["step_ms"] = p.step * 1e3;
  state.counters["load"] = p.load;
  if (world_rank() == 0) profiles().push_back(std::move(p));
}

void register_all() {
  const auto n = static_cast<std::size_t>(world_size());
  for (const auto& c : configs()) {
    if (c.data * c.model != n) continue;
    benchmark::RegisterBenchmark((std::string("BM_gpt_step/") + c.name).c_str(),
                                 [c](benchmark::State& s) { gpt_step(s, c); })
        ->Iterations(kIterations)
        ->Repetitions(kRepetitions)
        ->ReportAggregatesOnly(true)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const auto& c : configs()) {
    if (c.data * c.model != n || c.fsdp || c.sequence_parallel || c.shard_state) continue;
    benchmark::RegisterBenchmark((std::string("BM_gpt_remat/") + c.name).c_str(),
                                 [c](benchmark::State& s) { gpt_remat(s, c); })
        ->Iterations(kIterations)
        ->Repetitions(kRepetitions)
        ->ReportAggregatesOnly(true)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const auto& c : configs()) {
    if (c.data * c.model != n || c.fsdp || c.sequence_parallel || c.shard_state) continue;
    benchmark::RegisterBenchmark((std::string("BM_gpt_mixed_precision/") + c.name).c_str(),
                                 [c](benchmark::State& s) { gpt_mixed_precision(s, c); })
        ->Iterations(kIterations)
        ->Repetitions(kRepetitions)
        ->ReportAggregatesOnly(true)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const auto& c : configs()) {
    if (c.data * c.model != n || c.fsdp || c.sequence_parallel || c.shard_state) continue;
    benchmark::RegisterBenchmark((std::string("BM_gpt_save_every_10_steps/") + c.name).c_str(),
                                 [c](benchmark::State& s) { gpt_checkpointing(s, c); })
        ->Iterations(3)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const auto& c : configs()) {
    if (c.data * c.model != n) continue;
    benchmark::RegisterBenchmark((std::string("BM_gpt_profile/") + c.name).c_str(),
                                 [c](benchmark::State& s) { gpt_profile(s, c); })
        ->Iterations(kProfileSteps)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1 << 20) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  }
  return buf;
}

void print_profile(const Profile& p) {
  std::printf("\n== %s (%d process%s; load %.2f) ==\n", p.config.c_str(), world_size(),
              world_size() == 1 ? "" : "es", p.load);
  std::printf("where a step's time goes, by layer (ms per step, slowest rank per row)\n");
  std::printf("  %-26s %9s %9s %9s %7s %9s\n", "layer", "forward", "backward", "total", "%step",
              "of it MPI");
  double sum = 0;
  for (const auto& r : p.layers) {
    const double t = r.forward + r.backward;
    sum += t;
    std::printf("  %-26s %9.2f %9.2f %9.2f %6.1f%% %9.2f\n", r.what.c_str(), r.forward * 1e3,
                r.backward * 1e3, t * 1e3, 100 * t / p.step, r.mpi * 1e3);
  }
  const double rest = p.step - p.instrumented;
  std::printf("  %-26s %9s %9s %9.2f %6.1f%%\n", "optimizer + rest (step-sum)", "", "", rest * 1e3,
              100 * rest / p.step);
  std::printf("  %-26s %9s %9s %9.2f %6.1f%%\n", "AdamW update, timed alone", "", "", p.adamw * 1e3,
              100 * p.adamw / p.step);
  std::printf(
      "  train_step median %.2f ms; instrumented forward+loss+backward median %.2f ms "
      "(layers sum %.2f ms)\n",
      p.step * 1e3, p.instrumented * 1e3, sum * 1e3);

  std::printf("inside train_step, by Kokkos kernel (rank 0, ms per step)\n");
  double kernels = 0;
  for (const auto& [name, s] : p.kernels) kernels += s.seconds;
  int shown = 0;
  for (const auto& [name, s] : p.kernels) {
    if (++shown > 14) break;
    std::printf("  %-42s %5lld calls %8.2f ms %5.1f%%\n", name.c_str(), s.count, s.seconds * 1e3,
                100 * s.seconds / p.step);
  }
  double mpi = 0;
  for (const auto& [k, v] : p.calls) {
    if (k.where == "train_step") mpi += v.seconds;
  }
  std::printf("  %-42s %20.2f ms %5.1f%%\n", "all Kokkos kernels", kernels * 1e3,
              100 * kernels / p.step);
  std::printf("  %-42s %20.2f ms %5.1f%%\n", "MPI calls", mpi * 1e3, 100 * mpi / p.step);
  std::printf("  %-42s %20.2f ms %5.1f%%\n", "rest (Eigen GEMMs, copies, allocations)",
              (p.step - kernels - mpi) * 1e3, 100 * (p.step - kernels - mpi) / p.step);

  if (world_size() == 1) return;
  std::printf("MPI calls of one step (rank 0; bytes: see bench_gpt.cpp)\n");
  std::printf("  %-24s %-40s %-26s %10s %6s %9s\n", "where", "kdist regions", "MPI call", "bytes",
              "count", "ms");
  std::map<std::string, std::pair<long long, double>> totals;  // call -> (count, bytes)
  long long train_calls = 0;
  for (const auto& [k, v] : p.calls) {
    std::printf("  %-24s %-40s %-26s %10lld %6lld %9.3f\n", k.where.c_str(), k.region.c_str(),
                k.call.c_str(), k.bytes, v.count, v.seconds * 1e3);
    if (k.where == "train_step") {
      auto& t = totals[k.call];
      t.first += v.count;
      t.second += static_cast<double>(v.count * k.bytes);
      train_calls += v.count;
    }
  }
  std::printf("  train_step in all: %lld MPI calls:", train_calls);
  for (const auto& [call, t] : totals) {
    std::printf(" %s %lld (%s)", call.c_str(), t.first, human_bytes(t.second).c_str());
  }
  std::printf("\n");
}

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians_[run.run_name.function_name] = run;
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const int n = world_size();
    std::printf("\nsummary (%d process%s; median of %d x %d steps; the slowest rank's times)\n", n,
                n == 1 ? "" : "es", kRepetitions, kIterations);
    std::printf("  %-22s %10s %12s %16s %16s %8s %6s\n", "config", "ms/step", "tokens/s",
                "weights+slots", "1 process", "ratio", "load");
    for (const auto& entry : medians_) {
      const auto& name = entry.first;  // clang 14 captures no structured bindings
      const auto& run = entry.second;
      auto c = [&](const char* k) {
        const auto it = run.counters.find(k);
        return it == run.counters.end() ? 0.0 : it->second.value;
      };
      std::printf("  %-22s %10.2f %12.0f %16s %16s %8.4f %6.2f\n", name.c_str(),
                  run.GetAdjustedRealTime(), c("tokens_per_s"),
                  human_bytes(c("state_bytes_per_rank")).c_str(),
                  human_bytes(c("state_bytes_1proc")).c_str(), c("state_ratio"),
                  std::max(c("load_begin"), c("load_end")));
    }
    for (const auto& p : profiles()) print_profile(p);
    std::fflush(stdout);
  }

 private:
  std::map<std::string, Run> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  return kdist::bench::mpi_benchmark_main<SummaryReporter>(argc, argv, register_all);
}
