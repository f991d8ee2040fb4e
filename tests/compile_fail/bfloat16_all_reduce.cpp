// MPI does not sum bfloat16 values (it would sum their bits): kdist::all_reduce refuses them.
// expect: bfloat16 and float16 values are not summed by MPI
#include <kdist/parallel/collectives.hpp>

void f(MPI_Comm comm) {
#ifdef KDIST_BAD
  Kokkos::View<kdist::bfloat16*> v("v", 4);
#else
  Kokkos::View<float*> v("v", 4);
#endif
  kdist::all_reduce(Kokkos::DefaultExecutionSpace(), v, kdist::ReduceOp::sum, comm);
}
