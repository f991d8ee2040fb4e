#pragma once
//! \file nn/train/step_graph.hpp
//! `detail::StepGraph`: the training step recorded once as a device graph and replayed as one
//! launch each step (issue 36), when the program asks (kdist::CompileOptions::device_graph) or
//! the environment does (`KDIST_DEVICE_GRAPH=1`).
//!
//! A step replays right only if its kernels take nothing from the host that changes from step to
//! step and nothing in it waits for the device. kdist's step keeps its count in device memory
//! (device_iterations.hpp) and its metrics there (OutputLoss, the library's losses); what is left
//! is checked twice:
//! - before anything runs, by what the host knows (`host_reason`): the library's optimizer (a
//!   user's may take its step count from the host), a loss that keeps its sum on the device;
//! - on the device, by an audit: after two launched steps (the shapes seen, every buffer
//!   allocated) a third runs under Kokkos Tools callbacks, and any fence, copy between memory
//!   spaces or allocation in it names why the step is not captured, outside the collectives.
//! The fourth step is recorded by stream capture of the Kokkos CUDA instance (ops/detail/
//! cuda_graph.hpp) and launched; every later step with the same key (the inputs' addresses and
//! extents, the global batch, the learning rate and weight decay) is one graph launch, up to four
//! keys at once. Memory of the model's space freed after a recording (a layer's buffer replaced for
//! other shapes) drops every recording (DeviceFrees). Without CUDA the step runs launched (the same
//! code), and status() says so.
//!
//! MPI is not captured: on a mesh of several processes the recording is split at the step's
//! collectives (parallel/detail/collective_split.hpp). Each blocking collective on device memory
//! (the data-parallel gradient sums) ends a piece of graph and becomes a host call, with the same
//! Views, between that piece and the next; a replayed step is piece, call, piece, ..., one launch
//! per piece. The audit runs those calls as they come, their fences and staging copies allowed; a
//! collective that cannot run between pieces (a non-blocking one, raw MPI on the host's data, the
//! host copies of a redistribute's exchange) names why the step is not captured.
//!
//! Stream capture of the default instance is used rather than Kokkos Graph: Kokkos Graph's nodes
//! capture cuBLAS only from Kokkos 4.5 (`cuda_capture`), CI's Debian Kokkos is 3.4, and a Kokkos
//! Graph holds no MPI either: the pieces would be the same. Not yet timed on a GPU.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/core/error.hpp>
#include <kdist/ops/detail/cuda_graph.hpp>
#include <kdist/parallel/detail/collective_split.hpp>

namespace kdist {

//! Whether the training step runs as one device graph (kdist::CompileOptions::device_graph).
//! `KDIST_DEVICE_GRAPH=1` (or "on", "true") turns it on for a program that does not say, "0"
//! ("off", "false") off; unset: off. Errors: kdist::ValueError for any other value.
inline bool device_graph_from_environment() {
  const char* v = std::getenv("KDIST_DEVICE_GRAPH");
  if (v == nullptr || *v == '\0') return false;
  const std::string s(v);
  if (s == "1" || s == "on" || s == "true") return true;
  if (s == "0" || s == "off" || s == "false") return false;
  throw ValueError("KDIST_DEVICE_GRAPH is '" + s +
                   "'; set it to 1 (the training step runs as one device graph) or 0 (launched "
                   "kernel by kernel), or unset it");
}

//! What kdist::Sequential::device_graph() reports.
struct DeviceGraphStatus {
  bool requested = false;      //!< asked for by the program or KDIST_DEVICE_GRAPH
  bool captured = false;       //!< the current key's step is a recorded graph
  std::size_t recordings = 0;  //!< graphs recorded (one per key)
  std::size_t replays = 0;     //!< steps run as recorded graphs
  //! Pieces of graph of the current key's recorded step: its collectives run between them (1 on
  //! one process; 0 when not captured).
  std::size_t pieces = 0;
  std::string not_captured;  //!< why the step runs launched, when requested and not captured
};

namespace detail {

//! Kokkos Tools callbacks that note, while an audit lives, the first fence, copy between memory
//! spaces and allocation (their names): what would make a captured step wait or fail. The
//! callbacks a tool had set are restored after.
class HostWaitAudit {
 public:
  HostWaitAudit() : saved_(Kokkos::Tools::Experimental::get_callbacks()) {
    namespace kt = Kokkos::Tools::Experimental;
    found() = {};
    kt::set_begin_fence_callback(on_fence);
    kt::set_begin_deep_copy_callback(on_copy);
    kt::set_allocate_data_callback(on_allocation);
  }
  HostWaitAudit(const HostWaitAudit&) = delete;
  HostWaitAudit& operator=(const HostWaitAudit&) = delete;
  ~HostWaitAudit() { Kokkos::Tools::Experimental::set_callbacks(saved_); }

