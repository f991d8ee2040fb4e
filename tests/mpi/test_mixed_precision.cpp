// kdist-mpi-ranks: 1 2
// Keras' dtype policies (issue 37): the names and their compute / variable dtypes, the global
// policy layers take and the one a layer is given, kdist::float16's rounding, and models under
// "mixed_bfloat16" and "mixed_float16": outputs in the compute dtype, losses close to float32's
// on every mesh, activations kept in 16 bits (fewer bytes), no allocation per step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <kdist/core/float16.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/dtype_policy.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/loss_scale_optimizer.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <kdist/tensor/allocation_counters.hpp>

#include "mpi/model_test_support.hpp"
#include "mpi/mpi_test_util.hpp"
#include "mpi/small_gpt.hpp"
#include "mpi/step_allocations.hpp"

namespace {

using kdist::DTypePolicy;
using kdist::float16;
using kdist::test::message_of;
using namespace kdist::layers;
using Model = kdist::Sequential;
namespace mp = kdist::mixed_precision;

TEST(DTypePolicy, HasKerasNamesAndDtypes) {
  const struct {
    const char* name;
    const char* compute;
    const char* variable;
  } cases[] = {{"float32", "float32", "float32"},       {"mixed_bfloat16", "bfloat16", "float32"},
               {"mixed_float16", "float16", "float32"}, {"bfloat16", "bfloat16", "bfloat16"},
               {"float16", "float16", "float16"},       {"float64", "float64", "float64"}};
  for (const auto& c : cases) {
    const DTypePolicy p(c.name);
    EXPECT_EQ(p.name(), c.name);
    EXPECT_EQ(p.compute_dtype(), c.compute) << c.name;
    EXPECT_EQ(p.variable_dtype(), c.variable) << c.name;
  }
  EXPECT_EQ(DTypePolicy("mixed_bfloat16").repr(), "<DTypePolicy \"mixed_bfloat16\">");
  EXPECT_EQ(DTypePolicy("mixed_bfloat16"), DTypePolicy(std::string("mixed_bfloat16")));
  EXPECT_FALSE(DTypePolicy("bfloat16") == DTypePolicy("mixed_bfloat16"));
  EXPECT_EQ(message_of<kdist::ValueError>([] { DTypePolicy("mixed_int8"); }),
            "Cannot convert 'mixed_int8' to a mixed precision DTypePolicy. Valid policies include "
            "'mixed_float16', 'mixed_bfloat16', and the name of any float dtype such as "
            "'float32'.");
  EXPECT_EQ(message_of<kdist::ValueError>([] { mp::set_global_policy("int32"); }).substr(0, 26),
            "Cannot convert 'int32' to ");
}

TEST(DTypePolicy, GlobalPolicyIsFloat32UntilSetAndAScopeRestoresIt) {
  EXPECT_EQ(mp::global_policy().name(), "float32");
  EXPECT_EQ(DTypePolicy().name(), "float32");  // Keras' DTypePolicy(): the global one
  {
    const mp::PolicyScope scope("mixed_bfloat16");
    EXPECT_EQ(mp::global_policy().compute_dtype(), "bfloat16");
    EXPECT_EQ(DTypePolicy().name(), "mixed_bfloat16");
    mp::set_dtype_policy("mixed_float16");  // keras.config.set_dtype_policy
    EXPECT_EQ(mp::dtype_policy().name(), "mixed_float16");
  }
  EXPECT_EQ(mp::global_policy().name(), "float32");
}

TEST(Float16Scalar, RoundsToNearestEvenWithSubnormalsAndOverflowsToInfinity) {
  EXPECT_EQ(float16(1.0F).bits, 0x3c00);
  EXPECT_EQ(float16(-2.0F).bits, 0xc000);
  EXPECT_EQ(float16(65504.0F).bits, 0x7bff);  // the largest finite
  EXPECT_EQ(float16(65519.0F).bits, 0x7bff);  // below the halfway point
  EXPECT_EQ(float16(65520.0F).bits, 0x7c00);  // the halfway point: to even, which is infinity
  EXPECT_EQ(float16(1e9F).bits, 0x7c00);
  EXPECT_EQ(float16(-1e9F).bits, 0xfc00);
  EXPECT_EQ(float16(1.0F + 1.0F / 2048).bits, 0x3c00);     // a tie rounds to even
  EXPECT_EQ(float16(1.0F + 3.0F / 2048).bits, 0x3c02);     // ... up, to even
  EXPECT_EQ(float16(std::ldexp(1.0F, -24)).bits, 0x0001);  // the smallest subnormal
  EXPECT_EQ(float16(std::ldexp(1.0F, -25)).bits, 0x0000);  // half of it: a tie, to even (zero)
  EXPECT_EQ(float16(std::ldexp(3.0F, -25)).bits, 0x0002);  // 1.5 units: to even (2)
  EXPECT_EQ(float16(std::ldexp(1.0F, -14)).bits, 0x0400);  // the smallest normal
  EXPECT_EQ(float16(-0.0F).bits, 0x8000);
  EXPECT_TRUE(std::isnan(static_cast<float>(float16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(float16::from_bits(0x7c00)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(kdist::mpi::datatype<float16>(), MPI_UINT16_T);
}

TEST(Float16Scalar, EveryFloat16WidensExactlyAndRoundsBackToItself) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = float16::from_bits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float16(f).bits, b) << std::hex << b;
    // the float halfway to the next float16 up rounds to the even one of the two
    if ((b & 0x7fffU) < 0x7bffU) {
      const float next = static_cast<float>(float16::from_bits(static_cast<std::uint16_t>(b + 1)));
      const std::uint32_t even = (b & 1U) == 0 ? b : b + 1;
      ASSERT_EQ(float16((f + next) / 2).bits, even) << std::hex << b;
    }
  }
}

TEST(MixedPrecision, LayersTakeTheGlobalPolicyOrTheOneTheyAreGiven) {
  {
    const mp::PolicyScope scope("mixed_bfloat16");
    Model::Layer d(Dense(4, Activation::relu, true, "d"));
    EXPECT_EQ(d.dtype_policy().name(), "mixed_bfloat16");
    EXPECT_EQ(d.compute_dtype(), "bfloat16");
    EXPECT_EQ(d.variable_dtype(), "float32");
    auto last = kdist::with_dtype_policy("float32", Dense(4, Activation::softmax, true, "out"));
    EXPECT_EQ(last.compute_dtype(), "float32");
    EXPECT_EQ(kdist::with_dtype_policy("mixed_float16", Flatten()).compute_dtype(), "float16");
    auto copy = d;  // a copy keeps the policy
    EXPECT_EQ(copy.compute_dtype(), "bfloat16");
  }
  Model::Layer plain(Dense(4, Activation::relu, true, "d"));
  EXPECT_EQ(plain.dtype_policy().name(), "float32");
  // "float32", the default, means the model's scalars: float64 on a model of double
  kdist::AnyLayer<double> wide(BasicDense<double>(4, Activation::relu, true, "d"));
  EXPECT_EQ(wide.compute_dtype(), "float64");
}

TEST(MixedPrecision, PoliciesTheModelCannotTakeAreClearErrors) {
  const auto set = [](const char* policy) {
    return message_of<kdist::ValueError>(
        [&] { kdist::with_dtype_policy(policy, Dense(4, Activation::relu, true, "d")); });
  };
  EXPECT_NE(set("float64").find("but the model computes in float32"), std::string::npos);
  for (const char* policy : {"mixed_bfloat16", "bfloat16", "float16"}) {
    const std::string message = message_of<kdist::ValueError>([&] {
      kdist::with_dtype_policy(policy, BasicDense<double>(4, Activation::relu, true, "w"));
    });
    EXPECT_EQ(message, "kdist: layer 'w' has the dtype policy \"" + std::string(policy) +
                           "\", which computes in " +
                           std::string(DTypePolicy(policy).compute_dtype()) +
                           ", but the model is of float64: kdist computes in 16 bits in float32 "
                           "models (kdist::Sequential, kdist::BasicSequential<float>)");
  }
}

std::vector<float> fit_losses(Model model, const kdist::test::Dist& dist, std::size_t epochs) {
  model.compile(dist, kdist::Loss::mean_squared_error, kdist::RMSprop(0.001), 7);
  const auto history =
      model.fit(kdist::examples::seeds_data(),
                {.batch_size = 32, .epochs = epochs, .shuffle = false, .verbose = 0});
  std::vector<float> out;
  for (const auto& e : history.epochs) out.push_back(static_cast<float>(e.loss));
  return out;
}

Model seeds_under(const char* policy) {
  const mp::PolicyScope scope(policy);
  return kdist::examples::seeds_model();
}

// The seeds' model (Flatten, Dense relu, Dropout, Dense softmax, MSE) under each 16-bit policy
// trains to the float32 losses within the rounding of 16-bit activations, on every mesh and
// distribution the model tests use (rows, columns, row-parallel kernels).
TEST(MixedPrecision, SeedsModelTrainsCloseToFloat32OnEveryMesh) {
  for (const auto& dist : kdist::test::distributions()) {
    const auto want = fit_losses(seeds_under("float32"), dist, 3);
    for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
      const auto got = fit_losses(seeds_under(policy), dist, 3);
      ASSERT_EQ(got.size(), want.size());
      // bfloat16 keeps 8 significant bits (relative rounding 2^-9), float16 11
      const float tolerance = std::string(policy) == "mixed_bfloat16" ? 0.01F : 0.002F;
      for (std::size_t e = 0; e < want.size(); ++e) {
        EXPECT_NEAR(got[e], want[e], tolerance * want[e])
            << policy << " epoch " << e << " on " << dist->device_mesh().to_string();
      }
    }
  }
}

template <class H>
bool representable(float v) {
  return static_cast<float>(H(v)) == v;
}

// What flows out of a layer is in its compute dtype: every output of predict is a bfloat16 (or
// float16) value, and its layers keep their input and output in 16 bits (nothing else: Dense's
// relu keeps no pre-activation).
TEST(MixedPrecision, OutputsAreInTheComputeDtypeAndDenseKeepsItsActivationsIn16Bits) {
  const auto data = kdist::examples::seeds_data();
  for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
    const mp::PolicyScope scope(policy);
    // no softmax at the end (its outputs sum to 1 in float32, not in 16 bits)
    std::vector<Model::Layer> l;
    l.emplace_back(Flatten());
    l.emplace_back(Dense(64, Activation::gelu, true, "d1"));
    l.emplace_back(Dense(10, Activation::linear, true, "d2"));
    Model m({28, 28, 1}, std::move(l));
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::RMSprop(0.001), 7);
    m.fit(data, {.batch_size = 32, .epochs = 1, .shuffle = false, .verbose = 0});
    const auto dist = std::make_shared<kdist::DataParallel>();
    const kdist::BatchPlan plan(32, 32, *dist);
    const auto idx = plan.local_indices(plan.order(0), 0);
    kdist::detail::BatchLoader<float, 4> loader(data, idx.size());
    const auto out =
        std::get<kdist::DistributedTensor<float**>>(m.predict_step(loader.load_examples(idx), 32));
    const auto y = kdist::full_tensor(out);
    ASSERT_EQ(y.extent(0), 32U);
    const bool bf16 = std::string(policy) == "mixed_bfloat16";
    for (std::size_t i = 0; i < y.extent(0); ++i) {
      for (std::size_t j = 0; j < y.extent(1); ++j) {
        const float v = y(i, j);
        ASSERT_TRUE(bf16 ? representable<kdist::bfloat16>(v) : representable<float16>(v))
            << policy << ": " << v;
      }
    }
    // d1 keeps x (the input that flowed in), y (the output that flowed out) and gelu's
    // pre-activation; d2 its x and y
    EXPECT_EQ(m.layers()[1].kept_in_sixteen_bits(), 3U) << policy;
    EXPECT_EQ(m.layers()[2].kept_in_sixteen_bits(), 2U) << policy;
  }
}

