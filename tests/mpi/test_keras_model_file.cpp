// kdist-mpi-ranks: 1 2 4
// Keras model files (issue 39, kdist/io/keras_model_file.hpp): a `.keras` file Keras 3.15 wrote
// (tests/data/keras_cnn.keras, made by scripts/keras/make_model_file_fixture.py) loads as a
// compiled kdist model that predicts what Keras predicted and resumes its optimizer, on every
// layout; save_model writes a file that loads back to the same model, weights and optimizer bit
// for bit (and Keras loads: scripts/keras/check_model_file.py); every config kdist cannot honour
// is a ValueError naming the layer and the option, the same on every process.
#include <gtest/gtest.h>
#include <mpi.h>
#include <zip.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <kdist/io/keras_model_file.hpp>
#include <kdist/nn/layers/conv2d.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

#ifndef KDIST_TEST_DATA_DIR
#error "KDIST_TEST_DATA_DIR (tests/data) must be defined by the build"
#endif

namespace {

using namespace kdist::test;
using json = nlohmann::json;
using kdist::test::message_of;

class KerasModelFile : public TempDirTest {};

const std::string fixture = std::string(KDIST_TEST_DATA_DIR) + "/keras_cnn.keras";

std::shared_ptr<const kdist::Distribution> model_parallel() {
  kdist::RuntimeDeviceMesh mesh({1, static_cast<std::size_t>(world_size())}, {"data", "model"},
                                kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d/kernel"] = {kdist::replicated, "model"};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

// The probe of the fixture's script: 4 examples x[i] = cos(0.11 i) of 8 x 8 x `channels`.
std::vector<float> probe(std::size_t channels) {
  std::vector<float> x(4 * 64 * channels);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  return x;
}

// The model's probabilities for the probe, whole on every process (predict_step gives the
// logits of a model that ends in a softmax: the softmax of each row here).
std::vector<float> predictions(kdist::Sequential& m) {
  const std::size_t channels = m.input_shape().back();
  const auto rows = kdist::BatchPlan(4, 4, m.distribution()).local_indices({0, 1, 2, 3}, 0);
  auto x = probe(channels);
  const std::size_t first = rows.empty() ? 0 : rows.front();
  const Kokkos::View<float****, Kokkos::HostSpace> xs(x.data() + first * 64 * channels, rows.size(),
                                                      8, 8, channels);
  const auto y =
      kdist::full_tensor(std::get<kdist::DistributedTensor<float**>>(m.predict_step(xs, 4)));
  std::vector<float> out(y.size());
  for (std::size_t r = 0; r < y.extent(0); ++r) {
    double top = y(r, 0), sum = 0;
    for (std::size_t j = 0; j < y.extent(1); ++j) top = std::max(top, double(y(r, j)));
    for (std::size_t j = 0; j < y.extent(1); ++j) sum += std::exp(double(y(r, j)) - top);
    for (std::size_t j = 0; j < y.extent(1); ++j) {
      out[r * y.extent(1) + j] = static_cast<float>(std::exp(double(y(r, j)) - top) / sum);
    }
  }
  return out;
}

std::vector<float> keras_predictions(const std::string& model = "keras_cnn") {
  std::ifstream in(std::string(KDIST_TEST_DATA_DIR) + "/" + model + "_predictions.txt");
  std::vector<float> out;
  double v = 0;
  while (in >> v) out.push_back(static_cast<float>(v));
  return out;
}

const std::string unet = std::string(KDIST_TEST_DATA_DIR) + "/keras_unet.keras";

// A fixture's config.json.
json fixture_config(const std::string& path = fixture) {
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &error);
  EXPECT_NE(z, nullptr);
  const std::string text = kdist::detail::keras_model::read_member(z, path, "config.json");
  zip_discard(z);
  return json::parse(text);
}

// A `.keras` archive of `members` (name, bytes), written by process 0.
void write_archive(const std::string& path,
                   const std::vector<std::pair<std::string, std::string>>& members) {
  if (world_rank() == 0) {
    int error = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
    ASSERT_NE(z, nullptr);
    for (const auto& [name, bytes] : members) {
      zip_source_t* s = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
      ASSERT_GE(zip_file_add(z, name.c_str(), s, ZIP_FL_OVERWRITE), 0);
    }
    ASSERT_EQ(zip_close(z), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

std::string layer_error(const std::function<void(json&)>& change,
                        const std::string& path = fixture) {
  json config = fixture_config(path);
  change(config);
  return message_of<kdist::ValueError>([&] { (void)kdist::model_from_json(config.dump()); });
}

TEST_F(KerasModelFile, AFileKerasWrotePredictsWhatKerasPredictedAndTrainsOnOnEveryLayout) {
  const auto want = keras_predictions();
  ASSERT_EQ(want.size(), 40U);
  for (const auto& dist :
       {std::shared_ptr<const kdist::Distribution>(std::make_shared<kdist::DataParallel>()),
        model_parallel()}) {
    auto m = kdist::load_model(fixture, dist, {.seed = 5});
    const std::string what = name_of(*dist);
    EXPECT_EQ(m.iterations(), 3) << what;  // Keras trained 3 steps: its optimizer's state loaded
    EXPECT_EQ(m.layers().size(), 8U) << what;
    EXPECT_EQ(m.layers()[0].name(), "c1");
    EXPECT_EQ(std::get<kdist::Adam>(m.optimizer()).learning_rate(), 0.01f) << what;
    EXPECT_EQ(m.loss().name(), "sparse_categorical_crossentropy");
    const auto got = predictions(m);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::abs(want[i])) << what << " value " << i;
    }
    std::vector<std::int32_t> labels(16);
    for (std::size_t i = 0; i < 16; ++i) labels[i] = static_cast<std::int32_t>(i % 10);
    const kdist::ArrayDataset<float> small(kdist::examples::random_normal(16 * 64, 3), {8, 8, 1},
                                           labels);
    const double loss = m.fit(small, {.batch_size = 8, .epochs = 1, .verbose = 0}).epochs[0].loss;
    EXPECT_TRUE(std::isfinite(loss)) << what;
    EXPECT_EQ(m.iterations(), 5) << what;
  }
}

TEST_F(KerasModelFile, ASavedModelLoadsBackTheSameLayersWeightsAndOptimizer) {
  const auto dist = std::make_shared<kdist::DataParallel>();
  auto m = kdist::load_model(fixture, dist);
  std::vector<std::int32_t> labels(16);
  for (std::size_t i = 0; i < 16; ++i) labels[i] = static_cast<std::int32_t>(i % 10);
  m.fit(kdist::ArrayDataset<float>(kdist::examples::random_normal(16 * 64, 4), {8, 8, 1}, labels),
        {.batch_size = 8, .epochs = 1, .verbose = 0});
  kdist::save_model(m, file("tuned.keras"));
  auto back = kdist::load_model(file("tuned.keras"), model_parallel());
  EXPECT_EQ(kdist::model_to_json(back), kdist::model_to_json(m));
  EXPECT_EQ(back.iterations(), m.iterations());
  expect_bitwise_equal(state_of(back), state_of(m), "saved and loaded");
  // the same weights on another layout: the same probabilities but for the GEMMs' rounding
  const auto p = predictions(back), q = predictions(m);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], q[i], 1e-6) << i;
  // the archive is what Keras writes: three stored members, and no file left beside it
  if (world_rank() == 0) {
    int error = 0;
    zip_t* z = zip_open(file("tuned.keras").c_str(), ZIP_RDONLY, &error);
    ASSERT_NE(z, nullptr);
    EXPECT_EQ(zip_get_num_entries(z, 0), 3);
    for (const char* name : {"metadata.json", "config.json", "model.weights.h5"}) {
      zip_stat_t st;
      EXPECT_EQ(zip_stat(z, name, 0, &st), 0) << name;
      EXPECT_EQ(st.comp_method, ZIP_CM_STORE) << name;
    }
    zip_discard(z);
    std::size_t files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) files += e.is_regular_file();
    EXPECT_EQ(files, 1U);
  }
}

