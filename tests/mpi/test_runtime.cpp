// kdist-mpi-ranks: 1 2 4
// kdist/parallel/initialize.hpp: initialize (arguments, KERAS_DISTRIBUTION_* fallbacks, agreed errors),
// ScopeGuard, list_devices, get_device_count, process_count, process_id.
#include <gtest/gtest.h>
#include <mpi.h>
#include "mpi_test_util.hpp"

#include <cstdlib>
#include <fstream>
#include <kdist/parallel/initialize.hpp>
#include <optional>
#include <string>

namespace {

using kdist::test::world_rank;
using kdist::test::world_size;

// Sets (or unsets, with nullptr) an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
    }
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

using kdist::test::contains;
using kdist::test::message_of;

// No KERAS_DISTRIBUTION_* variable from the environment leaks into the tests.
class Runtime : public ::testing::Test {
 protected:
  ScopedEnv a_{"KERAS_DISTRIBUTION_JOB_ADDRESSES", nullptr};
  ScopedEnv b_{"KERAS_DISTRIBUTION_NUM_PROCESSES", nullptr};
  ScopedEnv c_{"KERAS_DISTRIBUTION_PROCESS_ID", nullptr};
};

// The path this test program was started as (its bundle's, tests/bundles.cmake): what the
// mpiexec line of kdist's message must name.
std::string this_program() {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::string program;
  std::getline(cmdline, program, '\0');
  return program;
}

}  // namespace

// ---- devices ----------------------------------------------------------------------------------

TEST_F(Runtime, ListDevicesOnePerProcess) {
  const auto devices = kdist::list_devices();
  ASSERT_EQ(static_cast<int>(devices.size()), world_size());
  const std::string type = kdist::default_space_is_gpu ? "gpu" : "cpu";
  for (int i = 0; i < world_size(); ++i) {
    EXPECT_EQ(devices[static_cast<std::size_t>(i)], type + ":" + std::to_string(i));
  }
  EXPECT_EQ(kdist::get_device_count(), world_size());
}

TEST_F(Runtime, DeviceTypeInAnyCase) {
  for (const char* type : {"cpu", "CPU", "Cpu", "cPu"}) {
    const auto devices = kdist::list_devices(type);
    ASSERT_EQ(static_cast<int>(devices.size()), world_size()) << type;
    EXPECT_EQ(devices.front(), "cpu:0");
    EXPECT_EQ(devices.back(), "cpu:" + std::to_string(world_size() - 1));
    EXPECT_EQ(kdist::get_device_count(type), world_size());
  }
}

TEST_F(Runtime, GpuOnAHostBuildIsARuntimeErrorSayingWhatIsAvailable) {
  if constexpr (kdist::default_space_is_gpu) {
    EXPECT_EQ(kdist::list_devices("GPU").front(), "gpu:0");
  } else {
    for (const char* type : {"gpu", "GPU"}) {
      const auto m = message_of<kdist::RuntimeError>([&] { (void)kdist::list_devices(type); });
      EXPECT_TRUE(contains(m, "no \"gpu\" devices")) << m;
      EXPECT_TRUE(contains(m, "available device types: \"cpu\"")) << m;
      EXPECT_TRUE(contains(m, Kokkos::DefaultExecutionSpace::name())) << m;
    }
    const auto m = message_of<kdist::RuntimeError>([] { (void)kdist::get_device_count("gpu"); });
    EXPECT_TRUE(contains(m, "kdist::get_device_count")) << m;
  }
}

TEST_F(Runtime, TpuIsARuntimeError) {
  for (const char* type : {"tpu", "TPU"}) {
    const auto m = message_of<kdist::RuntimeError>([&] { (void)kdist::list_devices(type); });
    EXPECT_TRUE(contains(m, "no \"tpu\" devices")) << m;
    EXPECT_TRUE(contains(m, "available device types: \"cpu\"")) << m;
  }
  (void)message_of<kdist::RuntimeError>([] { (void)kdist::get_device_count("Tpu"); });
}

TEST_F(Runtime, UnknownDeviceTypeIsAValueErrorListingTheValidOnes) {
  for (const char* type : {"npu", "", "cpu:0", "gpus"}) {
    const auto m = message_of<kdist::ValueError>([&] { (void)kdist::list_devices(type); });
    EXPECT_TRUE(contains(m, "unknown device_type \"" + std::string(type) + "\"")) << m;
    EXPECT_TRUE(contains(m, "\"cpu\", \"gpu\" and \"tpu\"")) << m;
  }
  const auto m = message_of<kdist::ValueError>([] { (void)kdist::get_device_count("xpu"); });
  EXPECT_TRUE(contains(m, "kdist::get_device_count: unknown device_type \"xpu\"")) << m;
}

TEST_F(Runtime, ProcessCountAndId) {
  EXPECT_EQ(kdist::process_count(), world_size());
  EXPECT_EQ(kdist::process_id(), world_rank());
}

// ---- initialize: good settings ---------------------------------------------------------------

