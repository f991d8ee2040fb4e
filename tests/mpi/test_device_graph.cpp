// kdist-mpi-ranks: 1 2
// The training step as one device graph (issue 36, item 2; nn/train/step_graph.hpp): asked for
// by CompileOptions::device_graph or KDIST_DEVICE_GRAPH, it trains exactly as the launched step;
// on a GPU build the step is recorded after two launched steps and an audited third and then
// replayed, elsewhere it runs launched and says why. The reasons the host knows are checked here
// on every backend; the audit's callbacks on what Kokkos reports.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>

#include "common/gpt_model.hpp"
#include "common/random_normal.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/tiny_gpt_config.hpp"

namespace {

using kdist::test::world_rank;
using kdist::test::world_size;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct FitRun {
  kdist::History history;
  std::vector<float> weights;
  kdist::DeviceGraphStatus status;
};
FitRun fit_seeds(bool graph, std::size_t steps_per_execution) {
  auto model = kdist::examples::seeds_model();
  model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                kdist::Adam(0.001), 11,
                {.steps_per_execution = steps_per_execution, .device_graph = graph});
  FitRun r;
  r.history = model.fit(kdist::test::labeled_images(128, 4, 3),
                        {.batch_size = 16, .epochs = 2, .steps_per_epoch = 7, .verbose = 0});
  r.weights = kdist::test::local_weights(model);
  r.status = model.device_graph();
  return r;
}

TEST(DeviceGraph, TrainsExactlyAsTheLaunchedStepAndSaysWhatItDid) {
  const FitRun launched = fit_seeds(false, 1);
  EXPECT_FALSE(launched.status.requested);
  EXPECT_TRUE(launched.status.not_captured.empty());
  for (std::size_t n : {1U, 3U}) {
    const FitRun graph = fit_seeds(true, n);
    EXPECT_EQ(graph.weights, launched.weights) << "steps_per_execution " << n;
    ASSERT_EQ(graph.history.epochs.size(), 2U);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_NEAR(graph.history.epochs[e].loss, launched.history.epochs[e].loss,
                  1e-9 * std::abs(launched.history.epochs[e].loss));
      EXPECT_NEAR(graph.history.epochs[e].accuracy, launched.history.epochs[e].accuracy, 1e-12);
    }
    EXPECT_TRUE(graph.status.requested);
    if (kdist::ops::detail::cuda_graphs_enabled) {
      // One loader for both epochs, one key: 2 launched, 1 audited, 1 recorded, then 10 replays;
      // on several processes split at the gradients' all-reduces (3 variables: d1's kernel, d2's
      // kernel and bias).
      EXPECT_TRUE(graph.status.not_captured.empty()) << graph.status.not_captured;
      EXPECT_EQ(graph.status.recordings, 1U);
      EXPECT_EQ(graph.status.replays, 10U);
      EXPECT_EQ(graph.status.pieces, world_size() > 1 ? 4U : 1U);
    } else {
      EXPECT_FALSE(graph.status.captured);
      EXPECT_EQ(graph.status.replays, 0U);
      EXPECT_TRUE(contains(graph.status.not_captured, "has no device graphs"))
          << graph.status.not_captured;
    }
  }
}

