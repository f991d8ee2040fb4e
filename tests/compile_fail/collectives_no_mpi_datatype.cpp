// A collective moves Views of a type MPI knows.
// expect: the View's value type has no MPI datatype
#include <kdist/parallel/collectives.hpp>

struct Point {
  double x, y;
};

void f(MPI_Comm comm) {
#ifdef KDIST_BAD
  Kokkos::View<Point*> v("v", 4);
#else
  Kokkos::View<double*> v("v", 4);
#endif
  kdist::broadcast(Kokkos::DefaultHostExecutionSpace(), v, 0, comm);
}
