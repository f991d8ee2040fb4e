// kdist-mpi-ranks: 1 2
// Keras weights for the GPT (examples/common/gpt_model.hpp): a model with Residual blocks is
// written as Keras 3's functional model (input_layer, the Residuals flattened into their layers and
// an Add, MultiHeadAttention's EinsumDense sublayers as query_dense ... output_dense). The tree
// and the shapes below are those Keras 3.15.1 wrote for the same GPT built in Keras
// (scripts/keras/gpt_keras_side.py; scripts/keras/check_gpt_exchange.sh checks both directions
// against Keras itself). Here, without Keras: the layout, the round trip on every mesh, the errors.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/gpt_model.hpp"
#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"

namespace {

using namespace kdist::test;
using kdist::test::contains;
using kdist::test::message_of;
using Model = kdist::BasicSequential<float>;

class KerasGptWeights : public TempDirTest {};

kdist::examples::GptConfig tiny(std::size_t blocks = 2, std::size_t vocab = 32,
                                std::size_t heads = 2) {
  kdist::examples::GptConfig c;
  c.vocab = vocab;
  c.sequence = 8;
  c.d_model = 16;
  c.heads = heads;
  c.blocks = blocks;
  c.dropout = 0;
  return c;
}

// The example's tensor-parallel rules, FSDP too when asked, on a (data, model) mesh.
std::shared_ptr<const kdist::Distribution> gpt_distribution(const std::vector<std::size_t>& shape,
                                                            bool fsdp = false) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(
      kdist::examples::gpt_layout_map(mesh, kdist::examples::GptSharding{.fsdp = fsdp}), "data");
}

Model compiled_gpt(const kdist::examples::GptConfig& c, const std::vector<std::size_t>& mesh,
                   std::uint64_t seed, bool fsdp = false) {
  auto m = kdist::examples::make_gpt<float>(c);
  m.compile(gpt_distribution(mesh, fsdp), kdist::Loss::sparse_categorical_crossentropy,
            kdist::AdamW(0.01), seed);
  return m;
}

// Four token windows of the tiny vocabulary: x the tokens, y the next ones.
kdist::ArrayDataset<float> batch() {
  const std::size_t n = 4, seq = 8;
  std::vector<float> x(n * seq), y(n * seq);
  const auto token = [](std::size_t k) { return static_cast<float>((7 * k * k + 3 * k + 1) % 32); };
  for (std::size_t i = 0; i < n * seq; ++i) {
    x[i] = token(i);
    y[i] = token(i + 1);
  }
  return kdist::ArrayDataset<float>(std::move(x), {seq}, std::move(y), seq);
}
const kdist::FitOptions one_step{.batch_size = 4, .epochs = 1, .shuffle = false, .verbose = 0};
const kdist::EvaluateOptions eval{.batch_size = 4, .verbose = 0};

// ---- reading the file with the HDF5 library (process 0) --------------------------------------

std::set<std::string> tree_of(const std::string& path) {
  std::set<std::string> out;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << path;
  H5Ovisit(
      f, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (std::string(name) == ".") return 0;
        static_cast<std::set<std::string>*>(data)->insert(
            std::string(name) + (info->type == H5O_TYPE_GROUP ? "/" : ""));
        return 0;
      },
      &out);
  H5Fclose(f);
  return out;
}

std::string name_attribute(const std::string& path, const std::string& object) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::string value;
  if (H5Aexists_by_name(f, object.c_str(), "name", H5P_DEFAULT) > 0) {
    hid_t a = H5Aopen_by_name(f, object.c_str(), "name", H5P_DEFAULT, H5P_DEFAULT);
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

struct Data {
  std::vector<hsize_t> dims;
  bool float32 = false;
  std::vector<float> values;
};
Data dataset_of(const std::string& path, const std::string& name) {
  Data out;
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
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data());
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
  }
  H5Fclose(f);
  return out;
}

// ---- what Keras 3.15.1 writes for the tiny GPT of 2 blocks ------------------------------------

// The groups (h5ls -r of Keras' file).
const std::vector<std::string> keras_groups{"layers/",
                                            "layers/add/",
                                            "layers/add/vars/",
                                            "layers/add_1/",
                                            "layers/add_1/vars/",
                                            "layers/add_2/",
                                            "layers/add_2/vars/",
                                            "layers/add_3/",
                                            "layers/add_3/vars/",
                                            "layers/dense/",
                                            "layers/dense/vars/",
                                            "layers/dense_1/",
                                            "layers/dense_1/vars/",
                                            "layers/dense_2/",
                                            "layers/dense_2/vars/",
                                            "layers/dense_3/",
                                            "layers/dense_3/vars/",
                                            "layers/dense_4/",
                                            "layers/dense_4/vars/",
                                            "layers/embedding/",
                                            "layers/embedding/vars/",
                                            "layers/input_layer/",
                                            "layers/input_layer/vars/",
                                            "layers/layer_normalization/",
                                            "layers/layer_normalization/vars/",
                                            "layers/layer_normalization_1/",
                                            "layers/layer_normalization_1/vars/",
                                            "layers/layer_normalization_2/",
                                            "layers/layer_normalization_2/vars/",
                                            "layers/layer_normalization_3/",
                                            "layers/layer_normalization_3/vars/",
                                            "layers/layer_normalization_4/",
                                            "layers/layer_normalization_4/vars/",
                                            "layers/multi_head_attention/",
                                            "layers/multi_head_attention/_dropout_layer/",
                                            "layers/multi_head_attention/_dropout_layer/vars/",
                                            "layers/multi_head_attention/_softmax/",
                                            "layers/multi_head_attention/_softmax/vars/",
                                            "layers/multi_head_attention/key_dense/",
                                            "layers/multi_head_attention/key_dense/vars/",
                                            "layers/multi_head_attention/output_dense/",
                                            "layers/multi_head_attention/output_dense/vars/",
                                            "layers/multi_head_attention/query_dense/",
                                            "layers/multi_head_attention/query_dense/vars/",
                                            "layers/multi_head_attention/value_dense/",
                                            "layers/multi_head_attention/value_dense/vars/",
                                            "layers/multi_head_attention/vars/",
                                            "layers/multi_head_attention_1/",
                                            "layers/multi_head_attention_1/_dropout_layer/",
                                            "layers/multi_head_attention_1/_dropout_layer/vars/",
                                            "layers/multi_head_attention_1/_softmax/",
                                            "layers/multi_head_attention_1/_softmax/vars/",
                                            "layers/multi_head_attention_1/key_dense/",
                                            "layers/multi_head_attention_1/key_dense/vars/",
                                            "layers/multi_head_attention_1/output_dense/",
                                            "layers/multi_head_attention_1/output_dense/vars/",
                                            "layers/multi_head_attention_1/query_dense/",
                                            "layers/multi_head_attention_1/query_dense/vars/",
                                            "layers/multi_head_attention_1/value_dense/",
                                            "layers/multi_head_attention_1/value_dense/vars/",
                                            "layers/multi_head_attention_1/vars/",
                                            "layers/position_embedding/",
                                            "layers/position_embedding/vars/",
                                            "optimizer/",
                                            "optimizer/vars/",
                                            "vars/"};

// The variables in Keras' order (model.trainable_variables, the optimizer's order): the dataset,
// kdist's variable, the shape.
const std::vector<std::tuple<std::string, std::string, std::vector<hsize_t>>> keras_variables{
    {"layers/embedding/vars/0", "token_embedding/embeddings", {32, 16}},
    {"layers/position_embedding/vars/0", "position_embedding/embeddings", {8, 16}},
    {"layers/layer_normalization/vars/0", "block0/ln1/gamma", {16}},
    {"layers/layer_normalization/vars/1", "block0/ln1/beta", {16}},
    {"layers/multi_head_attention/query_dense/vars/0", "block0/mha/query/kernel", {16, 2, 8}},
    {"layers/multi_head_attention/query_dense/vars/1", "block0/mha/query/bias", {2, 8}},
    {"layers/multi_head_attention/key_dense/vars/0", "block0/mha/key/kernel", {16, 2, 8}},
    {"layers/multi_head_attention/key_dense/vars/1", "block0/mha/key/bias", {2, 8}},
    {"layers/multi_head_attention/value_dense/vars/0", "block0/mha/value/kernel", {16, 2, 8}},
    {"layers/multi_head_attention/value_dense/vars/1", "block0/mha/value/bias", {2, 8}},
    {"layers/multi_head_attention/output_dense/vars/0",
     "block0/mha/attention_output/kernel",
     {2, 8, 16}},
    {"layers/multi_head_attention/output_dense/vars/1", "block0/mha/attention_output/bias", {16}},
    {"layers/layer_normalization_1/vars/0", "block0/ln2/gamma", {16}},
    {"layers/layer_normalization_1/vars/1", "block0/ln2/beta", {16}},
    {"layers/dense/vars/0", "block0/up/kernel", {16, 64}},
    {"layers/dense/vars/1", "block0/up/bias", {64}},
    {"layers/dense_1/vars/0", "block0/down/kernel", {64, 16}},
    {"layers/dense_1/vars/1", "block0/down/bias", {16}},
    {"layers/layer_normalization_2/vars/0", "block1/ln1/gamma", {16}},
    {"layers/layer_normalization_2/vars/1", "block1/ln1/beta", {16}},
    {"layers/multi_head_attention_1/query_dense/vars/0", "block1/mha/query/kernel", {16, 2, 8}},
    {"layers/multi_head_attention_1/query_dense/vars/1", "block1/mha/query/bias", {2, 8}},
    {"layers/multi_head_attention_1/key_dense/vars/0", "block1/mha/key/kernel", {16, 2, 8}},
    {"layers/multi_head_attention_1/key_dense/vars/1", "block1/mha/key/bias", {2, 8}},
    {"layers/multi_head_attention_1/value_dense/vars/0", "block1/mha/value/kernel", {16, 2, 8}},
    {"layers/multi_head_attention_1/value_dense/vars/1", "block1/mha/value/bias", {2, 8}},
    {"layers/multi_head_attention_1/output_dense/vars/0",
     "block1/mha/attention_output/kernel",
     {2, 8, 16}},
    {"layers/multi_head_attention_1/output_dense/vars/1", "block1/mha/attention_output/bias", {16}},
    {"layers/layer_normalization_3/vars/0", "block1/ln2/gamma", {16}},
    {"layers/layer_normalization_3/vars/1", "block1/ln2/beta", {16}},
    {"layers/dense_2/vars/0", "block1/up/kernel", {16, 64}},
    {"layers/dense_2/vars/1", "block1/up/bias", {64}},
    {"layers/dense_3/vars/0", "block1/down/kernel", {64, 16}},
    {"layers/dense_3/vars/1", "block1/down/bias", {16}},
    {"layers/layer_normalization_4/vars/0", "final_norm/gamma", {16}},
    {"layers/layer_normalization_4/vars/1", "final_norm/beta", {16}},
    {"layers/dense_4/vars/0", "lm_head/kernel", {16, 32}},
};

TEST_F(KerasGptWeights, FileHasTheLayoutKerasWritesForTheSameGpt) {
  auto m = compiled_gpt(tiny(), {1, static_cast<std::size_t>(world_size())}, 3);
  m.fit(batch(), one_step);
  const std::string path = file("gpt.weights.h5");
  kdist::save_keras_weights(m, path);
  const auto state = state_of(m);
  if (world_rank() != 0) return;
  std::set<std::string> want(keras_groups.begin(), keras_groups.end());
  for (const auto& [ds, var, shape] : keras_variables) want.insert(ds);
  for (std::size_t i = 0; i < 2 + 2 * keras_variables.size(); ++i) {
    want.insert("optimizer/vars/" + std::to_string(i));
  }
  EXPECT_EQ(tree_of(path), want);
  for (std::size_t i = 0; i < keras_variables.size(); ++i) {
    const auto& [ds, var, shape] = keras_variables[i];
    const auto d = dataset_of(path, ds);
    EXPECT_EQ(d.dims, shape) << ds;
    EXPECT_TRUE(d.float32) << ds;
    EXPECT_EQ(d.values, state.at(var)) << ds;
    // AdamW's momentum and velocity of each variable in turn
    EXPECT_EQ(dataset_of(path, "optimizer/vars/" + std::to_string(2 + 2 * i)).values,
              state.at(var + "/slot0"))
        << var;
    EXPECT_EQ(dataset_of(path, "optimizer/vars/" + std::to_string(3 + 2 * i)).values,
              state.at(var + "/slot1"))
        << var;
  }
  EXPECT_EQ(dataset_of(path, "optimizer/vars/0").values, std::vector<float>{1.0f});
  // the name attributes: the layers' own names; MultiHeadAttention's sublayers' Keras names
  EXPECT_EQ(name_attribute(path, "layers/add/vars"), "block0/attn");
  EXPECT_EQ(name_attribute(path, "layers/add_3/vars"), "block1/mlp");
  EXPECT_EQ(name_attribute(path, "layers/multi_head_attention_1/vars"), "block1/mha");
  EXPECT_EQ(name_attribute(path, "layers/multi_head_attention/output_dense/vars"),
            "attention_output");
  EXPECT_EQ(name_attribute(path, "layers/dense_4/vars"), "lm_head");
  EXPECT_EQ(name_attribute(path, "layers/input_layer/vars"), "input_layer");
  EXPECT_EQ(name_attribute(path, "vars"), "functional");
}

