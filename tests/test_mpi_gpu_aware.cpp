// kdist/parallel/mpi/gpu_aware.hpp: the environment override, its error, and the library's answer
// (none without a GPU backend: there are no device pointers to hand over).
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <kdist/parallel/mpi/gpu_aware.hpp>
#include <string>

namespace {

// The library's answer is an MPI call (under Kokkos CUDA with MPICH, MPIX_GPU_query_support),
// which MPI must be initialised for, as it is wherever kdist asks it: a singleton MPI here (this
// test runs without mpiexec), from before the first test to after the last.
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
  }
  void TearDown() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
};

[[maybe_unused]] ::testing::Environment* const mpi_environment =
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

using kdist::mpi::GpuSupport;
using kdist::mpi::detail::gpu_support_from;

TEST(MpiGpuAware, EnvironmentOverridesTheLibrary) {
  EXPECT_EQ(gpu_support_from("1"), GpuSupport::all);
  EXPECT_EQ(gpu_support_from("blocking"), GpuSupport::blocking);
  EXPECT_EQ(gpu_support_from("0"), GpuSupport::none);
}

const char* name_of(GpuSupport s) {
  switch (s) {
    case GpuSupport::none:
      return "none";
    case GpuSupport::blocking:
      return "blocking calls";
    case GpuSupport::all:
      return "every call";
  }
  return "?";
}

TEST(MpiGpuAware, UnsetOrEmptyAsksTheLibrary) {
  // the answer, for the logs of a run on a GPU (benchmarks/gpu/gpu_aware_mpi.sh)
  std::printf("kdist: the MPI library's GPU support: %s\n",
              name_of(kdist::mpi::detail::library_gpu_support()));
  EXPECT_EQ(gpu_support_from(nullptr), kdist::mpi::detail::library_gpu_support());
  EXPECT_EQ(gpu_support_from(""), kdist::mpi::detail::library_gpu_support());
#if !defined(KOKKOS_ENABLE_CUDA) && !defined(KOKKOS_ENABLE_HIP)
  EXPECT_EQ(kdist::mpi::detail::library_gpu_support(), GpuSupport::none);
#endif
}

// This process's answer, from its environment (ctest runs it without KDIST_MPI_GPU_AWARE, and
// with it set: tests/CMakeLists.txt): the blocking answer covers the non-blocking one.
TEST(MpiGpuAware, TheProcessAnswerFollowsItsEnvironment) {
  const GpuSupport expected = gpu_support_from(std::getenv("KDIST_MPI_GPU_AWARE"));
  EXPECT_EQ(kdist::mpi::gpu_support(), expected);
  EXPECT_EQ(kdist::mpi::gpu_aware(), expected != GpuSupport::none);
  EXPECT_EQ(kdist::mpi::gpu_aware_non_blocking(), expected == GpuSupport::all);
}

TEST(MpiGpuAware, AnyOtherValueIsAnErrorNamingIt) {
  for (const char* bad : {"yes", "true", "2", " 1", "Blocking"}) {
    try {
      (void)gpu_support_from(bad);
      ADD_FAILURE() << "no error for KDIST_MPI_GPU_AWARE=" << bad;
    } catch (const kdist::ValueError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("KDIST_MPI_GPU_AWARE is '" + std::string(bad) + "'"), std::string::npos)
          << m;
      EXPECT_NE(m.find("set it to 1"), std::string::npos) << m;
      EXPECT_NE(m.find("blocking (in its blocking calls only)"), std::string::npos) << m;
    }
  }
}

}  // namespace
