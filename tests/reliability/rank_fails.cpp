// One process fails, the others are in (or about to enter) a collective: the job must end within
// seconds with the failing process' message and a non-zero exit (tests/reliability.cmake).
//   rank_fails collective    process 1 gives all_reduce a recv of another size (a local check)
//   rank_fails redistribute  process 1 asks redistribute for a layout on another mesh
//   rank_fails uncaught      process 1 throws out of a main without kdist::run (terminate handler)
//   rank_fails everyone      every process throws the same error: printed once, exit 2, no abort
//   rank_fails kill          process 1 SIGKILLs itself while the others wait in a collective
#include <csignal>
#include <cstdio>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <string>

namespace {

int fail_on_rank_one(const std::string& mode) {
  const int rank = kdist::process_id();
  const int n = kdist::process_count();
  const auto space = Kokkos::DefaultExecutionSpace();
  if (mode == "collective") {
    Kokkos::View<double*, Kokkos::LayoutRight> send("send", 4), recv("recv", rank == 1 ? 5 : 4);
    kdist::all_reduce(space, send, recv, kdist::ReduceOp::sum, MPI_COMM_WORLD);
  } else if (mode == "redistribute") {
    kdist::RuntimeDeviceMesh mesh({static_cast<std::size_t>(n)}, {"x"},
                                  static_cast<std::size_t>(n));
    auto t = kdist::distribute_tensor<double**>(
        [](std::size_t i, std::size_t j) { return double(i + j); }, {8, 4},
        kdist::RuntimeTensorLayout({kdist::DimAxes("x"), kdist::DimAxes()}, mesh));
    kdist::RuntimeDeviceMesh other({1, static_cast<std::size_t>(n)}, {"a", "b"},
                                   static_cast<std::size_t>(n));
    const kdist::RuntimeTensorLayout target =
        rank == 1 ? kdist::RuntimeTensorLayout({kdist::DimAxes(), kdist::DimAxes("b")}, other)
                  : kdist::RuntimeTensorLayout({kdist::DimAxes(), kdist::DimAxes()}, mesh);
    auto r = kdist::redistribute(t, target);
    (void)r;
  } else if (mode == "everyone") {
    throw kdist::ValueError("every process fails alike");
  } else if (mode == "kill") {
    if (rank == 1) std::raise(SIGKILL);
  } else {
    throw kdist::ValueError("unknown mode " + mode);
  }
  // The healthy processes wait here for the failed one.
  Kokkos::View<double*, Kokkos::LayoutRight> v("v", 1);
  kdist::all_reduce(space, v, kdist::ReduceOp::sum, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  std::printf("process %d: no failure reached this process (mode %s)\n", rank, mode.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "uncaught") {
    kdist::ScopeGuard guard(argc, argv);
    if (kdist::process_id() == 1) throw kdist::RuntimeError("thrown out of main on process 1");
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
  }
  return kdist::run(argc, argv, [&](int, char**) { return fail_on_rank_one(mode); });
}