// Saved on one mesh (tensor parallel, or FSDP too), loaded on every mesh of the world: the same
// weights and AdamW state bit for bit, the same loss, and the same next training step.
TEST_F(KerasGptWeights, RoundTripOnEveryMeshIsBitIdentical) {
  for (const auto& from : meshes()) {
    for (const bool fsdp : {false, true}) {
      auto saved = compiled_gpt(tiny(), from, 3, fsdp);
      saved.fit(batch(), one_step);
      const std::string path = file("gpt.weights.h5");
      kdist::save_keras_weights(saved, path);
      const auto want = state_of(saved);
      const double loss = saved.evaluate(batch(), eval).loss;
      saved.fit(batch(), one_step);
      const double next = saved.evaluate(batch(), eval).loss;
      for (const auto& to : meshes()) {
        const std::string what = "saved on (" + std::to_string(from[0]) + ", " +
                                 std::to_string(from[1]) + ") fsdp " + std::to_string(fsdp) +
                                 ", loaded on (" + std::to_string(to[0]) + ", " +
                                 std::to_string(to[1]) + ")";
        auto loaded = compiled_gpt(tiny(), to, 99, !fsdp);
        const auto r = kdist::load_keras_weights(loaded, path);
        EXPECT_TRUE(r.optimizer_loaded) << what << ": " << r.optimizer_note;
        EXPECT_EQ(r.iterations, 1) << what;
        expect_bitwise_equal(state_of(loaded), want, what);
        const double got = loaded.evaluate(batch(), eval).loss;
        EXPECT_NEAR(got, loss, 1e-6 * loss) << what;
        if (to == from) {
          EXPECT_EQ(got, loss) << what;
        }
        loaded.fit(batch(), one_step);
        EXPECT_NEAR(loaded.evaluate(batch(), eval).loss, next, 1e-5 * next) << what;
      }
    }
  }
}

// A small model of Residual attention blocks, to shape files the GPT cannot.
Model attention_model(std::size_t blocks, bool use_bias) {
  using namespace kdist::layers;
  std::vector<Model::Layer> l;
  l.emplace_back(BasicEmbedding<float>(32, 16, "emb"));
  for (std::size_t b = 0; b < blocks; ++b) {
    l.emplace_back(BasicResidual<float>(
        "res" + std::to_string(b),
        {BasicMultiHeadAttention<float>(2, 8, "mha" + std::to_string(b), use_bias)}));
  }
  l.emplace_back(Model::Dense(32, Activation::linear, false, "head"));
  Model m(kdist::Shape{8}, std::move(l));
  m.compile(gpt_distribution({1, static_cast<std::size_t>(world_size())}),
            kdist::Loss::sparse_categorical_crossentropy, kdist::AdamW(0.01), 1);
  return m;
}

