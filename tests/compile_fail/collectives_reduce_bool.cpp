// Reductions add, compare or average numbers; bool is not one (MPI has no MPI_SUM on it).
// expect: the value type must be a number \(not bool\)
#include <kdist/parallel/collectives.hpp>

void f(MPI_Comm comm) {
#ifdef KDIST_BAD
  Kokkos::View<bool*> flags("flags", 4);
#else
  Kokkos::View<int*> flags("flags", 4);
#endif
  kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), flags, kdist::ReduceOp::max, comm);
}
