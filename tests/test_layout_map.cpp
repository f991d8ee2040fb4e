// kdist::LayoutMap: Keras' LayoutMapTest (keras/src/distribution/distribution_lib_test.py) ported
// with the same mesh, keys and expectations, the docstring example, kdist's deliberate
// differences, every error path, RE2's linear time (ReDoS, 1 MB path), the cache, concurrent
// lookups, and the diagnostics (resolve, strict mode, report).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <kdist/core/layout.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using kdist::DimAxes;
using kdist::LayoutMap;
using kdist::RuntimeDeviceMesh;
using kdist::RuntimeTensorLayout;
using ::testing::HasSubstr;

std::vector<std::string> cpu_devices(std::size_t n) {
  std::vector<std::string> d;
  for (std::size_t i = 0; i < n; ++i) d.push_back("cpu:" + std::to_string(i));
  return d;
}

//! Runs f, expects a kdist::ValueError whose message contains every one of `parts`.
template <class F>
void expect_value_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected kdist::ValueError";
  } catch (const kdist::ValueError& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

class LayoutMapTest : public ::testing::Test {
 protected:
  RuntimeDeviceMesh device_mesh{{4, 2}, {"data", "model"}, cpu_devices(8)};
  RuntimeTensorLayout sharded_2d{kdist::replicated, "model"};
  RuntimeTensorLayout sharded_1d{"model"};
  RuntimeTensorLayout replicated_2d{kdist::replicated, kdist::replicated};
  RuntimeTensorLayout replicated_1d{kdist::replicated};
};

// ---- Keras' LayoutMapTest ---------------------------------------------------------------------

TEST_F(LayoutMapTest, Add) {
  LayoutMap layout_map(device_mesh);
  layout_map["dense/kernel"] = sharded_2d;
  layout_map["dense/bias"] = sharded_1d;
  // Test for adding list/tuple as shortcut for TensorLayout
  layout_map["conv/bias"] = {"model"};

  EXPECT_EQ(layout_map.size(), 3u);

  auto kernel_layout = layout_map.get("dense/kernel");
  ASSERT_TRUE(kernel_layout);
  EXPECT_EQ(kernel_layout->axes(), (std::vector<DimAxes>{kdist::replicated, "model"}));
  EXPECT_EQ(kernel_layout->device_mesh(), device_mesh);

  auto bias_layout = layout_map.get("dense/bias");
  ASSERT_TRUE(bias_layout);
  EXPECT_EQ(bias_layout->axes(), (std::vector<DimAxes>{"model"}));
  EXPECT_EQ(bias_layout->device_mesh(), device_mesh);

  auto conv_bias_layout = layout_map.get("conv/bias");
  ASSERT_TRUE(conv_bias_layout);
  EXPECT_EQ(conv_bias_layout->axes(), (std::vector<DimAxes>{"model"}));
  EXPECT_EQ(conv_bias_layout->device_mesh(), device_mesh);

  expect_value_error([&] { layout_map["dense/kernel"] = sharded_2d; },
                     {"dense/kernel already exist", "Please make sure to not use duplicated keys"});

  // Keras rejects a list ("should be a TensorLayout"); kdist accepts one, and validates its axes
  // against the map's mesh: ["a", "b"] names no axis of the mesh, so nothing is inserted.
  expect_value_error(
      [&] {
        layout_map["conv.kernel"] = std::vector<DimAxes>{"a", "b"};
      },
      {"Invalid axis names for Layout", "'conv.kernel'", "nothing was inserted"});
  EXPECT_EQ(layout_map.size(), 3u);
  EXPECT_FALSE(layout_map.contains("conv.kernel"));
  layout_map["conv.kernel"] = std::vector<DimAxes>{"data", "model"};
  EXPECT_EQ(layout_map.size(), 4u);
}

TEST_F(LayoutMapTest, Get) {
  LayoutMap layout_map(device_mesh);
  layout_map["dense/kernel"] = sharded_2d;
  layout_map["dense/bias"] = sharded_1d;

  layout_map[".*dense.*kernel"] = replicated_2d;
  layout_map[".*dense.*bias"] = replicated_1d;

  layout_map[".*bias"] = sharded_1d;

  const auto on_mesh = [&](const RuntimeTensorLayout& l) {
    return l.with_device_mesh(device_mesh);
  };
  EXPECT_EQ(layout_map["dense/kernel"], on_mesh(sharded_2d));
  EXPECT_EQ(layout_map["dense/bias"], on_mesh(sharded_1d));

  EXPECT_EQ(layout_map["dense_2/kernel"], on_mesh(replicated_2d));
  // Map against the wildcard bias rule for dense. This will cause a ValueError
  expect_value_error(
      [&] { (void)layout_map.get("dense_2/bias"); },
      {"Path 'dense_2/bias' matches multiple layout", "'.*dense.*bias'", "'.*bias'"});

  EXPECT_TRUE(layout_map["conv2d/kernel"] == std::nullopt);
  EXPECT_EQ(layout_map["conv2d/bias"], on_mesh(sharded_1d));
}

TEST_F(LayoutMapTest, Delete) {
  LayoutMap layout_map(device_mesh);
  layout_map["dense/kernel"] = sharded_2d;
  layout_map["dense/bias"] = sharded_1d;

  EXPECT_EQ(layout_map.pop("dense/kernel"), sharded_2d.with_device_mesh(device_mesh));
  // Make sure to match against the exact string, not the regex (Keras: KeyError)
  expect_value_error([&] { (void)layout_map.pop(".*bias"); }, {"no key '.*bias'"});
  EXPECT_EQ(layout_map.erase(".*bias"), 0u);

  // Make sure del also works
  EXPECT_EQ(layout_map.erase("dense/bias"), 1u);
  EXPECT_EQ(layout_map.size(), 0u);
  EXPECT_TRUE(layout_map.empty());
}

TEST_F(LayoutMapTest, Len) {
  LayoutMap layout_map(device_mesh);
  EXPECT_EQ(layout_map.size(), 0u);

  layout_map["dense/kernel"] = sharded_2d;
  layout_map["dense/bias"] = sharded_1d;

  EXPECT_EQ(layout_map.size(), 2u);
}

TEST_F(LayoutMapTest, Iter) {
  LayoutMap layout_map(device_mesh);
  layout_map["dense/kernel"] = sharded_2d;
  layout_map["dense/bias"] = sharded_1d;

  // Make sure the items are ordered based on the insertion order.
  EXPECT_EQ(layout_map.keys(), (std::vector<std::string>{"dense/kernel", "dense/bias"}));

  std::vector<std::string> keys;
  std::vector<RuntimeTensorLayout> values;
  for (const auto& [k, v] : layout_map) {
    keys.push_back(k);
    values.push_back(v);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"dense/kernel", "dense/bias"}));
  EXPECT_EQ(values, (std::vector<RuntimeTensorLayout>{sharded_2d.with_device_mesh(device_mesh),
                                                      sharded_1d.with_device_mesh(device_mesh)}));
}

