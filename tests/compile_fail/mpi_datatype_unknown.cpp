// kdist::mpi::datatype<T>() exists for the types MPI knows (or that specialise datatype_traits).
// expect: kdist::mpi::datatype<T>: T has no MPI datatype
#include <string>

#include <kdist/parallel/mpi/datatype.hpp>

#ifdef KDIST_BAD
using T = std::string;
#else
using T = long long;
#endif
MPI_Datatype f() {
  return kdist::mpi::datatype<T>();
}