TEST_F(Runtime, InitializeWithMatchingSettingsIsANoOp) {
  EXPECT_NO_THROW(kdist::initialize());
  EXPECT_NO_THROW(kdist::initialize(std::nullopt, world_size()));
  EXPECT_NO_THROW(kdist::initialize(std::nullopt, world_size(), world_rank()));
  EXPECT_NO_THROW(kdist::initialize(std::nullopt, std::nullopt, world_rank()));
  // A single address names the coordinator only (Keras): not counted.
  EXPECT_NO_THROW(kdist::initialize("10.0.0.1:1234", world_size(), world_rank()));
  std::string all;
  for (int i = 0; i < world_size(); ++i) {
    all += (i ? "," : "") + std::string("10.0.0.") + std::to_string(i + 1) + ":1234";
  }
  if (world_size() > 1) {
    EXPECT_NO_THROW(kdist::initialize(all, world_size(), world_rank()));
    EXPECT_NO_THROW(kdist::initialize(all));  // counted against the world size
  }
  EXPECT_TRUE(Kokkos::is_initialized());
}

TEST_F(Runtime, InitializeReadsTheEnvironment) {
  ScopedEnv n("KERAS_DISTRIBUTION_NUM_PROCESSES", std::to_string(world_size()));
  ScopedEnv p("KERAS_DISTRIBUTION_PROCESS_ID", " " + std::to_string(world_rank()) + " ");
  ScopedEnv j("KERAS_DISTRIBUTION_JOB_ADDRESSES", "10.0.0.1:1234");
  EXPECT_NO_THROW(kdist::initialize());
}

TEST_F(Runtime, EmptyVariablesCountAsUnset) {
  ScopedEnv n("KERAS_DISTRIBUTION_NUM_PROCESSES", "");
  ScopedEnv p("KERAS_DISTRIBUTION_PROCESS_ID", "");
  ScopedEnv j("KERAS_DISTRIBUTION_JOB_ADDRESSES", "");
  EXPECT_NO_THROW(kdist::initialize());
}

TEST_F(Runtime, ArgumentsTakePrecedenceOverTheEnvironment) {
  ScopedEnv n("KERAS_DISTRIBUTION_NUM_PROCESSES", "not a number");
  ScopedEnv p("KERAS_DISTRIBUTION_PROCESS_ID", "nor this");
  ScopedEnv j("KERAS_DISTRIBUTION_JOB_ADDRESSES", "a,b,c,d,e,f,g");
  EXPECT_NO_THROW(kdist::initialize("10.0.0.1:1234", world_size(), world_rank()));
}

// ---- initialize: errors, thrown on every rank ------------------------------------------------

TEST_F(Runtime, NonNumericVariablesAreValueErrorsNamingVariableAndValue) {
  {
    ScopedEnv n("KERAS_DISTRIBUTION_NUM_PROCESSES", "two");
    const auto m = message_of<kdist::ValueError>([] { kdist::initialize(); });
    EXPECT_TRUE(contains(m, "KERAS_DISTRIBUTION_NUM_PROCESSES is \"two\", which is not a number"))
        << m;
  }
  for (const char* bad : {"1x", "0.5", "-"}) {
    ScopedEnv p("KERAS_DISTRIBUTION_PROCESS_ID", bad);
    const auto m = message_of<kdist::ValueError>([] { kdist::initialize(); });
    EXPECT_TRUE(contains(
        m, "KERAS_DISTRIBUTION_PROCESS_ID is \"" + std::string(bad) + "\", which is not a number"))
        << m;
  }
}

// A whole number too large for an int is out of range, not "not a number".
TEST_F(Runtime, IntegersBeyondAnIntAreOutOfRange) {
  for (const char* big : {"99999999999", "-99999999999", " 2147483648 "}) {
    ScopedEnv p("KERAS_DISTRIBUTION_PROCESS_ID", big);
    const auto m = message_of<kdist::ValueError>([] { kdist::initialize(); });
    EXPECT_TRUE(contains(m, "KERAS_DISTRIBUTION_PROCESS_ID is \"" + std::string(big) +
                                "\", which is out of range (at most 2147483647)"))
        << m;
  }
}

TEST_F(Runtime, ProcessCountDifferentFromTheWorldShowsTheMpiexecLine) {
  const int asked = world_size() + 1;
  const auto m = message_of<kdist::RuntimeError>([&] { kdist::initialize(std::nullopt, asked); });
  EXPECT_TRUE(
      contains(m, "num_processes is " + std::to_string(asked) + " (from the argument), but "))
      << m;
  EXPECT_TRUE(contains(m, "mpiexec -n " + std::to_string(asked) + " ")) << m;
  EXPECT_TRUE(contains(m, this_program())) << m;  // the program path
  if (world_size() == 1) {
    EXPECT_TRUE(contains(m, "single MPI process")) << m;
  } else {
    EXPECT_TRUE(contains(m, "MPI's world has " + std::to_string(world_size()) + " processes")) << m;
  }
  // The same from the environment, which the message names.
  ScopedEnv n("KERAS_DISTRIBUTION_NUM_PROCESSES", std::to_string(asked));
  const auto e = message_of<kdist::RuntimeError>([] { kdist::initialize(); });
  EXPECT_TRUE(contains(e, "(from KERAS_DISTRIBUTION_NUM_PROCESSES)")) << e;
  // ...and through the guard.
  const auto g = message_of<kdist::RuntimeError>([] { kdist::ScopeGuard guard; });
  EXPECT_EQ(g, e);
}

