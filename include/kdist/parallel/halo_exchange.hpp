#pragma once
//! \file parallel/halo_exchange.hpp
//! Halo exchange along one dimension of a field split in blocks over the processes of a
//! communicator (process r of it holds block r, kdist/core/halo_plan.hpp), by non-blocking
//! point-to-point messages:
//! - `kdist::start_halo_gather(space, plan, block, extended, comm)` fills `extended` with the
//!   range this process wants (its block, its neighbours' edges, zeros or periodic images beyond
//!   the field) and returns a `kdist::HaloRequest`; work done before `request.wait()` overlaps the
//!   messages. `kdist::halo_gather(...)` is start + wait.
//! - `kdist::halo_scatter_add(space, plan, extended, block, comm)` is its adjoint (the backward
//!   pass of a gather): `block` becomes the sum of the positions of every process's `extended`
//!   that stand for it (its own, the halos its neighbours read, the periodic images), zeros dropped;
//!   `kdist::start_halo_scatter_add` returns its request (work before wait() overlaps it).
//!
//! Views: contiguous LayoutRight of any rank; `dim` (the plan's dimension) is the split one, the
//! other extents equal in `block` and `extended`. Each is seen as (outer, extent of dim, inner),
//! so a run of positions is a strided slab packed into one contiguous message. Messages go from the
//! Views' memory when MPI can read it, else through host copies (as kdist's collectives). A halo
//! message that does not arrive within the collective timeout (kdist::set_collective_timeout,
//! KDIST_COLLECTIVE_TIMEOUT) ends the job, naming the dimension and the processes not heard from.
//! One exchange at a time per communicator. The forms taking a `const mpi::Communicator*` (nullptr:
//! a plan of one block, padding only) also take a `kdist::HaloMessages*` that keeps the message
//! buffers from call to call (kdist/nn/layers/spatial_halos.hpp passes one per dimension).

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/core/halo_plan.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/detail/collectives_staging.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <kdist/parallel/world.hpp>

