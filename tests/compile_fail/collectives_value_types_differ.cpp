// send and recv of a collective hold the same type.
// expect: the send and recv Views must have the same value type
#include <kdist/parallel/collectives.hpp>

void f(MPI_Comm comm) {
  Kokkos::View<double*> send("send", 4);
#ifdef KDIST_BAD
  Kokkos::View<float*> recv("recv", 4);
#else
  Kokkos::View<double*> recv("recv", 4);
#endif
  kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), send, recv, kdist::ReduceOp::sum, comm);
}