TEST_F(KerasModelFile, ConfigsKdistCannotHonourAreValueErrorsNamingTheLayerAndOption) {
  EXPECT_EQ(layer_error([](json& c) { c["class_name"] = "Bogus"; }),
            "kdist::model_from_json: the model is a \"Bogus\"; kdist reads Sequential and "
            "Functional models");
  EXPECT_EQ(layer_error([](json& c) { c["config"]["layers"][2]["class_name"] = "LSTM"; }),
            "kdist::model_from_json: layer 2 'p1' (LSTM): kdist has no layer of class \"LSTM\" in "
            "model files yet (Dense, Dropout, Flatten, Conv2D, Conv3D, MaxPooling2D/3D, "
            "AveragePooling2D/3D, UpSampling2D/3D, Embedding, PositionEmbedding, "
            "LayerNormalization, MultiHeadAttention); build this model in C++ and load its "
            "weights with kdist::load_keras_weights");
  EXPECT_EQ(layer_error([](json& c) {
              c["config"]["layers"][1]["config"]["kernel_regularizer"] = {{"class_name", "L2"}};
            }),
            "kdist::model_from_json: layer 1 'c1' (Conv2D): kernel_regularizer = "
            "{\"class_name\":\"L2\"} is not in kdist");
  EXPECT_EQ(layer_error([](json& c) { c["config"]["layers"][8]["config"]["activation"] = "tanh"; }),
            "kdist::model_from_json: layer 8 'd' (Dense): activation \"tanh\" is not in kdist "
            "(linear, relu, softmax, gelu); follow the layer with an Activation kdist has, or "
            "train this model in Keras");
  EXPECT_EQ(layer_error([](json& c) {
              c["config"]["layers"][1]["config"]["data_format"] = "channels_first";
            }),
            "kdist::model_from_json: layer 1 'c1' (Conv2D): data_format = \"channels_first\" is "
            "not in kdist (only \"channels_last\"): give the layer channels_last data (kdist's "
            "images are (batch, ..., channels))");
  EXPECT_EQ(layer_error([](json& c) { c["config"]["layers"][3]["config"]["groups"] = 2; }),
            "kdist::model_from_json: layer 3 'c2' (Conv2D): groups = 2 is not in kdist (only 1)");
  EXPECT_EQ(layer_error(
                [](json& c) { c["config"]["layers"][4]["config"]["interpolation"] = "bilinear"; }),
            "kdist::model_from_json: layer 4 'up' (UpSampling2D): interpolation = \"bilinear\" is "
            "not in kdist (only \"nearest\")");
  EXPECT_EQ(layer_error([](json& c) { c["config"]["layers"][3]["config"]["padding"] = "causal"; }),
            "kdist::model_from_json: layer 3 'c2' (Conv2D): padding \"causal\" is not in kdist "
            "(\"valid\", \"same\")");
  EXPECT_EQ(layer_error([](json& c) { c["config"]["layers"][1]["config"]["kernel_size"] = {3}; }),
            "kdist::model_from_json: layer 1 'c1' (Conv2D): kernel_size = [3] is not 2 positive "
            "integers");
  EXPECT_EQ(layer_error([](json& c) {
              c["config"]["layers"][0]["config"]["batch_shape"] = {nullptr, nullptr, 8, 1};
              c["config"]["build_input_shape"] = nullptr;
            }),
            "kdist::model_from_json: the model has no input shape (no InputLayer with a "
            "batch_shape of known extents, no build_input_shape); give the Keras model an "
            "keras.Input(shape) with every extent known");
  EXPECT_TRUE(contains(message_of<kdist::ValueError>([] { (void)kdist::model_from_json("{"); }),
                       "kdist::model_from_json: not JSON ("));
}

// A Functional model of skips (tests/data/keras_unet.keras): x + f(x) and concatenate([x, g(x)])
// with another x + h(x) inside g, as Keras wrote it.
TEST_F(KerasModelFile, AFunctionalModelOfSkipsIsResidualAndConcatenateBlocksThatPredictAsKeras) {
  const auto want = keras_predictions("keras_unet");
  ASSERT_EQ(want.size(), 40U);
  for (const auto& dist :
       {std::shared_ptr<const kdist::Distribution>(std::make_shared<kdist::DataParallel>()),
        model_parallel()}) {
    auto m = kdist::load_model(unet, dist);
    const std::string what = name_of(*dist);
    ASSERT_EQ(m.layers().size(), 5U) << what;  // c1, skip1, cat, flatten, d
    auto* skip = m.layers()[1].get_if<kdist::layers::BasicResidual<float>>();
    auto* cat = m.layers()[2].get_if<kdist::layers::BasicConcatenate<float>>();
    ASSERT_NE(skip, nullptr);
    ASSERT_NE(cat, nullptr);
    EXPECT_EQ(skip->name(), "skip1");
    ASSERT_EQ(cat->layers().size(), 4U);  // p, c3, inner (c4), up
    EXPECT_NE(cat->layers()[2].get_if<kdist::layers::BasicResidual<float>>(), nullptr);
    EXPECT_EQ(m.iterations(), 3) << what;
    const auto got = predictions(m);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-5 * std::abs(want[i])) << what << " value " << i;
    }
  }
  // saved as Keras' Functional model, and back
  auto m = kdist::load_model(unet, std::make_shared<kdist::DataParallel>());
  kdist::save_model(m, file("unet.keras"));
  auto back = kdist::load_model(file("unet.keras"), model_parallel());
  const auto config = json::parse(kdist::model_to_json(back));
  EXPECT_EQ(config["class_name"], "Functional");
  EXPECT_EQ(kdist::model_to_json(back), kdist::model_to_json(m));
  expect_bitwise_equal(state_of(back), state_of(m), "saved and loaded");
}

// The GPT of scripts/keras/gpt_keras_side.py written in Keras' functional API (tests/data/
// keras_gpt.keras: Embedding, the additive PositionEmbedding, LayerNormalization,
// MultiHeadAttention(h, h, use_causal_mask=True), Add, Dense; AdamW,
// SparseCategoricalCrossentropy(from_logits=True), 2 steps): that script's batch.
std::pair<std::vector<float>, std::vector<float>> gpt_batch() {
  std::vector<float> x(4 * 8), y(4 * 8);
  const auto token = [](std::int64_t k) {
    return static_cast<float>((7 * k * k + 3 * k + 1) % 32);
  };
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 8; ++j) {
      x[static_cast<std::size_t>(i * 8 + j)] = token(i * 8 + j);
      y[static_cast<std::size_t>(i * 8 + j)] = token(i * 8 + j + 1);
    }
  }
  return {x, y};
}

// The GPT's logits for the batch, whole on every process.
std::vector<float> gpt_logits(kdist::Sequential& m) {
  auto [x, y] = gpt_batch();
  const auto rows = kdist::BatchPlan(4, 4, m.distribution()).local_indices({0, 1, 2, 3}, 0);
  const std::size_t first = rows.empty() ? 0 : rows.front();
  const Kokkos::View<float**, Kokkos::HostSpace> xs(x.data() + first * 8, rows.size(), 8);
  const auto out =
      kdist::full_tensor(std::get<kdist::DistributedTensor<float***>>(m.predict_step(xs, 4)));
  return std::vector<float>(out.data(), out.data() + out.size());
}