// A last layer given "float32" (Keras' advice for a softmax output) computes in float32 on the
// widened 16-bit input; the model trains as the all-mixed one does.
TEST(MixedPrecision, AFloat32LayerAfter16BitLayersTakesTheirOutputsWidened) {
  const auto dist = std::make_shared<kdist::DataParallel>();
  const auto want = fit_losses(seeds_under("float32"), dist, 2);
  Model m = [] {
    const mp::PolicyScope scope("mixed_bfloat16");
    std::vector<Model::Layer> l;
    l.emplace_back(Flatten());
    l.emplace_back(Dense(200, Activation::relu, false, "d1"));
    l.emplace_back(Dropout(0.4, "dropout"));
    l.emplace_back(kdist::with_dtype_policy("float32", Dense(10, Activation::softmax, true, "d2")));
    return Model({28, 28, 1}, std::move(l));
  }();
  EXPECT_EQ(m.layers()[3].compute_dtype(), "float32");
  const auto got = fit_losses(std::move(m), dist, 2);
  for (std::size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got[e], want[e], 0.01F * want[e]);
}

// The bytes a model holds beyond what it holds once compiled (variables, gradients; SGD keeps no
// slots), peak over two epochs of `data` (kdist::AllocationCounters): its activations and the
// step's other buffers. `make()` builds it, under `policy`.
template <class Make>
std::size_t activation_bytes(const char* policy, Make&& make,
                             std::shared_ptr<const kdist::Distribution> dist, kdist::Loss loss,
                             const kdist::ArrayDataset<float>& data, std::size_t batch) {
  kdist::detail::ViewArena::for_this_thread()->clear();  // other tests' buffers
  kdist::AllocationCounters counters;
  auto m = [&] {
    const mp::PolicyScope scope(policy);
    return make();
  }();
  m.compile(std::move(dist), loss, kdist::SGD(0.001), 7);
  const std::size_t compiled = counters.live_bytes();
  counters.reset_peak();  // compile's transient buffers are not the step's
  m.fit(data, {.batch_size = batch, .epochs = 2, .shuffle = false, .verbose = 0});
  return counters.peak_bytes() - compiled;
}

