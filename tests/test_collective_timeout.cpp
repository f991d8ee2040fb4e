// The stuck-collective watchdog's settings and the step it names (parallel/collective_timeout.hpp,
// parallel/step_scope.hpp). The watchdog itself, under MPI: tests/collective_timeout.cmake.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <string>

namespace {

namespace wd = kdist::detail::watchdog;

std::int64_t from_env(const char* value) {
  if (value == nullptr) {
    unsetenv("KDIST_COLLECTIVE_TIMEOUT");
  } else {
    setenv("KDIST_COLLECTIVE_TIMEOUT", value, 1);
  }
  const auto t = wd::timeout_from_environment();
  unsetenv("KDIST_COLLECTIVE_TIMEOUT");
  return t;
}

std::string env_error(const char* value) {
  try {
    from_env(value);
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CollectiveTimeout, EnvironmentValues) {
  EXPECT_EQ(from_env(nullptr), 600'000'000'000LL);  // the default: 10 minutes
  EXPECT_EQ(from_env(""), 600'000'000'000LL);
  EXPECT_EQ(from_env("2"), 2'000'000'000LL);
  EXPECT_EQ(from_env("0.25"), 250'000'000LL);
  EXPECT_EQ(from_env("120"), 120'000'000'000LL);
  EXPECT_EQ(from_env("0"), 0);
  EXPECT_EQ(from_env("off"), 0);
  EXPECT_EQ(from_env("OFF"), 0);
  EXPECT_EQ(from_env("1e7"), 10'000'000'000'000'000LL);
}

TEST(CollectiveTimeout, BadEnvironmentValues) {
  for (const char* bad :
       {"soon", "-1", "2s", " 2", "1e99", "nan", "inf", "1e7.5", "0x", "0x10", "+2", "2 "}) {
    EXPECT_EQ(env_error(bad), "KDIST_COLLECTIVE_TIMEOUT is '" + std::string(bad) +
                                  "', not a number of seconds from 0 to 10000000 or 'off'; set "
                                  "it to the seconds a collective may wait for the other "
                                  "processes (e.g. 600), or to 0 or off to turn the "
                                  "stuck-collective watchdog off")
        << bad;
  }
}

TEST(CollectiveTimeout, ApiSettingWinsOverTheEnvironment) {
  setenv("KDIST_COLLECTIVE_TIMEOUT", "7", 1);
  wd::settings() = {};
  EXPECT_EQ(kdist::collective_timeout(), std::chrono::seconds(7));  // read on first use
  kdist::set_collective_timeout(std::chrono::milliseconds(1500));
  EXPECT_EQ(kdist::collective_timeout(), std::chrono::milliseconds(1500));
  wd::read_environment();  // as start-up does: checks the variable, keeps the program's setting
  EXPECT_EQ(kdist::collective_timeout(), std::chrono::milliseconds(1500));
  kdist::set_collective_timeout(std::chrono::seconds(0));
  EXPECT_EQ(kdist::collective_timeout(), std::chrono::seconds(0));
  setenv("KDIST_COLLECTIVE_TIMEOUT", "never", 1);
  EXPECT_THROW(wd::read_environment(), kdist::ValueError);  // still checked
  unsetenv("KDIST_COLLECTIVE_TIMEOUT");
  wd::settings() = {};
  EXPECT_EQ(kdist::collective_timeout(), kdist::default_collective_timeout);
}

TEST(CollectiveTimeout, BadApiValues) {
  try {
    kdist::set_collective_timeout(std::chrono::seconds(-1));
    FAIL() << "no error";
  } catch (const kdist::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "kdist::set_collective_timeout: the timeout is -1.000000 s; give a duration from 0 "
              "(no timeout) to 10000000 s");
  }
  EXPECT_THROW(kdist::set_collective_timeout(std::chrono::hours(3000)), kdist::ValueError);
  EXPECT_THROW(kdist::set_collective_timeout(std::chrono::duration<double>(std::nan(""))),
               kdist::ValueError);
}

TEST(StepScope, NamesTheStepAndNests) {
  EXPECT_EQ(kdist::current_step_description(), "outside a training step");
  {
    const kdist::StepScope fit("fit", 0, 2);
    EXPECT_EQ(kdist::current_step_description(), "during fit, epoch 1, step 3");
    {
      const kdist::StepScope eval("evaluate", 0, 0);
      EXPECT_EQ(kdist::current_step_description(), "during evaluate, epoch 1, step 1");
    }
    EXPECT_EQ(kdist::current_step_description(), "during fit, epoch 1, step 3");
  }
  EXPECT_EQ(kdist::current_step_description(), "outside a training step");
}

}  // namespace