TEST_F(KerasModelFile, AGptWrittenInKerasFunctionalApiPredictsKerasLogitsAndRoundTrips) {
  const std::string gpt = std::string(KDIST_TEST_DATA_DIR) + "/keras_gpt.keras";
  for (const auto& dist :
       {std::shared_ptr<const kdist::Distribution>(std::make_shared<kdist::DataParallel>()),
        model_parallel()}) {
    auto m = kdist::load_model(gpt, dist, {.seed = 1});
    EXPECT_EQ(m.iterations(), 2);
    EXPECT_EQ(m.optimizer().name(), "AdamW");
    ASSERT_NE(m.layers()[2].get_if<kdist::layers::Residual>(), nullptr);
    const auto& mha = m.layers()[2]
                          .get_if<kdist::layers::Residual>()
                          ->layers()[1]
                          .get_if<kdist::layers::MultiHeadAttention>();
    ASSERT_NE(mha, nullptr);
    EXPECT_TRUE(mha->causal());
    const auto want = keras_predictions("keras_gpt");
    const auto got = gpt_logits(m);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << i;
    }
    // Keras' loss of the batch (from logits)
    auto [x, y] = gpt_batch();
    const auto rows = kdist::BatchPlan(4, 4, m.distribution()).local_indices({0, 1, 2, 3}, 0);
    const std::size_t first = rows.empty() ? 0 : rows.front();
    const Kokkos::View<float**, Kokkos::HostSpace> xs(x.data() + first * 8, rows.size(), 8);
    const Kokkos::View<float**, Kokkos::HostSpace> ys(y.data() + first * 8, rows.size(), 8);
    std::ifstream in(std::string(KDIST_TEST_DATA_DIR) + "/keras_gpt_loss.txt");
    double keras_loss = 0;
    in >> keras_loss;
    EXPECT_NEAR(m.evaluate_batch(xs, ys, 4).loss, keras_loss, 1e-6 * keras_loss);
  }
  // written back: the same config, weights and optimizer state; Keras' file format
  auto m = kdist::load_model(gpt, std::make_shared<kdist::DataParallel>());
  kdist::save_model(m, file("gpt.keras"));
  auto back = kdist::load_model(file("gpt.keras"), std::make_shared<kdist::DataParallel>());
  EXPECT_EQ(kdist::model_to_json(back), kdist::model_to_json(m));
  expect_bitwise_equal(state_of(back), state_of(m), "saved and loaded");
  const auto config = json::parse(kdist::model_to_json(m));
  EXPECT_EQ(config["compile_config"]["loss"]["config"]["from_logits"], true);
  EXPECT_EQ(config["config"]["layers"][0]["config"]["dtype"], "int32");
  bool causal_call = false;
  for (const auto& l : config["config"]["layers"]) {
    if (l["class_name"] == "MultiHeadAttention") {
      causal_call = l["inbound_nodes"][0]["kwargs"]["use_causal_mask"] == true &&
                    l["inbound_nodes"][0]["args"].size() == 2;
    }
    if (l["class_name"] == "PositionEmbedding") {
      EXPECT_EQ(l["registered_name"], "kdist>PositionEmbedding");
    }
  }
  EXPECT_TRUE(causal_call);
}