// The example of Keras' LayoutMap docstring.
TEST_F(LayoutMapTest, DocstringExample) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*dense.*kernel"] = {kdist::replicated, "model"};
  layout_map[".*dense.*bias"] = {"model"};
  layout_map[".*conv2d.*kernel"] = {kdist::replicated, kdist::replicated, kdist::replicated,
                                    "model"};
  layout_map[".*conv2d.*bias"] = {"model"};
  const RuntimeTensorLayout layout_2d({kdist::replicated, "model"}, device_mesh);
  const RuntimeTensorLayout layout_1d({"model"}, device_mesh);
  const RuntimeTensorLayout layout_4d(
      {kdist::replicated, kdist::replicated, kdist::replicated, "model"}, device_mesh);

  EXPECT_EQ(layout_map["dense_1.kernel"], layout_2d);
  EXPECT_EQ(layout_map["dense_1.bias"], layout_1d);
  EXPECT_EQ(layout_map["dense_2.kernel"], layout_2d);
  EXPECT_EQ(layout_map["dense_2.bias"], layout_1d);
  EXPECT_EQ(layout_map["my_model/conv2d_123/kernel"], layout_4d);
  EXPECT_EQ(layout_map["my_model/conv2d_123/bias"], layout_1d);
  EXPECT_TRUE(layout_map["my_model/conv3d_1/kernel"] == std::nullopt);
  EXPECT_TRUE(layout_map["my_model/conv3d_1/bias"] == std::nullopt);
}

// ---- kdist's differences and API ----------------------------------------------------------------