  //! While one lives, what the step does is not noted: a collective's host call (its fence and
  //! staging copies are its own, between two pieces of a split graph).
  class Pause {
   public:
    Pause() noexcept { ++paused(); }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;
    ~Pause() { --paused(); }
  };

  //! "" when the step neither fenced, copied between memory spaces nor allocated; else what did.
  static std::string why() {
    const auto& f = found();
    if (!f.fence.empty()) return "the step waits for the device in '" + f.fence + "'";
    if (!f.copy.empty()) return "the step copies between memory spaces in '" + f.copy + "'";
    if (!f.allocation.empty()) return "the step allocates '" + f.allocation + "'";
    return {};
  }

 private:
  struct Found {
    std::string fence, copy, allocation;
  };
  static Found& found() {
    static Found f;
    return f;
  }
  static int& paused() {
    static int n = 0;
    return n;
  }
  static void on_fence(const char* name, std::uint32_t, std::uint64_t* id) {
    *id = 0;
    if (paused() == 0 && found().fence.empty()) found().fence = name ? name : "?";
  }
  static void on_copy(Kokkos::Tools::SpaceHandle dst, const char* dst_name, const void*,
                      Kokkos::Tools::SpaceHandle src, const char* src_name, const void*,
                      std::uint64_t) {
    if (paused() == 0 && std::strcmp(dst.name, src.name) != 0 && found().copy.empty()) {
      found().copy =
          std::string(src_name ? src_name : "?") + "' to '" + (dst_name ? dst_name : "?");
    }
  }
  static void on_allocation(Kokkos::Tools::SpaceHandle, const char* name, const void*,
                            std::uint64_t) {
    if (paused() == 0 && found().allocation.empty()) found().allocation = name ? name : "?";
  }
  Kokkos::Tools::Experimental::EventSet saved_;
};

//! Counts the frees of memory in the space of the model's Views while any step graph holds a
//! recording (a FreeWatch lives): a replayed graph reads and writes where it was recorded, so
//! memory freed since then (a layer's buffer replaced for other shapes, by evaluate or by another
//! key's steps) ends every recording. Kokkos Tools' deallocate callback, chained to a tool's.
class DeviceFrees {
 public:
  static std::uint64_t generation() { return state().generation; }

  //! While one lives, frees are counted.
  class FreeWatch {
   public:
    FreeWatch() {
      auto& s = state();
      if (s.watchers++ == 0) {
        s.previous = Kokkos::Tools::Experimental::get_callbacks().deallocate_data;
        Kokkos::Tools::Experimental::set_deallocate_data_callback(on_free);
      }
    }
    FreeWatch(const FreeWatch&) = delete;
    FreeWatch& operator=(const FreeWatch&) = delete;
    ~FreeWatch() {
      auto& s = state();
      if (--s.watchers == 0 &&
          Kokkos::Tools::Experimental::get_callbacks().deallocate_data == &on_free) {
        Kokkos::Tools::Experimental::set_deallocate_data_callback(s.previous);
      }
    }
  };

 private:
  struct State {
    std::uint64_t generation = 0;
    int watchers = 0;
    Kokkos::Tools::deallocateDataFunction previous = nullptr;
  };
  static State& state() {
    static State s;
    return s;
  }
  static void on_free(Kokkos::Tools::SpaceHandle space, const char* label, const void* ptr,
                      std::uint64_t size) {
    auto& s = state();
    if (std::strcmp(space.name, Kokkos::DefaultExecutionSpace::memory_space::name()) == 0) {
      ++s.generation;
    }
    if (s.previous != nullptr) s.previous(space, label, ptr, size);
  }
};

//! The collectives of an audited step (a HostWaitAudit lives): one on the step's memory runs at
//! once as the host call it would be between two pieces of graph, unaudited; any other names why
//! the step cannot be split there (the first such reason is kept).
class AuditSplit final : public CollectiveSplit {
 public:
  bool take(std::string_view who, bool step_memory, std::function<void()> call) override {
    if (!step_memory) {
      note(std::string(who) + " works on host memory that the host wrote in the step");
      return false;
    }
    ++host_calls_;
    const HostWaitAudit::Pause pause;
    call();
    return true;
  }
  void cannot_take(std::string_view who) override {
    note(std::string(who) + " cannot run between two pieces of a graph");
  }
  //! "" when every collective could be a host call between pieces; else the first that cannot.
  const std::string& why() const noexcept { return why_; }
  std::size_t host_calls() const noexcept { return host_calls_; }

