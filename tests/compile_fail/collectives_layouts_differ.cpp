// Collectives work in memory order: two Views of the same rank >= 2 share their layout.
// expect: send and recv Views of the same rank >= 2 must have the same layout
#include <kdist/parallel/collectives.hpp>

void f(MPI_Comm comm) {
  Kokkos::View<double**, Kokkos::LayoutRight> send("send", 2, 3);
#ifdef KDIST_BAD
  Kokkos::View<double**, Kokkos::LayoutLeft> recv("recv", 2, 3);
#else
  Kokkos::View<double**, Kokkos::LayoutRight> recv("recv", 2, 3);
#endif
  kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), send, recv, kdist::ReduceOp::sum, comm);
}
