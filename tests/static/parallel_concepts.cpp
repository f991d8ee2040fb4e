// The concepts of kdist/parallel/concepts.hpp (kokkos-comm's spellings), and that the collectives
// and tensors take what they name. Built = passed (also under plain nvcc, tests/nvcc.cmake).
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/concepts.hpp>

#include <Kokkos_Core.hpp>

namespace {

using View = Kokkos::View<double*>;

static_assert(kdist::KokkosView<View> && kdist::KokkosView<Kokkos::View<const float**>>);
static_assert(!kdist::KokkosView<double*> && !kdist::KokkosView<const View&>);
static_assert(kdist::KokkosExecutionSpace<Kokkos::DefaultExecutionSpace>);
static_assert(kdist::KokkosExecutionSpace<Kokkos::DefaultHostExecutionSpace>);
static_assert(!kdist::KokkosExecutionSpace<Kokkos::HostSpace>);  // a memory space
static_assert(kdist::MpiCommunicator<MPI_Comm> && kdist::MpiCommunicator<kdist::mpi::Communicator>);
static_assert(!kdist::MpiCommunicator<int> || std::is_same_v<MPI_Comm, int>);  // MPICH: an int

// The collectives' signatures: what the concepts admit, and nothing else.
template <class Space, class V, class Comm>
concept all_reducible = requires(const Space& s, const V& v, const Comm& c) {
  kdist::all_reduce(s, v, kdist::ReduceOp::sum, c);
};
static_assert(all_reducible<Kokkos::DefaultExecutionSpace, View, kdist::mpi::Communicator>);
static_assert(all_reducible<Kokkos::DefaultExecutionSpace, View, MPI_Comm>);
static_assert(!all_reducible<Kokkos::HostSpace, View, MPI_Comm>);
static_assert(!all_reducible<Kokkos::DefaultExecutionSpace, double*, MPI_Comm>);

}  // namespace
