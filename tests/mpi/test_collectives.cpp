// kdist-mpi-ranks: 1 2 4 8
// kdist/parallel/collectives.hpp against serial references: every collective and reduction, in place,
// through a host copy (the path of device memory), over raw MPI_Comm, kdist::mpi::Communicator and
// mesh axes; every error. At 8 ranks on 2 cores each collective costs ~50-90 ms: tests keep their
// count small.
#include <gtest/gtest.h>
#include <mpi.h>
#include "count_allocations.hpp"
#include "mpi_test_util.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <climits>
#include <complex>
#include <cstdint>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mesh_communicators.hpp>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

// The host-side checks read and write Views directly, so their Views are host memory; the
// default space (a GPU's, under Kokkos CUDA) has its own test, DeviceViewsThroughMirrors.
using Space = Kokkos::DefaultHostExecutionSpace;
template <class DataType>
using HostView = Kokkos::View<DataType, Kokkos::LayoutRight, Kokkos::HostSpace>;
using kdist::ReduceOp;

using kdist::test::world_rank;
using kdist::test::world_size;

// The value rank r holds at element i: exact in double, distinct over ranks, not monotonic in r.
double value(int r, std::size_t i) {
  return static_cast<double>((r * 7 + 3) % 11) * 0.5 + static_cast<double>(i);
}

// Serial reference of a reduction over ranks 0..p-1 of value(r, i).
double reference(ReduceOp op, int p, std::size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < p; ++r) {
    const double v = value(r, i);
    acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
  }
  return op == ReduceOp::mean ? acc / p : acc;
}

template <class V>
void fill(const V& v, int r) {
  auto* p = v.data();
  for (std::size_t i = 0; i < v.size(); ++i) {
    p[i] = static_cast<typename V::non_const_value_type>(value(r, i));
  }
}

using kdist::test::contains;
using kdist::test::message_of;

const char* name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
    case ReduceOp::mean:
      return "mean";
  }
  return "?";
}

}  // namespace

TEST(Collectives, AllReduceEveryOpMatchesTheSerialReference) {
  const int p = world_size();
  const int r = world_rank();
  HostView<double**> send("send", 3, 5);
  HostView<double**> recv("recv", 3, 5);
  fill(send, r);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::mean}) {
    kdist::all_reduce(Space(), send, recv, op, MPI_COMM_WORLD);
    for (std::size_t i = 0; i < recv.size(); ++i) {
      ASSERT_DOUBLE_EQ(recv.data()[i], reference(op, p, i)) << name(op) << " element " << i;
    }
    EXPECT_EQ(send(1, 2), value(r, 7)) << "send untouched";
  }
}

TEST(Collectives, AllReduceIntegersAndComplex) {
  const int p = world_size();
  const int r = world_rank();
  // Integer mean is integer division of the sum.
  HostView<std::int64_t*> ints("ints", 4);
  for (int i = 0; i < 4; ++i) {
    ints(i) = r + i;
  }
  kdist::all_reduce(Space(), ints, ReduceOp::mean, kdist::mpi::Communicator::world());
  for (int i = 0; i < 4; ++i) {
    const std::int64_t sum =
        static_cast<std::int64_t>(p) * (p - 1) / 2 + static_cast<std::int64_t>(p) * i;
    EXPECT_EQ(ints(i), sum / p);
  }
  HostView<std::complex<double>*> z("z", 2);
  z(0) = {1.0, static_cast<double>(r)};
  z(1) = {static_cast<double>(r), -1.0};
  kdist::all_reduce(Space(), z, ReduceOp::sum, MPI_COMM_WORLD);
  const double s = p * (p - 1) / 2.0;
  EXPECT_EQ(z(0), std::complex<double>(p, s));
  EXPECT_EQ(z(1), std::complex<double>(s, -p));
}

// MPICH 4.0.2 compares unsigned 64-bit integers as signed in MPI_MIN/MPI_MAX (min(0, 2^64 - 1)
// came out 2^64 - 1): kdist's min and max of them are unsigned, in place, two Views and
// reduce_scatter alike.
TEST(Collectives, UnsignedSixtyFourBitMinAndMaxCompareAsUnsigned) {
  const int p = world_size();
  const int r = world_rank();
  const auto big = std::numeric_limits<std::uint64_t>::max();
  const auto high = std::uint64_t{1} << 63;
  // element 0: 0 on rank 0, the largest value elsewhere; element 1: 1 on rank 0, 2^63 elsewhere
  const auto fill_u = [&](HostView<std::uint64_t*> v) {
    for (std::size_t i = 0; i < v.size(); i += 2) {
      v(i) = r == 0 ? 0 : big;
      v(i + 1) = r == 0 ? 1 : high;
    }
  };
  HostView<std::uint64_t*> lo("lo", 2), hi("hi", 2), out("out", 2);
  fill_u(lo);
  kdist::all_reduce(Space(), lo, ReduceOp::min, MPI_COMM_WORLD);
  EXPECT_EQ(lo(0), 0u);
  EXPECT_EQ(lo(1), 1u);
  fill_u(hi);
  kdist::all_reduce(Space(), hi, out, ReduceOp::max, MPI_COMM_WORLD);
  EXPECT_EQ(out(0), p > 1 ? big : 0u);
  EXPECT_EQ(out(1), p > 1 ? high : 1u);
  HostView<unsigned long long*> send("send", 2 * static_cast<std::size_t>(p)), block("block", 2);
  for (std::size_t i = 0; i < send.size(); i += 2) {
    send(i) = r == 0 ? 0 : big;
    send(i + 1) = r == 0 ? 1 : high;
  }
  kdist::reduce_scatter(Space(), send, block, ReduceOp::min, MPI_COMM_WORLD);
  EXPECT_EQ(block(0), 0u);
  EXPECT_EQ(block(1), 1u);
}

TEST(Collectives, AllReduceInPlaceAndAliased) {
  const int p = world_size();
  HostView<float*> v("v", 6);
  fill(v, world_rank());
  kdist::all_reduce(Space(), v, ReduceOp::mean, MPI_COMM_WORLD);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_FLOAT_EQ(v(i), static_cast<float>(reference(ReduceOp::mean, p, i)));
  }
  // The same View as send and recv runs in place (MPI forbids aliased buffers).
  fill(v, world_rank());
  kdist::all_reduce(Space(), v, v, ReduceOp::max, MPI_COMM_WORLD);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_FLOAT_EQ(v(i), static_cast<float>(reference(ReduceOp::max, p, i)));
  }
}

TEST(Collectives, AllGatherIsRankMajor) {
  const int p = world_size();
  HostView<int*> send("send", 3);
  for (int i = 0; i < 3; ++i) {
    send(i) = 100 * world_rank() + i;
  }
  HostView<int**> recv("recv", p, 3);  // row q from rank q
  kdist::all_gather(Space(), send, recv, MPI_COMM_WORLD);
  for (int q = 0; q < p; ++q) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(recv(q, i), 100 * q + i);
    }
  }
}

TEST(Collectives, ReduceScatterGivesEachRankItsBlock) {
  const int p = world_size();
  const int r = world_rank();
  const std::size_t block = 4;
  HostView<double*> send("send", block * static_cast<std::size_t>(p));
  HostView<double*> recv("recv", block);
  fill(send, r);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    kdist::reduce_scatter(Space(), send, recv, op, MPI_COMM_WORLD);
    for (std::size_t i = 0; i < block; ++i) {
      EXPECT_DOUBLE_EQ(recv(i), reference(op, p, static_cast<std::size_t>(r) * block + i))
          << name(op);
    }
  }
  if (p <= 4) {
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      kdist::reduce_scatter(Space(), send, recv, op, MPI_COMM_WORLD);
      for (std::size_t i = 0; i < block; ++i) {
        EXPECT_DOUBLE_EQ(recv(i), reference(op, p, static_cast<std::size_t>(r) * block + i))
            << name(op);
      }
    }
  }
}

TEST(Collectives, BroadcastFromAnyRoot) {
  const int p = world_size();
  HostView<double***> v("v", 2, 2, 2);
  for (int root : {p - 1, 0}) {
    fill(v, world_rank());
    kdist::broadcast(Space(), v, root, MPI_COMM_WORLD);
    for (std::size_t i = 0; i < v.size(); ++i) {
      EXPECT_EQ(v.data()[i], value(root, i)) << "root " << root;
    }
    if (p > 4) {
      break;
    }
  }
}

TEST(Collectives, AllToAllExchangesBlocks) {
  const int p = world_size();
  const int r = world_rank();
  const int block = 2;
  HostView<int*> send("send", static_cast<std::size_t>(block * p));
  HostView<int*> recv("recv", static_cast<std::size_t>(block * p));
  for (int j = 0; j < p; ++j) {
    for (int k = 0; k < block; ++k) {
      send(j * block + k) = 1000 * r + 10 * j + k;  // block j goes to rank j
    }
  }
  kdist::all_to_all(Space(), send, recv, MPI_COMM_WORLD);
  for (int i = 0; i < p; ++i) {
    for (int k = 0; k < block; ++k) {
      EXPECT_EQ(recv(i * block + k), 1000 * i + 10 * r + k);  // block i came from rank i
    }
  }
}

TEST(Collectives, ThroughAHostCopyAsForDeviceMemory) {
  // The path Views in memory MPI cannot read take (device memory, MPI not GPU-aware), forced on
  // host Views: results must be those of the direct path.
  namespace dc = kdist::detail::collectives;
  const int p = world_size();
  const int r = world_rank();
  const MPI_Comm comm = MPI_COMM_WORLD;
  HostView<double*> send("send", 2 * static_cast<std::size_t>(p));
  HostView<double*> recv("recv", 2 * static_cast<std::size_t>(p));
  fill(send, r);
  // kdist::host_staged_bytes() counts the copies: the send View's in, the result's out
  const std::uint64_t staged = kdist::host_staged_bytes();
  dc::all_reduce<true, true>(Space(), send, recv, ReduceOp::mean, comm, p);
  EXPECT_EQ(kdist::host_staged_bytes() - staged, (send.size() + recv.size()) * sizeof(double));
  for (std::size_t i = 0; i < recv.size(); ++i) {
    EXPECT_DOUBLE_EQ(recv(i), reference(ReduceOp::mean, p, i));
  }
  HostView<double*> inplace("inplace", 3);
  fill(inplace, r);
  const std::uint64_t before_in_place = kdist::host_staged_bytes();
  dc::all_reduce_in_place<true>(Space(), inplace, ReduceOp::sum, comm, p);
  EXPECT_EQ(kdist::host_staged_bytes() - before_in_place, 2 * inplace.size() * sizeof(double));
  EXPECT_DOUBLE_EQ(inplace(2), reference(ReduceOp::sum, p, 2));
  // the direct path on host memory copies nothing
  const std::uint64_t before_direct = kdist::host_staged_bytes();
  kdist::all_reduce(Space(), inplace, ReduceOp::sum, comm);
  EXPECT_EQ(kdist::host_staged_bytes(), before_direct);
  HostView<double*> mine("mine", 2);
  fill(mine, r);
  dc::all_gather<true, true>(Space(), mine, recv, comm);
  for (int q = 0; q < p; ++q) {
    EXPECT_EQ(recv(2 * q + 1), value(q, 1));
  }
  if (p <= 4) {
    HostView<double*> block("block", 2);
    dc::reduce_scatter<true, true>(Space(), send, block, ReduceOp::sum, comm, p);
    EXPECT_DOUBLE_EQ(block(1), reference(ReduceOp::sum, p, 2 * static_cast<std::size_t>(r) + 1));
    fill(mine, r);
    dc::broadcast<true>(Space(), mine, 0, comm, r);
    EXPECT_EQ(mine(1), value(0, 1));
    HostView<double*> out("out", 2 * static_cast<std::size_t>(p));
    dc::all_to_all<true, true>(Space(), send, out, comm, p);
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(out(2 * q), value(q, 2 * static_cast<std::size_t>(r)));
    }
  }
}

