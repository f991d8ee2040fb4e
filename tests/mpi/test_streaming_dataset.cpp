// kdist-mpi-ranks: 2 3 4
// kdist/parallel/stream_channel.hpp and kdist/nn/streaming_dataset.hpp: producers stream examples
// to trainers' reservoirs. One-to-one (2 and 4 processes), many-to-one (3) and an ensemble of two
// producer groups (3, 4): every example arrives once and whole (its values say who sent it and
// when), the reservoir never holds more than its capacity, old time steps stay after many new
// ones, a trainer whose producers are ahead does not wait, the end of the streams (every example
// seen `passes` times, then 0 rows and done()); argument errors and bad messages on every process.
#include <gtest/gtest.h>
#include <mpi.h>
#include "mpi_test_util.hpp"

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <kdist/nn/streaming_dataset.hpp>
#include <kdist/parallel/stream_channel.hpp>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using kdist::test::contains;
using kdist::test::message_of;
using kdist::test::world_rank;
using kdist::test::world_size;
using X = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Y = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Labels = Kokkos::View<std::int32_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;

constexpr std::size_t rows = 3, cols = 4, width = 2;

// The snapshot of producer p at time step t: its values encode (p, t) and their position.
std::vector<float> snapshot(int p, std::size_t t) {
  std::vector<float> v(rows * cols);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(p) * 10000.0f + static_cast<float>(t) + static_cast<float>(i) / 16;
  }
  return v;
}
std::vector<float> target_of(int p, std::size_t t) {
  return {static_cast<float>(p), static_cast<float>(t) * 2};
}
// (producer, time step) of a held example, checking that every value is the one sent.
std::pair<int, std::size_t> identify(std::span<const float> x, std::span<const float> y) {
  const int p = static_cast<int>(y[0]);
  const auto t = static_cast<std::size_t>(y[1] / 2);
  EXPECT_EQ(std::vector<float>(x.begin(), x.end()), snapshot(p, t)) << "example " << p << "/" << t;
  return {p, t};
}

// Trainers are ranks 0 .. T-1 (T = 2 at 4 processes, else 1); producer q (rank T + q) feeds
// trainer q % T: one-to-one at 2 and 4 processes, many-to-one at 3.
int trainers() {
  return world_size() >= 4 ? 2 : 1;
}
std::vector<int> producers_of(int trainer) {
  std::vector<int> out;
  for (int r = trainers(); r < world_size(); ++r) {
    if ((r - trainers()) % trainers() == trainer) out.push_back(r);
  }
  return out;
}

TEST(StreamingDataset, EveryExampleArrivesOnceAndWhole) {
  constexpr std::size_t steps = 60, batch = 4, capacity = 128;  // room for every example
  const int me = world_rank();
  if (me >= trainers()) {
    kdist::StreamProducer<float> out(MPI_COMM_WORLD, (me - trainers()) % trainers(), {rows, cols},
                                     width, {.max_in_flight = 3, .tag = 101});
    for (std::size_t t = 0; t < steps; ++t) {
      out.send(snapshot(me, t), target_of(me, t));
      EXPECT_LE(out.in_flight(), 3u);
    }
    EXPECT_EQ(out.sent(), steps);
    out.close();
    EXPECT_EQ(out.in_flight(), 0u);
    EXPECT_TRUE(out.closed());
    return;
  }
  const auto producers = producers_of(me);
  kdist::StreamingDataset<float> data(MPI_COMM_WORLD, producers, {rows, cols}, width,
                                      {.capacity = capacity, .seed = 1, .passes = 2, .tag = 101});
  X x("x", batch, rows, cols);
  Y y("y", batch, width);
  std::size_t rows_filled = 0;
  for (std::size_t n; (n = data.next_batch(x, y)) > 0;) {
    ASSERT_LE(n, batch);
    for (std::size_t i = 0; i < n; ++i) {
      identify({&x(i, 0, 0), rows * cols}, {&y(i, 0), width});
    }
    rows_filled += n;
    EXPECT_LE(data.reservoir().size(), capacity);
  }
  EXPECT_TRUE(data.done());
  EXPECT_EQ(data.next_batch(x, y), 0u);
  const auto& r = data.reservoir();
  std::set<std::pair<int, std::size_t>> held;
  for (std::size_t s = 0; s < r.size(); ++s) {
    EXPECT_TRUE(held.insert(identify(r.example(s), r.target(s))).second) << "twice: slot " << s;
    EXPECT_GE(r.seen(s), 2u);
  }
  EXPECT_EQ(held.size(), producers.size() * steps);  // all of them, once each
  const auto st = data.statistics();
  EXPECT_EQ(st.received, producers.size() * steps);
  EXPECT_EQ(st.evicted, 0u);
  EXPECT_EQ(st.sampled, rows_filled);
  EXPECT_GE(st.seen_min, 2u);
  EXPECT_EQ(st.open_producers, 0u);
  EXPECT_LE(st.waits, 1u);  // before the first batch at most
}