 private:
  void note(std::string why) {
    if (why_.empty()) why_ = "the step's collective " + std::move(why);
  }
  std::string why_;
  std::size_t host_calls_ = 0;
};

//! A step recorded as pieces of graph with its collectives between them (the file's comment):
//! recording captures every piece and runs nothing (a collective's host call is kept, not run);
//! launch() enqueues piece 0, runs call 0 (its fence waits for that piece), enqueues piece 1, ...
//! `Piece` records one piece on a stream (begin, end, abandon) and launches it:
//! ops::detail::CudaGraph (tests give one that records nothing, to check the bookkeeping).
template <class Piece>
class SplitGraph final : public CollectiveSplit {
 public:
  using Stream = typename Piece::stream_type;

  SplitGraph() = default;
  SplitGraph(SplitGraph&&) = delete;  // the active split's address is held while it records

  //! Records what `enqueue()` puts on `stream`, split at its collectives: "" once ready to launch,
  //! else why not (nothing of it ran: the step then runs launched).
  template <class Enqueue>
  std::string record(Stream stream, Enqueue&& enqueue) {
    reset();
    stream_ = stream;
    if (std::string why = pieces_.emplace_back().begin(stream); !why.empty()) {
      reset();
      return why;
    }
    capturing_ = true;
    try {
      const Scope scope(this);
      enqueue();
    } catch (const std::exception& ex) {
      if (capturing_) pieces_.back().abandon(stream);
      reset();
      return std::string("the step failed while it was captured: ") + ex.what();
    }
    capturing_ = false;
    std::string why = pieces_.back().end(stream);
    if (!why.empty()) reset();
    return why;
  }
  //! One replay: every piece, and between them the collectives' host calls.
  void launch(Stream stream) const {
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      pieces_[k].launch(stream);
      if (k < calls_.size()) calls_[k]();
    }
  }
  bool ready() const noexcept { return !pieces_.empty() && pieces_.back().ready(); }
  std::size_t pieces() const noexcept { return ready() ? pieces_.size() : 0; }
  void reset() noexcept {
    pieces_.clear();
    calls_.clear();
    capturing_ = false;
  }

  bool take(std::string_view who, bool step_memory, std::function<void()> call) override {
    if (!step_memory) {
      throw RuntimeError(std::string(who) +
                         " works on host memory that the host wrote in the step: it cannot run "
                         "between two pieces of a graph");
    }
    capturing_ = false;
    if (std::string why = pieces_.back().end(stream_); !why.empty()) throw RuntimeError(why);
    calls_.push_back(std::move(call));
    if (std::string why = pieces_.emplace_back().begin(stream_); !why.empty()) {
      throw RuntimeError(why);
    }
    capturing_ = true;
    return true;
  }
  void cannot_take(std::string_view who) override {
    throw RuntimeError(std::string(who) + " cannot run between two pieces of a graph");
  }

 private:
  Stream stream_{};
  std::vector<Piece> pieces_;
  std::vector<std::function<void()>> calls_;
  bool capturing_ = false;  //!< pieces_.back() is being captured
};

//! The key of a recorded step: what its kernels take from the host as arguments or addresses.
using StepGraphKey = std::vector<std::uint64_t>;

class StepGraph {
 public:
  StepGraph() = default;
  //! A copy (a copied model) records its own graphs.
  StepGraph(const StepGraph& other) : requested_(other.requested_) {}
  StepGraph& operator=(const StepGraph& other) {
    if (this != &other) {
      *this = StepGraph();
      requested_ = other.requested_;
    }
    return *this;
  }
  StepGraph(StepGraph&&) noexcept = default;
  StepGraph& operator=(StepGraph&&) noexcept = default;
  ~StepGraph() = default;

  void request(bool on) {
    if (requested_ != on) drop_all();
    requested_ = on;
  }
  bool requested() const noexcept { return requested_; }

