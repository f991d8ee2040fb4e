// kdist::ScopeGuard's life, run under mpiexec (see runtime_extra.cmake):
//   plain        the guard starts MPI (MPI_THREAD_MULTIPLE) and Kokkos, an inner guard
//                starts and stops nothing, the outer one finalises both; kdist used before and
//                after says MPI is not running; a second guard after the first is an error.
//   kokkos-first Kokkos started by the program: the guard starts and finalises only MPI.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstring>
#include <kdist/parallel/initialize.hpp>
#include <string>

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::printf("error: %s\n", what);
    ++failures;
  }
}
bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}
bool mpi_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}
template <class F>
std::string runtime_error_of(F&& f) {
  try {
    f();
  } catch (const kdist::RuntimeError& e) {
    return e.what();
  }
  return "(no kdist::RuntimeError)";
}
bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  const bool kokkos_first = argc > 1 && std::strcmp(argv[1], "kokkos-first") == 0;
  int rank = -1;
  const auto m = runtime_error_of([] { (void)kdist::list_devices(); });
  check(contains(m, "MPI is not initialised; create a kdist::ScopeGuard"),
        "list_devices before MPI: no 'not initialised' error");
  if (kokkos_first) {
    Kokkos::initialize(argc, argv);
  }
  {
    kdist::ScopeGuard guard(argc, argv);
    check(guard.started_mpi(), "the guard did not start MPI");
    check(guard.started_kokkos() != kokkos_first, "the guard's Kokkos start is wrong");
    check(mpi_initialized() && Kokkos::is_initialized(), "MPI or Kokkos not running in the guard");
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    // MPI_THREAD_MULTIPLE: the I/O watchdog's helper thread asks the other processes itself.
    check(provided == MPI_THREAD_MULTIPLE, "MPI thread level below MPI_THREAD_MULTIPLE");
    {
      kdist::ScopeGuard inner;
      check(!inner.started_mpi() && !inner.started_kokkos(), "an inner guard started something");
    }
    check(!mpi_finalized() && Kokkos::is_initialized(),
          "an inner guard finalised what it did not start");
    rank = kdist::process_id();
  }
  check(mpi_finalized(), "MPI not finalised by the guard that started it");
  check(
      Kokkos::is_initialized() == kokkos_first,
      kokkos_first ? "the guard finalised Kokkos, which it did not start" : "Kokkos not finalised");
  const auto after = runtime_error_of([] { (void)kdist::process_count(); });
  check(contains(after, "MPI is already finalised"),
        "process_count after MPI: no 'already finalised'");
  const auto again = runtime_error_of([] { kdist::ScopeGuard second; });
  check(contains(again, "MPI was finalised already and cannot be initialised again"),
        "a second guard after MPI_Finalize: no error");
  if (kokkos_first) {
    Kokkos::finalize();
  }
  if (failures == 0 && rank == 0) {
    std::printf("guard lifecycle ok (%s)\n", kokkos_first ? "kokkos-first" : "plain");
  }
  return failures == 0 ? 0 : 1;
}