TEST(DeviceGraph, TheGptTrainsExactlyAsLaunchedAndPassesTheHostsChecks) {
  // The example GPT (Embedding, attention, dropout, AdamW with global_clipnorm, the
  // vocabulary-parallel loss): nothing the host knows keeps it from being captured on one
  // process; on a CPU build the reason is the backend's.
  const kdist::examples::GptConfig config = kdist::test::tiny_gpt_config(1);
  const auto run = [&](bool graph) {
    auto model = kdist::examples::make_gpt<float>(config);
    model.compile(std::make_shared<kdist::DataParallel>(),
                  kdist::Loss::sparse_categorical_crossentropy,
                  kdist::AdamW(0.001).with_global_clipnorm(1.0), 3,
                  {.steps_per_execution = 2, .device_graph = graph});
    std::vector<float> x(64 * config.sequence), y(64 * config.sequence);
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>((5 * i + 1) % config.vocab);
      y[i] = static_cast<float>((5 * i + 6) % config.vocab);
    }
    const kdist::ArrayDataset<float> data(std::move(x), {config.sequence}, std::move(y),
                                          config.sequence);
    const auto h = model.fit(data, {.batch_size = 8, .epochs = 1, .shuffle = false, .verbose = 0});
    return std::make_tuple(h.epochs.at(0).loss, kdist::test::local_weights(model),
                           model.device_graph());
  };
  const auto [loss, weights, status] = run(false);
  const auto [graph_loss, graph_weights, graph_status] = run(true);
  EXPECT_EQ(graph_weights, weights);
  EXPECT_NEAR(graph_loss, loss, 1e-9 * loss);
  EXPECT_TRUE(graph_status.requested);
  if (kdist::ops::detail::cuda_graphs_enabled) {
    EXPECT_TRUE(graph_status.not_captured.empty()) << graph_status.not_captured;
    EXPECT_EQ(graph_status.replays, 4U);  // 8 steps: 2 launched, 1 audited, 1 recorded
    // On several processes: pieces between the gradients' all-reduces, the global norm's
    // all-reduce and the loss's agreement on shapes.
    if (world_size() > 1) {
      EXPECT_GT(graph_status.pieces, 3U);
    } else {
      EXPECT_EQ(graph_status.pieces, 1U);
    }
  } else {
    EXPECT_TRUE(contains(graph_status.not_captured, "has no device graphs"))
        << graph_status.not_captured;
  }
}

//! The reason a model trained three train_steps with `graph` on reports.
template <class Loss, class Optimizer>
std::string reason_after_three_steps(Loss loss, Optimizer optimizer) {
  auto model = kdist::examples::seeds_model();
  model.compile(std::make_shared<kdist::DataParallel>(), std::move(loss), std::move(optimizer), 5,
                {.device_graph = true});
  const auto data = kdist::test::labeled_images(128, 4, 3);
  const std::size_t rows = 32 / static_cast<std::size_t>(world_size());
  kdist::detail::BatchLoader<float, 4> loader(data, rows);
  std::vector<std::size_t> idx(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    idx[i] = static_cast<std::size_t>(world_rank()) * rows + i;
  }
  const auto x = loader.load_examples(idx);
  const auto y = loader.load_labels(idx);
  for (int s = 0; s < 3; ++s) {
    const auto m = model.train_step(x, y, 32);
    EXPECT_TRUE(std::isfinite(m.loss));
    EXPECT_EQ(m.examples, 32U);
  }
  EXPECT_EQ(model.iterations(), 3);
  return model.device_graph().not_captured;
}

struct MeanAbsoluteError {  // a user's loss: it returns its sum to the host
  std::string name() const { return "mean_absolute_error"; }
  double sum(const kdist::LossInput<float>& pred, const kdist::LossTargets<float>& target,
             const kdist::LossGradient<float>& grad, float scale) const {
    const auto p = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pred);
    const auto t = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), target);
    auto g = Kokkos::create_mirror_view(grad);
    double s = 0;
    for (std::size_t i = 0; i < p.extent(0); ++i) {
      for (std::size_t j = 0; j < p.extent(1); ++j) {
        const float d = p(i, j) - t(i, j);
        s += std::abs(d) / static_cast<double>(p.extent(1));
        g(i, j) = (d > 0 ? scale : -scale) / static_cast<float>(p.extent(1));
      }
    }
    Kokkos::deep_copy(grad, g);
    return s;
  }
};

struct PlainSgd {  // a user's optimizer
  std::string name() const { return "PlainSgd"; }
  kdist::OptimizerSlots slots() const { return {}; }
  void update_step(const kdist::OptimizerView<float>& p, const kdist::OptimizerView<const float>& g,
                   std::span<const kdist::OptimizerView<float>>) const {
    Kokkos::parallel_for(
        "plain_sgd", p.extent(0), KOKKOS_LAMBDA(const std::size_t i) { p(i) -= 0.01f * g(i); });
  }
};