//! The activation bytes of `make`'s model under "mixed_bfloat16" over those under "float32".
template <class Make>
double mixed_over_float32_bytes(const char* what, Make&& make,
                                const std::shared_ptr<const kdist::Distribution>& dist,
                                kdist::Loss loss, const kdist::ArrayDataset<float>& data,
                                std::size_t batch) {
  const std::size_t f32 = activation_bytes("float32", make, dist, loss, data, batch);
  const std::size_t bf16 = activation_bytes("mixed_bfloat16", make, dist, loss, data, batch);
  const double ratio = static_cast<double>(bf16) / static_cast<double>(f32);
  std::printf("%s activation bytes: float32 %zu, mixed_bfloat16 %zu (%.3fx)\n", what, f32, bf16,
              ratio);
  return ratio;
}

// An MLP whose activations dominate: eight Dense(256, gelu) (0.66 M weights), under the global
// policy.
Model mlp() {
  std::vector<Model::Layer> l;
  l.emplace_back(Flatten());
  for (int i = 0; i < 8; ++i) {
    l.emplace_back(Dense(256, Activation::gelu, true, "d" + std::to_string(i)));
  }
  l.emplace_back(Dense(10, Activation::linear, true, "out"));
  return Model({28, 28, 1}, std::move(l));
}

TEST(MixedPrecision, KeepsAt55PercentOfTheActivationBytesOfFloat32OrFewer) {
  EXPECT_LE(
      mixed_over_float32_bytes("MLP", mlp, std::make_shared<kdist::DataParallel>(),
                               kdist::Loss::mean_squared_error, kdist::examples::seeds_data(), 128),
      0.55);
}