// Two producer groups (two simulations, each on its own MPI_Comm_split communicator) feed trainer
// 0 with 60 steps each into 96 slots; the producers are ahead (the trainer asks after a barrier).
// (The order in which the trainer drains the producers varies from run to run; with 96 slots a
// process drained first keeps about a quarter of its steps through the others' 120 at 4 processes.)
TEST(StreamingDataset, EnsembleKeepsOldStepsAndDoesNotWaitWhenProducersAreAhead) {
  if (world_size() < 3) GTEST_SKIP() << "an ensemble needs 2 producer processes";
  constexpr std::size_t steps = 60, capacity = 96, batch = 8;
  const int me = world_rank();
  const int member = me == 0 ? MPI_UNDEFINED : (me - 1) % 2;  // simulation 0 or 1
  MPI_Comm simulation = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member, me, &simulation);
  if (me > 0) {
    int sim_rank = 0;
    MPI_Comm_rank(simulation, &sim_rank);  // a real code would step its simulation on it
    kdist::StreamProducer<float> out(MPI_COMM_WORLD, 0, {rows, cols}, 0, {.tag = 102});
    for (std::size_t t = 0; t < steps; ++t) out.send(snapshot(me, t), member);
    out.close();
    MPI_Comm_free(&simulation);
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
  std::vector<int> producers;
  for (int r = 1; r < world_size(); ++r) producers.push_back(r);
  kdist::StreamingDataset<float> data(MPI_COMM_WORLD, producers, {rows, cols}, 0,
                                      {.capacity = capacity, .seed = 9, .tag = 102});
  MPI_Barrier(MPI_COMM_WORLD);  // every producer has sent and closed
  X x("x", batch, rows, cols);
  Labels y("y", batch);
  ASSERT_EQ(data.next_batch(x, y), batch);
  const auto st = data.statistics();
  EXPECT_EQ(st.waits, 0u);
  EXPECT_EQ(st.received, producers.size() * steps);
  EXPECT_EQ(st.evicted, producers.size() * steps - capacity);
  EXPECT_EQ(st.size, capacity);
  const auto& r = data.reservoir();
  std::set<std::int32_t> members;
  std::size_t older = 0;
  for (std::size_t s = 0; s < r.size(); ++s) {
    const auto x0 = r.example(s)[0];
    const int p = static_cast<int>(x0 / 10000);
    const auto t = static_cast<std::size_t>(x0 - static_cast<float>(p) * 10000);
    EXPECT_EQ(std::vector<float>(r.example(s).begin(), r.example(s).end()), snapshot(p, t));
    EXPECT_EQ(r.label(s), (p - 1) % 2);
    members.insert(r.label(s));
    older += r.arrival(s) < st.received - capacity ? 1 : 0;
  }
  EXPECT_EQ(members.size(), 2u);  // both simulations
  // A FIFO would hold only the last `capacity` arrivals; random eviction keeps many older ones.
  EXPECT_GE(older, 8u);
  while (data.next_batch(x, y) > 0) {
  }
  EXPECT_TRUE(data.done());
  EXPECT_EQ(data.statistics().seen_min, 1u);
}

// Every process is a producer to the next and a trainer of the previous (a ring, tag `tag`).
int next() {
  return (world_rank() + 1) % world_size();
}
int previous() {
  return (world_rank() + world_size() - 1) % world_size();
}

