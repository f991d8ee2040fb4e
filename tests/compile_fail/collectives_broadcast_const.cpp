// broadcast writes its View on every rank but the root.
// expect: kdist::broadcast: the View must not be const
#include <kdist/parallel/collectives.hpp>

void f(MPI_Comm comm) {
#ifdef KDIST_BAD
  Kokkos::View<const double*> v = Kokkos::View<double*>("v", 4);
#else
  Kokkos::View<double*> v("v", 4);
#endif
  kdist::broadcast(Kokkos::DefaultHostExecutionSpace(), v, 0, comm);
}
