// kdist-mpi-ranks: 1 2
// LayoutMap rules from JSON files (issue 22): the Keras-style format read and written in order,
// several axes per dimension, the same map on every process, and every bad file the same
// ValueError on every process, naming the file, the rule and what is wrong.
#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <kdist/parallel/devices.hpp>
#include <string>

#include "mpi/mpi_test_util.hpp"

#if !__has_include(<nlohmann/json.hpp>)
// kdist::io without nlohmann-json (the staged GPU machine): the header is unavailable.
TEST(LayoutMapFile, NeedsNlohmannJson) {
  GTEST_SKIP() << "no nlohmann/json.hpp";
}
#else
#include <kdist/io/layout_map_file.hpp>

namespace {

using kdist::test::contains;
using kdist::test::message_of;
using kdist::test::world_rank;

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// (1, P): "data" of extent 1, "model" over every process.
kdist::RuntimeDeviceMesh mesh() {
  return kdist::RuntimeDeviceMesh({1, static_cast<std::size_t>(world_size())}, {"data", "model"},
                                  kdist::list_devices());
}

// A file name private to this run (process 0's pid, sent to all).
std::string temp_file(const std::string& name) {
  long pid = world_rank() == 0 ? static_cast<long>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return (std::filesystem::temp_directory_path() /
          ("kdist_layout_map_" + std::to_string(pid) + "_" + name))
      .string();
}

void write_on_root(const std::string& file, const std::string& text) {
  if (world_rank() == 0) std::ofstream(file) << text;
  MPI_Barrier(MPI_COMM_WORLD);
}

// The guide's map (docs/guide/03) and a keras-hub Gemma-style map for the transformer.
constexpr const char* guide_rules = R"({
  "dense.*kernel": [null, "model"],
  "dense.*bias": ["model"],
  "conv2d.*kernel": [null, null, null, "model"],
  "conv2d.*bias": ["model"]
})";

TEST(LayoutMapFile, ReadsRulesInOrderAndResolvesThem) {
  const auto map = kdist::layout_map_from_json(guide_rules, mesh(), "guide.json");
  ASSERT_EQ(map.size(), 4u);
  std::vector<std::string> keys;
  for (const auto& item : map) keys.push_back(item.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"dense.*kernel", "dense.*bias", "conv2d.*kernel",
                                            "conv2d.*bias"}));
  const auto kernel = map["dense_1/kernel"].value();
  ASSERT_EQ(kernel.axes().size(), 2u);
  EXPECT_EQ(kernel.axes()[0].size(), 0u);
  EXPECT_EQ(kernel.axes()[1].names(), std::vector<std::string>{"model"});
  EXPECT_EQ(map["conv2d/kernel"]->axes().size(), 4u);
  EXPECT_FALSE(map["batch_normalization/gamma"].has_value());
}

