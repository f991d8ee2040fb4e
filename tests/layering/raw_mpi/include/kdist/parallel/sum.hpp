#pragma once
// parallel/ calls MPI: allowed.
#include <mpi.h>
inline void sum(double* v, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_SUM, comm);
}
