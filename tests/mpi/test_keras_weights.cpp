// kdist-mpi-ranks: 1 2 4
// kdist-mpi-filter-4: KerasWeights.FileWrittenByKeras*:KerasWeights.SavedOnEvery*
// At 4 processes only the tests of 4-process layouts run; the rest at 1 and 2. Files in 16 bits
// (Keras' "bfloat16" and "float16" policies) load exactly widened and are written as Keras writes
// them.
// Keras weights exchange (issue 11): save_keras_weights writes Keras 3's `.weights.h5` layout
// (groups, dataset names, dtypes, the optimizer's variables in Keras' order), checked here with the
// HDF5 library and h5ls only; a file Keras 3.15 wrote (tests/data, made by
// scripts/keras/make_test_fixture.py) loads on every mesh; a save on one layout loads on every
// other bit for bit; an optimizer whose state does not match is left alone as Keras does; every bad
// file is the same ValueError on every process, naming the file and the layer.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/nn/loss_scale_optimizer.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

#ifndef KDIST_TEST_DATA_DIR
#error "KDIST_TEST_DATA_DIR (tests/data) must be defined by the build"
#endif

namespace {

using namespace kdist::test;
using kdist::test::contains;
using kdist::test::message_of;

class KerasWeights : public TempDirTest {};

// A user's layer with variables that names no Keras class.
struct Scaled : kdist::layers::Dense {
  using kdist::layers::Dense::Dense;
  static constexpr std::string_view keras_class = "";
};

const std::string keras_fixture = std::string(KDIST_TEST_DATA_DIR) + "/keras_small.weights.h5";
const kdist::FitOptions one_epoch{.batch_size = 16, .epochs = 1, .shuffle = true, .verbose = 0};

// ---- reading the file with the HDF5 library (process 0) --------------------------------------

// The names of every object under `/`, groups ending in '/', in HDF5's name order.
std::vector<std::string> tree_of(const std::string& path) {
  std::vector<std::string> out;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  H5Ovisit(
      f, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (std::string(name) == ".") return 0;
        static_cast<std::vector<std::string>*>(data)->push_back(
            std::string(name) + (info->type == H5O_TYPE_GROUP ? "/" : ""));
        return 0;
      },
      &out);
  H5Fclose(f);
  return out;
}

std::string string_attribute(const std::string& path, const char* object, const char* name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::string value;
  if (H5Aexists_by_name(f, object, name, H5P_DEFAULT) > 0) {
    hid_t a = H5Aopen_by_name(f, object, name, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    if (H5Tis_variable_str(t) > 0) {
      char* s = nullptr;
      H5Aread(a, t, &s);
      value = s;
      H5free_memory(s);
    } else {
      value.resize(H5Tget_size(t));
      H5Aread(a, t, value.data());
      value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
    }
    H5Tclose(t);
    H5Aclose(a);
  }
  H5Fclose(f);
  return value;
}

struct DatasetInfo {
  std::vector<hsize_t> dims;
  bool float32 = false;
  bool int32 = false;
  int attributes = 0;
  std::vector<float> values;  // as float
};
DatasetInfo dataset_of(const std::string& path, const std::string& name) {
  DatasetInfo out;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << name;
  if (d >= 0) {
    hid_t s = H5Dget_space(d);
    out.dims.resize(static_cast<std::size_t>(H5Sget_simple_extent_ndims(s)));
    H5Sget_simple_extent_dims(s, out.dims.data(), nullptr);
    out.values.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
    hid_t t = H5Dget_type(d);
    out.float32 = H5Tequal(t, H5T_IEEE_F32LE) > 0;
    out.int32 = H5Tequal(t, H5T_STD_I32LE) > 0;
    H5O_info_t info{};
    H5Oget_info(d, &info);
    out.attributes = static_cast<int>(info.num_attrs);
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data());
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
  }
  H5Fclose(f);
  return out;
}

// ---- the layout Keras writes ------------------------------------------------------------------