TEST_F(LayoutMapTest, ContainsIsAnExactKeyTest) {
  // Keras' `in` is always true; kdist's contains is exact.
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = sharded_2d;
  EXPECT_TRUE(layout_map.contains(".*kernel"));
  EXPECT_FALSE(layout_map.contains("dense/kernel"));
  EXPECT_FALSE(layout_map.contains("anything"));
  EXPECT_TRUE(layout_map.get("dense/kernel"));  // a lookup, not a key
  EXPECT_EQ(layout_map.at(".*kernel"), sharded_2d.with_device_mesh(device_mesh));
  expect_value_error([&] { (void)layout_map.at("dense/kernel"); }, {"no key 'dense/kernel'"});
}

TEST_F(LayoutMapTest, FullMatchNotSearch) {
  LayoutMap layout_map(device_mesh);
  layout_map["dense/kernel"] = sharded_2d;
  layout_map["d.*"] = sharded_1d;
  // "dense/kernel" as a regex would find "model/dense/kernel" by search, not by full match.
  EXPECT_TRUE(layout_map["model/dense/kernel"] == std::nullopt);
  EXPECT_EQ(layout_map.matching_key("dense/kernel_1"), "d.*");
  // Python re semantics kept by RE2: '.' does not match a newline.
  EXPECT_TRUE(layout_map["d\nx"] == std::nullopt);
  // Alternation is tried as a whole (re.fullmatch("a|ab", "ab") matches).
  layout_map["x|xy"] = sharded_1d;
  EXPECT_EQ(layout_map.matching_key("xy"), "x|xy");
}

TEST_F(LayoutMapTest, ExactKeyWinsOverRegexMatches) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*"] = replicated_1d;
  layout_map[".*bias"] = sharded_1d;
  layout_map["d/bias"] = replicated_1d;
  EXPECT_EQ(layout_map.matching_key("d/bias"), "d/bias");
  EXPECT_EQ(layout_map.matching_keys("d/bias"),
            (std::vector<std::string>{".*", ".*bias", "d/bias"}));
  expect_value_error([&] { (void)layout_map.get("e/bias"); },
                     {"Path 'e/bias' matches multiple", "['.*', '.*bias']"});
}

TEST_F(LayoutMapTest, ProxyReadsAndWrites) {
  LayoutMap layout_map(device_mesh);
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  std::optional<RuntimeTensorLayout> l = layout_map["d1/kernel"];
  ASSERT_TRUE(l);
  EXPECT_EQ(l->rank(), 2u);
  EXPECT_EQ(layout_map["d1/kernel"]->axes_repr(), "(None, 'model')");
  EXPECT_TRUE(static_cast<bool>(layout_map["d1/kernel"]));
  EXPECT_FALSE(static_cast<bool>(layout_map["d2/kernel"]));
  expect_value_error([&] { (void)layout_map["d2/kernel"].value(); },
                     {"no rule matches 'd2/kernel'"});
  layout_map["d2/kernel"] = layout_map["d1/kernel"];
  EXPECT_EQ(layout_map["d2/kernel"], *l);
  const LayoutMap<>& cref = layout_map;
  EXPECT_EQ(cref["d2/kernel"], l);
  layout_map.insert("d1/bias", {"model"});
  layout_map.insert("d2/bias", std::vector<DimAxes>{"model"});
  layout_map.insert("multi", {kdist::axes<"data", "model">, kdist::replicated});
  EXPECT_EQ(layout_map["multi"]->axes_repr(), "(('data', 'model'), None)");
  EXPECT_EQ(layout_map.size(), 5u);
}

TEST_F(LayoutMapTest, StaticMeshAndStaticLayout) {
  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 4>, kdist::axis<"model", 2>>;
  LayoutMap layout_map(Mesh{});
  ASSERT_TRUE(layout_map.device_mesh());
  EXPECT_EQ(layout_map.device_mesh()->axis_names(), (std::vector<std::string>{"data", "model"}));
  layout_map["d1/kernel"] = kdist::TensorLayout<Mesh, kdist::replicated, "model">{};
  layout_map.insert("d1/bias", kdist::TensorLayout<Mesh, "model">{});
  EXPECT_EQ(layout_map["d1/kernel"],
            (kdist::TensorLayout<Mesh, kdist::replicated, "model">{}.to_runtime()));
  EXPECT_EQ(layout_map["d1/bias"]->axes_repr(), "('model',)");
}