// The host copies of staged collectives live in kept host scratch: once the largest has run,
// repeating them allocates nothing (no Kokkos View, no scratch growth), a smaller one reuses the
// buffer, a larger one grows it once, and every result is still right.
TEST(Collectives, HostCopiesAreKeptFromCallToCall) {
  namespace dc = kdist::detail::collectives;
  const int p = world_size();
  const int r = world_rank();
  const auto n = 6000 * static_cast<std::size_t>(p);
  HostView<double*> send("send", n), recv("recv", n);
  const auto run_all = [&](std::size_t m) {  // the first m elements of send and recv
    const auto s = Kokkos::subview(send, std::make_pair(std::size_t{0}, m));
    const auto v = Kokkos::subview(recv, std::make_pair(std::size_t{0}, m));
    fill(send, r);
    dc::all_reduce<true, true>(Space(), s, v, ReduceOp::sum, MPI_COMM_WORLD, p);
    for (std::size_t i = 0; i < m; ++i) EXPECT_DOUBLE_EQ(v(i), reference(ReduceOp::sum, p, i));
    dc::all_reduce_in_place<true>(Space(), s, ReduceOp::max, MPI_COMM_WORLD, p);
    for (std::size_t i = 0; i < m; ++i) EXPECT_DOUBLE_EQ(s(i), reference(ReduceOp::max, p, i));
  };
  run_all(n / 2);
  {
    const kdist::test::CountAllocations count;
    run_all(n / 2);
    run_all(n / 3);
    EXPECT_EQ(count.seen(), "") << "the same size or smaller: nothing allocated";
  }
  {
    const kdist::test::CountAllocations count;
    run_all(n);
    EXPECT_EQ(count.seen(), "host scratch grew x2") << "larger: the two copies grow once each";
  }
  const kdist::test::CountAllocations count;
  run_all(n);
  EXPECT_EQ(count.seen(), "");
}