TEST(DeviceGraph, SaysWhyAStepIsNotCaptured) {
  if (world_size() > 1) {  // several processes: the graph is split at the collectives
    for (const auto& why :
         {reason_after_three_steps(kdist::Loss::categorical_crossentropy, kdist::Adam()),
          reason_after_three_steps(kdist::Loss::categorical_crossentropy,
                                   kdist::Adam().with_global_clipnorm(1.0))}) {
      EXPECT_FALSE(contains(why, "processes")) << why;
      EXPECT_FALSE(contains(why, "clipnorm")) << why;
      if (!kdist::ops::detail::cuda_graphs_enabled) {
        EXPECT_TRUE(contains(why, "has no device graphs")) << why;
      }
    }
    return;
  }
  EXPECT_TRUE(contains(reason_after_three_steps(MeanAbsoluteError{}, kdist::Adam()),
                       "the loss 'mean_absolute_error' returns its sum to the host"));
  EXPECT_TRUE(contains(reason_after_three_steps(kdist::Loss::categorical_crossentropy, PlainSgd{}),
                       "the optimizer 'PlainSgd' is not the library's"));
  // global_clipnorm's scale is computed on the device (one process): no reason of the host's.
  const auto clipped = reason_after_three_steps(kdist::Loss::categorical_crossentropy,
                                                kdist::Adam().with_global_clipnorm(1.0));
  EXPECT_FALSE(contains(clipped, "clipnorm")) << clipped;
  if (!kdist::ops::detail::cuda_graphs_enabled) {
    EXPECT_TRUE(contains(clipped, "has no device graphs")) << clipped;
  }
}

TEST(DeviceGraph, TheEnvironmentAsksForItAndABadValueIsAValueError) {
  auto model = kdist::examples::seeds_model();
  const auto compile = [&] {
    model.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::categorical_crossentropy,
                  kdist::Adam(), 1);
  };
  ::setenv("KDIST_DEVICE_GRAPH", "1", 1);
  compile();
  EXPECT_TRUE(model.device_graph().requested);
  ::setenv("KDIST_DEVICE_GRAPH", "off", 1);
  compile();
  EXPECT_FALSE(model.device_graph().requested);
  ::setenv("KDIST_DEVICE_GRAPH", "maybe", 1);
  try {
    compile();
    ADD_FAILURE() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_TRUE(contains(e.what(), "KDIST_DEVICE_GRAPH is 'maybe'")) << e.what();
  }
  ::unsetenv("KDIST_DEVICE_GRAPH");
  compile();
  EXPECT_FALSE(model.device_graph().requested);
}

int& user_frees() {
  static int n = 0;
  return n;
}

void user_allocation_callback(Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) {
}

TEST(DeviceGraph, TheAuditNamesWhatWaitsOrAllocatesAndLeavesAToolsCallbacksAlone) {
  namespace kt = Kokkos::Tools::Experimental;
  kt::set_allocate_data_callback(user_allocation_callback);
  {
    const kdist::detail::HostWaitAudit audit;
    EXPECT_EQ(kdist::detail::HostWaitAudit::why(), "");
    Kokkos::View<float*> v("a_buffer_made_in_the_step", 8);
    EXPECT_EQ(kdist::detail::HostWaitAudit::why(),
              "the step allocates 'a_buffer_made_in_the_step'");
  }
  EXPECT_EQ(kt::get_callbacks().allocate_data, &user_allocation_callback);
  kt::set_allocate_data_callback(nullptr);
}

void user_free_callback(Kokkos::Tools::SpaceHandle, const char*, const void*, std::uint64_t) {
  ++user_frees();
}