TEST_F(LayoutMapTest, MapWithoutMeshKeepsLayoutsAsTheyAre) {
  LayoutMap layout_map;
  layout_map["a"] = {"anything"};  // no mesh: nothing to validate yet
  EXPECT_FALSE(layout_map["a"]->device_mesh());
  EXPECT_FALSE(layout_map.device_mesh());
  // A layout that has its own mesh keeps it (as Keras).
  LayoutMap with_mesh(device_mesh);
  RuntimeDeviceMesh other({8}, {"x"}, cpu_devices(8));
  with_mesh["b"] = RuntimeTensorLayout({"x"}, other);
  EXPECT_EQ(*with_mesh["b"]->device_mesh(), other);
}

TEST_F(LayoutMapTest, CopyAndMove) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = sharded_2d;
  LayoutMap copy = layout_map;
  copy[".*bias"] = sharded_1d;
  EXPECT_EQ(layout_map.size(), 1u);
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_TRUE(copy.get("x/bias"));
  EXPECT_FALSE(layout_map.get("x/bias"));
  LayoutMap moved = std::move(copy);
  EXPECT_EQ(moved.size(), 2u);
  EXPECT_TRUE(moved.get("x/kernel"));
  copy = moved;  // assign to a moved-from map
  EXPECT_EQ(copy.size(), 2u);
  EXPECT_TRUE(copy.get("y/bias"));
}

// ---- errors at insertion
// --------------------------------------------------------------------------

TEST_F(LayoutMapTest, BadRegexIsAnErrorAtInsertion) {
  LayoutMap layout_map(device_mesh);
  expect_value_error([&] { layout_map["dense/(kernel"] = sharded_2d; },
                     {"key 'dense/(kernel'", "not a valid regular expression", "missing )"});
  expect_value_error([&] { layout_map["[a-"] = sharded_2d; }, {"key '[a-'", "missing ]"});
  expect_value_error([&] { layout_map["*kernel"] = sharded_2d; },
                     {"key '*kernel'", "no argument for repetition operator"});
  // Python's re has them, RE2 has not: an error at insertion rather than at lookup.
  expect_value_error([&] { layout_map["(a)\\1"] = sharded_2d; },
                     {"key '(a)\\1'", "invalid escape"});
  expect_value_error([&] { layout_map["(?=a)a"] = sharded_2d; }, {"key '(?=a)a'"});
  EXPECT_EQ(layout_map.size(), 0u);
  // A pattern too large for RE2's memory budget is refused too.
  expect_value_error([&] { layout_map["((a{100}){100}){100}"] = sharded_2d; },
                     {"not a valid regular expression"});
  EXPECT_EQ(layout_map.size(), 0u);
}

TEST_F(LayoutMapTest, InvalidLayoutForTheMeshInsertsNothing) {
  LayoutMap layout_map(device_mesh);
  expect_value_error(
      [&] {
        layout_map["d1/kernel"] = {kdist::replicated, "unknown"};
      },
      {"'d1/kernel'", "Invalid axis names for Layout", "'unknown'", "nothing was inserted"});
  expect_value_error(
      [&] {
        layout_map["d1/kernel"] = {"model", "model"};
      },
      {"'d1/kernel'", "mesh axis 'model' is used twice"});
  EXPECT_EQ(layout_map.size(), 0u);
  EXPECT_FALSE(layout_map.contains("d1/kernel"));
  layout_map["d1/kernel"] = {kdist::replicated, "model"};  // the key is still free
  EXPECT_EQ(layout_map.size(), 1u);
}

TEST_F(LayoutMapTest, ExistingKeyNamesTheKeyAndTheValue) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = sharded_2d;
  expect_value_error(
      [&] { layout_map.insert(".*kernel", sharded_1d); },
      {".*kernel already exist in the LayoutMap with value <TensorLayout axes=(None, "
       "'model'), device_mesh=<DeviceMesh shape=(4, 2)"});
  EXPECT_EQ(layout_map.at(".*kernel"), sharded_2d.with_device_mesh(device_mesh));
}

// ---- linear time: ReDoS and huge paths
// ------------------------------------------------------------