namespace kdist {

namespace detail::halo {

inline constexpr int tag_base = 0x4a10;  // apart from the watchdog's

template <class V>
using scalar_t = std::remove_const_t<typename V::value_type>;
template <class V>
using Slabs = Kokkos::View<scalar_t<V>***, Kokkos::LayoutRight, typename V::memory_space,
                           Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class V>
using Packed = Kokkos::View<scalar_t<V>***, Kokkos::LayoutRight, typename V::memory_space>;

//! A contiguous LayoutRight View as (outer, extent of dim, inner).
template <class V>
Slabs<V> as_slabs(const V& v, std::size_t dim, const char* who, const char* what) {
  static_assert(
      Kokkos::is_view<V>::value && std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>,
      "kdist halo exchange: give LayoutRight Kokkos Views");
  if (dim >= V::rank) {
    throw ValueError(std::string(who) + ": dimension " + std::to_string(dim) + " of a rank-" +
                     std::to_string(V::rank) + " View");
  }
  if (!v.span_is_contiguous()) {
    throw ValueError(std::string(who) + ": " + what + " is not contiguous; give packed Views");
  }
  std::size_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < dim; ++d) outer *= v.extent(d);
  for (std::size_t d = dim + 1; d < V::rank; ++d) inner *= v.extent(d);
  return Slabs<V>(const_cast<scalar_t<V>*>(v.data()), outer, v.extent(dim), inner);
}

template <class S>
auto slab(const S& s, std::int64_t from, std::int64_t length) {
  // An empty View (no rows along the other axes: a coarse level of a U-Net on more processes than
  // rows) may have no memory; Kokkos would offset its null pointer. Any slab of it is empty.
  if (s.size() == 0) from = 0;
  return Kokkos::subview(
      s, Kokkos::ALL, Kokkos::pair<std::int64_t, std::int64_t>(from, from + length), Kokkos::ALL);
}

// Slabs are (outer, length, inner) Views whose innermost extent is contiguous: each kernel below
// runs over (outer, length) with a unit-stride loop over inner (Kokkos 3.4's deep_copy of strided
// Views indexes every element, and was most of an exchange's time).
//! Calls f(a, b) for every row (a, b) of an (outer, length, inner) View, on `space`.
template <class Space, class V, class F>
void for_each_row(const char* name, const Space& space, const V& v, const F& f) {
  // An empty slab (a block with no rows along an axis after `dim`: a coarse level of a U-Net on
  // more processes than rows) has rows of no elements: `&v(a, b, 0)` would bind a reference past
  // its end (UBSan's "reference binding to null pointer").
  if (v.size() == 0) return;
  const auto length = static_cast<std::int64_t>(v.extent(1));
  Kokkos::parallel_for(
      name,
      Kokkos::RangePolicy<Space, Kokkos::IndexType<std::int64_t>>(
          space, 0, static_cast<std::int64_t>(v.extent(0) * v.extent(1))),
      KOKKOS_LAMBDA(std::int64_t row) { f(row / length, row % length); });
}

//! to = from, two (outer, length, inner) Views of one memory space.
template <class Space, class To, class From>
void copy_into(const Space& space, const To& to, const From& from) {
  const auto inner = static_cast<std::int64_t>(to.extent(2));
  for_each_row(
      "kdist::halo/copy", space, to, KOKKOS_LAMBDA(std::int64_t a, std::int64_t b) {
        auto* t = &to(a, b, 0);  // inner is contiguous in both: a loop the compiler vectorises
        const auto* f = &from(a, b, 0);
        for (std::int64_t c = 0; c < inner; ++c) t[c] = f[c];
      });
}

//! to += from, two (outer, length, inner) Views of one memory space.
template <class Space, class To, class From>
void add_into(const Space& space, const To& to, const From& from) {
  const auto inner = static_cast<std::int64_t>(to.extent(2));
  for_each_row(
      "kdist::halo/add", space, to, KOKKOS_LAMBDA(std::int64_t a, std::int64_t b) {
        auto* t = &to(a, b, 0);
        const auto* f = &from(a, b, 0);
        for (std::int64_t c = 0; c < inner; ++c) t[c] += f[c];
      });
}

//! Zeros in an (outer, length, inner) View.
template <class Space, class To>
void zero(const Space& space, const To& to) {
  using T = typename To::non_const_value_type;
  const auto inner = static_cast<std::int64_t>(to.extent(2));
  for_each_row(
      "kdist::halo/zeros", space, to, KOKKOS_LAMBDA(std::int64_t a, std::int64_t b) {
        auto* t = &to(a, b, 0);
        for (std::int64_t c = 0; c < inner; ++c) t[c] = T(0);
      });
}

//! The two Views' extents agree but along `dim`, where `block` has the plan's block and
//! `extended` its wanted range.
template <class B, class E>
void check_extents(const char* who, const HaloPlan& plan, std::size_t dim, const B& block,
                   const E& extended) {
  static_assert(std::is_same_v<scalar_t<B>, scalar_t<E>> && B::rank == E::rank,
                "kdist halo exchange: the block and the extended View have the same rank and "
                "scalar type");
  for (std::size_t d = 0; d < B::rank; ++d) {
    const std::size_t want_b = d == dim ? plan.block().extent : extended.extent(d);
    const std::size_t want_e = d == dim ? plan.wanted().size() : block.extent(d);
    if (block.extent(d) != want_b || extended.extent(d) != want_e) {
      throw ValueError(std::string(who) + ": along dimension " + std::to_string(d) +
                       " the block has " + std::to_string(block.extent(d)) +
                       " and the extended View " + std::to_string(extended.extent(d)) +
                       " positions; expected " + std::to_string(want_b) + " and " +
                       std::to_string(want_e) +
                       " (the plan's block and wanted range along the exchanged dimension, "
                       "equal elsewhere)");
    }
  }
}

inline void check_comm(const char* who, const HaloPlan& plan, const mpi::Communicator* c) {
  if (c == nullptr) {
    if (plan.parts() == 1) return;
    throw ValueError(std::string(who) + ": a plan of " + std::to_string(plan.parts()) +
                     " blocks exchanges messages; give the communicator whose process r holds "
                     "block r");
  }
  const auto& comm = *c;
  if (static_cast<std::size_t>(comm.size()) != plan.parts() ||
      static_cast<std::size_t>(comm.rank()) != plan.me()) {
    throw ValueError(std::string(who) + ": the plan is for block " + std::to_string(plan.me()) +
                     " of " + std::to_string(plan.parts()) + " but this is process " +
                     std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                     " of the communicator; process r of it holds block r");
  }
}

}  // namespace detail::halo