TEST_F(KerasModelFile, LanguageModelConfigsKdistCannotHonourAreValueErrors) {
  const std::string gpt = std::string(KDIST_TEST_DATA_DIR) + "/keras_gpt.keras";
  const auto config = fixture_config(gpt);
  const auto dist = std::make_shared<kdist::DataParallel>();
  auto error = [&](const std::function<void(json&)>& change) {
    json c = config;
    change(c);
    return message_of<kdist::ValueError>([&] { (void)kdist::model_from_json(c.dump(), dist); });
  };
  auto layer = [](json& c, const std::string& name) -> json& {
    for (auto& l : c["config"]["layers"]) {
      if (l["name"] == name) return l;
    }
    throw std::runtime_error("no layer " + name);
  };
  EXPECT_EQ(error([&](json& c) { layer(c, "block0_mha")["config"]["dropout"] = 0.1; }),
            "kdist::model_from_json: layer 4 'block0_mha' (MultiHeadAttention): dropout = 0.1 is "
            "not in kdist (only 0.0): kdist's attention has no dropout of its probabilities");
  EXPECT_EQ(error([&](json& c) { layer(c, "block0_mha")["config"]["value_dim"] = 4; }),
            "kdist::model_from_json: layer 4 'block0_mha' (MultiHeadAttention): value_dim = 4 is "
            "not in kdist (only key_dim, 8)");
  EXPECT_EQ(error([&](json& c) {
              layer(c, "block0_mha")["inbound_nodes"][0]["kwargs"]["attention_mask"] = 1;
            }),
            "kdist::model_from_json: layer 4 'block0_mha' (MultiHeadAttention): it is called with "
            "attention_mask = 1, which kdist's MultiHeadAttention does not take (it attends from a "
            "sequence to itself: mha(x, x, use_causal_mask=...))");
  EXPECT_EQ(error([&](json& c) { layer(c, "token_embedding")["config"]["mask_zero"] = true; }),
            "kdist::model_from_json: layer 1 'token_embedding' (Embedding): mask_zero = true is "
            "not in kdist (only false)");
  EXPECT_EQ(error([&](json& c) { layer(c, "block0_ln1")["config"]["rms_scaling"] = true; }),
            "kdist::model_from_json: layer 3 'block0_ln1' (LayerNormalization): rms_scaling = "
            "true is not in kdist (only false)");
  EXPECT_EQ(error([&](json& c) {
              layer(c, "position_embedding")["registered_name"] = "keras_hub>PositionEmbedding";
            }),
            "kdist::model_from_json: layer 2 'position_embedding' (PositionEmbedding): keras-hub's "
            "PositionEmbedding returns its table, to be added (Add()([x, "
            "PositionEmbedding(s)(x)])), which kdist's model files do not read yet; use the "
            "PositionEmbedding that adds it, registered as \"kdist>PositionEmbedding\" "
            "(scripts/keras/gpt_keras_side.py)");
  // logits without from_logits (and from_logits for a classifier's probabilities)
  EXPECT_EQ(error([&](json& c) { c["compile_config"]["loss"]["config"]["from_logits"] = false; }),
            "kdist::load_model: the loss: from_logits = false for outputs of shape (8, 32); "
            "kdist's sparse_categorical_crossentropy takes logits (from_logits=True) for a "
            "language model's (sequence, vocabulary) outputs, ending in a Dense without "
            "activation, and probabilities (a final softmax) otherwise");
  json cnn = fixture_config();
  cnn["compile_config"]["loss"] = {{"class_name", "SparseCategoricalCrossentropy"},
                                   {"config", {{"from_logits", true}}}};
  EXPECT_EQ(message_of<kdist::ValueError>([&] { (void)kdist::model_from_json(cnn.dump(), dist); }),
            "kdist::load_model: the loss: from_logits = true for outputs of shape (10,); kdist's "
            "sparse_categorical_crossentropy takes logits (from_logits=True) for a language "
            "model's (sequence, vocabulary) outputs, ending in a Dense without activation, and "
            "probabilities (a final softmax) otherwise");
}

TEST_F(KerasModelFile, FunctionalGraphsThatAreNotChainsOfSkipsAreValueErrors) {
  auto layer = [](json& c, const char* name) -> json& {
    for (auto& l : c["config"]["layers"]) {
      if (l["name"] == name) return l;
    }
    throw std::runtime_error(name);
  };
  EXPECT_EQ(layer_error(
                [&](json& c) {
                  auto& args = layer(c, "cat")["inbound_nodes"][0]["args"][0];
                  std::swap(args[0], args[1]);
                },
                unet),
            "kdist::model_from_json: layer 9 'cat' (Concatenate) takes the branch 'up' before the "
            "skip 'skip1'; kdist's Concatenate puts the skip first: Concatenate()([x, f(x)])");
  EXPECT_EQ(layer_error([&](json& c) { layer(c, "cat")["config"]["axis"] = 1; }, unet),
            "kdist::model_from_json: layer 9 'cat' (Concatenate): axis = 1 is not in kdist (only "
            "-1: the channels)");
  EXPECT_EQ(layer_error(
                [&](json& c) {  // flatten reads c1's output too: 'c1' feeds three layers
                  auto& args = layer(c, "flatten")["inbound_nodes"][0]["args"];
                  args[0]["config"]["keras_history"][0] = "c1";
                },
                unet),
            "kdist::model_from_json: the output of 'c1' feeds 'c2', 'skip1', 'flatten'; kdist "
            "takes a tensor used twice only as a skip joined by an Add or a Concatenate of two "
            "inputs");
  EXPECT_EQ(layer_error(
                [&](json& c) {
                  c["config"]["output_layers"] = {{"d", 0, 0}, {"c1", 0, 0}};
                },
                unet),
            "kdist::model_from_json: the Functional model has 2 outputs; kdist's models take one "
            "input and give one output");
  EXPECT_EQ(layer_error(
                [&](json& c) {  // the layers listed in another order than the graph's
                  auto& list = c["config"]["layers"];
                  std::swap(list[1], list[2]);
                },
                unet),
            "kdist::model_from_json: the Functional model lists its layers in another order than "
            "kdist walks them (a branch created before the layers it follows?); build it in C++ "
            "and load its weights with kdist::load_keras_weights");
}

TEST_F(KerasModelFile, OptimizersAndLossesKdistLacksAreValueErrors) {
  namespace km = kdist::detail::keras_model;
  const json adam = fixture_config()["compile_config"]["optimizer"];
  auto optimizer_error = [&](const std::function<void(json&)>& change) {
    json o = adam;
    change(o);
    return message_of<kdist::ValueError>([&] { (void)km::optimizer_from_config<float>(o); });
  };
  EXPECT_EQ(optimizer_error([](json& o) { o["class_name"] = "Nadam"; }),
            "kdist::load_model: the optimizer is \"Nadam\"; kdist has SGD, Adam, AdamW and "
            "RMSprop: compile the model with one of them in Keras, or build it in C++");
  EXPECT_EQ(optimizer_error([](json& o) { o["config"]["clipvalue"] = 0.5; }),
            "kdist::load_model: the optimizer (Adam): clipvalue = 0.5 is not in kdist");
  EXPECT_EQ(optimizer_error([](json& o) { o["config"]["amsgrad"] = true; }),
            "kdist::load_model: the optimizer (Adam): amsgrad = true is not in kdist (only false)");
  EXPECT_TRUE(contains(optimizer_error([](json& o) {
                         o["config"]["learning_rate"] = {{"class_name", "ExponentialDecay"}};
                       }),
                       "its learning_rate is a schedule"));
  // what kdist has: SGD with Nesterov momentum and weight decay, RMSprop centred, a clip norm
  json sgd = {{"class_name", "SGD"},
              {"config",
               {{"learning_rate", 0.1},
                {"momentum", 0.9},
                {"nesterov", true},
                {"weight_decay", 0.001},
                {"global_clipnorm", 1.5}}}};
  const auto o = km::optimizer_from_config<float>(sgd);
  const auto& s = std::get<kdist::SGD>(o);
  EXPECT_EQ(s.momentum(), 0.9);
  EXPECT_TRUE(s.nesterov());
  EXPECT_EQ(s.weight_decay(), 0.001);
  EXPECT_EQ(s.global_clipnorm(), 1.5);
  EXPECT_EQ(km::loss_from_config("mse").loss, kdist::Loss::mean_squared_error);
  EXPECT_EQ(km::loss_from_config(
                {{"class_name", "CategoricalCrossentropy"}, {"config", {{"from_logits", false}}}})
                .loss,
            kdist::Loss::categorical_crossentropy);
  EXPECT_EQ(message_of<kdist::ValueError>([] {
              (void)km::loss_from_config(
                  {{"class_name", "CategoricalCrossentropy"}, {"config", {{"from_logits", true}}}});
            }),
            "kdist::load_model: the loss: from_logits = true is not in kdist (only false): "
            "kdist's losses take probabilities; end the model in a softmax");
  // from_logits: a language model's sparse cross-entropy (checked against the model: below)
  const auto logits = km::loss_from_config(
      {{"class_name", "SparseCategoricalCrossentropy"}, {"config", {{"from_logits", true}}}});
  EXPECT_EQ(logits.loss, kdist::Loss::sparse_categorical_crossentropy);
  EXPECT_TRUE(logits.from_logits);
  EXPECT_EQ(message_of<kdist::ValueError>([] { (void)km::loss_from_config("hinge"); }),
            "kdist::load_model: the loss is \"hinge\"; kdist has mean_squared_error, "
            "categorical_crossentropy and sparse_categorical_crossentropy");
}