TEST_F(LayoutMapTest, CatastrophicPatternsRunInLinearTime) {
  LayoutMap layout_map(device_mesh);
  layout_map["(a+)+$"] = replicated_1d;
  layout_map["(x+x+)+y"] = replicated_1d;
  layout_map["(a|aa)*b"] = replicated_1d;
  layout_map["(.*a){20}"] = replicated_1d;
  // Each of these takes exponential time in a backtracking engine (Python's re, std::regex).
  const std::string as = std::string(50000, 'a') + "!";
  const std::string xs = std::string(50000, 'x');
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(layout_map.get(as));
  EXPECT_FALSE(layout_map.get(xs));
  EXPECT_EQ(layout_map.matching_key(std::string(50000, 'a') + "b"), "(a|aa)*b");
  EXPECT_EQ(layout_map.matching_key(std::string(50000, 'x') + "y"), "(x+x+)+y");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "RE2 is linear time; this took " << seconds << " s";
}

TEST_F(LayoutMapTest, OneMegabytePathDoesNotOverflowTheStack) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = sharded_2d;
  layout_map["(a/)*bias"] = sharded_1d;
  layout_map["((a|b)+/)*c"] = replicated_1d;
  std::string path;
  while (path.size() < (std::size_t{1} << 20)) path += "a/";
  const std::size_t cached_before = layout_map.cache_size();
  EXPECT_EQ(layout_map.matching_key(path + "bias"), "(a/)*bias");
  EXPECT_EQ(layout_map.matching_key(path + "kernel"), ".*kernel");
  EXPECT_EQ(layout_map.matching_key(path + "c"), "((a|b)+/)*c");
  EXPECT_FALSE(layout_map.get(path + "other"));
  EXPECT_EQ(layout_map.cache_size(), cached_before) << "huge paths are not cached";
  // A 1 MB key is beyond RE2's budget for one key: refused at insertion, and the message quotes
  // only the key's beginning.
  try {
    layout_map[path] = replicated_1d;
    ADD_FAILURE() << "expected kdist::ValueError";
  } catch (const kdist::ValueError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("pattern too large"));
    EXPECT_THAT(what, HasSubstr("... (" + std::to_string(path.size()) + " characters)"));
    EXPECT_LT(what.size(), 1000u);
  }
  // Messages about a huge path are short too.
  layout_map[".*"] = replicated_1d;
  try {
    (void)layout_map.get(path + "kernel");
    ADD_FAILURE() << "expected kdist::ValueError";
  } catch (const kdist::ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("matches multiple layout specification keys: ['.*kernel', '.*']"));
    EXPECT_LT(std::string(e.what()).size(), 1000u);
  }
}

TEST_F(LayoutMapTest, ManyRulesAndHugePathsFallBackCorrectly) {
  // 500 rules in one RE2::Set, against paths long enough to strain its DFA cache: the results
  // must equal those of matching key by key.
  LayoutMap layout_map(device_mesh);
  for (int i = 0; i < 500; ++i)
    layout_map[".*b" + std::to_string(i) + "/(k|q)[a-z]*"] = replicated_1d;
  std::string noise;
  for (int i = 0; i < 20000; ++i) {
    noise += 'b';
    noise += std::to_string(i % 997);
    noise += '/';
  }
  EXPECT_EQ(layout_map.matching_key(noise + "b42/kernel"), ".*b42/(k|q)[a-z]*");
  EXPECT_EQ(layout_map.matching_key(noise + "b499/q"), ".*b499/(k|q)[a-z]*");
  EXPECT_FALSE(layout_map.get(noise + "b500/kernel"));
}

TEST_F(LayoutMapTest, KeyByKeyFallbackGivesTheSameResults) {
  // A set too large for its memory budget is not built: lookups match key by key.
  LayoutMap one_pass(device_mesh);
  for (int i = 0; i < 60; ++i) one_pass[".*b" + std::to_string(i) + "/(k|q)[a-z]*"] = replicated_1d;
  one_pass[".*b7/kernel"] = sharded_1d;  // b7/kernel matches two keys
  LayoutMap key_by_key = one_pass;
  key_by_key.set_match_memory_budget(20000);
  EXPECT_EQ(key_by_key.match_memory_budget(), 20000);
  EXPECT_TRUE(one_pass.uses_regex_set());
  EXPECT_FALSE(key_by_key.uses_regex_set());
  for (const std::string path : {"m/b3/kernel", "m/b59/q", "m/b60/kernel", "b12/kx", "m/b3/x"}) {
    EXPECT_EQ(key_by_key.matching_key(path), one_pass.matching_key(path)) << path;
  }
  expect_value_error([&] { (void)key_by_key.get("m/b7/kernel"); },
                     {"Path 'm/b7/kernel' matches multiple", "'.*b7/(k|q)[a-z]*', '.*b7/kernel'"});
  key_by_key.set_match_memory_budget(0);  // automatic again
  EXPECT_TRUE(key_by_key.uses_regex_set());
}