// Once a step's shapes are seen it allocates nothing more under "mixed_bfloat16" than under
// "float32" (nothing, but for a product sliced on a model axis of the (1, 2) mesh, which float32
// allocates as well).
TEST(MixedPrecision, StepsAllocateNoMoreThanFloat32OnceTheirShapesAreSeen) {
  const auto data = kdist::examples::seeds_data();
  for (const auto& dist : kdist::test::distributions()) {
    const auto allocations = [&](const char* policy) {
      auto m = seeds_under(policy);
      m.compile(dist, kdist::Loss::mean_squared_error, kdist::RMSprop(0.001), 7);
      return kdist::test::allocations_of_steps_3_and_4<4>(m, *dist, data, 32);
    };
    EXPECT_EQ(allocations("mixed_bfloat16"), allocations("float32"))
        << dist->device_mesh().to_string();
  }
  const auto dp = std::make_shared<kdist::DataParallel>();
  auto m = seeds_under("mixed_bfloat16");
  m.compile(dp, kdist::Loss::mean_squared_error, kdist::RMSprop(0.001), 7);
  EXPECT_EQ(kdist::test::allocations_of_steps_3_and_4<4>(m, *dp, data, 32), "");
}

// A rematerialised layer under a 16-bit policy: its boundary in 16 bits, its activations
// recomputed in float32 and rounded to 16 bits in place as the ones a layer keeps are, so the
// losses are those without the scope, bit for bit (Keras' RematScope: the same gradients).
TEST(MixedPrecision, RematerialisedLayersTrainAsWithout) {
  const auto dist = std::make_shared<kdist::DataParallel>();
  const auto want = fit_losses(seeds_under("mixed_bfloat16"), dist, 2);
  Model m = [] {
    const mp::PolicyScope policy("mixed_bfloat16");
    const kdist::RematScope remat("full");
    return kdist::examples::seeds_model();
  }();
  EXPECT_NE(m.layers()[1].remat_settings(), nullptr);
  EXPECT_EQ(m.layers()[1].compute_dtype(), "bfloat16");
  const auto got = fit_losses(std::move(m), dist, 2);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t e = 0; e < want.size(); ++e) EXPECT_EQ(got[e], want[e]) << "epoch " << e;
}

// The GPT (embeddings, layer normalisation, attention, residual blocks, dropout) under
// "mixed_bfloat16" trains to the float32 losses within 1%, data parallel, tensor parallel, and
// with FSDP and sequence parallelism.
TEST(MixedPrecision, GptTrainsCloseToFloat32UnderEveryRuleSet) {
  namespace gpt = kdist::test::small_gpt;
  const auto data = gpt::tokens(16);
  const kdist::FitOptions fit{.batch_size = 8, .epochs = 2, .shuffle = false, .verbose = 0};
  for (const auto rules :
       {gpt::Rules::data_parallel, gpt::Rules::tensor, gpt::Rules::fsdp_sequence}) {
    const auto losses = [&](const char* policy) {
      auto m = [&] {
        const mp::PolicyScope scope(policy);
        return gpt::gpt(std::nullopt);
      }();
      m.compile(gpt::distribution(rules), kdist::Loss::sparse_categorical_crossentropy,
                kdist::Adam(0.01), 3);
      std::vector<double> out;
      for (const auto& e : m.fit(data, fit).epochs) out.push_back(e.loss);
      return out;
    };
    const auto want = losses("float32");
    const auto got = losses("mixed_bfloat16");
    for (std::size_t e = 0; e < want.size(); ++e) {
      EXPECT_NEAR(got[e], want[e], 0.01 * want[e])
          << "rules " << static_cast<int>(rules) << " epoch " << e;
    }
  }
}

// The GPT, tensor parallel (the target: at most 0.55x).
TEST(MixedPrecision, GptKeeps55PercentOfTheActivationBytesOfFloat32OrFewer) {
  namespace gpt = kdist::test::small_gpt;
  EXPECT_LE(mixed_over_float32_bytes(
                "GPT", [] { return gpt::gpt(std::nullopt); }, gpt::distribution(gpt::Rules::tensor),
                kdist::Loss::sparse_categorical_crossentropy, gpt::tokens(16), 16),
            0.55);
}

// Token ids are not rounded (an Embedding does not autocast its inputs): ids that are not
// bfloat16 values (above 256) pick their own rows, which flow out rounded to bfloat16.
TEST(MixedPrecision, EmbeddingTokenIdsAreNotRounded) {
  const mp::PolicyScope scope("mixed_bfloat16");
  kdist::AnyLayer<float> layer(Embedding(1024, 8, "tokens"));
  const kdist::DataParallel dist;
  layer.build({4}, dist, 3);
  const kdist::RuntimeTensorLayout replicated({std::nullopt, std::nullopt}, dist.device_mesh());
  std::vector<float> ids{257, 513, 1023, 3, 259, 4, 1021, 300};
  const auto x = kdist::distribute_tensor<float**>(ids.data(), {2, 4}, replicated);
  const auto y = kdist::full_tensor(std::get<kdist::DistributedTensor<float***>>(
      layer.forward(kdist::LayerTensor<float>(x), kdist::StepContext{})));
  const auto table = kdist::full_tensor(layer.get_if<Embedding>()->embeddings().value);
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 4; ++j) {
      const auto id = static_cast<std::size_t>(ids[i * 4 + j]);
      for (std::size_t k = 0; k < 8; ++k) {
        ASSERT_EQ(y(i, j, k), static_cast<float>(kdist::bfloat16(table(id, k)))) << id;
      }
    }
  }
}

