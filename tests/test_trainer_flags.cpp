// examples/common/trainer_flags.hpp: the trainers' flags parse strictly (CLI11): every value the
// old strtod/strtoul parser let through (1e30 epochs, negative sizes and seeds, "-1x-2") is an
// error naming the flag and what is accepted; good values and --help still work.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/trainer_flags.hpp"

namespace {

using kdist::examples::parse_options;
using kdist::examples::TrainerOptions;

std::optional<TrainerOptions> parse(std::vector<std::string> words) {
  words.insert(words.begin(), "trainer");
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return parse_options(static_cast<int>(argv.size()), argv.data(), "usage: trainer [flags]", false);
}

std::string error_of(std::vector<std::string> words) {
  try {
    (void)parse(std::move(words));
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TrainerFlags, GoodValues) {
  const auto o = parse({"--mesh", "2x4", "--epochs", "3", "--batch-size", "256", "--learning-rate",
                        "0.01", "--optimizer", "sgd", "--loss", "mse", "--seed",
                        "18446744073709551615", "--steps", "0", "--quiet", "--drop-remainder"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->mesh, (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(o->epochs, 3u);
  EXPECT_EQ(o->batch_size, 256u);
  EXPECT_DOUBLE_EQ(o->learning_rate, 0.01);
  EXPECT_EQ(o->optimizer, "sgd");
  EXPECT_EQ(o->loss, "mse");
  EXPECT_EQ(o->seed, 18446744073709551615u);
  EXPECT_EQ(o->max_steps, 0u);
  EXPECT_TRUE(o->quiet);
  EXPECT_TRUE(o->drop_remainder);
  const auto d = parse({});
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->mesh.empty());
  EXPECT_FALSE(d->drop_remainder);  // the partial last batch is trained on, as in Keras
  EXPECT_EQ(d->epochs, 5u);
}

TEST(TrainerFlags, HelpIsNotAnError) {
  EXPECT_FALSE(parse({"--help"}));
}

TEST(TrainerFlags, IntegersAreStrict) {
  struct Case {
    const char* flag;
    const char* value;
    const char* accepted;
  };
  for (const Case& c :
       {Case{"--epochs", "1e30", "[1, 1000000]"}, Case{"--epochs", "0", "[1, 1000000]"},
        Case{"--epochs", "3.5", "[1, 1000000]"}, Case{"--epochs", "5x", "[1, 1000000]"},
        Case{"--epochs", "0x10", "[1, 1000000]"}, Case{"--epochs", " 5", "[1, 1000000]"},
        Case{"--batch-size", "-1", "[1, 2147483648]"},
        Case{"--batch-size", "99999999999999999999999", "[1, 2147483648]"},
        Case{"--seed", "-1", "[0, 18446744073709551615]"},
        Case{"--seed", "18446744073709551616", "[0, 18446744073709551615]"},
        Case{"--steps", "-5", "[0, 9223372036854775807]"}}) {
    const std::string m = error_of({c.flag, c.value});
    EXPECT_NE(m.find(c.flag), std::string::npos) << c.flag << " " << c.value << ": " << m;
    EXPECT_NE(m.find(c.value), std::string::npos) << c.flag << " " << c.value << ": " << m;
    EXPECT_NE(m.find(c.accepted), std::string::npos) << c.flag << " " << c.value << ": " << m;
  }
}

TEST(TrainerFlags, MeshLearningRateNamesAndUnknownFlags) {
  for (const char* mesh : {"-1x-2", "2y2", "0x4", "2x", "x2", "", "2x4x", "+2", "4294967296"}) {
    const std::string m = error_of({"--mesh", mesh});
    EXPECT_NE(m.find("--mesh '" + std::string(mesh) + "' does not parse"), std::string::npos)
        << mesh << ": " << m;
  }
  for (const char* lr : {"-0.1", "0", "nan", "inf", "1e999", "0.1x"}) {
    const std::string m = error_of({"--learning-rate", lr});
    EXPECT_NE(m.find("is not a finite number > 0"), std::string::npos) << lr << ": " << m;
  }
  EXPECT_NE(error_of({"--optimizer", "adamw"}).find("adamw"), std::string::npos);
  EXPECT_NE(error_of({"--loss", "hinge"}).find("hinge"), std::string::npos);
  EXPECT_NE(error_of({"--epoch", "3"}).find("--epoch"), std::string::npos);
  EXPECT_NE(error_of({"--epochs"}).find("--epochs"), std::string::npos);
}

}  // namespace