//! The message buffers of an exchange (packed slabs, and their host copies when MPI cannot read
//! the Views' memory), kept from one exchange to the next so that a training step allocates them
//! once: pass the same HaloMessages to the same kind of exchange with the same plan. Not shared
//! by two exchanges in flight.
template <class View>
class HaloMessages {
 public:
  using Buffer = detail::halo::Packed<View>;
  using Host = typename Buffer::HostMirror;

  HaloMessages() = default;
  //! A copy starts empty (a copied layer keeps buffers of its own); moves take the buffers.
  HaloMessages(const HaloMessages&) {}
  HaloMessages& operator=(const HaloMessages&) {
    receives_.clear();
    sends_.clear();
    return *this;
  }
  HaloMessages(HaloMessages&&) noexcept = default;
  HaloMessages& operator=(HaloMessages&&) noexcept = default;

  //! Message `k` of the receives (`receive`) or sends, of (outer, length, inner) elements.
  std::pair<Buffer, Host> get(bool receive, std::size_t k, std::size_t outer, std::size_t length,
                              std::size_t inner, bool stage) {
    auto& list = receive ? receives_ : sends_;
    if (list.size() <= k) list.resize(k + 1);
    auto& [buffer, host] = list[k];
    if (buffer.extent(0) != outer || buffer.extent(1) != length || buffer.extent(2) != inner ||
        buffer.data() == nullptr) {
      buffer = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::halo/message"), outer,
                      length, inner);
      host = Host();
    }
    if (stage && host.data() == nullptr) host = Kokkos::create_mirror_view(buffer);
    return {buffer, host};
  }

 private:
  std::vector<std::pair<Buffer, Host>> receives_, sends_;
};

//! A started halo exchange (kdist::start_halo_gather). Move-only; a request still running when it
//! is destroyed is waited for.
class HaloRequest {
 public:
  HaloRequest() = default;
  HaloRequest(const HaloRequest&) = delete;
  HaloRequest& operator=(const HaloRequest&) = delete;
  HaloRequest(HaloRequest&&) noexcept = default;
  HaloRequest& operator=(HaloRequest&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~HaloRequest() { finish_quietly(); }

  [[nodiscard]] bool active() const noexcept { return state_ != nullptr; }

  //! Completes the exchange: on return the extended View holds every position. Past the
  //! collective timeout the job ends. Errors: kdist::RuntimeError when MPI fails.
  void wait() {
    if (!state_) return;
    auto state = std::move(state_);
    state->wait_all();
    state->finish();
  }

  //! (kdist internals) The pieces of an exchange: its MPI requests and what to do once they are
  //! complete.
  struct State {
    virtual ~State() = default;
    std::vector<MPI_Request> requests;
    std::vector<int> peers;  // the process each request talks to
    MPI_Comm comm = MPI_COMM_NULL;
    std::string what;  // names the exchange in a timeout
    virtual void finish() = 0;

    void wait_all() {
      if (requests.empty()) return;
      const std::int64_t timeout = detail::watchdog::timeout_ns();
      const auto n = static_cast<int>(requests.size());
      if (timeout == 0) {
        mpi::detail::check_mpi(MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE), what.c_str());
        return;
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
      for (unsigned i = 1;; ++i) {
        int done = 0;
        mpi::detail::check_mpi(MPI_Testall(n, requests.data(), &done, MPI_STATUSES_IGNORE),
                               what.c_str());
        if (done) return;
        if ((i & 255U) == 0 && std::chrono::steady_clock::now() >= deadline) [[unlikely]] {
          on_timeout(timeout);
        }
      }
    }

    [[noreturn]] void on_timeout(std::int64_t timeout) {
      std::vector<int> missing;
      for (std::size_t k = 0; k < requests.size(); ++k) {
        int done = 0;
        MPI_Test(&requests[k], &done, MPI_STATUS_IGNORE);
        if (!done && (missing.empty() || missing.back() != peers[k])) missing.push_back(peers[k]);
      }
      std::string list;
      for (int p : missing) list += (list.empty() ? "" : ", ") + std::to_string(p);
      detail::failure::abort_job(
          what + " on " + detail::watchdog::describe(comm) + " did not complete within " +
          detail::watchdog::seconds_text(timeout) + ", " + current_step_description() +
          ": no message from or to process(es) " + list +
          " of it (its neighbours). The timeout is KDIST_COLLECTIVE_TIMEOUT (seconds; 0 or off: "
          "no timeout) or kdist::set_collective_timeout");
    }
  };

  explicit HaloRequest(std::unique_ptr<State> state) : state_(std::move(state)) {}

 private:
  void finish_quietly() noexcept {
    if (!state_) return;
    try {
      wait();
    } catch (...) {
      std::terminate();  // MPI failed under an exchange whose buffers are about to go
    }
  }
  std::unique_ptr<State> state_;
};

namespace detail::halo {

//! Messages of one exchange: packed slabs in the Views' memory, with host copies when MPI cannot
//! read it. `Receive`: runs that land in this process's View.
template <class V>
struct Exchange : HaloRequest::State {
  using Buffer = Packed<V>;
  using Host = typename Buffer::HostMirror;
  struct Message {
    Buffer buffer;
    Host host;
    std::int64_t at = 0;  // where the run goes in the receiving View (slab position)
  };
  std::vector<Message> receives, sends;
  bool stage = false;

  HaloMessages<V>* kept = nullptr;  // buffers kept from call to call, when given

  Message& add_message(std::vector<Message>& list, std::size_t outer, std::int64_t length,
                       std::size_t inner, std::int64_t at) {
    Message m;
    const auto n = static_cast<std::size_t>(length);
    if (kept != nullptr) {
      std::tie(m.buffer, m.host) =
          kept->get(&list == &receives, list.size(), outer, n, inner, stage);
    } else {
      m.buffer = Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::halo/message"),
                        outer, n, inner);
      if (stage) m.host = Kokkos::create_mirror_view(m.buffer);
    }
    m.at = at;
    list.push_back(std::move(m));
    return list.back();
  }
  void* address(Message& m) { return stage ? m.host.data() : m.buffer.data(); }
  //! A received message's host copy back into its buffer (staging).
  void unstage(Message& m) {
    Kokkos::deep_copy(m.buffer, m.host);
    count_staged(m);
  }
  static void count_staged(const Message& m) {
    detail::staged_bytes_counter().fetch_add(m.buffer.span() * sizeof(scalar_t<V>),
                                             std::memory_order_relaxed);
  }

  //! Posts the receives first, then packs (fenced) and posts the sends.
  template <class Space, class Pack>
  void post(const Space& space, const std::vector<int>& from, const std::vector<int>& from_tags,
            const std::vector<int>& to, const std::vector<int>& to_tags, Pack&& pack) {
    const MPI_Datatype type = mpi::datatype<scalar_t<V>>();
    for (std::size_t k = 0; k < receives.size(); ++k) {
      requests.push_back(MPI_REQUEST_NULL);
      peers.push_back(from[k]);
      mpi::detail::check_mpi(
          MPI_Irecv(address(receives[k]), static_cast<int>(receives[k].buffer.size()), type,
                    from[k], tag_base + from_tags[k], comm, &requests.back()),
          "kdist halo exchange: MPI_Irecv");
    }
    for (std::size_t k = 0; k < sends.size(); ++k) pack(k, sends[k].buffer);
    space.fence();
    for (std::size_t k = 0; k < sends.size(); ++k) {
      if (stage) {
        Kokkos::deep_copy(sends[k].host, sends[k].buffer);
        count_staged(sends[k]);
      }
      requests.push_back(MPI_REQUEST_NULL);
      peers.push_back(to[k]);
      mpi::detail::check_mpi(MPI_Isend(address(sends[k]), static_cast<int>(sends[k].buffer.size()),
                                       type, to[k], tag_base + to_tags[k], comm, &requests.back()),
                             "kdist halo exchange: MPI_Isend");
    }
  }
};

template <class Space, class V>
struct Gather final : Exchange<V> {
  Space space;
  Slabs<V> extended;
  void finish() override {
    for (auto& m : this->receives) {
      if (this->stage) this->unstage(m);
      copy_into(space, slab(extended, m.at, static_cast<std::int64_t>(m.buffer.extent(1))),
                m.buffer);
    }
    space.fence();
  }
};

template <class Space, class V>
struct ScatterAdd final : Exchange<V> {
  Space space;
  Slabs<V> block;
  void finish() override {
    for (auto& m : this->receives) {
      if (this->stage) this->unstage(m);
      add_into(space, slab(block, m.at, static_cast<std::int64_t>(m.buffer.extent(1))), m.buffer);
    }
    space.fence();
  }
};

//! What a gather and a scatter_add set up alike: the space, the communicator (none for one
//! block), the name a timeout gives, the staging through host copies and the kept buffers.
template <class State, class Space, class V>
void set_up(State& state, const Space& space, const mpi::Communicator* comm, const char* name,
            std::size_t dim, HaloMessages<V>* kept) {
  state.space = space;
  state.comm = comm != nullptr ? comm->get() : MPI_COMM_NULL;
  state.what = std::string(name) + " along dimension " + std::to_string(dim);
  state.stage = detail::collectives::must_stage<V>();
  state.kept = kept;
}

}  // namespace detail::halo

