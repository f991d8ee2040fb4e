// Run directly, not by mpiexec, with KERAS_DISTRIBUTION_NUM_PROCESSES=2 (see runtime_extra.cmake):
// kdist must refuse and show the mpiexec command line that would work. `guard` tests
// kdist::ScopeGuard (which finalises what it started before rethrowing), `initialize` tests
// kdist::initialize (whose MPI and Kokkos are finalised at exit).
#include <cstdio>
#include <cstring>
#include <kdist/parallel/initialize.hpp>

int main(int argc, char** argv) {
  const bool use_guard = argc > 1 && std::strcmp(argv[1], "guard") == 0;
  try {
    if (use_guard) {
      kdist::ScopeGuard guard(argc, argv);
    } else {
      kdist::initialize();
    }
  } catch (const kdist::RuntimeError& e) {
    std::printf("kdist::RuntimeError: %s\n", e.what());
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (use_guard && !finalized) {
      std::printf("error: the guard did not finalise the MPI it started\n");
      return 1;
    }
    return 0;
  }
  std::printf("error: no kdist::RuntimeError for a single process asked to be several\n");
  return 1;
}