// Inputs beyond float16's range (65504) overflow a "mixed_float16" model: without loss scaling
// that is an error naming kdist::LossScaleOptimizer, on every process; with it, training goes on
// (Keras' dynamic scaling skips the steps whose gradients are not finite).
TEST(MixedPrecision, Float16OverflowWithoutLossScalingIsAnError) {
  auto x = kdist::examples::random_normal(128 * 28 * 28, 1);
  for (auto& v : x) v *= 1e5F;
  const kdist::ArrayDataset<float> huge(std::move(x), {28, 28, 1},
                                        kdist::examples::random_normal(128 * 10, 2), 10);
  const kdist::FitOptions one{.batch_size = 32, .epochs = 1, .shuffle = false, .verbose = 0};
  auto m = seeds_under("mixed_float16");
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
            kdist::RMSprop(0.001), 7);
  const std::string message = message_of<kdist::ValueError>([&] { m.fit(huge, one); });
  EXPECT_TRUE(kdist::test::contains(
      message,
      "and layer 'flatten' computes in float16 without loss scaling: float16 overflows "
      "above 65504"))
      << message;
  EXPECT_TRUE(kdist::test::contains(message, "wrap the optimizer in kdist::LossScaleOptimizer"));
  auto scaled = seeds_under("mixed_float16");
  scaled.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                 kdist::LossScaleOptimizer(kdist::RMSprop(0.001)), 7);
  EXPECT_NO_THROW(scaled.fit(huge, one));
  auto bf16 = seeds_under("mixed_bfloat16");  // float32's range: no overflow
  bf16.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
               kdist::RMSprop(0.001), 7);
  EXPECT_TRUE(std::isfinite(bf16.fit(huge, one).epochs[0].loss));
}

// A layer of the user's, which lists no kept tensors, computes under the policy too: its inputs
// and outputs are 16-bit values.
struct Twice {
  using value_type = float;
  std::string name() const { return "twice"; }
  kdist::Shape build(const kdist::Shape& in, const kdist::Distribution&, std::uint64_t) {
    return in;
  }
  kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& x, const kdist::StepContext&) {
    seen = std::get<kdist::DistributedTensor<float**>>(x);
    forward_gemm_inputs = kdist::ops::gemm_inputs();
    return scaled(seen);
  }
  std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy, bool,
                                                    kdist::Gradients<float>&) {
    backward_gemm_inputs = kdist::ops::gemm_inputs();
    return scaled(std::get<kdist::DistributedTensor<float**>>(dy));
  }
  std::vector<kdist::VariableRef<float>> variables() { return {}; }
  static kdist::LayerTensor<float> scaled(const kdist::DistributedTensor<float**>& t) {
    auto out = kdist::DistributedTensor<float**>::zeros(t.shape(), t.layout());
    const auto in = t.local();
    const auto o = out.local();
    Kokkos::parallel_for(
        "twice", in.size(), KOKKOS_LAMBDA(std::size_t i) {
          o(i / in.extent(1), i % in.extent(1)) = 2.0F * in(i / in.extent(1), i % in.extent(1));
        });
    return out;
  }
  kdist::DistributedTensor<float**> seen;
  std::optional<kdist::ops::GemmInputs> forward_gemm_inputs, backward_gemm_inputs;
};

TEST(MixedPrecision, AUserLayerComputesUnderThePolicy) {
  const mp::PolicyScope scope("mixed_bfloat16");
  kdist::AnyLayer<float> layer(Twice{});
  kdist::RuntimeDeviceMesh mesh({static_cast<std::size_t>(kdist::test::world_size())}, {"data"},
                                kdist::list_devices());
  const kdist::RuntimeTensorLayout rows({std::nullopt, std::nullopt}, mesh);
  std::vector<float> values{1.0F + 1.0F / 512, 3.0F, -0.1F, 1000.5F};  // not all bfloat16 values
  const auto x = kdist::distribute_tensor<float**>(values.data(), {2, 2}, rows);
  const auto y = std::get<kdist::DistributedTensor<float**>>(
      layer.forward(kdist::LayerTensor<float>(x), kdist::StepContext{}));
  const auto seen = kdist::full_tensor(layer.get_if<Twice>()->seen);
  const auto out = kdist::full_tensor(y);
  for (std::size_t i = 0; i < 4; ++i) {
    const float rounded = static_cast<float>(kdist::bfloat16(values[i]));
    EXPECT_EQ(seen(i / 2, i % 2), rounded) << i;  // the input, rounded to bfloat16
    EXPECT_EQ(out(i / 2, i % 2), static_cast<float>(kdist::bfloat16(2.0F * rounded))) << i;
  }
}

// A layer's passes under a 16-bit policy run in a GemmInputsScope of its compute dtype: cuBLAS
// then takes the float32 products' inputs in it (tensor cores, float32 accumulation); outside the
// layer, and under "float32", products take their inputs as given.
TEST(MixedPrecision, ALayersPassesTakeGpuProductInputsInItsComputeDtype) {
  using kdist::ops::GemmInputs;
  const struct {
    const char* policy;
    GemmInputs inputs;
  } cases[] = {{"float32", GemmInputs::as_given},
               {"mixed_bfloat16", GemmInputs::bfloat16},
               {"mixed_float16", GemmInputs::float16},
               {"bfloat16", GemmInputs::bfloat16},
               {"float16", GemmInputs::float16}};
  kdist::RuntimeDeviceMesh mesh({static_cast<std::size_t>(kdist::test::world_size())}, {"data"},
                                kdist::list_devices());
  const kdist::RuntimeTensorLayout rows({std::nullopt, std::nullopt}, mesh);
  std::vector<float> values{1.0F, 2.0F, 3.0F, 4.0F};
  const auto x = kdist::distribute_tensor<float**>(values.data(), {2, 2}, rows);
  for (const auto& c : cases) {
    const mp::PolicyScope scope(c.policy);
    kdist::AnyLayer<float> layer(Twice{});
    kdist::Gradients<float> grads;
    layer.forward(kdist::LayerTensor<float>(x), kdist::StepContext{});
    EXPECT_EQ(kdist::ops::gemm_inputs(), GemmInputs::as_given) << c.policy;  // restored after
    layer.backward(kdist::LayerTensor<float>(x), true, grads);
    EXPECT_EQ(kdist::ops::gemm_inputs(), GemmInputs::as_given) << c.policy;
    const Twice& twice = *layer.get_if<Twice>();
    EXPECT_EQ(twice.forward_gemm_inputs, c.inputs) << c.policy;
    EXPECT_EQ(twice.backward_gemm_inputs, c.inputs) << c.policy;
  }
  {  // a scope restores what was in force before it, also when left by an exception
    const kdist::ops::GemmInputsScope outer(GemmInputs::float16);
    try {
      const kdist::ops::GemmInputsScope inner(GemmInputs::bfloat16);
      EXPECT_EQ(kdist::ops::gemm_inputs(), GemmInputs::bfloat16);
      throw std::runtime_error("left");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(kdist::ops::gemm_inputs(), GemmInputs::float16);
  }
  EXPECT_EQ(kdist::ops::gemm_inputs(), GemmInputs::as_given);
}

// ---- "bfloat16" and "float16": 16-bit variables (kdist/nn/sixteen_bit_variables.hpp) ---------

//! Whether every value of `values` is a value of `dtype` ("bfloat16" or "float16").
bool all_of_dtype(const std::vector<float>& values, std::string_view dtype) {
  for (const float v : values) {
    if (dtype == "bfloat16" ? !representable<kdist::bfloat16>(v) : !representable<float16>(v)) {
      return false;
    }
  }
  return true;
}
//! The same for every variable and slot of a model's state.
bool all_of_dtype(const std::map<std::string, std::vector<float>>& state, std::string_view dtype) {
  for (const auto& [path, values] : state) {
    if (!all_of_dtype(values, dtype)) {
      ADD_FAILURE() << path << " holds a value that is not a " << dtype;
      return false;
    }
  }
  return true;
}

//! `x` rounded to `dtype`.
float rounded_to(float x, std::string_view dtype) {
  return dtype == "bfloat16" ? static_cast<float>(kdist::bfloat16(x))
                             : static_cast<float>(float16(x));
}

//! SGD that records, per variable, the gradient it was given and the value it computed from it
//! (before the model rounds it), on this process.
struct RecordingSGD {
  struct Record {
    std::vector<float> grad, updated;
  };
  double rate = 0.25;
  std::shared_ptr<std::map<std::string, Record>> seen =
      std::make_shared<std::map<std::string, Record>>();
  std::string name() const { return "RecordingSGD"; }
  kdist::OptimizerSlots slots() const { return {}; }
  void update_step(const kdist::OptimizerView<float>& p, const kdist::OptimizerView<const float>& g,
                   std::span<const kdist::OptimizerView<float>> slots) const {
    update_step(p, g, slots, "");
  }
  void update_step(const kdist::OptimizerView<float>& p, const kdist::OptimizerView<const float>& g,
                   std::span<const kdist::OptimizerView<float>>, std::string_view path) const {
    const float r = static_cast<float>(rate);
    Kokkos::parallel_for(
        "recording_sgd", p.size(), KOKKOS_LAMBDA(std::size_t i) { p(i) -= r * g(i); });
    auto& record = (*seen)[std::string(path)];
    record.grad = host_copy(g);
    record.updated = host_copy(p);
  }
  template <class V>
  static std::vector<float> host_copy(const V& v) {
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    return {h.data(), h.data() + h.size()};
  }
};
static_assert(kdist::Optimizer<RecordingSGD>);

//! Copies every variable's block of `from` into `to` (same model, same distribution).
void copy_weights(Model& from, Model& to) {
  std::vector<Kokkos::View<float*, Kokkos::HostSpace>> blocks;
  from.for_each_variable([&](auto& v) {
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v.value.local());
    blocks.emplace_back("block", h.size());
    std::copy(h.data(), h.data() + h.size(), blocks.back().data());
  });
  std::size_t k = 0;
  to.for_each_variable([&](auto& v) {
    auto h = Kokkos::create_mirror_view(v.value.local());
    ASSERT_EQ(h.size(), blocks.at(k).size());
    std::copy(blocks[k].data(), blocks[k].data() + h.size(), h.data());
    Kokkos::deep_copy(v.value.local(), h);
    ++k;
  });
}

// Keras' "bfloat16" and "float16": a layer's variables are of the compute dtype; a float32 model
// takes them (kdist/nn/sixteen_bit_variables.hpp).
TEST(SixteenBitVariables, LayersUnderBfloat16OrFloat16HaveVariablesOfTheirDtype) {
  for (const char* policy : {"bfloat16", "float16"}) {
    auto m = seeds_under(policy);
    EXPECT_EQ(m.layers()[1].variable_dtype(), policy);
    EXPECT_EQ(m.layers()[1].compute_dtype(), policy);
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(0.001), 7);
    m.for_each_variable([&](auto& v) {
      EXPECT_EQ(kdist::dtype_name(v.dtype), policy) << v.path;
      EXPECT_TRUE(all_of_dtype(kdist::test::full_from_zero(v.value), policy)) << v.path;
    });
  }
  auto f32 = seeds_under("mixed_bfloat16");  // mixed: float32 variables
  f32.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(0.001), 7);
  f32.for_each_variable([](auto& v) { EXPECT_EQ(v.dtype, kdist::DType::float32) << v.path; });
}

// A step under "bfloat16" ("float16") is the "mixed_bfloat16" step of the same weights with the
// gradient rounded to the dtype before the update and the updated value after it, on every mesh
// and distribution; after steps of Adam every variable and slot still holds values of the dtype.
TEST(SixteenBitVariables, AStepIsTheMixedStepWithGradientAndValueRounded) {
  const auto data = kdist::examples::seeds_data();
  const kdist::FitOptions one{
      .batch_size = 64, .epochs = 1, .shuffle = false, .steps_per_epoch = 1, .verbose = 0};
  for (const auto& dist : kdist::test::distributions()) {
    for (const std::string policy : {"bfloat16", "float16"}) {
      const std::string where = policy + " on " + dist->device_mesh().to_string();
      auto pure = seeds_under(policy.c_str());
      auto mixed = seeds_under(("mixed_" + policy).c_str());
      const RecordingSGD p, q;
      pure.compile(dist, kdist::Loss::mean_squared_error, p, 7);
      mixed.compile(dist, kdist::Loss::mean_squared_error, q, 7);
      copy_weights(pure, mixed);  // the mixed model computes with the 16-bit weights
      pure.fit(data, one);
      mixed.fit(data, one);
      ASSERT_EQ(p.seen->size(), 3U) << where;  // d1/kernel (no bias), d2/kernel, d2/bias
      std::size_t k = 0;
      const auto after = kdist::test::local_weights(pure);
      std::size_t at = 0;
      pure.for_each_variable([&](auto& v) {
        const auto& got = p.seen->at(v.path);
        const auto& want = q.seen->at(v.path);
        ASSERT_EQ(got.grad.size(), want.grad.size()) << where;
        std::size_t grads_rounded = 0;
        for (std::size_t i = 0; i < want.grad.size(); ++i) {
          ASSERT_EQ(got.grad[i], rounded_to(want.grad[i], policy)) << where << " " << v.path;
          ASSERT_EQ(after[at + i], rounded_to(got.updated[i], policy)) << where << " " << v.path;
          grads_rounded += got.grad[i] != want.grad[i] ? 1 : 0;
        }
        // the float32 gradients are not all of the dtype already: the check above can fail
        if (v.path == "d1/kernel") EXPECT_GT(grads_rounded, 0U) << where;
        at += got.grad.size();
        ++k;
      });
      EXPECT_EQ(k, 3U);
      auto adam = seeds_under(policy.c_str());
      adam.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 7);
      adam.fit(data, {.batch_size = 64, .epochs = 1, .steps_per_epoch = 3, .verbose = 0});
      EXPECT_TRUE(all_of_dtype(kdist::test::state_of(adam), policy)) << where;
    }
  }
}

// Adam's slots of 16-bit variables are stored in 16 bits: half the bytes of float32 slots plus one
// 128 KiB float32 scratch block per slot for the updates, 0.55x on an MLP of 0.66 M weights; the
// seeds' model trains to the loss of "mixed_bfloat16" within 2%.
TEST(SixteenBitVariables, SlotsTakeHalfTheBytesAndTheModelTrains) {
  const auto compiled_bytes = [&](const char* policy, kdist::Sequential::Optimizer optimizer) {
    kdist::AllocationCounters counters;
    auto m = [&] {
      const mp::PolicyScope scope(policy);
      return mlp();
    }();
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error, optimizer,
              7);
    return counters.live_bytes();
  };
  const auto slot_bytes = [&](const char* policy) {
    return compiled_bytes(policy, kdist::Adam(0.001)) - compiled_bytes(policy, kdist::SGD(0.001));
  };
  const double f32 = static_cast<double>(slot_bytes("mixed_bfloat16"));
  const double bf16 = static_cast<double>(slot_bytes("bfloat16"));
  std::printf("Adam's slot bytes: float32 %.0f, bfloat16 %.0f (%.3fx)\n", f32, bf16, bf16 / f32);
  // half, plus the two slots' scratch blocks (the largest variable has more than a chunk); Kokkos
  // rounds each allocation up to 8 bytes (a 16-bit slot of 10 elements takes 24)
  constexpr double chunk = kdist::detail::OptimizerState<float>::sixteen_bit_chunk;
  EXPECT_NEAR(bf16, f32 / 2 + 2 * chunk * sizeof(float), 2 * 18 * 8);
  EXPECT_LE(bf16 / f32, 0.55);

  const auto loss_under = [&](const char* policy) {
    auto m = seeds_under(policy);
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(0.001), 7);
    return m.fit(kdist::examples::seeds_data(), {.batch_size = 32, .epochs = 2, .verbose = 0})
        .epochs.back()
        .loss;
  };
  const double mixed = loss_under("mixed_bfloat16");
  EXPECT_NEAR(loss_under("bfloat16"), mixed, 0.02 * mixed);
}