TEST(StreamingDataset, ArgumentErrorsOnEveryProcess) {
  const int me = world_rank();
  const auto comm = MPI_COMM_WORLD;
  using D = kdist::StreamingDataset<float>;
  using P = kdist::StreamProducer<float>;
  const kdist::StreamingOptions ok{.capacity = 8};
  auto dataset_error = [&](std::vector<int> producers, std::vector<std::size_t> shape,
                           kdist::StreamingOptions o) {
    return message_of<kdist::ValueError>([&] { D(comm, producers, shape, 2, o); });
  };
  EXPECT_TRUE(contains(dataset_error({next()}, {3}, {}), "the capacity is 0 examples"));
  EXPECT_TRUE(contains(dataset_error({next()}, {3}, {.capacity = 4, .min_fill = 5}),
                       "min_fill is 5 examples, over the capacity of 4"));
  EXPECT_TRUE(contains(dataset_error({next()}, {3}, {.capacity = 4, .passes = 0}), "passes is 0"));
  EXPECT_TRUE(contains(dataset_error({}, {3}, ok), "no producers"));
  EXPECT_TRUE(contains(dataset_error({me}, {3}, ok),
                       "producer " + std::to_string(me) + " is this process, the trainer"));
  EXPECT_TRUE(
      contains(dataset_error({world_size()}, {3}, ok), "is not a rank of the communicator"));
  EXPECT_TRUE(contains(dataset_error({next(), next()}, {3}, ok), "is listed twice"));
  EXPECT_TRUE(contains(dataset_error({next()}, {}, ok), "give 1 to 8 extents"));
  EXPECT_TRUE(contains(dataset_error({next()}, {3, 0}, ok), "(3, 0) examples"));
  EXPECT_TRUE(contains(dataset_error({next()}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, ok), "1 to 8 extents"));
  EXPECT_TRUE(contains(dataset_error({next()}, {3}, {.capacity = 8, .tag = -1}), "tag -1"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { D(MPI_COMM_NULL, {1}, {3}, 2, ok); }),
                       "MPI_COMM_NULL"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { P(comm, me, {3}, 2); }),
                       "is this process; a process is a producer or a trainer, not both"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { P(comm, -1, {3}, 2); }),
                       "trainer -1 is not a rank of the communicator"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { P(comm, next(), {}, 2); }),
                       "give 1 to 8 extents"));
  EXPECT_TRUE(contains(
      message_of<kdist::ValueError>([&] { P(comm, next(), {3}, 2, {.max_in_flight = 0}); }),
      "max_in_flight is 0"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { P(comm, next(), {3}, 2, {.tag = -5}); }),
                       "tag -5 is not from 0 to"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { P(MPI_COMM_NULL, 0, {3}, 2); }),
                       "MPI_COMM_NULL"));

  // A stream around the ring: the bad sends throw before anything goes; one good example arrives.
  P out(comm, next(), {3}, 2, {.tag = 103});
  const std::vector<float> x3{1, 2, 3}, y2{4, 5};
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { out.send(std::vector<float>{1}, y2); }),
                       "the example has 1 values; the stream's (3) examples with 2 target values "
                       "have 3"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { out.send(x3, std::vector<float>{1}); }),
                       "the target has 1 values"));
  EXPECT_TRUE(
      contains(message_of<kdist::ValueError>([&] { out.send(x3, 1); }), "call send(x, target)"));
  out.send(x3, y2);
  out.close();
  EXPECT_TRUE(
      contains(message_of<kdist::ValueError>([&] { out.send(x3, y2); }), "the stream is closed"));
  EXPECT_TRUE(
      contains(message_of<kdist::ValueError>([&] { out.close(); }), "the stream is closed"));
  P labels(comm, next(), {3}, 0, {.tag = 104});
  EXPECT_TRUE(
      contains(message_of<kdist::ValueError>([&] { labels.send(x3, y2); }), "call send(x, label)"));
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([&] { labels.send(x3, -2); }),
                       "label -2 is negative"));
  labels.close();

  D in(comm, {previous()}, {3}, 2, {.capacity = 4, .tag = 103});
  in.wait_for_end();
  EXPECT_EQ(in.statistics().received, 1u);
  EXPECT_TRUE(in.open_producers().empty());
  D in_labels(comm, {previous()}, {3}, 0, {.capacity = 4, .tag = 104});
  in_labels.wait_for_end();
  EXPECT_EQ(in_labels.statistics().received, 0u);
  EXPECT_EQ(
      in_labels.next_batch(Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>("x", 2, 3),
                           Labels("y", 2)),
      0u);  // an empty stream ends at once
  EXPECT_TRUE(in_labels.done());

  using X1 = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  auto batch_error = [&](auto x, auto y) {
    return message_of<kdist::ValueError>([&] { in.next_batch(x, y); });
  };
  EXPECT_TRUE(contains(batch_error(X1("x", 2, 4), Y("y", 2, 2)),
                       "x is (2, 4); give (batch, then the example shape) for (3) examples"));
  EXPECT_TRUE(contains(batch_error(X("x", 2, 3, 1), Y("y", 2, 2)), "x is (2, 3, 1)"));
  EXPECT_TRUE(contains(batch_error(X1("x", 0, 3), Y("y", 0, 2)), "a batch of 0 examples"));
  EXPECT_TRUE(contains(batch_error(X1("x", 5, 3), Y("y", 5, 2)),
                       "a batch of 5 examples; give 1 to the capacity, 4"));
  EXPECT_TRUE(contains(batch_error(X1("x", 2, 3), Y("y", 2, 3)), "y must be a (2, 2) View of T"));
  EXPECT_TRUE(contains(batch_error(X1("x", 2, 3), Labels("y", 2)), "y must be a (2, 2) View"));
  EXPECT_TRUE(contains(
      message_of<kdist::ValueError>([&] { in_labels.next_batch(X1("x", 2, 3), Y("y", 2, 2)); }),
      "this stream carries integer labels; give y as a View of 2 integers"));
  EXPECT_TRUE(contains(
      message_of<kdist::ValueError>([&] { in_labels.next_batch(X1("x", 2, 3), Labels("y", 3)); }),
      "give y as a View of 2 integers"));
}