//! Starts filling `extended` (the plan's wanted range along dimension `dim`) from the blocks of
//! the processes of `comm` (process r holds block r; `block` is this one's, the plan's block
//! along `dim`): own positions and zeros at once, the others when the returned request's wait()
//! returns. `block` must not be written and `extended` not read before then.
//! Errors (before any message): kdist::ValueError for extents that do not match the plan, a plan
//! for another process or communicator size, non-contiguous Views.
template <class Space, class BlockView, class ExtendedView>
[[nodiscard]] HaloRequest start_halo_gather(const Space& space, const HaloPlan& plan,
                                            std::size_t dim, const BlockView& block,
                                            const ExtendedView& extended,
                                            const mpi::Communicator* comm,
                                            HaloMessages<ExtendedView>* kept = nullptr) {
  constexpr const char* who = "kdist::start_halo_gather";
  detail::require_started(who);
  using namespace detail::halo;
  const auto from = as_slabs(block, dim, who, "the block");
  const auto to = as_slabs(extended, dim, who, "the extended View");
  check_extents(who, plan, dim, block, extended);
  check_comm(who, plan, comm);
  auto state = std::make_unique<Gather<Space, ExtendedView>>();
  state->extended = to;
  set_up(*state, space, comm, "kdist::halo_gather", dim, kept);
  std::vector<int> from_peers, from_tags, to_peers, to_tags;
  const auto& segments = plan.segments();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    if (s.owner < 0) {
      zero(space, slab(to, s.at, s.length));
    } else if (static_cast<std::size_t>(s.owner) == plan.me()) {
      copy_into(space, slab(to, s.at, s.length), slab(from, s.from, s.length));
    } else {
      state->add_message(state->receives, to.extent(0), s.length, to.extent(2), s.at);
      from_peers.push_back(s.owner);
      from_tags.push_back(plan.receive_tag(i));
    }
  }
  for (const auto& s : plan.sends()) {
    state->add_message(state->sends, from.extent(0), s.length, from.extent(2), s.from);
    to_peers.push_back(s.peer);
    to_tags.push_back(s.tag);
  }
  state->post(space, from_peers, from_tags, to_peers, to_tags, [&](std::size_t k, auto& buffer) {
    copy_into(space, buffer, slab(from, plan.sends()[k].from, plan.sends()[k].length));
  });
  return HaloRequest(std::move(state));
}

template <class Space, class BlockView, class ExtendedView>
[[nodiscard]] HaloRequest start_halo_gather(const Space& space, const HaloPlan& plan,
                                            std::size_t dim, const BlockView& block,
                                            const ExtendedView& extended,
                                            const mpi::Communicator& comm) {
  return start_halo_gather(space, plan, dim, block, extended, &comm);
}