// ZeRO-1 (the optimizer state sharded over the data axis) keeps 16-bit slots in 16 bits and
// trains bit for bit as without it.
TEST(SixteenBitVariables, ShardedOptimizerStateTrainsAsUnsharded) {
  if constexpr (!std::is_same_v<Kokkos::DefaultExecutionSpace::memory_space, Kokkos::HostSpace>) {
    if (kdist::test::world_size() > 1 && !kdist::mpi::gpu_aware_non_blocking()) {
      GTEST_SKIP() << "ZeRO-1 on device memory needs an MPI whose non-blocking collectives take "
                      "device pointers (a clear error otherwise)";
    }
  }
  const auto train = [](bool shard, std::size_t bucket_bytes) {
    auto m = seeds_under("bfloat16");
    kdist::GradientSyncOptions o;
    o.shard_optimizer_state = shard;
    o.bucket_bytes = bucket_bytes;
    m.set_gradient_sync(o);
    m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
              kdist::Adam(0.01), 7);
    m.fit(kdist::examples::seeds_data(),
          {.batch_size = 64, .epochs = 1, .steps_per_epoch = 3, .verbose = 0});
    return kdist::test::state_of(m);
  };
  const auto want = train(false, 0);
  EXPECT_TRUE(all_of_dtype(want, "bfloat16"));
  kdist::test::expect_bitwise_equal(train(true, 0), want, "sharded in parts");
  kdist::test::expect_bitwise_equal(train(true, std::size_t{1} << 30), want, "owned whole");
}

class SixteenBitFiles : public kdist::test::TempDirTest {};

//! The HDF5 size of dataset `name`'s elements in `path` (process 0 reads, every process returns).
int element_bytes(const std::string& path, const std::string& name) {
  int bytes = 0;
  if (kdist::test::world_rank() == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    const hid_t t = H5Dget_type(d);
    bytes = static_cast<int>(H5Tget_size(t));
    H5Tclose(t);
    H5Dclose(d);
    H5Fclose(f);
  }
  MPI_Bcast(&bytes, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return bytes;
}

// A checkpoint and a Keras file keep each variable's dtype: a "bfloat16" model's variables and
// slots are 2-byte datasets holding its values exactly; they load into a "bfloat16" model on
// another distribution bit for bit, and into a float32 one widened; a float32 checkpoint loads into
// a "bfloat16" model rounded.
TEST_F(SixteenBitFiles, CheckpointsAndKerasFilesKeepEachVariablesDtype) {
  const auto data = kdist::examples::seeds_data();
  const kdist::FitOptions steps{.batch_size = 64, .epochs = 1, .steps_per_epoch = 2, .verbose = 0};
  const auto compiled = [](const char* policy, const kdist::test::Dist& dist) {
    auto m = seeds_under(policy);
    m.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 7);
    return m;
  };
  const auto dists = kdist::test::distributions();
  auto saved = compiled("bfloat16", dists.front());
  saved.fit(data, steps);
  const auto state = kdist::test::state_of(saved);
  kdist::save_checkpoint(saved, file("ckpt.h5"));
  kdist::save_keras_weights(saved, file("model.weights.h5"));
  EXPECT_EQ(element_bytes(file("ckpt.h5"), "variables/d1/kernel"), 2);
  EXPECT_EQ(element_bytes(file("ckpt.h5"), "optimizer/d1/kernel/slot1"), 2);
  EXPECT_EQ(element_bytes(file("model.weights.h5"), "layers/dense/vars/0"), 2);

  auto again = compiled("bfloat16", dists.back());
  kdist::load_checkpoint(again, file("ckpt.h5"));
  kdist::test::expect_bitwise_equal(kdist::test::state_of(again), state, "bfloat16 checkpoint");
  auto from_keras = compiled("bfloat16", dists.back());
  kdist::load_keras_weights(from_keras, file("model.weights.h5"));
  kdist::test::expect_bitwise_equal(kdist::test::state_of(from_keras), state, "Keras file");
  auto wide = compiled("float32", dists.back());
  kdist::load_checkpoint(wide, file("ckpt.h5"));
  kdist::test::expect_bitwise_equal(kdist::test::state_of(wide), state, "into float32");

  // a float32 checkpoint into a bfloat16 model: each value rounded
  wide.fit(data, steps);
  const auto f32 = kdist::test::state_of(wide);
  kdist::save_checkpoint(wide, file("f32.h5"));
  EXPECT_EQ(element_bytes(file("f32.h5"), "variables/d1/kernel"), 4);
  auto narrow = compiled("bfloat16", dists.front());
  kdist::load_checkpoint(narrow, file("f32.h5"));
  auto want = f32;
  for (auto& [path, values] : want) {
    for (auto& v : values) v = rounded_to(v, "bfloat16");
  }
  kdist::test::expect_bitwise_equal(kdist::test::state_of(narrow), want, "rounded");
}

}  // namespace