// A raw message with a stream header (as StreamProducer<float> writes it) and `extra` bytes.
void forge(int to, int tag, std::int64_t kind, std::int64_t type, std::vector<std::int64_t> shape,
           std::int64_t target_width, std::int64_t sequence, std::size_t values,
           std::size_t extra = 0) {
  namespace s = kdist::detail::stream;
  std::vector<std::int64_t> h(s::header_words);
  h[0] = s::magic;
  h[1] = kind;
  h[2] = type;
  h[3] = target_width;
  h[5] = sequence;
  h[6] = static_cast<std::int64_t>(shape.size());
  for (std::size_t i = 0; i < shape.size() && i < s::max_rank; ++i) h[7 + i] = shape[i];
  std::vector<std::byte> bytes(s::header_bytes + values * sizeof(float) + extra);
  std::memcpy(bytes.data(), h.data(), s::header_bytes);
  MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, to, tag, MPI_COMM_WORLD);
}

TEST(StreamingDataset, BadMessagesOnEveryProcess) {
  namespace s = kdist::detail::stream;
  constexpr auto f32 = s::type_code<float>();
  const std::string from = "producer " + std::to_string(previous());
  std::vector<std::pair<std::string, std::function<void(int)>>> cases = {
      {from + " sends (4) examples with 2 target values; this trainer expects (3) examples with 2 "
              "target values; give StreamProducer and StreamingDataset the same example shape",
       [](int tag) {
         kdist::StreamProducer<float> p(MPI_COMM_WORLD, next(), {4}, 2, {.tag = tag});
         p.send(std::vector<float>(4), std::vector<float>(2));
         p.close();
       }},
      {"(3) examples with integer labels; this trainer expects (3) examples with 2 target",
       [](int tag) {
         kdist::StreamProducer<float> p(MPI_COMM_WORLD, next(), {3}, 0, {.tag = tag});
         p.send(std::vector<float>(3), 0);
         p.close();
       }},
      {from + " sends floating-point values of 8 bytes, this trainer reads floating-point values "
              "of 4 bytes; give StreamProducer<T> and StreamingDataset<T> the same T",
       [](int tag) {
         kdist::StreamProducer<double> p(MPI_COMM_WORLD, next(), {3}, 2, {.tag = tag});
         p.send(std::vector<double>(3), std::vector<double>(2));
         p.close();
       }},
      {"bytes is not a kdist stream message",
       [](int tag) {
         const int junk = 7;
         MPI_Send(&junk, 1, MPI_INT, next(), tag, MPI_COMM_WORLD);
       }},
      {"has 160 bytes; one example of (3) examples with 2 target values takes 140",
       [](int tag) { forge(next(), tag, 1, f32, {3}, 2, 0, 5, 20); }},
      {"is example 5 of its stream; expected 0",
       [](int tag) { forge(next(), tag, 1, f32, {3}, 2, 5, 5); }},
      {"has a header of rank 9",
       [](int tag) {
         forge(next(), tag, 1, f32, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 2, 0, 5);
       }},
      {"came after its producer closed the stream",
       [](int tag) {
         forge(next(), tag, 2, f32, {3}, 2, 0, 0);
         forge(next(), tag, 1, f32, {3}, 2, 0, 5);
       }},
  };
  int tag = 200;
  for (const auto& [expected, send] : cases) {
    ++tag;
    send(tag);
    kdist::StreamingDataset<float> in(MPI_COMM_WORLD, {previous()}, {3}, 2,
                                      {.capacity = 4, .tag = tag});
    std::string error;
    try {
      in.wait_for_end();
      // A message after the end may still be on its way when the end arrives: look for it a while.
      for (const double t0 = MPI_Wtime(); MPI_Wtime() - t0 < 5.0;) in.drain();
    } catch (const kdist::ValueError& e) {
      error = e.what();
    }
    EXPECT_TRUE(contains(error, expected)) << "expected: " << expected << "\ngot: " << error;
    if (tag <= 203) in.wait_for_end();  // the first three cases' producers closed: take the end
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // A message from a process that is not one of the trainer's producers (3 or more processes).
  if (world_size() >= 3) {
    forge((world_rank() + 2) % world_size(), 300, 2, f32, {3}, 2, 0, 0);
    kdist::StreamingDataset<float> in(MPI_COMM_WORLD, {previous()}, {3}, 2,
                                      {.capacity = 4, .tag = 300});
    const auto error = message_of<kdist::ValueError>([&] { in.wait_for_end(); });
    EXPECT_TRUE(
        contains(error, "a message from process " +
                            std::to_string((world_rank() + world_size() - 2) % world_size()) +
                            " (tag 300), which is not one of this trainer's producers (" +
                            std::to_string(previous()) + ")"))
        << error;
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace
