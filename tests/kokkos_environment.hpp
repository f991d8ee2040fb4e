#pragma once
// Included once by a single-process GoogleTest file whose tests use Kokkos: initialises Kokkos
// before the first test and finalises it after the last (a GoogleTest global environment).
#include <gtest/gtest.h>
#include <Kokkos_Core.hpp>

namespace kdist::testing {

class KokkosEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { Kokkos::initialize(); }
  void TearDown() override { Kokkos::finalize(); }
};

[[maybe_unused]] inline ::testing::Environment* const kokkos_environment =
    ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

}  // namespace kdist::testing