TEST_F(KerasWeights, SeedsModelFileHasKerasLayoutAndValues) {
  auto m = seeds_model();
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::RMSprop(0.002), 3);
  m.fit(seeds_data(), one_epoch);
  const std::string path = file("seeds.weights.h5");
  kdist::save_keras_weights(m, path);
  const auto state = state_of(m);
  if (world_rank() == 0) {
    // exactly the tree Keras 3.15's model.save_weights writes for this model (checked against
    // Keras: docs/checkpoints.md)
    const std::vector<std::string> want{"layers/",
                                        "layers/dense/",
                                        "layers/dense/vars/",
                                        "layers/dense/vars/0",
                                        "layers/dense_1/",
                                        "layers/dense_1/vars/",
                                        "layers/dense_1/vars/0",
                                        "layers/dense_1/vars/1",
                                        "layers/dropout/",
                                        "layers/dropout/vars/",
                                        "layers/flatten/",
                                        "layers/flatten/vars/",
                                        "optimizer/",
                                        "optimizer/vars/",
                                        "optimizer/vars/0",
                                        "optimizer/vars/1",
                                        "optimizer/vars/2",
                                        "optimizer/vars/3",
                                        "optimizer/vars/4",
                                        "vars/"};
    EXPECT_EQ(tree_of(path), want);
    EXPECT_EQ(string_attribute(path, "layers/dense/vars", "name"), "d1");
    EXPECT_EQ(string_attribute(path, "layers/dense_1/vars", "name"), "d2");
    EXPECT_EQ(string_attribute(path, "layers/dropout/vars", "name"), "dropout");
    EXPECT_EQ(string_attribute(path, "optimizer/vars", "name"), "rm_sprop");
    EXPECT_EQ(string_attribute(path, "vars", "name"), "sequential");
    const auto k1 = dataset_of(path, "layers/dense/vars/0");
    EXPECT_EQ(k1.dims, (std::vector<hsize_t>{784, 200}));
    EXPECT_TRUE(k1.float32);
    EXPECT_EQ(k1.attributes, 0);  // Keras' datasets carry no attributes
    EXPECT_EQ(k1.values, state.at("d1/kernel"));
    EXPECT_EQ(dataset_of(path, "layers/dense_1/vars/0").values, state.at("d2/kernel"));
    EXPECT_EQ(dataset_of(path, "layers/dense_1/vars/1").values, state.at("d2/bias"));
    const auto it = dataset_of(path, "optimizer/vars/0");
    EXPECT_TRUE(it.int32 && it.dims.empty());
    EXPECT_EQ(it.values, std::vector<float>{static_cast<float>(m.iterations())});
    const auto lr = dataset_of(path, "optimizer/vars/1");
    EXPECT_TRUE(lr.float32 && lr.dims.empty());
    EXPECT_EQ(lr.values, std::vector<float>{0.002f});
    // RMSprop's velocities, in the order of the model's variables
    EXPECT_EQ(dataset_of(path, "optimizer/vars/2").values, state.at("d1/kernel/slot0"));
    EXPECT_EQ(dataset_of(path, "optimizer/vars/3").values, state.at("d2/kernel/slot0"));
    EXPECT_EQ(dataset_of(path, "optimizer/vars/4").values, state.at("d2/bias/slot0"));
#ifdef KDIST_TEST_H5LS
    const std::string listing = h5ls_listing(path);
    for (const char* line : {"/layers/dense/vars/0     Dataset {784, 200}",
                             "/optimizer/vars/0        Dataset {SCALAR}"}) {
      EXPECT_TRUE(contains(listing, line)) << "h5ls -r:\n" << listing << "\nlacks " << line;
    }
#endif
  }
}

// Adam keeps (momentum, velocity) of each variable in turn; RMSprop with momentum and centered
// every velocity, then every momentum, then every average gradient (Keras' build order).
TEST_F(KerasWeights, OptimizerSlotsInKerasOrder) {
  struct Case {
    std::string name;
    kdist::Sequential::Optimizer optimizer;
    std::vector<std::string> order;  // datasets 2, 3, ...: variable/slot<k>
  };
  const std::vector<Case> cases{
      {"Adam",
       kdist::Adam(0.01),
       {"d1/kernel/slot0", "d1/kernel/slot1", "d1/bias/slot0", "d1/bias/slot1", "d2/kernel/slot0",
        "d2/kernel/slot1", "d2/bias/slot0", "d2/bias/slot1"}},
      {"RMSprop(momentum, centered)",
       kdist::RMSprop(0.01, 0.9, 0.5, 1e-7, true),
       // kdist's slots: 0 velocity, 1 average_gradient, 2 momentum
       {"d1/kernel/slot0", "d1/bias/slot0", "d2/kernel/slot0", "d2/bias/slot0", "d1/kernel/slot2",
        "d1/bias/slot2", "d2/kernel/slot2", "d2/bias/slot2", "d1/kernel/slot1", "d1/bias/slot1",
        "d2/kernel/slot1", "d2/bias/slot1"}},
      {"SGD(momentum)",
       kdist::SGD(0.01, 0.9),
       {"d1/kernel/slot0", "d1/bias/slot0", "d2/kernel/slot0", "d2/bias/slot0"}},
  };
  for (const auto& c : cases) {
    auto m = small_model();
    m.compile(guide_model_parallel(meshes().back()), kdist::Loss::mean_squared_error, c.optimizer,
              4);
    m.fit(small_data(), one_epoch);
    const std::string path = file("opt.weights.h5");
    kdist::save_keras_weights(m, path);
    const auto state = state_of(m);
    if (world_rank() == 0) {
      for (std::size_t i = 0; i < c.order.size(); ++i) {
        EXPECT_EQ(dataset_of(path, "optimizer/vars/" + std::to_string(2 + i)).values,
                  state.at(c.order[i]))
            << c.name << ": optimizer/vars/" << 2 + i << " should be " << c.order[i];
      }
      hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      H5G_info_t g{};
      H5Gget_info_by_name(f, "optimizer/vars", &g, H5P_DEFAULT);
      EXPECT_EQ(g.nlinks, 2 + c.order.size()) << c.name;
      H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

TEST_F(KerasWeights, WithoutOptimizerHasNoOptimizerGroup) {
  auto m = small_model();
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::Adam(0.01), 4);
  const std::string path = file("weights_only.weights.h5");
  kdist::save_keras_weights(m, path, {.optimizer = false});
  if (world_rank() == 0) {
    for (const auto& name : tree_of(path)) {
      EXPECT_NE(name.rfind("optimizer", 0), 0u) << name;
    }
  }
  auto loaded = small_model();
  loaded.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                 kdist::Adam(0.01), 9);
  const auto r = kdist::load_keras_weights(loaded, path);
  EXPECT_FALSE(r.optimizer_loaded);
  EXPECT_TRUE(contains(r.optimizer_note, "no optimizer state")) << r.optimizer_note;
  EXPECT_EQ(state_of(loaded).at("d1/kernel"), state_of(m).at("d1/kernel"));
}

// ---- a file Keras wrote -----------------------------------------------------------------------

// What Keras wrote in `path`, read with the HDF5 library: small_model()'s weights, and the
// optimizer datasets `slots` as kdist's state_of() names them ("d1/kernel/slot0").
std::map<std::string, std::vector<float>> keras_state(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& slots) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, key] :
       {std::pair<std::string, std::string>{"layers/dense/vars/0", "d1/kernel"},
        {"layers/dense/vars/1", "d1/bias"},
        {"layers/dense_1/vars/0", "d2/kernel"},
        {"layers/dense_1/vars/1", "d2/bias"}}) {
    out[key] = dataset_of(path, name).values;
  }
  for (const auto& [name, key] : slots) out[key] = dataset_of(path, name).values;
  return out;
}

TEST_F(KerasWeights, FileWrittenByKerasLoadsOnEveryLayout) {
  const auto keras = keras_state(keras_fixture, {{"optimizer/vars/2", "d1/kernel/slot0"},
                                                 {"optimizer/vars/3", "d1/bias/slot0"},
                                                 {"optimizer/vars/4", "d2/kernel/slot0"},
                                                 {"optimizer/vars/5", "d2/bias/slot0"}});
  for (const auto& dist : distributions()) {
    auto m = small_model();
    m.compile(dist, kdist::Loss::mean_squared_error, kdist::RMSprop(0.5), 11);
    const auto r = kdist::load_keras_weights(m, keras_fixture);
    const std::string what = layouts_of(m);
    EXPECT_TRUE(r.optimizer_loaded) << what << ": " << r.optimizer_note;
    EXPECT_EQ(r.iterations, 3) << what;  // the fixture trained 3 steps
    EXPECT_EQ(m.iterations(), 3) << what;
    EXPECT_FLOAT_EQ(static_cast<float>(std::get<kdist::RMSprop>(m.optimizer()).learning_rate()),
                    0.01f)
        << what;
    expect_bitwise_equal(state_of(m), keras, what);
    // and it trains on from there on every layout alike
    const double loss = m.fit(small_data(), one_epoch).epochs.back().loss;
    EXPECT_TRUE(std::isfinite(loss)) << what;
  }
}

// Keras' LossScaleOptimizer (scripts/keras/make_test_fixture.py --loss-scale): its own variables
// (iteration, learning rate, step_counter, dynamic_scale) then Adam's in /optimizer/vars, and
// Adam's again in /optimizer/inner_optimizer/vars. kdist loads the scale, the counter and Adam's
// state on every layout, and writes the same objects with the same values back.
TEST_F(KerasWeights, ALossScaleOptimizersStateAsKerasWritesItBothWays) {
  const std::string fixture = std::string(KDIST_TEST_DATA_DIR) + "/keras_small_lso.weights.h5";
  std::vector<std::pair<std::string, std::string>> slots;  // Adam's after the scaling's four
  std::size_t i = 6;
  for (const char* v : {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"}) {
    for (const char* k : {"/slot0", "/slot1"}) {  // momentum, velocity
      slots.emplace_back("optimizer/vars/" + std::to_string(i++), std::string(v) + k);
    }
  }
  const auto keras = keras_state(fixture, slots);
  const auto lso = [] { return kdist::LossScaleOptimizer(kdist::Adam(0.5), 1024.0, 2); };
  for (const auto& dist : distributions()) {
    auto m = small_model();
    m.compile(dist, kdist::Loss::mean_squared_error, lso(), 11);
    const auto r = kdist::load_keras_weights(m, fixture);
    const std::string what = layouts_of(m);
    EXPECT_TRUE(r.optimizer_loaded) << what << ": " << r.optimizer_note;
    EXPECT_EQ(m.iterations(), 3) << what;
    EXPECT_FLOAT_EQ(static_cast<float>(m.optimizer().learning_rate()), 0.01F) << what;
    ASSERT_NE(m.loss_scaling(), nullptr);
    EXPECT_EQ(m.loss_scaling()->loss_scale(), 2048.0) << what;  // 1024 doubled after 2 steps
    EXPECT_EQ(m.loss_scaling()->step_counter(), 1) << what;
    expect_bitwise_equal(state_of(m), keras, what);
    // written back: Keras' objects, and the values it wrote
    const std::string path = file("lso.weights.h5");
    kdist::save_keras_weights(m, path);
    if (world_rank() == 0) {
      EXPECT_EQ(tree_of(path), tree_of(fixture)) << what;
      EXPECT_EQ(string_attribute(path, "optimizer/vars", "name"), "loss_scale_optimizer");
      EXPECT_EQ(string_attribute(path, "optimizer/inner_optimizer/vars", "name"), "adam");
      for (int v = 0; v < 14; ++v) {
        const std::string name = "optimizer/vars/" + std::to_string(v);
        EXPECT_EQ(dataset_of(path, name).values, dataset_of(fixture, name).values)
            << what << " " << name;
      }
      for (int v = 0; v < 10; ++v) {
        const std::string name = "optimizer/inner_optimizer/vars/" + std::to_string(v);
        EXPECT_EQ(dataset_of(path, name).values, dataset_of(fixture, name).values)
            << what << " " << name;
      }
    }
  }
  // a plain Adam's file is another optimizer: the state is left as it is, as Keras does
  auto plain = small_model();
  plain.compile(distributions().front(), kdist::Loss::mean_squared_error, kdist::Adam(0.01), 11);
  plain.fit(small_data(), one_epoch);
  const std::string adam_path = file("adam.weights.h5");
  kdist::save_keras_weights(plain, adam_path);
  auto again = small_model();
  again.compile(distributions().front(), kdist::Loss::mean_squared_error, lso(), 11);
  const auto r2 = kdist::load_keras_weights(again, adam_path);
  EXPECT_FALSE(r2.optimizer_loaded);
  EXPECT_EQ(again.loss_scaling()->loss_scale(), 1024.0);
}

// ---- save on one layout, load on every other ---------------------------------------------------

TEST_F(KerasWeights, SavedOnEveryLayoutLoadsOnEveryOtherBitForBit) {
  const auto dists = distributions();
  for (std::size_t s = 0; s < dists.size(); ++s) {
    auto saved = small_model();
    saved.compile(dists[s], kdist::Loss::mean_squared_error, kdist::Adam(0.01), 5);
    saved.fit(small_data(), one_epoch);
    const auto want = state_of(saved);
    const std::string path = file("w" + std::to_string(s) + ".weights.h5");
    kdist::save_keras_weights(saved, path);
    for (std::size_t l = 0; l < dists.size(); ++l) {
      auto loaded = small_model();
      loaded.compile(dists[l], kdist::Loss::mean_squared_error, kdist::Adam(0.01), 99);
      const std::string what =
          "saved on " + layouts_of(saved) + ", loaded on " + layouts_of(loaded);
      const auto r = kdist::load_keras_weights(loaded, path);
      EXPECT_TRUE(r.optimizer_loaded) << what;
      expect_bitwise_equal(state_of(loaded), want, what);
      EXPECT_EQ(loaded.iterations(), saved.iterations()) << what;
    }
  }
}

// Conv2D: the ModelParallel page's rules (filters over 'model') saved and loaded on every mesh.
TEST_F(KerasWeights, Conv2DModelRoundTripsAcrossMeshes) {
  using namespace kdist::layers;
  const auto conv_model = [] {
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Conv2D(4, {3, 3}, Activation::relu, true, "conv2d"));
    l.emplace_back(Flatten());
    l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    return kdist::Sequential({8, 8, 1}, std::move(l));
  };
  const auto conv_rules = [](const std::vector<std::size_t>& shape) {
    kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
    kdist::LayoutMap map(mesh);
    map["conv2d.*kernel"] = {kdist::replicated, kdist::replicated, kdist::replicated, "model"};
    map["conv2d.*bias"] = {"model"};
    return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
  };
  auto saved = conv_model();
  saved.compile(conv_rules(meshes().back()), kdist::Loss::mean_squared_error, kdist::Adam(0.01), 2);
  saved.fit(small_data(), one_epoch);
  const std::string path = file("conv.weights.h5");
  kdist::save_keras_weights(saved, path);
  if (world_rank() == 0) {
    EXPECT_EQ(dataset_of(path, "layers/conv2d/vars/0").dims, (std::vector<hsize_t>{3, 3, 1, 4}));
    EXPECT_EQ(dataset_of(path, "layers/dense/vars/0").dims, (std::vector<hsize_t>{144, 10}));
    EXPECT_EQ(string_attribute(path, "layers/flatten/vars", "name"), "flatten");
  }
  for (const auto& shape : meshes()) {
    auto loaded = conv_model();
    loaded.compile(conv_rules(shape), kdist::Loss::mean_squared_error, kdist::Adam(0.01), 8);
    kdist::load_keras_weights(loaded, path);
    expect_bitwise_equal(state_of(loaded), state_of(saved), layouts_of(loaded));
  }
}

// ---- the optimizer: Keras' rule -------------------------------------------------------------

TEST_F(KerasWeights, OptimizerOfAnotherKindIsLeftAloneAndSaysWhy) {
  auto m = small_model();
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::SGD(0.01), 4);  // no momentum: only the step counter and the learning rate
  m.fit(small_data(), one_epoch);
  const std::string path = file("sgd.weights.h5");
  kdist::save_keras_weights(m, path);
  auto loaded = small_model();
  loaded.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                 kdist::Adam(0.03), 9);
  const auto r = kdist::load_keras_weights(loaded, path);
  EXPECT_FALSE(r.optimizer_loaded);
  EXPECT_TRUE(contains(r.optimizer_note,
                       "the file's optimizer has 2 variables but the model's "
                       "Adam has 10"))
      << r.optimizer_note;
  EXPECT_EQ(loaded.iterations(), 0);
  EXPECT_EQ(std::get<kdist::Adam>(loaded.optimizer()).learning_rate(), 0.03);
  EXPECT_EQ(state_of(loaded).at("d2/kernel"), state_of(m).at("d2/kernel"));  // weights did load
  const auto skipped = kdist::load_keras_weights(loaded, keras_fixture, {.optimizer = false});
  EXPECT_FALSE(skipped.optimizer_loaded);
  EXPECT_EQ(skipped.optimizer_note, "not asked for");
}

// ---- errors: the same message on every process, the model unchanged ---------------------------

TEST_F(KerasWeights, BadFilesAreTheSameErrorEverywhere) {
  auto m = small_model();
  m.compile(guide_model_parallel(meshes().back()), kdist::Loss::mean_squared_error,
            kdist::RMSprop(), 1);
  const auto before = state_of(m);
  const auto fails = [&](const std::string& path, const std::string& expected) {
    const std::string msg =
        message_of<kdist::ValueError>([&] { kdist::load_keras_weights(m, path); });
    EXPECT_TRUE(contains(msg, expected)) << msg << "\nlacks: " << expected;
    expect_same_on_every_process(msg);
    expect_bitwise_equal(state_of(m), before, "after a failed load of " + path);
  };
  fails(file("none.weights.h5"), "kdist::load_keras_weights: '" + file("none.weights.h5") +
                                     "': no such file (a Keras weights file is written by");
  write_file_on_zero(file("text.weights.h5"), "not hdf5 at all");
  fails(file("text.weights.h5"), "' is not an HDF5 file, so not a Keras weights file");
  // an HDF5 file that is no Keras weights file: a kdist checkpoint
  kdist::save_checkpoint(m, file("ckpt.h5"));
  fails(file("ckpt.h5"),
        "' is an HDF5 file but not a Keras weights file: it has no group "
        "'/layers'");
  // another model: d1 of 12 units
  {
    auto other = small_model(12);
    other.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                  kdist::RMSprop(), 1);
    kdist::save_keras_weights(other, file("wide.weights.h5"));
  }
  fails(file("wide.weights.h5"),
        "': variable 0 of layer 'd1' (group '/layers/dense') has shape (64, 12) in the file but "
        "(64, 10) in the model; the file holds the weights of another model");
  // a model with one more Dense layer than the file
  {
    auto longer = small_model(10, /*extra_layer=*/true);
    longer.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                   kdist::RMSprop(), 1);
    const std::string msg =
        message_of<kdist::ValueError>([&] { kdist::load_keras_weights(longer, keras_fixture); });
    EXPECT_TRUE(contains(msg, "layer 'd2' (group '/layers/dense_2') is not in the file")) << msg;
    expect_same_on_every_process(msg);
  }
  // a file with one more Dense layer than the model
  {
    auto longer = small_model(10, /*extra_layer=*/true);
    longer.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                   kdist::RMSprop(), 1);
    kdist::save_keras_weights(longer, file("longer.weights.h5"));
  }
  fails(file("longer.weights.h5"),
        "the file has weights for layer group '/layers/dense_2', which the model has no layer "
        "for");
  // a layer's variable count (d1 without a bias in the model)
  {
    using namespace kdist::layers;
    std::vector<kdist::Sequential::Layer> l;
    l.emplace_back(Flatten());
    l.emplace_back(Dense(10, Activation::relu, false, "d1"));
    l.emplace_back(Dropout(0.4, "dropout"));
    l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
    kdist::Sequential no_bias({8, 8, 1}, std::move(l));
    no_bias.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                    kdist::RMSprop(), 1);
    const std::string msg =
        message_of<kdist::ValueError>([&] { kdist::load_keras_weights(no_bias, keras_fixture); });
    EXPECT_TRUE(contains(msg,
                         "layer 'd1' (group '/layers/dense') has 1 variable(s) in the model "
                         "but 2 in the file"))
        << msg;
  }
  // a damaged file: a variable's dataset replaced by one of integers
  if (world_rank() == 0) {
    std::filesystem::copy_file(keras_fixture, file("damaged.weights.h5"));
    hid_t f = H5Fopen(file("damaged.weights.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Ldelete(f, "layers/dense_1/vars/1", H5P_DEFAULT);
    const hsize_t n = 10;
    hid_t s = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "layers/dense_1/vars/1", H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(s);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  fails(file("damaged.weights.h5"),
        "dataset '/layers/dense_1/vars/1' (variable 1 of layer 'd2' (group '/layers/dense_1')) "
        "does not hold floating-point values; the file is damaged");
}

// ---- 16-bit files: Keras' "bfloat16" and "float16" policies -------------------------------------

// A 16-bit dataset as it is stored: its type's class and size, its `dtype` attribute, and its
// values widened by kdist's exact conversions (the words read as stored, with no HDF5 conversion).
struct SixteenBitDataset {
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  std::string dtype;
  std::vector<float> values;
};
SixteenBitDataset sixteen_bit_dataset(const std::string& path, const std::string& name,
                                      bool bfloat16) {
  SixteenBitDataset out;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0) << name;
  hid_t t = H5Dget_type(d);
  out.cls = H5Tget_class(t);
  out.size = H5Tget_size(t);
  hid_t s = H5Dget_space(d);
  std::vector<std::uint16_t> words(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  if (out.size == 2) {
    EXPECT_GE(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, words.data()), 0);
  }
  for (const auto w : words) {
    out.values.push_back(bfloat16 ? kdist::from_bfloat16_bits(w) : kdist::from_float16_bits(w));
  }
  H5Sclose(s);
  H5Tclose(t);
  H5Dclose(d);
  H5Fclose(f);
  out.dtype = string_attribute(path, name.c_str(), "dtype");
  return out;
}

// small_model()'s weights and RMSprop's velocities as a 16-bit file holds them, widened.
std::map<std::string, std::vector<float>> sixteen_bit_state(const std::string& path,
                                                            bool bfloat16) {
  std::map<std::string, std::vector<float>> out;
  const char* keys[] = {"d1/kernel", "d1/bias", "d2/kernel", "d2/bias"};
  const char* layers[] = {"layers/dense/vars/0", "layers/dense/vars/1", "layers/dense_1/vars/0",
                          "layers/dense_1/vars/1"};
  for (int i = 0; i < 4; ++i) {
    out[keys[i]] = sixteen_bit_dataset(path, layers[i], bfloat16).values;
    out[std::string(keys[i]) + "/slot0"] =
        sixteen_bit_dataset(path, "optimizer/vars/" + std::to_string(2 + i), bfloat16).values;
  }
  return out;
}

// Files Keras 3.15 wrote under "bfloat16" and "float16" (scripts/keras/make_test_fixture.py
// --policy): every variable and RMSprop velocity widened exactly into kdist's float32 model, on
// every layout, with the step counter and learning rate.
TEST_F(KerasWeights, SixteenBitFilesWrittenByKerasLoadOnEveryLayout) {
  for (const bool bfloat16 : {true, false}) {
    const std::string fixture = std::string(KDIST_TEST_DATA_DIR) + "/keras_small_" +
                                (bfloat16 ? "bfloat16" : "float16") + ".weights.h5";
    const auto keras = sixteen_bit_state(fixture, bfloat16);
    const auto d1 = sixteen_bit_dataset(fixture, "layers/dense/vars/0", bfloat16);
    EXPECT_EQ(d1.cls, bfloat16 ? H5T_OPAQUE : H5T_FLOAT);
    EXPECT_EQ(d1.size, 2U);
    EXPECT_EQ(d1.dtype, bfloat16 ? "bfloat16" : "");
    for (const auto& dist : distributions()) {
      auto m = small_model();
      m.compile(dist, kdist::Loss::mean_squared_error, kdist::RMSprop(0.5), 11);
      const auto r = kdist::load_keras_weights(m, fixture);
      const std::string what = fixture + " on " + layouts_of(m);
      EXPECT_TRUE(r.optimizer_loaded) << what << ": " << r.optimizer_note;
      EXPECT_EQ(m.iterations(), 3) << what;
      expect_bitwise_equal(state_of(m), keras, what);
      EXPECT_TRUE(std::isfinite(m.fit(small_data(), one_epoch).epochs.back().loss)) << what;
    }
  }
}

// KerasWeightsOptions::dtype: the variables and slots (RMSprop's) written as Keras writes them under that
// policy (the values rounded to nearest, ties to even; the step counter int32 and the learning
// rate float32), and the file loads back on every other layout as those rounded values.
TEST_F(KerasWeights, SavedInSixteenBitsAsKerasWritesThem) {
  const auto dists = distributions();
  for (const std::string dtype : {"bfloat16", "float16"}) {
    const bool bfloat16 = dtype == "bfloat16";
    auto saved = small_model();
    saved.compile(dists.front(), kdist::Loss::mean_squared_error, kdist::RMSprop(0.01), 5);
    saved.fit(small_data(), one_epoch);
    auto want = state_of(saved);
    std::size_t changed = 0;
    for (auto& [key, values] : want) {
      for (auto& x : values) {
        const float r = bfloat16 ? kdist::from_bfloat16_bits(kdist::to_bfloat16_bits(x))
                                 : kdist::from_float16_bits(kdist::to_float16_bits(x));
        changed += r != x ? 1 : 0;
        x = r;
      }
    }
    EXPECT_GT(changed, 100U) << dtype << ": the rounding is seen";
    const std::string path = file("sixteen_" + dtype + ".weights.h5");
    kdist::save_keras_weights(saved, path, {.dtype = dtype});
    if (kdist::process_id() == 0) {
      const auto file_state = sixteen_bit_state(path, bfloat16);
      for (const auto& [key, values] : file_state) {
        EXPECT_EQ(values, want.at(key)) << dtype << " " << key;
      }
      const auto d2 = sixteen_bit_dataset(path, "layers/dense_1/vars/0", bfloat16);
      EXPECT_EQ(d2.cls, bfloat16 ? H5T_OPAQUE : H5T_FLOAT) << dtype;
      EXPECT_EQ(d2.size, 2U) << dtype;
      EXPECT_EQ(d2.dtype, bfloat16 ? "bfloat16" : "") << dtype;
      EXPECT_TRUE(dataset_of(path, "optimizer/vars/0").int32) << dtype;
      EXPECT_TRUE(dataset_of(path, "optimizer/vars/1").float32) << dtype;
    }
    for (const auto& dist : dists) {
      auto loaded = small_model();
      loaded.compile(dist, kdist::Loss::mean_squared_error, kdist::RMSprop(0.01), 99);
      const auto r = kdist::load_keras_weights(loaded, path);
      EXPECT_TRUE(r.optimizer_loaded) << dtype;
      expect_bitwise_equal(state_of(loaded), want, dtype + " loaded on " + layouts_of(loaded));
      EXPECT_EQ(loaded.iterations(), saved.iterations()) << dtype;
    }
  }
  // the model's own dtype by name is the float32 file
  auto m = small_model();
  m.compile(dists.front(), kdist::Loss::mean_squared_error, kdist::RMSprop(0.01), 5);
  kdist::save_keras_weights(m, file("own.weights.h5"), {.dtype = "float32"});
  if (kdist::process_id() == 0) {
    EXPECT_TRUE(dataset_of(file("own.weights.h5"), "layers/dense/vars/0").float32);
  }
  const std::string bad = message_of<kdist::ValueError>(
      [&] { kdist::save_keras_weights(m, file("bad.weights.h5"), {.dtype = "int8"}); });
  EXPECT_TRUE(contains(bad,
                       "kdist::save_keras_weights: KerasWeightsOptions::dtype is 'int8'; "
                       "Keras writes variables as \"float32\""))
      << bad;
  expect_same_on_every_process(bad);
  EXPECT_FALSE(std::filesystem::exists(file("bad.weights.h5")));
}

TEST_F(KerasWeights, ModelErrors) {
  // not compiled
  auto m = small_model();
  EXPECT_TRUE(contains(
      message_of<kdist::ValueError>([&] { kdist::save_keras_weights(m, file("x.weights.h5")); }),
      "kdist::save_keras_weights: the model is not compiled"));
  EXPECT_TRUE(
      contains(message_of<kdist::ValueError>([&] { kdist::load_keras_weights(m, keras_fixture); }),
               "kdist::load_keras_weights: the model is not compiled"));
  // a user layer with variables and no Keras class
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(kdist::layers::Flatten());
  l.emplace_back(Scaled(10, kdist::layers::Activation::softmax, true, "mine"));
  kdist::Sequential user({8, 8, 1}, std::move(l));
  user.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
               kdist::SGD(), 1);
  const std::string msg = message_of<kdist::ValueError>(
      [&] { kdist::save_keras_weights(user, file("user.weights.h5")); });
  EXPECT_TRUE(contains(msg, "kdist::save_keras_weights: layer 'mine' names no Keras class")) << msg;
  expect_same_on_every_process(msg);
}

TEST(KerasNames, SnakeCaseAsKeras) {
  using kdist::detail::keras_weights::to_snake_case;
  EXPECT_EQ(to_snake_case("Dense"), "dense");
  EXPECT_EQ(to_snake_case("Conv2D"), "conv2d");
  EXPECT_EQ(to_snake_case("RMSprop"), "rm_sprop");
  EXPECT_EQ(to_snake_case("BatchNormalization"), "batch_normalization");
  EXPECT_EQ(to_snake_case("SGD"), "sgd");
  EXPECT_EQ(to_snake_case("MultiHeadAttention"), "multi_head_attention");
}

}  // namespace