TEST(DeviceGraph, FreesAreCountedWhileARecordingLivesAndAToolStillSeesThem) {
  // A replayed graph writes where it recorded: memory of the model's space freed meanwhile ends
  // the recordings (StepGraph compares DeviceFrees' generation), and a tool's callback still runs.
  namespace kt = Kokkos::Tools::Experimental;
  kt::set_deallocate_data_callback(user_free_callback);
  user_frees() = 0;
  const auto before = kdist::detail::DeviceFrees::generation();
  {
    const kdist::detail::DeviceFrees::FreeWatch watch;
    { Kokkos::View<float*> v("freed_while_watched", 8); }
    EXPECT_EQ(kdist::detail::DeviceFrees::generation(), before + 1);
    EXPECT_EQ(user_frees(), 1);
  }
  EXPECT_EQ(kt::get_callbacks().deallocate_data, &user_free_callback);
  { Kokkos::View<float*> v("freed_unwatched", 8); }
  EXPECT_EQ(kdist::detail::DeviceFrees::generation(), before + 1);
  EXPECT_EQ(user_frees(), 2);
  kt::set_deallocate_data_callback(nullptr);
}

//! A split that takes every collective offered and keeps its call (a test's recording), and
//! notes those it cannot take.
struct KeepingSplit final : kdist::detail::CollectiveSplit {
  bool take(std::string_view who, bool, std::function<void()> call) override {
    taken.emplace_back(who);
    calls.push_back(std::move(call));
    return true;
  }
  void cannot_take(std::string_view who) override { refused.emplace_back(who); }
  std::vector<std::string> taken, refused;
  std::vector<std::function<void()>> calls;
};

using V = Kokkos::View<float*>;
//! A View of the step's memory holding base, base + 1, ... (a free function: nvcc takes no
//! KOKKOS_LAMBDA in a test's private body).
V filled(const std::string& label, std::size_t n, float base) {
  V v(label, n);
  Kokkos::parallel_for(
      label, n, KOKKOS_LAMBDA(const std::size_t i) { v(i) = base + static_cast<float>(i); });
  return v;
}
std::vector<float> host(const V& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.size());
}

TEST(DeviceGraph, ARecordingTakesEachBlockingCollectiveAsAHostCallWithTheSameViews) {
  // While a recording is active its collectives do nothing but hand over their calls; run later
  // (as between two pieces of a replayed graph) they give what the collectives give at once.
  const auto p = static_cast<std::size_t>(world_size());
  const auto r = static_cast<float>(world_rank());
  const auto comm = kdist::communicator();
  const auto space = Kokkos::DefaultExecutionSpace();
  // Each collective's inputs made twice: once for the recording, once run at once.
  struct Run {
    V sum_in, sum_out, in_place, gather_in, gather_out, scatter_in, scatter_out, bcast, a2a_in,
        a2a_out;
  };
  const auto inputs = [&] {
    Run x;
    x.sum_in = filled("sum_in", 4, 10 * r);
    x.sum_out = V("sum_out", 4);
    x.in_place = filled("in_place", 3, r);
    x.gather_in = filled("gather_in", 2, 100 * r);
    x.gather_out = V("gather_out", 2 * p);
    x.scatter_in = filled("scatter_in", 2 * p, r);
    x.scatter_out = V("scatter_out", 2);
    x.bcast = filled("bcast", 3, 7 * r + 1);
    x.a2a_in = filled("a2a_in", 2 * p, 50 * r);
    x.a2a_out = V("a2a_out", 2 * p);
    return x;
  };
  const auto run_all = [&](const Run& x) {
    kdist::all_reduce(space, x.sum_in, x.sum_out, kdist::ReduceOp::sum, comm);
    kdist::all_reduce(space, x.in_place, kdist::ReduceOp::max, comm);
    kdist::all_gather(space, x.gather_in, x.gather_out, comm);
    kdist::reduce_scatter(space, x.scatter_in, x.scatter_out, kdist::ReduceOp::sum, comm);
    kdist::broadcast(space, x.bcast, static_cast<int>(p) - 1, comm);
    kdist::all_to_all(space, x.a2a_in, x.a2a_out, comm);
  };
  const Run now = inputs();
  run_all(now);
  const Run later = inputs();
  KeepingSplit split;
  {
    const kdist::detail::CollectiveSplit::Scope recording(&split);
    run_all(later);
  }
  EXPECT_EQ(split.taken, (std::vector<std::string>{"kdist::all_reduce", "kdist::all_reduce",
                                                   "kdist::all_gather", "kdist::reduce_scatter",
                                                   "kdist::broadcast", "kdist::all_to_all"}));
  EXPECT_TRUE(split.refused.empty());
  EXPECT_EQ(host(later.sum_out), std::vector<float>(4, 0.0f));  // nothing ran yet
  EXPECT_EQ(host(later.bcast), host(filled("bcast", 3, 7 * r + 1)));
  for (const auto& call : split.calls) call();  // the replay's host calls, in order
  EXPECT_EQ(host(later.sum_out), host(now.sum_out));
  EXPECT_EQ(host(later.in_place), host(now.in_place));
  EXPECT_EQ(host(later.gather_out), host(now.gather_out));
  EXPECT_EQ(host(later.scatter_out), host(now.scatter_out));
  EXPECT_EQ(host(later.bcast), host(now.bcast));
  EXPECT_EQ(host(later.a2a_out), host(now.a2a_out));
  EXPECT_EQ(host(now.bcast)[0], 7.0f * static_cast<float>(p - 1) + 1.0f);
  EXPECT_EQ(kdist::detail::CollectiveSplit::active(), nullptr);
}

TEST(DeviceGraph, ANonBlockingCollectiveOrAnAgreementCannotBeTakenAndRunsAtOnce) {
  KeepingSplit split;
  Kokkos::View<double*, Kokkos::HostSpace> v("v", 2);
  Kokkos::deep_copy(v, 1.0);
  {
    const kdist::detail::CollectiveSplit::Scope recording(&split);
    auto request = kdist::start_all_reduce(Kokkos::DefaultHostExecutionSpace(), v,
                                           kdist::ReduceOp::sum, kdist::communicator());
    request.wait();
    kdist::mpi::agree(kdist::communicator(), true, "");
  }
  EXPECT_EQ(v(0), static_cast<double>(world_size()));
  EXPECT_TRUE(split.taken.empty());
  EXPECT_EQ(split.refused,
            (std::vector<std::string>{"kdist::start_all_reduce",
                                      "kdist::mpi::agree (a flag the host computed)"}));
}

TEST(DeviceGraph, TheAuditRunsTheCollectivesAsHostCallsUnauditedAndNamesOneThatCannotBe) {
  // The audited step's collectives on the step's memory run at once, their fences and staging
  // copies not held against the step; a non-blocking one names why the step cannot be split.
  Kokkos::View<float*> g("gradient", 4);
  Kokkos::deep_copy(g, 1.0f);
  {
    const kdist::detail::HostWaitAudit audit;
    kdist::detail::AuditSplit split;
    {
      const kdist::detail::CollectiveSplit::Scope scope(&split);
      kdist::all_reduce(Kokkos::DefaultExecutionSpace(), g, kdist::ReduceOp::sum,
                        kdist::communicator());
    }
    EXPECT_EQ(split.host_calls(), 1U);
    EXPECT_EQ(split.why(), "");
    EXPECT_EQ(kdist::detail::HostWaitAudit::why(), "");
    {
      const kdist::detail::CollectiveSplit::Scope scope(&split);
      Kokkos::View<double*, Kokkos::HostSpace> sums("sums", 2);
      kdist::start_all_reduce(Kokkos::DefaultHostExecutionSpace(), sums, kdist::ReduceOp::sum,
                              kdist::communicator())
          .wait();
    }
    EXPECT_EQ(split.why(),
              "the step's collective kdist::start_all_reduce cannot run between two pieces of a "
              "graph");
  }
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
  EXPECT_EQ(h(3), static_cast<float>(world_size()));
}

//! A piece of graph that records nothing and logs what the split asks of it: the bookkeeping of
//! SplitGraph on any backend (the CUDA build's pieces are ops::detail::CudaGraph).
struct PieceLog {
  std::vector<std::string> events;
  int begun = 0;
  int invalid_at = -1;  //!< the piece whose end fails, as an invalidated capture would
};
struct LoggedPiece {
  using stream_type = PieceLog*;
  int id = -1;
  bool done = false;
  std::string begin(PieceLog* log) {
    id = log->begun++;
    log->events.push_back("begin " + std::to_string(id));
    return {};
  }
  std::string end(PieceLog* log) {
    log->events.push_back("end " + std::to_string(id));
    if (id == log->invalid_at) return "the capture was invalidated";
    done = true;
    return {};
  }
  void abandon(PieceLog* log) noexcept { log->events.push_back("abandon " + std::to_string(id)); }
  void launch(PieceLog* log) const { log->events.push_back("launch " + std::to_string(id)); }
  bool ready() const noexcept { return done; }
};

