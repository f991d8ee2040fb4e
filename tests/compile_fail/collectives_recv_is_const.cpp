// A collective writes its recv View, which cannot be const.
// expect: the recv View must not be const
#include <kdist/parallel/collectives.hpp>

void f(MPI_Comm comm) {
  Kokkos::View<double*> send("send", 4);
#ifdef KDIST_BAD
  Kokkos::View<const double*> recv = Kokkos::View<double*>("recv", 8);
#else
  Kokkos::View<double*> recv("recv", 8);
#endif
  kdist::all_gather(Kokkos::DefaultHostExecutionSpace(), send, recv, comm);
}