TEST_F(LayoutMapTest, LiteralKeysMatchExactlyTheirPathBesideRegexKeys) {
  // A key without regex metacharacters (a generated per-variable rule) is found by the exact-key
  // index, with no RE2 object of its own and outside the RE2::Set: Keras' rules all the same.
  LayoutMap layout_map(device_mesh);
  for (int i = 0; i < 1000; ++i) {
    layout_map["block" + std::to_string(i) + "/dense/kernel"] = sharded_2d;
  }
  layout_map[".*dense/kernel"] = replicated_2d;
  layout_map["block7/dense/bias"] = sharded_1d;
  EXPECT_EQ(layout_map.matching_key("block3/dense/kernel"), "block3/dense/kernel");  // exact wins
  EXPECT_EQ(layout_map.matching_key("other/dense/kernel"), ".*dense/kernel");
  EXPECT_EQ(layout_map.matching_key("xblock3/dense/kernel"), ".*dense/kernel");  // no substring
  EXPECT_FALSE(layout_map.get("block7/dense/biasx"));
  EXPECT_EQ(layout_map.get("block7/dense/bias"), sharded_1d.with_device_mesh(device_mesh));
  EXPECT_EQ(layout_map.matching_keys("block3/dense/kernel"),
            (std::vector<std::string>{"block3/dense/kernel", ".*dense/kernel"}));
  // Key by key (a Set budget too small for any Set) gives the same answers.
  LayoutMap key_by_key = layout_map;
  key_by_key.set_match_memory_budget(1);
  EXPECT_FALSE(key_by_key.uses_regex_set());
  for (const std::string path : {"block3/dense/kernel", "other/dense/kernel", "block7/dense/bias",
                                 "block7/dense/biasx", "xblock3/dense/kernel"}) {
    EXPECT_EQ(key_by_key.matching_key(path), layout_map.matching_key(path)) << path;
  }
  // A literal key that would also be a path's regex match elsewhere is still only that path.
  layout_map["block1/dense"] = sharded_1d;
  EXPECT_EQ(layout_map.matching_key("block1/dense"), "block1/dense");
  EXPECT_FALSE(layout_map.get("block1/densex"));
}

TEST_F(LayoutMapTest, InsertAllAppendsRulesInOrderOrNothing) {
  LayoutMap layout_map(device_mesh);
  layout_map["c"] = replicated_1d;
  kdist::RuntimeLayoutMap more(device_mesh);
  more["a/kernel"] = sharded_2d;
  more["b.*"] = sharded_1d;
  layout_map.insert_all(std::move(more));
  EXPECT_EQ(layout_map.keys(), (std::vector<std::string>{"c", "a/kernel", "b.*"}));
  EXPECT_EQ(layout_map.matching_key("bx"), "b.*");
  EXPECT_TRUE(more.empty());
  // A key the map has: nothing is inserted.
  kdist::RuntimeLayoutMap clash(device_mesh);
  clash["d"] = replicated_1d;
  clash["c"] = replicated_1d;
  expect_value_error([&] { layout_map.insert_all(std::move(clash)); },
                     {"c already exist in the LayoutMap"});
  EXPECT_EQ(layout_map.size(), 3u);
  // Rules without a mesh get the map's, checked: one that does not fit inserts nothing.
  kdist::RuntimeLayoutMap no_mesh;
  no_mesh["e"] = RuntimeTensorLayout{"model"};
  no_mesh["f"] = RuntimeTensorLayout{"nope"};
  expect_value_error([&] { layout_map.insert_all(std::move(no_mesh)); },
                     {"does not fit the map's mesh"});
  EXPECT_EQ(layout_map.size(), 3u);
  kdist::RuntimeLayoutMap fits;
  fits["e"] = RuntimeTensorLayout{"model"};
  layout_map.insert_all(std::move(fits));
  EXPECT_EQ(layout_map.at("e"), RuntimeTensorLayout{"model"}.with_device_mesh(device_mesh));
}