// Views in the default execution space's memory (device memory under Kokkos CUDA, where kdist
// stages through the host unless MPI is CUDA-aware), written and read only through host mirrors.
TEST(Collectives, DeviceViewsThroughMirrors) {
  using Exec = Kokkos::DefaultExecutionSpace;
  using DeviceView = Kokkos::View<double*, Kokkos::LayoutRight, Exec::memory_space>;
  const int p = world_size();
  const int r = world_rank();
  const auto n = 2 * static_cast<std::size_t>(p);
  DeviceView send("send", n), recv("recv", n);
  auto host_send = Kokkos::create_mirror_view(send);
  fill(host_send, r);
  Kokkos::deep_copy(send, host_send);

  kdist::all_reduce(Exec(), send, recv, ReduceOp::sum, MPI_COMM_WORLD);
  auto got = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), recv);
  for (std::size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(got(i), reference(ReduceOp::sum, p, i));

  DeviceView mine("mine", 2);
  Kokkos::deep_copy(mine, Kokkos::subview(send, std::make_pair(0, 2)));
  kdist::all_gather(Exec(), mine, recv, MPI_COMM_WORLD);
  Kokkos::deep_copy(got, recv);
  for (int q = 0; q < p; ++q) EXPECT_EQ(got(2 * static_cast<std::size_t>(q) + 1), value(q, 1));

  kdist::broadcast(Exec(), send, 0, MPI_COMM_WORLD);
  Kokkos::deep_copy(got, send);
  EXPECT_EQ(got(1), value(0, 1));

  // Again: the host copies (where MPI cannot read device memory) are kept, nothing is allocated.
  fill(host_send, r);  // the broadcast overwrote send (and host_send, the same View on a CPU)
  Kokkos::deep_copy(send, host_send);
  {
    const kdist::test::CountAllocations count;
    kdist::all_reduce(Exec(), send, recv, ReduceOp::sum, MPI_COMM_WORLD);
    kdist::all_gather(Exec(), mine, recv, MPI_COMM_WORLD);
    kdist::all_reduce(Exec(), send, recv, ReduceOp::sum, MPI_COMM_WORLD);
    EXPECT_EQ(count.seen(), "");
  }
  Kokkos::deep_copy(got, recv);
  for (std::size_t i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(got(i), reference(ReduceOp::sum, p, i));
}

TEST(Collectives, OverMeshAxes) {
  const int p = world_size();
  if (p < 4) {
    GTEST_SKIP() << "needs 4 ranks";
  }
  kdist::MeshCommunicators mesh({2, p / 2}, {"data", "model"});
  // Sum of world ranks over the "model" axis: the ranks of one row of the mesh.
  HostView<int*> v("v", 1);
  v(0) = world_rank();
  kdist::all_reduce(Space(), v, ReduceOp::sum, mesh.comm("model"));
  const int q = p / 2;
  const int row = mesh.coords()[0];
  EXPECT_EQ(v(0), row * q * q + q * (q - 1) / 2);
}

TEST(Collectives, ZeroSizedViews) {
  HostView<double*> empty("empty", 0);
  HostView<double*> also("also", 0);
  EXPECT_NO_THROW(kdist::all_reduce(Space(), empty, also, ReduceOp::sum, MPI_COMM_WORLD));
  EXPECT_NO_THROW(kdist::all_gather(Space(), empty, also, MPI_COMM_WORLD));
}

TEST(Collectives, ProfilingRegions) {
  static std::vector<std::string> regions;
  static int pops = 0;
  regions.clear();
  pops = 0;
  Kokkos::Tools::Experimental::set_push_region_callback(
      [](const char* n) { regions.emplace_back(n); });
  Kokkos::Tools::Experimental::set_pop_region_callback([] { ++pops; });
  const int p = world_size();
  HostView<double*> a("a", static_cast<std::size_t>(p));
  HostView<double*> b("b", static_cast<std::size_t>(p));
  HostView<double*> one("one", 1);
  kdist::all_reduce(Space(), a, b, ReduceOp::sum, MPI_COMM_WORLD);
  kdist::all_reduce(Space(), a, ReduceOp::sum, MPI_COMM_WORLD);
  kdist::all_gather(Space(), one, a, MPI_COMM_WORLD);
  kdist::reduce_scatter(Space(), a, one, ReduceOp::sum, MPI_COMM_WORLD);
  kdist::broadcast(Space(), a, 0, MPI_COMM_WORLD);
  kdist::all_to_all(Space(), a, b, MPI_COMM_WORLD);
  // An error still closes its region.
  HostView<double*> longer("longer", static_cast<std::size_t>(p) + 1);
  EXPECT_THROW(kdist::all_reduce(Space(), a, longer, ReduceOp::sum, MPI_COMM_WORLD),
               kdist::ValueError);
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  Kokkos::Tools::Experimental::set_pop_region_callback(nullptr);
  const std::vector<std::string> expected = {
      "kdist::all_reduce", "kdist::all_reduce", "kdist::all_gather", "kdist::reduce_scatter",
      "kdist::broadcast",  "kdist::all_to_all", "kdist::all_reduce"};
  EXPECT_EQ(regions, expected);
  EXPECT_EQ(pops, 7);
}

// ---- errors: local checks, before any communication ------------------------------------------

TEST(CollectiveErrors, SizeMismatchesNameTheSizes) {
  const int p = world_size();
  HostView<double*> five("five", 5);
  HostView<double*> four("four", 4);
  auto m = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), five, four, ReduceOp::sum, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::all_reduce: send has 5 elements but recv has 4")) << m;

  HostView<double*> gathered("gathered", 5 * static_cast<std::size_t>(p) + 1);
  m = message_of<kdist::ValueError>(
      [&] { kdist::all_gather(Space(), five, gathered, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::all_gather: recv has " + std::to_string(5 * p + 1) +
                              " elements but must have send.size() * communicator size = 5 * " +
                              std::to_string(p) + " = " + std::to_string(5 * p)))
      << m;

  m = message_of<kdist::ValueError>(
      [&] { kdist::reduce_scatter(Space(), gathered, five, ReduceOp::sum, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::reduce_scatter: send has " + std::to_string(5 * p + 1) +
                              " elements but must have recv.size() * communicator size = 5 * " +
                              std::to_string(p)))
      << m;

  m = message_of<kdist::ValueError>(
      [&] { kdist::all_to_all(Space(), five, four, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "kdist::all_to_all: send has 5 elements but recv has 4")) << m;
  if (p > 1) {
    HostView<double*> odd("odd", static_cast<std::size_t>(p) + 1);
    HostView<double*> odd2("odd2", static_cast<std::size_t>(p) + 1);
    m = message_of<kdist::ValueError>(
        [&] { kdist::all_to_all(Space(), odd, odd2, MPI_COMM_WORLD); });
    EXPECT_TRUE(contains(m, "do not split into " + std::to_string(p) + " equal blocks")) << m;
  }
}

TEST(CollectiveErrors, BroadcastRootOutsideTheCommunicator) {
  const int p = world_size();
  HostView<double*> v("v", 2);
  for (int root : {-1, p}) {
    const auto m =
        message_of<kdist::ValueError>([&] { kdist::broadcast(Space(), v, root, MPI_COMM_WORLD); });
    EXPECT_TRUE(contains(m, "kdist::broadcast: root " + std::to_string(root) + " is not a rank"))
        << m;
  }
}

TEST(CollectiveErrors, NonContiguousViews) {
  HostView<double**> m2("matrix", 4, 4);
  auto column = Kokkos::subview(m2, Kokkos::ALL, 1);  // stride 4
  HostView<double*> four("four", 4);
  auto m = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), column, four, ReduceOp::sum, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "the send View (\"matrix\") is not contiguous")) << m;
  m = message_of<kdist::ValueError>([&] { kdist::broadcast(Space(), column, 0, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "is not contiguous")) << m;
  m = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), column, ReduceOp::sum, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "is not contiguous")) << m;
  // A contiguous subview is fine.
  auto row = Kokkos::subview(m2, 1, Kokkos::ALL);
  EXPECT_NO_THROW(kdist::all_reduce(Space(), row, four, ReduceOp::sum, MPI_COMM_WORLD));
}

TEST(CollectiveErrors, MaxOfComplexIsAValueError) {
  HostView<std::complex<float>*> z("z", 2);
  const auto m = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), z, ReduceOp::max, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(m, "ReduceOp::max is not defined for complex values")) << m;
}

TEST(CollectiveErrors, CountsBeyondMpisIntAndUnknownOps) {
  namespace dc = kdist::detail::collectives;
  const auto big = static_cast<std::size_t>(INT_MAX) + 1;
  const auto m =
      message_of<kdist::ValueError>([&] { (void)dc::to_count(big, "kdist::all_gather"); });
  EXPECT_TRUE(contains(m, "kdist::all_gather: " + std::to_string(big) +
                              " elements per message is more than MPI's int count allows"))
      << m;
  EXPECT_EQ(dc::to_count(static_cast<std::size_t>(INT_MAX), "x"), INT_MAX);
  HostView<double*> v("v", 1);
  const auto u = message_of<kdist::ValueError>(
      [&] { kdist::all_reduce(Space(), v, static_cast<ReduceOp>(42), MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(u, "unknown ReduceOp 42")) << u;
}