TEST_F(Runtime, ProcessIdDifferentFromTheRankThrowsOnEveryRank) {
  const int n = world_size();
  // Rank 0 is right, every other rank is wrong: all ranks throw rank 1's message.
  if (n > 1) {
    const auto m =
        message_of<kdist::RuntimeError>([] { kdist::initialize(std::nullopt, std::nullopt, 0); });
    EXPECT_TRUE(
        contains(m, "process_id is 0 (from the argument), but this process' MPI rank is 1;"))
        << m;
  }
  // Every rank wrong: the lowest (rank 0) speaks for all.
  if (n > 1) {
    ScopedEnv p("KERAS_DISTRIBUTION_PROCESS_ID", std::to_string((world_rank() + 1) % n));
    const auto m = message_of<kdist::RuntimeError>([] { kdist::initialize(); });
    EXPECT_TRUE(contains(
        m,
        "process_id is 1 (from KERAS_DISTRIBUTION_PROCESS_ID), but this process' MPI rank is 0;"))
        << m;
  }
}

TEST_F(Runtime, OutOfRangeValuesAreValueErrors) {
  auto m = message_of<kdist::ValueError>([] { kdist::initialize(std::nullopt, 0); });
  EXPECT_TRUE(contains(m, "num_processes is 0 (from the argument); it must be at least 1")) << m;
  m = message_of<kdist::ValueError>([] { kdist::initialize(std::nullopt, std::nullopt, -1); });
  EXPECT_TRUE(contains(m, "process_id is -1 (from the argument); it must not be negative")) << m;
  m = message_of<kdist::ValueError>(
      [] { kdist::initialize(std::nullopt, world_size(), world_size()); });
  EXPECT_TRUE(contains(
      m, "process_id is " + std::to_string(world_size()) + " (from the argument), out of range"))
      << m;
}

TEST_F(Runtime, JobAddressCountMustMatchTheProcessCount) {
  // Keras' words.
  auto m =
      message_of<kdist::ValueError>([] { kdist::initialize("10.0.0.1:1234,10.0.0.2:2345", 3); });
  EXPECT_TRUE(contains(m,
                       "job_addresses \"10.0.0.1:1234,10.0.0.2:2345\" (from the argument) has 2 "
                       "jobs, but num_processes is 3"))
      << m;
  {
    ScopedEnv j("KERAS_DISTRIBUTION_JOB_ADDRESSES", "h1:1,h2:2");
    ScopedEnv n("KERAS_DISTRIBUTION_NUM_PROCESSES", "3");
    m = message_of<kdist::ValueError>([] { kdist::initialize(); });
    EXPECT_TRUE(contains(
        m,
        "\"h1:1,h2:2\" (from KERAS_DISTRIBUTION_JOB_ADDRESSES) has 2 jobs, but num_processes is 3 "
        "(from KERAS_DISTRIBUTION_NUM_PROCESSES)"))
        << m;
  }
  // Without num_processes the count is checked against MPI's world.
  std::string too_many;
  for (int i = 0; i <= world_size(); ++i) {
    too_many += (i ? "," : "") + std::string("h") + std::to_string(i);
  }
  m = message_of<kdist::RuntimeError>([&] { kdist::initialize(too_many); });
  EXPECT_TRUE(contains(m, "has " + std::to_string(world_size() + 1) +
                              " jobs, but MPI's world has " + std::to_string(world_size())))
      << m;
  EXPECT_TRUE(contains(m, "mpiexec -n " + std::to_string(world_size() + 1))) << m;
  m = message_of<kdist::ValueError>([] { kdist::initialize("a:1,,b:2", 3); });
  EXPECT_TRUE(contains(m, "has an empty address at position 2")) << m;
}

TEST_F(Runtime, ScopeGuardStartsNothingThatRuns) {
  kdist::ScopeGuard guard(std::nullopt, world_size(), world_rank());
  EXPECT_FALSE(guard.started_mpi());
  EXPECT_FALSE(guard.started_kokkos());
  // Same checks as initialize.
  (void)message_of<kdist::ValueError>([] { kdist::ScopeGuard bad(std::nullopt, 0); });
}

TEST_F(Runtime, ErrorHelpersQuoteTheCommandLine) {
  EXPECT_EQ(kdist::detail::runtime::shell_quote("./prog"), "./prog");
  EXPECT_EQ(kdist::detail::runtime::shell_quote("a b"), "'a b'");
  EXPECT_EQ(kdist::detail::runtime::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(kdist::detail::runtime::parse_int(" 12 "), 12);
  EXPECT_EQ(kdist::detail::runtime::parse_int("+3"), 3);
  EXPECT_EQ(kdist::detail::runtime::parse_int("-3"), -3);
  EXPECT_FALSE(kdist::detail::runtime::parse_int("3 4"));
  EXPECT_FALSE(kdist::detail::runtime::parse_int(""));
}