// ---- cache
// ----------------------------------------------------------------------------------------

TEST_F(LayoutMapTest, CacheIsInvalidatedByEveryChange) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = sharded_2d;
  EXPECT_FALSE(layout_map.get("x/bias"));
  EXPECT_TRUE(layout_map.get("x/kernel"));
  EXPECT_EQ(layout_map.cache_size(), 2u);
  layout_map[".*bias"] = sharded_1d;
  EXPECT_EQ(layout_map.cache_size(), 0u);
  EXPECT_TRUE(layout_map.get("x/bias"));
  layout_map[".*x/.*"] = replicated_1d;  // now x/bias matches two rules
  expect_value_error([&] { (void)layout_map.get("x/bias"); }, {"multiple"});
  expect_value_error([&] { (void)layout_map.get("x/bias"); }, {"multiple"});  // cached error
  EXPECT_EQ(layout_map.erase(".*x/.*"), 1u);
  EXPECT_EQ(layout_map.get("x/bias"), sharded_1d.with_device_mesh(device_mesh));
  (void)layout_map.pop(".*bias");
  EXPECT_FALSE(layout_map.get("x/bias"));
}

TEST_F(LayoutMapTest, CacheCapacityBoundsTheCache) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = sharded_2d;
  layout_map.set_cache_capacity(3);
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(layout_map.get(std::string("l") + std::to_string(i) + "/kernel"));
    EXPECT_LE(layout_map.cache_size(), 3u);
  }
  layout_map.set_cache_capacity(0);
  EXPECT_TRUE(layout_map.get("l0/kernel"));
  EXPECT_EQ(layout_map.cache_size(), 0u);
}

TEST_F(LayoutMapTest, ConcurrentConstLookupsAgreeWithSequentialOnes) {
  // Many threads race on the lazy RE2::Set build and on filling the cache of a fresh map.
  LayoutMap reference(device_mesh);
  std::vector<std::string> paths;
  for (int b = 0; b < 40; ++b) {
    for (const char* kind : {"attn/query/kernel", "attn/key/kernel", "mlp/up/bias", "norm/gamma"}) {
      paths.push_back("model/block_" + std::to_string(b) + "/" + kind);
    }
  }
  for (int b = 0; b < 40; b += 2) {
    reference[".*block_" + std::to_string(b) + "/attn/.*"] = sharded_2d;
    reference[".*block_" + std::to_string(b) + "/mlp/up/bias"] = sharded_1d;
  }
  std::vector<std::optional<std::string>> expected;
  for (const auto& p : paths) {
    const auto keys = reference.matching_keys(p);
    expected.push_back(keys.empty() ? std::nullopt : std::optional<std::string>(keys[0]));
  }
  for (int round = 0; round < 5; ++round) {
    const LayoutMap layout_map = reference;  // fresh cache, no set built yet
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 4000; ++i) {
          const std::size_t k = static_cast<std::size_t>(i * 7 + t) % paths.size();
          if (layout_map.matching_key(paths[k]) != expected[k]) ++mismatches;
          const auto* l = layout_map.find(paths[k]);
          if ((l != nullptr) != expected[k].has_value()) ++mismatches;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0);
  }
}

// ---- diagnostics
// ----------------------------------------------------------------------------------

TEST_F(LayoutMapTest, ResolveChecksRankWithThePathInTheMessage) {
  LayoutMap layout_map(device_mesh);
  layout_map[".*kernel"] = {kdist::replicated, "model"};
  EXPECT_EQ(layout_map.resolve("d1/kernel", {784, 200}), sharded_2d.with_device_mesh(device_mesh));
  expect_value_error([&] { (void)layout_map.resolve("d1/kernel", {784}); },
                     {"variable 'd1/kernel' of shape (784,)", "matches key '.*kernel'",
                      "(None, 'model') has rank 2", "the variable has rank 1"});
  expect_value_error(
      [&] {
        (void)layout_map.resolve("conv/kernel", {3, 3, 1, 32});
      },
      {"'conv/kernel'", "rank 4"});
  // Any integer range works as a shape.
  EXPECT_TRUE(layout_map.resolve("d2/kernel", std::vector<int>{10, 4}));
}

TEST_F(LayoutMapTest, ResolveChecksEvenDivisionWhenTheLayoutDemandsIt) {
  LayoutMap layout_map(device_mesh);
  layout_map["even/kernel"] =
      RuntimeTensorLayout({kdist::replicated, "model"}, device_mesh, kdist::Division::even);
  layout_map["chunk/kernel"] = {kdist::replicated, "model"};
  EXPECT_TRUE(layout_map.resolve("even/kernel", {5, 8}));
  expect_value_error(
      [&] {
        (void)layout_map.resolve("even/kernel", {5, 7});
      },
      {"variable 'even/kernel' of shape (5, 7)", "dimension 1 (extent 7) into 2 shards", "'model'",
       "demands even division"});
  // kdist's default division (torch.chunk) accepts uneven shards...
  EXPECT_TRUE(layout_map.resolve("chunk/kernel", {5, 7}));
  // ...unless the map is strict.
  layout_map.set_strict(true);
  expect_value_error(
      [&] {
        (void)layout_map.resolve("chunk/kernel", {5, 7});
      },
      {"'chunk/kernel'", "strict mode demands even division"});
}

TEST_F(LayoutMapTest, StrictModeRejectsUnmatchedVariablesOfRankTwoOrMore) {
  LayoutMap layout_map(device_mesh);
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  EXPECT_FALSE(layout_map.strict());
  EXPECT_FALSE(layout_map.resolve("d2/kernel", {200, 10}));  // replicated, silently
  layout_map.set_strict(true);
  EXPECT_TRUE(layout_map.strict());
  expect_value_error(
      [&] {
        (void)layout_map.resolve("d2/kernel", {200, 10});
      },
      {"strict", "variable 'd2/kernel' of shape (200, 10) matches no rule"});
  EXPECT_FALSE(layout_map.resolve("d2/bias", {10}));  // rank 1: replicated, reported
  EXPECT_FALSE(layout_map.resolve("seed", std::vector<std::size_t>{}));
  // get() is a lookup of tensor layouts, not a variable resolution: never strict.
  EXPECT_FALSE(layout_map.get("d2/kernel"));
}

TEST_F(LayoutMapTest, ReportListsUnusedRulesAndReplicatedVariables) {
  LayoutMap layout_map(device_mesh);
  layout_map["d1/kernel"] = {kdist::replicated, "model"};
  layout_map["d1/bias"] = {"model"};
  layout_map[".*dense.*kernel"] = {kdist::replicated, "model"};  // typo'd model: never used
  EXPECT_EQ(layout_map.report().unused_rules,
            (std::vector<std::string>{"d1/kernel", "d1/bias", ".*dense.*kernel"}));
  (void)layout_map.resolve("d1/kernel", {784, 200});
  (void)layout_map.resolve("d1/bias", {200});
  (void)layout_map.resolve("d2/kernel", {200, 10});
  (void)layout_map.resolve("d2/bias", {10});
  (void)layout_map.resolve("d2/bias", {10});  // once in the report
  auto report = layout_map.report();
  EXPECT_EQ(report.unused_rules, (std::vector<std::string>{".*dense.*kernel"}));
  EXPECT_EQ(report.replicated_variables, (std::vector<kdist::LayoutMapReport::Fallback>{
                                             {"d2/bias", {10}}, {"d2/kernel", {200, 10}}}));
  EXPECT_FALSE(report.empty());
  const std::string text = report.to_string();
  EXPECT_THAT(text, HasSubstr("1 rule(s) matched nothing, 2 variable(s) fell back to replicated"));
  EXPECT_THAT(text, HasSubstr("unused rule: '.*dense.*kernel'"));
  EXPECT_THAT(text, HasSubstr("replicated: 'd2/kernel' shape (200, 10)"));
  // Used flags survive later changes of the map; the report can be reset.
  layout_map["extra"] = {"model"};
  EXPECT_EQ(layout_map.report().unused_rules,
            (std::vector<std::string>{".*dense.*kernel", "extra"}));
  layout_map.reset_report();
  EXPECT_EQ(layout_map.report().unused_rules.size(), 4u);
  EXPECT_TRUE(layout_map.report().replicated_variables.empty());
}

}  // namespace
