// kdist/parallel/mpi/gpu_aware.hpp: the environment override, its error, and the library's answer (false
// without a GPU backend: there are no device pointers to hand over).
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
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

using kdist::mpi::detail::gpu_aware_from;

TEST(MpiGpuAware, EnvironmentOverridesTheLibrary) {
  EXPECT_TRUE(gpu_aware_from("1"));
  EXPECT_FALSE(gpu_aware_from("0"));
}

TEST(MpiGpuAware, UnsetOrEmptyAsksTheLibrary) {
  EXPECT_EQ(gpu_aware_from(nullptr), kdist::mpi::detail::library_gpu_aware());
  EXPECT_EQ(gpu_aware_from(""), kdist::mpi::detail::library_gpu_aware());
#if !defined(KOKKOS_ENABLE_CUDA) && !defined(KOKKOS_ENABLE_HIP)
  EXPECT_FALSE(kdist::mpi::detail::library_gpu_aware());
#endif
}

TEST(MpiGpuAware, AnyOtherValueIsAnErrorNamingIt) {
  for (const char* bad : {"yes", "true", "2", " 1"}) {
    try {
      (void)gpu_aware_from(bad);
      ADD_FAILURE() << "no error for KDIST_MPI_GPU_AWARE=" << bad;
    } catch (const kdist::ValueError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("KDIST_MPI_GPU_AWARE is '" + std::string(bad) + "'"), std::string::npos)
          << m;
      EXPECT_NE(m.find("set it to 1"), std::string::npos) << m;
    }
  }
}

}  // namespace