  //! One step. `launch()` runs it kernel by kernel (and its host bookkeeping); `replayed()` does
  //! the host bookkeeping of a step that ran as a graph launch; `undo()` reverts the host
  //! bookkeeping of a capture that failed (the step then runs launched). `host_reason()` says why
  //! the step cannot be captured by what the host knows ("" when it can); it is asked after the
  //! two launched steps, once the step has shown what it does (its loss kept on the device).
  //! Each key keeps its own graph, up to kMaxKeys of them, until memory is freed (DeviceFrees).
  template <class HostReason, class Launch, class Replayed, class Undo>
  void run(const StepGraphKey& key, HostReason&& host_reason, Launch&& launch, Replayed&& replayed,
           Undo&& undo) {
    if (!requested_) return launch();
    if (entries_.size() >= kMaxKeys && entries_.find(key) == entries_.end()) {
      drop_all();  // inputs that keep moving: record again from here
    }
    Entry& e = entries_[key];
    current_ = &e;
#if defined(KOKKOS_ENABLE_CUDA)
    const cudaStream_t stream = Kokkos::DefaultExecutionSpace().cuda_stream();
    if (e.graph->ready() && e.generation != DeviceFrees::generation()) {
      drop_all();  // memory a recording used may be gone: record again
      return run(key, host_reason, launch, replayed, undo);
    }
    if (e.graph->ready()) {
      e.graph->launch(stream);
      replayed();
      ++replays_;
      return;
    }
#else
    (void)replayed, (void)undo;
#endif
    if (!e.not_captured.empty()) return launch();
    if (e.launched < 2) {  // the shapes seen, every buffer allocated
      ++e.launched;
      return launch();
    }
    std::string why = host_reason();
    if (why.empty() && !ops::detail::cuda_graphs_enabled) {
      why = std::string("this build's Kokkos (") + Kokkos::DefaultExecutionSpace::name() +
            ") has no device graphs: the step runs launched, the same code";
    }
    if (!why.empty()) {
      e.not_captured = why;
      return launch();
    }
#if defined(KOKKOS_ENABLE_CUDA)
    if (e.launched == 2) {  // the audit: a launched step that must not wait, copy or allocate
      ++e.launched;
      {
        const HostWaitAudit audit;
        AuditSplit split;
        {
          const CollectiveSplit::Scope scope(&split);
          launch();
        }
        why = split.why().empty() ? HostWaitAudit::why() : split.why();
      }
      if (!why.empty()) e.not_captured = why;
      return;
    }
    why = e.graph->record(stream, launch);
    if (!why.empty()) {
      e.not_captured = "the capture failed: " + why;
      undo();
      return launch();
    }
    ++recordings_;
    if (!watch_) watch_ = std::make_unique<DeviceFrees::FreeWatch>();
    e.generation = DeviceFrees::generation();
    e.graph->launch(stream);  // the recorded step itself (its host bookkeeping ran as it recorded)
#endif
  }

  //! What the last step's key did (captured, or why not), and the counts of all keys.
  DeviceGraphStatus status() const {
    DeviceGraphStatus s;
    s.requested = requested_;
    if (current_ != nullptr) {
#if defined(KOKKOS_ENABLE_CUDA)
      s.captured = current_->graph->ready();
      s.pieces = current_->graph->pieces();
#endif
      if (requested_ && !s.captured) s.not_captured = current_->not_captured;
    }
    s.recordings = recordings_;
    s.replays = replays_;
    return s;
  }

 private:
  static constexpr std::size_t kMaxKeys = 4;
  struct Entry {
    std::size_t launched = 0;  //!< steps of this key run launched before recording
    std::string not_captured;
    std::uint64_t generation = 0;  //!< DeviceFrees' when recorded
#if defined(KOKKOS_ENABLE_CUDA)
    std::unique_ptr<SplitGraph<ops::detail::CudaGraph>> graph =
        std::make_unique<SplitGraph<ops::detail::CudaGraph>>();
#endif
  };

  //! Forgets every recording (and stops counting frees).
  void drop_all() {
    entries_.clear();
    current_ = nullptr;
    watch_.reset();
  }

  bool requested_ = false;
  std::map<StepGraphKey, Entry> entries_;
  std::unique_ptr<DeviceFrees::FreeWatch> watch_;  //!< while a recording exists
  const Entry* current_ = nullptr;                 //!< the last step's (entries_ holds it)
  std::size_t recordings_ = 0, replays_ = 0;
};

}  // namespace detail
}  // namespace kdist