// Files of other architectures: the same ValueError on every process, naming the file and the
// layer's group, and the model unchanged.
TEST_F(KerasGptWeights, FilesOfOtherArchitecturesAreClearErrors) {
  const std::vector<std::size_t> mesh{1, static_cast<std::size_t>(world_size())};
  const auto save = [&](Model m, const std::string& name) {
    kdist::save_keras_weights(m, file(name));
    return file(name);
  };
  const auto fails = [&](Model& m, const std::string& path, const std::string& expected) {
    const auto before = state_of(m);
    const std::string msg =
        message_of<kdist::ValueError>([&] { kdist::load_keras_weights(m, path); });
    EXPECT_TRUE(contains(msg, "kdist::load_keras_weights: '" + path + "'")) << msg;
    EXPECT_TRUE(contains(msg, expected)) << msg << "\nlacks: " << expected;
    expect_same_on_every_process(msg);
    expect_bitwise_equal(state_of(m), before, "after a failed load of " + path);
  };
  auto gpt = compiled_gpt(tiny(), mesh, 3);
  // one block less in the file: its second attention is missing
  fails(gpt, save(compiled_gpt(tiny(1), mesh, 3), "one_block.weights.h5"),
        "layer 'block1/mha' (group '/layers/multi_head_attention_1/query_dense') is not in the "
        "file; the file holds the weights of another model");
  // one block more in the file: its dense_2 is the second block's up projection (with a bias)
  auto one_block = compiled_gpt(tiny(1), mesh, 3);
  fails(one_block, save(compiled_gpt(tiny(2), mesh, 3), "two_blocks.weights.h5"),
        "layer 'lm_head' (group '/layers/dense_2') has 1 variable(s) in the model but 2 in the "
        "file; the file holds the weights of another model");
  // another vocabulary
  fails(gpt, save(compiled_gpt(tiny(2, 40), mesh, 3), "vocab40.weights.h5"),
        "variable 0 of layer 'token_embedding' (group '/layers/embedding') has shape (40, 16) in "
        "the file but (32, 16) in the model");
  // another number of heads (key_dim 4 instead of 8)
  fails(gpt, save(compiled_gpt(tiny(2, 32, 4), mesh, 3), "heads4.weights.h5"),
        "variable 0 of layer 'block0/mha' (group '/layers/multi_head_attention/query_dense') has "
        "shape (16, 4, 4) in the file but (16, 2, 8) in the model");
  // a Sequential's file (an MLP): no embedding
  {
    auto mlp = small_model();
    mlp.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                kdist::Adam(), 1);
    fails(gpt, save(std::move(mlp), "mlp.weights.h5"),
          "layer 'token_embedding' (group '/layers/embedding') is not in the file");
  }
  // attention without biases against a file with them
  auto no_bias = attention_model(1, false);
  fails(no_bias, save(attention_model(1, true), "bias.weights.h5"),
        "layer 'mha0' (group '/layers/multi_head_attention/query_dense') has 1 variable(s) in the "
        "model but 2 in the file");
  // a file with an attention block the model lacks (its weights only in the sublayers' groups)
  auto one = attention_model(1, true);
  fails(one, save(attention_model(2, true), "two_attention.weights.h5"),
        "the file has weights for layer group '/layers/multi_head_attention_1', which the model "
        "has no layer for");
}

// A user's layer claiming to be Keras' MultiHeadAttention without its variables cannot be mapped.
struct NotAttention : kdist::layers::Dense {
  using kdist::layers::Dense::Dense;
  static constexpr std::string_view keras_class = "MultiHeadAttention";
};

TEST_F(KerasGptWeights, ALayerNamingMultiHeadAttentionNeedsItsVariables) {
  std::vector<Model::Layer> l;
  l.emplace_back(NotAttention(4, kdist::layers::Activation::linear, true, "fake"));
  Model m(kdist::Shape{3}, std::move(l));
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error, kdist::Adam(),
            1);
  const std::string msg =
      message_of<kdist::ValueError>([&] { kdist::save_keras_weights(m, file("fake.weights.h5")); });
  EXPECT_TRUE(contains(msg,
                       "kdist::save_keras_weights: layer 'fake' names the Keras class "
                       "MultiHeadAttention but has 2 variables, and Keras' has 8"))
      << msg;
  expect_same_on_every_process(msg);
}

}  // namespace
