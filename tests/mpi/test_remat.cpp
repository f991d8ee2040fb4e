// kdist-mpi-ranks: 1 2
// Rematerialisation as Keras' RematScope (issue 37): a GPT whose blocks are created in a
// RematScope trains to bit-identical losses and weights (dropout included) on every mesh, keeps
// fewer bytes of activations (the allocation counters), still allocates nothing per step once its
// shapes are seen, and each mode selects the layers Keras' would.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <optional>
#include <random>

#include <kdist/nn/dtype_policy.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/position_embedding.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/allocation_counters.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/small_gpt.hpp"
#include "mpi/step_allocations.hpp"

namespace {

using kdist::test::message_of;
using kdist::test::world_size;
using namespace kdist::layers;
using Model = kdist::Sequential;

using namespace kdist::test::small_gpt;

const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .shuffle = false, .verbose = 0};

// A GPT with and without RematScope "full" on its blocks, under the dtype policy `policy`, on each
// rule set: the same losses, weights and evaluation, bit for bit.
void expect_remat_bit_identical(const char* policy) {
  const auto data = tokens(16);
  for (const Rules rules : {Rules::data_parallel, Rules::tensor, Rules::fsdp_sequence}) {
    const auto under_policy = [&](std::optional<Remat> remat) {
      const kdist::mixed_precision::PolicyScope scope(policy);
      auto m = gpt(std::move(remat));
      m.compile(distribution(rules), kdist::Loss::sparse_categorical_crossentropy,
                kdist::Adam(0.01), 3);
      return m;
    };
    auto plain = under_policy(std::nullopt);
    auto remat = under_policy(Remat{"full"});
    const auto want = plain.fit(data, fit);
    const auto got = remat.fit(data, fit);
    const std::string what =
        std::string(policy) + ", rules " + std::to_string(static_cast<int>(rules));
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(got.epochs[e].loss, want.epochs[e].loss) << what << " epoch " << e;
    }
    kdist::test::expect_bitwise_equal(kdist::test::state_of(remat), kdist::test::state_of(plain),
                                      what);
    EXPECT_EQ(remat.evaluate(data).loss, plain.evaluate(data).loss) << what;
  }
}

// The recomputed forward passes are the same arithmetic on the same inputs with the same dropout
// keys, so nothing differs, not even in the last bit.
TEST(Remat, FullScopeTrainsToBitIdenticalLossesAndWeightsOnEveryMesh) {
  expect_remat_bit_identical("float32");
}

// Under "mixed_bfloat16" too: what a recomputed layer keeps is rounded to 16 bits in place just
// before its backward pass, the values the shrunk and widened tensors of the plain run have.
TEST(Remat, FullScopeUnderMixedBfloat16IsBitIdenticalToo) {
  expect_remat_bit_identical("mixed_bfloat16");
}

void recompute_attention(Model& m) {
  for (auto& layer : m.layers()) {
    if (auto* block = layer.get_if<Residual>()) {
      for (auto& inner : block->layers()) {
        if (auto* mha = inner.get_if<MultiHeadAttention>()) mha->set_recompute_attention(true);
      }
    }
  }
}

// Megatron's selective recompute: the attention probabilities are computed again in backward,
// into buffers the layers share; the same arithmetic, so the same bits, and fewer bytes.
TEST(Remat, SelectiveAttentionRecomputeTrainsToBitIdenticalWeightsInFewerBytes) {
  const auto data = tokens(16);
  for (const Rules rules : {Rules::data_parallel, Rules::tensor}) {
    auto plain = gpt(std::nullopt);
    auto selective = gpt(std::nullopt);
    recompute_attention(selective);
    for (auto* m : {&plain, &selective}) {
      m->compile(distribution(rules), kdist::Loss::sparse_categorical_crossentropy,
                 kdist::Adam(0.01), 3);
      m->fit(data, fit);
    }
    kdist::test::expect_bitwise_equal(kdist::test::state_of(selective),
                                      kdist::test::state_of(plain),
                                      "rules " + std::to_string(static_cast<int>(rules)));
  }
  const auto bytes = [&](bool recompute) {
    kdist::detail::ViewArena::for_this_thread()->clear();
    kdist::AllocationCounters counters;
    auto m = gpt(std::nullopt);
    if (recompute) recompute_attention(m);
    m.compile(distribution(Rules::data_parallel), kdist::Loss::sparse_categorical_crossentropy,
              kdist::Adam(0.01), 3);
    m.fit(data, fit);
    return counters.peak_bytes();
  };
  // (blocks - 1) layers' probabilities and scratch fewer: 2 x 2 x (8/n x 4 x 16 x 16) floats
  const std::size_t probs = 8 / static_cast<std::size_t>(world_size()) * heads * seq * seq * 4;
  EXPECT_LE(bytes(true) + 2 * (blocks - 1) * probs, bytes(false));
}

// Activations: the peak bytes of two epochs above what the model holds for its variables (values
// and gradients, counted after compile, and AdamW's two slots), counted by
// kdist::AllocationCounters from before the model is built.
std::size_t activation_bytes(const std::optional<Remat>& remat, Rules rules) {
  const auto data = tokens(8);
  kdist::detail::ViewArena::for_this_thread()->clear();  // the other tests' buffers
  kdist::AllocationCounters counters;
  auto model = gpt(remat);
  model.compile(distribution(rules), kdist::Loss::sparse_categorical_crossentropy,
                kdist::Adam(0.01), 3);
  std::size_t weights = 0;
  model.for_each_variable([&](auto& v) { weights += v.value.local().span() * sizeof(float); });
  const std::size_t state = counters.live_bytes() + 2 * weights;
  model.fit(data, {.batch_size = 8, .epochs = 2, .shuffle = false, .verbose = 0});
  return counters.peak_bytes() - state;
}

TEST(Remat, FullScopeKeepsAThirdOfTheActivationBytesOrLess) {
  for (const Rules rules : {Rules::data_parallel, Rules::tensor}) {
    const std::size_t plain = activation_bytes(std::nullopt, rules);
    const std::size_t remat = activation_bytes(Remat{"full"}, rules);
    std::printf("rules %d: %zu activation bytes with remat, %zu without\n", static_cast<int>(rules),
                remat, plain);
    EXPECT_LT(remat, plain / 3) << "rules " << static_cast<int>(rules) << ": " << remat
                                << " bytes with remat, " << plain << " without";
  }
}

TEST(Remat, StepsAllocateNothingOnceTheirShapesAreSeen) {
  const auto data = tokens(8);
  for (const Rules rules : {Rules::data_parallel, Rules::fsdp_sequence}) {
    auto model = gpt(Remat{"full"});
    const auto dist = distribution(rules);
    model.compile(dist, kdist::Loss::sparse_categorical_crossentropy, kdist::Adam(0.01), 3);
    EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<2>(model, *dist, data, 8), "")
        << "rules " << static_cast<int>(rules);
  }
}

const kdist::RematSettings* settings_of(Model::Layer& layer) {
  return layer.remat_settings();
}

TEST(Remat, ModesSelectTheLayersKerasWould) {
  {
    kdist::RematScope scope("list_of_layers", 1024, {"block0/mlp"});
    auto l = block(0);
    EXPECT_EQ(settings_of(l[0]), nullptr);  // block0/attn is not in the list
    ASSERT_NE(settings_of(l[1]), nullptr);
    EXPECT_EQ(settings_of(l[1])->mode, kdist::RematMode::list_of_layers);
  }
  {
    kdist::RematScope scope("activations");  // kdist's activations keep only their inputs
    auto l = block(0);
    EXPECT_EQ(settings_of(l[0]), nullptr);
    EXPECT_EQ(settings_of(l[1]), nullptr);
  }
  {
    kdist::RematScope outer("full");
    kdist::RematScope inner(std::nullopt);  // Keras' RematScope(mode=None): none inside
    EXPECT_EQ(settings_of(block(0)[0]), nullptr);
  }
  {
    kdist::RematScope outer("full");
    auto l = block(0);
    ASSERT_NE(settings_of(l[0]), nullptr);
    EXPECT_EQ(settings_of(l[0])->mode, kdist::RematMode::full);
  }
  EXPECT_EQ(kdist::RematScope::current(), nullptr);  // every scope has ended
  EXPECT_EQ(settings_of(block(0)[0]), nullptr);
  auto explicit_remat = kdist::remat<float>(Dense(4, Activation::relu, true, "d"));
  ASSERT_NE(explicit_remat.remat_settings(), nullptr);
  EXPECT_EQ(explicit_remat.remat_settings()->mode, kdist::RematMode::full);
}

// "larger_than" decides at each call from the output's size, batch included (8 x 16 x 32 = 4096
// elements per block and layer here, 4 x 4096 for the MLP's `up`): a threshold at the largest
// keeps every activation, one below the smallest rematerialises as "full" does; the weights are
// the same either way.
TEST(Remat, LargerThanRematerialisesOnlyOutputsAboveTheThreshold) {
  const std::size_t plain = activation_bytes(std::nullopt, Rules::data_parallel);
  const std::size_t full = activation_bytes(Remat{"full"}, Rules::data_parallel);
  EXPECT_EQ(activation_bytes(Remat{"larger_than", 8 * seq * 4 * d_model}, Rules::data_parallel),
            plain);
  EXPECT_EQ(activation_bytes(Remat{"larger_than", 8 * seq * d_model - 1}, Rules::data_parallel),
            full);
  const auto data = tokens(16);
  auto a = gpt(Remat{"larger_than", 100});
  auto b = gpt(std::nullopt);
  for (auto* m : {&a, &b}) {
    m->compile(distribution(Rules::data_parallel), kdist::Loss::sparse_categorical_crossentropy,
               kdist::Adam(0.01), 3);
    m->fit(data, fit);
  }
  kdist::test::expect_bitwise_equal(kdist::test::state_of(a), kdist::test::state_of(b),
                                    "larger_than 100");
}

TEST(Remat, AnUnknownModeIsAnErrorThatNamesTheModes) {
  const std::string m =
      message_of<kdist::ValueError>([] { kdist::RematScope scope("everything"); });
  EXPECT_NE(m.find("invalid mode 'everything'"), std::string::npos) << m;
  EXPECT_NE(m.find("'full', 'activations', 'larger_than', 'list_of_layers'"), std::string::npos)
      << m;
  EXPECT_EQ(kdist::RematScope::current(), nullptr);
}

TEST(Remat, ABackwardPassBeforeTheForwardPassIsAnError) {
  auto layer = kdist::remat<float>(Dense(4, Activation::relu, true, "d"));
  const auto dist = distribution(Rules::data_parallel);
  layer.build(kdist::Shape{3}, *dist, 1);
  auto x = kdist::DistributedTensor<float**>::zeros({8, 3}, dist->get_data_layout({8, 3}), "x");
  kdist::Gradients<float> grads;
  kdist::StepContext context;
  layer.forward(kdist::LayerTensor<float>(x), context);
  auto dy = kdist::DistributedTensor<float**>::zeros({8, 4}, dist->get_data_layout({8, 4}), "dy");
  layer.backward(kdist::LayerTensor<float>(dy), true, grads);
  const std::string m = message_of<kdist::ValueError>(
      [&] { layer.backward(kdist::LayerTensor<float>(dy), true, grads); });
  EXPECT_NE(m.find("backward pass came before its forward pass"), std::string::npos) << m;
}

TEST(AllocationCounters, CountLiveAndPeakBytesAndOneSetAtATime) {
  kdist::AllocationCounters counters;
  {
    Kokkos::View<float*> a("a", 1000);
    EXPECT_EQ(counters.live_bytes(), 4000u);
    Kokkos::View<float*> b("b", 500);
    EXPECT_EQ(counters.live_bytes(), 6000u);
  }
  EXPECT_EQ(counters.live_bytes(), 0u);
  EXPECT_EQ(counters.peak_bytes(), 6000u);
  EXPECT_EQ(counters.allocations(), 2u);
  counters.reset_peak();
  EXPECT_EQ(counters.peak_bytes(), 0u);
  const std::string m = message_of<kdist::RuntimeError>([] { kdist::AllocationCounters another; });
  EXPECT_NE(m.find("another set of counters is live"), std::string::npos) << m;
}

}  // namespace