TEST_F(KerasModelFile, FilesThatCannotBeLoadedAreTheSameValueErrorOnEveryProcess) {
  const auto dist = std::make_shared<kdist::DataParallel>();
  auto error = [&](const std::string& path) {
    const auto m = message_of<kdist::ValueError>([&] { (void)kdist::load_model(path, dist); });
    expect_same_on_every_process(m);
    return m;
  };
  EXPECT_TRUE(contains(
      error(file("none.keras")),
      "kdist::load_model: '" + file("none.keras") + "' cannot be opened as a Keras model file ("));
  write_file_on_zero(file("text.keras"), "not an archive");
  EXPECT_TRUE(contains(error(file("text.keras")), "cannot be opened as a Keras model file"));
  write_archive(file("no_config.keras"), {{"metadata.json", "{}"}});
  EXPECT_EQ(error(file("no_config.keras")),
            "kdist::load_model: " + file("no_config.keras") +
                ": the archive has no config.json; a Keras model file holds config.json, "
                "metadata.json and model.weights.h5 (keras' model.save(\"x.keras\"))");
  json uncompiled = fixture_config();
  uncompiled.erase("compile_config");
  write_archive(file("uncompiled.keras"),
                {{"config.json", uncompiled.dump()}, {"model.weights.h5", "unused"}});
  EXPECT_EQ(error(file("uncompiled.keras")),
            "kdist::load_model: '" + file("uncompiled.keras") +
                "' holds a model saved without compile (no optimizer, no loss); build it with "
                "kdist::model_from_json, compile it, and load the weights with "
                "kdist::load_keras_weights");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {  // nothing left beside the archives
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().extension(), ".keras") << e.path();
    }
  }
}

TEST_F(KerasModelFile, ModelsKerasFilesCannotHoldAreValueErrorsOnSave) {
  auto m = small_model();
  EXPECT_EQ(message_of<kdist::ValueError>([&] { kdist::save_model(m, file("x.keras")); }),
            "kdist::save_model: the model is not compiled; compile it first (a Keras file holds "
            "the variables and the optimizer)");
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(kdist::layers::Conv2D(2, {3, 3}, kdist::layers::Activation::relu, true, "c",
                                       {.padding = kdist::layers::Padding::periodic}));
  l.emplace_back(kdist::layers::Flatten());
  l.emplace_back(kdist::layers::Dense(10, kdist::layers::Activation::softmax, true, "d"));
  kdist::Sequential periodic({8, 8, 1}, std::move(l));
  periodic.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                   kdist::Adam(), 1);
  EXPECT_EQ(message_of<kdist::ValueError>([&] { kdist::save_model(periodic, file("x.keras")); }),
            "kdist::model_to_json: layer 1 'c': padding \"periodic\" is kdist's, not Keras'; a "
            "Keras file cannot hold it");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(std::filesystem::exists(file("x.keras")));
}

}  // namespace