TEST(DeviceGraph, ASplitRecordingEndsAPieceAtEachCollectiveAndReplaysPieceCallPiece) {
  using Split = kdist::detail::SplitGraph<LoggedPiece>;
  const double r = world_rank() + 1.0;
  const double sum = world_size() * (world_size() + 1) / 2.0;
  Kokkos::View<double*> x("x", 2), y("y", 3);
  Kokkos::deep_copy(x, r);
  Kokkos::deep_copy(y, 2 * r);
  const auto at = [](const Kokkos::View<double*>& v) {
    double h = 0;
    Kokkos::deep_copy(h, Kokkos::subview(v, 0));
    return h;
  };
  PieceLog log;
  Split split;
  const auto space = Kokkos::DefaultExecutionSpace();
  const auto comm = kdist::communicator();
  std::string why = split.record(&log, [&] {
    log.events.emplace_back("work a");
    kdist::all_reduce(space, x, kdist::ReduceOp::sum, comm);
    log.events.emplace_back("work b");
    kdist::all_reduce(space, y, kdist::ReduceOp::sum, comm);
    log.events.emplace_back("work c");
  });
  EXPECT_EQ(why, "");
  EXPECT_TRUE(split.ready());
  EXPECT_EQ(split.pieces(), 3U);
  EXPECT_EQ(log.events, (std::vector<std::string>{"begin 0", "work a", "end 0", "begin 1", "work b",
                                                  "end 1", "begin 2", "work c", "end 2"}));
  EXPECT_EQ(at(x), r);  // recorded, not run
  EXPECT_EQ(kdist::detail::CollectiveSplit::active(), nullptr);
  log.events.clear();
  split.launch(&log);  // a replay: piece, call, piece, call, piece
  EXPECT_EQ(log.events, (std::vector<std::string>{"launch 0", "launch 1", "launch 2"}));
  EXPECT_EQ(at(x), sum);
  EXPECT_EQ(at(y), 2 * sum);
  split.launch(&log);  // and again, with the same Views
  EXPECT_EQ(at(x), sum * world_size());

  // What cannot run between pieces ends the recording, nothing of it run, the reason kept.
  Kokkos::View<double*, Kokkos::HostSpace> h("h", 1);
  why = split.record(&log, [&] {
    kdist::start_all_reduce(Kokkos::DefaultHostExecutionSpace(), h, kdist::ReduceOp::sum, comm)
        .wait();
  });
  EXPECT_EQ(why,
            "the step failed while it was captured: kdist::start_all_reduce cannot run between two "
            "pieces of a graph");
  EXPECT_FALSE(split.ready());
  EXPECT_EQ(split.pieces(), 0U);
  EXPECT_EQ(log.events.back(), "abandon " + std::to_string(log.begun - 1));
  why = split.record(&log, [&] { split.take("a test's collective", false, [] {}); });
  EXPECT_EQ(why,
            "the step failed while it was captured: a test's collective works on host memory that "
            "the host wrote in the step: it cannot run between two pieces of a graph");
  // A piece whose capture is invalidated (its end fails) ends the recording with the reason.
  log.invalid_at = log.begun + 1;
  why = split.record(&log, [&] {
    kdist::all_reduce(space, x, kdist::ReduceOp::sum, comm);
    kdist::all_reduce(space, y, kdist::ReduceOp::sum, comm);
  });
  EXPECT_EQ(why, "the step failed while it was captured: the capture was invalidated");
  EXPECT_FALSE(split.ready());
  EXPECT_EQ(at(x), sum * world_size());  // nothing ran
}

}  // namespace