TEST(LayoutMapFile, SeveralAxesPerDimensionAndRoundTrip) {
  const std::string text = R"({"token_embedding/embeddings": [null, ["data", "model"]],
                              "attention_output/kernel": ["model", [], null]})";
  const auto map = kdist::layout_map_from_json(text, mesh(), "gemma.json");
  const auto emb = map["token_embedding/embeddings"].value();
  EXPECT_EQ(emb.axes()[1].names(), (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(map["attention_output/kernel"]->axes()[1].size(), 0u);  // [] is replicated
  const std::string json = kdist::layout_map_to_json(map);
  EXPECT_EQ(json,
            "{\n  \"token_embedding/embeddings\": [null, [\"data\", \"model\"]],\n"
            "  \"attention_output/kernel\": [\"model\", null, null]\n}\n");
  const auto again = kdist::layout_map_from_json(json, mesh());
  ASSERT_EQ(again.size(), map.size());
  for (const auto& [key, layout] : map) EXPECT_EQ(again[key].value(), layout) << key;
}

TEST(LayoutMapFile, AddsToAnExistingMapAllOrNothing) {
  kdist::RuntimeLayoutMap map(mesh());
  map.insert("d2/output", {"data", std::nullopt});
  kdist::layout_map_from_json(R"({"d1/kernel": [null, "model"]})", map, "more.json");
  ASSERT_EQ(map.size(), 2u);
  EXPECT_EQ(map["d1/kernel"]->axes()[1].names(), std::vector<std::string>{"model"});
  // A rule the map has already: an error naming it, and the file's other rules are not added.
  const auto message = message_of<kdist::ValueError>([&] {
    kdist::layout_map_from_json(R"({"d3/kernel": [null, "model"], "d2/output": [null, null]})", map,
                                "clash.json");
  });
  EXPECT_TRUE(contains(message, "clash.json: rule \"d2/output\"")) << message;
  EXPECT_TRUE(contains(message, "already exist")) << message;
  EXPECT_EQ(map.size(), 2u);
  EXPECT_FALSE(map["d3/kernel"].has_value());
}

TEST(LayoutMapFile, WrittenAndReadBackOnEveryProcess) {
  const auto file = temp_file("round_trip.json");
  const auto map = kdist::layout_map_from_json(guide_rules, mesh());
  kdist::write_layout_map(map, file);
  const auto read = kdist::read_layout_map(file, mesh());
  ASSERT_EQ(read.size(), 4u);
  EXPECT_EQ(read["dense_2/bias"].value(), map["dense_2/bias"].value());
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove(file);
}

TEST(LayoutMapFile, EveryBadFileIsTheSameErrorOnEveryProcess) {
  struct Case {
    const char* text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {R"({"dense.*kernel": [null, "model"],)", {"bad.json", "not valid JSON", "byte"}},
      {R"([[null, "model"]])", {"bad.json", "the top level is array, not an object"}},
      {R"({"k": [null], "k": ["model"]})", {"bad.json: rule \"k\" is given twice"}},
      {R"({"k": "model"})", {"rule \"k\"", "is not an array with one entry per dimension"}},
      {R"({"k": [null, 3]})", {"rule \"k\", dimension 1", "3 is not a mesh axis name"}},
      {R"({"k": [["model", null]]})", {"rule \"k\", dimension 0", "null is not a mesh axis"}},
      {R"({"k": [""]})", {"rule \"k\", dimension 0: an axis name is empty"}},
      {R"({"k": [null, "tensor"]})", {"bad.json: rule \"k\"", "tensor"}},
      {R"({"dense[": [null]})", {"bad.json: rule \"dense[\""}},
  };
  for (const auto& c : cases) {
    const auto message = message_of<kdist::ValueError>(
        [&] { (void)kdist::layout_map_from_json(c.text, mesh(), "bad.json"); });
    for (const auto& part : c.expected)
      EXPECT_TRUE(contains(message, part)) << c.text << "\n -> " << message;
  }
  // From a file: every process gets process 0's error.
  const auto file = temp_file("bad.json");
  write_on_root(file, R"({"dense.*kernel": [null, "nodes"]})");
  const auto message =
      message_of<kdist::ValueError>([&] { (void)kdist::read_layout_map(file, mesh()); });
  EXPECT_TRUE(contains(message, file + ": rule \"dense.*kernel\"")) << message;
  EXPECT_TRUE(contains(message, "nodes")) << message;
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove(file);
}

TEST(LayoutMapFile, AMissingFileIsAnErrorOnEveryProcess) {
  const auto file = temp_file("missing.json");
  const auto message =
      message_of<kdist::ValueError>([&] { (void)kdist::read_layout_map(file, mesh()); });
  EXPECT_TRUE(contains(message, file + ": cannot open this LayoutMap file (no such file)"))
      << message;
  const auto unwritable =
      (std::filesystem::temp_directory_path() / "kdist_no_such_dir" / "x.json").string();
  const auto write_message = message_of<kdist::ValueError>([&] {
    kdist::write_layout_map(kdist::layout_map_from_json(guide_rules, mesh()), unwritable);
  });
  EXPECT_TRUE(contains(write_message, unwritable + ": cannot write this LayoutMap file"))
      << write_message;
}

}  // namespace
#endif