//! start_halo_gather, then wait. Without a communicator: a plan of one block (padding only).
template <class Space, class BlockView, class ExtendedView>
void halo_gather(const Space& space, const HaloPlan& plan, std::size_t dim, const BlockView& block,
                 const ExtendedView& extended, const mpi::Communicator& comm) {
  start_halo_gather(space, plan, dim, block, extended, &comm).wait();
}
template <class Space, class BlockView, class ExtendedView>
void halo_gather(const Space& space, const HaloPlan& plan, std::size_t dim, const BlockView& block,
                 const ExtendedView& extended) {
  start_halo_gather(space, plan, dim, block, extended, nullptr).wait();
}

//! The adjoint of halo_gather: `block` (overwritten) becomes the sum, over every process's
//! `extended` (the plan's wanted ranges), of the positions that stand for it; positions of zeros
//! are dropped. Errors: as start_halo_gather.
template <class Space, class ExtendedView, class BlockView>
[[nodiscard]] HaloRequest start_halo_scatter_add(const Space& space, const HaloPlan& plan,
                                                 std::size_t dim, const ExtendedView& extended,
                                                 const BlockView& block,
                                                 const mpi::Communicator* comm,
                                                 HaloMessages<BlockView>* kept = nullptr) {
  constexpr const char* who = "kdist::halo_scatter_add";
  detail::require_started(who);
  using namespace detail::halo;
  const auto from = as_slabs(extended, dim, who, "the extended View");
  const auto to = as_slabs(block, dim, who, "the block");
  check_extents(who, plan, dim, block, extended);
  check_comm(who, plan, comm);
  auto state = std::make_unique<ScatterAdd<Space, BlockView>>();
  state->block = to;
  set_up(*state, space, comm, "kdist::halo_scatter_add", dim, kept);
  zero(space, to);
  // The runs this process wanted go back to their owners (the gather's receives become sends,
  // with the same tags); what the others wanted of this block comes back to be added.
  std::vector<int> from_peers, from_tags, to_peers, to_tags;
  std::vector<std::int64_t> send_at;
  const auto& segments = plan.segments();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    if (s.owner < 0) continue;
    if (static_cast<std::size_t>(s.owner) == plan.me()) {
      add_into(space, slab(to, s.from, s.length), slab(from, s.at, s.length));
    } else {
      state->add_message(state->sends, from.extent(0), s.length, from.extent(2), s.at);
      to_peers.push_back(s.owner);
      to_tags.push_back(plan.receive_tag(i));
      send_at.push_back(s.at);
    }
  }
  for (const auto& s : plan.sends()) {
    state->add_message(state->receives, to.extent(0), s.length, to.extent(2), s.from);
    from_peers.push_back(s.peer);
    from_tags.push_back(s.tag);
  }
  state->post(space, from_peers, from_tags, to_peers, to_tags, [&](std::size_t k, auto& buffer) {
    copy_into(space, buffer, slab(from, send_at[k], static_cast<std::int64_t>(buffer.extent(1))));
  });
  return HaloRequest(std::move(state));
}

//! Starts halo_scatter_add: this process's own positions are added at once, the others' when the
//! returned request's wait() returns; `extended` must not be written and `block` not read before.
template <class Space, class ExtendedView, class BlockView>
[[nodiscard]] HaloRequest start_halo_scatter_add(const Space& space, const HaloPlan& plan,
                                                 std::size_t dim, const ExtendedView& extended,
                                                 const BlockView& block,
                                                 const mpi::Communicator& comm) {
  return start_halo_scatter_add(space, plan, dim, extended, block, &comm);
}

//! start_halo_scatter_add, then wait. Without a communicator: a plan of one block.
template <class Space, class ExtendedView, class BlockView>
void halo_scatter_add(const Space& space, const HaloPlan& plan, std::size_t dim,
                      const ExtendedView& extended, const BlockView& block,
                      const mpi::Communicator& comm) {
  start_halo_scatter_add(space, plan, dim, extended, block, &comm).wait();
}
template <class Space, class ExtendedView, class BlockView>
void halo_scatter_add(const Space& space, const HaloPlan& plan, std::size_t dim,
                      const ExtendedView& extended, const BlockView& block) {
  start_halo_scatter_add(space, plan, dim, extended, block, nullptr).wait();
}

}  // namespace kdist
