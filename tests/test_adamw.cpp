// kdist::AdamW (Keras 3's AdamW: Adam after decoupled weight decay) and the global_clipnorm option
// of the library's optimizers, on one process: AdamW's steps against a double reference written
// here from Keras' formulas (BaseOptimizer._apply_weight_decay, then Adam.update_step), its
// exclude_from_weight_decay, AnyOptimizer holding it, Keras' clip_by_global_norm factor on a
// known vector, every optimizer's weight_decay and its exclusions (Keras gives every optimizer
// one), and every new error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/train/gradient_clipping.hpp>
#include <kdist/ops/optimizers.hpp>

#include "kokkos_environment.hpp"

namespace {

template <class T>
using HostVec = Kokkos::View<T*, Kokkos::LayoutRight, Kokkos::HostSpace>;

template <class T>
HostVec<T> host_vec(const std::vector<double>& values, const char* label = "v") {
  HostVec<T> v(std::string(label), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) v(i) = static_cast<T>(values[i]);
  return v;
}

// Keras' AdamW on doubles, written from keras/src/optimizers: the variable decays
// (`variable - variable * wd * lr`), then Adam's step with local_step t = iterations + 1.
struct ReferenceAdamW {
  ReferenceAdamW(double learning_rate, double weight_decay, std::vector<double> p0)
      : lr(learning_rate), wd(weight_decay), p(p0), m(p0.size(), 0.0), v(p0.size(), 0.0) {}
  double lr, wd, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  std::vector<double> p, m, v;
  int iterations = 0;
  void step(const std::vector<double>& g, bool decay = true) {
    const double t = iterations + 1;
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decay) p[i] = p[i] - p[i] * wd * lr;
      m[i] += (g[i] - m[i]) * (1 - b1);
      v[i] += (g[i] * g[i] - v[i]) * (1 - b2);
      p[i] -= m[i] * alpha / (std::sqrt(v[i]) + eps);
    }
    ++iterations;
  }
};

const std::vector<double> p0 = {1.0, -2.0, 0.5, 3.0, -0.25};
const std::vector<std::vector<double>> grads = {{0.5, -0.1, 0.0, 2.0, -0.3},
                                                {0.3, 0.2, -0.7, 1.5, 0.01},
                                                {-0.4, 0.05, 0.2, -1.0, 0.4},
                                                {0.1, -0.3, 0.6, 0.25, -0.2}};

template <class T>
class AdamWSteps : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AdamWSteps, Scalars);

TYPED_TEST(AdamWSteps, FollowKerasFormulasOnEveryBackend) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  struct Case {
    double lr, wd;
  };
  for (const Case c : {Case{0.001, 0.004}, Case{0.05, 0.1}}) {
    const auto run = [&](auto backend) {
      kdist::AdamW opt(c.lr, c.wd);
      ReferenceAdamW ref(c.lr, c.wd, p0);
      auto p = host_vec<T>(p0, "p");
      auto m = kdist::make_slot(p, "m");
      auto v = kdist::make_slot(p, "v");
      for (std::size_t s = 0; s < grads.size(); ++s) {
        opt.update(p, host_vec<T>(grads[s], "g"), m, v, backend);
        opt.finish_step();
        ref.step(grads[s]);
        for (std::size_t i = 0; i < p0.size(); ++i) {
          EXPECT_NEAR(p(i), ref.p[i], tol * std::max(1.0, std::abs(ref.p[i])))
              << "lr " << c.lr << " wd " << c.wd << " step " << s + 1 << " element " << i;
          EXPECT_NEAR(m(i), ref.m[i], tol) << "step " << s + 1;
          EXPECT_NEAR(v(i), ref.v[i], tol) << "step " << s + 1;
        }
      }
      EXPECT_EQ(opt.iterations(), static_cast<std::int64_t>(grads.size()));
    };
    run(kdist::ops::EigenBackend{});
    run(kdist::ops::KokkosBackend{});
  }
}

TYPED_TEST(AdamWSteps, TheDecayIsWhatSetsItApartFromAdam) {
  using T = TypeParam;
  // weight_decay 0 is Adam, bit for bit; weight decay > 0 moves every nonzero weight towards 0
  // by about lr * wd * |p| more than Adam does in one step.
  kdist::AdamW w0(0.01, 0.0);
  kdist::AdamW w(0.01, 0.5);
  kdist::Adam adam(0.01);
  auto pa = host_vec<T>(p0), p0w = host_vec<T>(p0), pw = host_vec<T>(p0);
  auto ma = kdist::make_slot(pa, "m"), va = kdist::make_slot(pa, "v");
  auto m0 = kdist::make_slot(pa, "m"), v0 = kdist::make_slot(pa, "v");
  auto mw = kdist::make_slot(pa, "m"), vw = kdist::make_slot(pa, "v");
  const auto g = host_vec<T>(grads[0]);
  adam.update(pa, g, ma, va);
  w0.update(p0w, g, m0, v0);
  w.update(pw, g, mw, vw);
  for (std::size_t i = 0; i < p0.size(); ++i) {
    EXPECT_EQ(p0w(i), pa(i)) << i;
    const double extra = static_cast<double>(pa(i)) - static_cast<double>(pw(i));
    EXPECT_NEAR(extra, p0[i] * 0.5 * 0.01, 1e-6) << i;
  }
}

TEST(AdamW, KerasDefaultsNameSlotsAndConfig) {
  const kdist::AdamW opt;
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.001);
  EXPECT_DOUBLE_EQ(opt.weight_decay(), 0.004);
  EXPECT_DOUBLE_EQ(opt.beta_1(), 0.9);
  EXPECT_DOUBLE_EQ(opt.beta_2(), 0.999);
  EXPECT_DOUBLE_EQ(opt.epsilon(), 1e-7);
  EXPECT_EQ(opt.name(), "AdamW");
  EXPECT_EQ(opt.slots(),
            (kdist::OptimizerSlots{{"momentum", "velocity"}, {{"momentum", "velocity"}}}));
  EXPECT_EQ(opt.slot_count(), 2u);
  EXPECT_FALSE(opt.global_clipnorm().has_value());
  const std::vector<std::pair<std::string, double>> config = {{"learning_rate", 0.001},
                                                              {"weight_decay", 0.004},
                                                              {"beta_1", 0.9},
                                                              {"beta_2", 0.999},
                                                              {"epsilon", 1e-7}};
  EXPECT_EQ(opt.hyperparameters(), config);
  static_assert(kdist::Optimizer<kdist::AdamW> && kdist::Optimizer<kdist::AdamW, double>);
}

TEST(AdamW, ExcludeFromWeightDecayMatchesTheVariablesName) {
  kdist::AdamW opt(0.01, 0.1);
  EXPECT_TRUE(opt.uses_weight_decay("d1/kernel"));
  EXPECT_TRUE(opt.uses_weight_decay("d1/bias"));
  opt.exclude_from_weight_decay({"bias", "gamma"});
  EXPECT_EQ(opt.excluded_from_weight_decay(), (std::vector<std::string>{"bias", "gamma"}));
  EXPECT_TRUE(opt.uses_weight_decay("d1/kernel"));
  EXPECT_FALSE(opt.uses_weight_decay("d1/bias"));
  EXPECT_FALSE(opt.uses_weight_decay("block/ln/gamma"));
  EXPECT_FALSE(opt.uses_weight_decay("bias"));
  // Keras matches the variable's name ("kernel"), not its layer: "d1" excludes nothing here.
  opt.exclude_from_weight_decay({"d1"});
  EXPECT_TRUE(opt.uses_weight_decay("d1/kernel"));
  opt.exclude_from_weight_decay({"kern"});  // a substring of the name, as Keras' re.search
  EXPECT_FALSE(opt.uses_weight_decay("d1/kernel"));
  opt.exclude_from_weight_decay({});
  EXPECT_TRUE(opt.uses_weight_decay("d1/kernel"));
  EXPECT_FALSE(kdist::AdamW(0.01, 0.0).uses_weight_decay("d1/kernel"));
}

// OptimizerViews (default memory space) of `values`, filled through a host mirror.
template <class T>
kdist::OptimizerView<T> device_vec(std::vector<Kokkos::View<T*, Kokkos::LayoutRight>>& keep,
                                   const std::vector<double>& values) {
  Kokkos::View<T*, Kokkos::LayoutRight> v("v", values.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < values.size(); ++i) h(i) = static_cast<T>(values[i]);
  Kokkos::deep_copy(v, h);
  keep.push_back(v);
  return kdist::OptimizerView<T>(v.data(), v.size());
}

template <class T>
std::vector<double> on_host(const kdist::OptimizerView<T>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

TEST(AdamW, AnyOptimizerHoldsItAndTellsItTheVariable) {
  kdist::AdamW w(0.05, 0.2);
  w.exclude_from_weight_decay({"bias"});
  kdist::AnyOptimizer<float> any = w;
  ASSERT_NE(any.get_if<kdist::AdamW>(), nullptr);
  EXPECT_EQ(any.get_if<kdist::Adam>(), nullptr);
  EXPECT_NE(std::get_if<kdist::AdamW>(&any), nullptr);
  EXPECT_EQ(any.name(), "AdamW");
  EXPECT_EQ(any.slot_count(), 2u);
  EXPECT_EQ(any.keras_slot_groups(), (std::vector<std::vector<std::size_t>>{{0, 1}}));
  EXPECT_FALSE(any.global_clipnorm().has_value());

  std::vector<Kokkos::View<float*, Kokkos::LayoutRight>> keep;
  const auto step = [&](std::string_view path, bool decay) {
    ReferenceAdamW ref(0.05, 0.2, p0);
    ref.step(grads[0], decay);
    const auto p = device_vec<float>(keep, p0);
    const auto g = device_vec<float>(keep, grads[0]);
    const std::vector<kdist::OptimizerView<float>> slots = {
        device_vec<float>(keep, std::vector<double>(p0.size(), 0.0)),
        device_vec<float>(keep, std::vector<double>(p0.size(), 0.0))};
    any.update_step(p, kdist::OptimizerView<const float>(g.data(), g.size()),
                    std::span<const kdist::OptimizerView<float>>(slots), path);
    const auto got = on_host(p);
    for (std::size_t i = 0; i < p0.size(); ++i) {
      EXPECT_NEAR(got[i], ref.p[i], 2e-6) << path << " element " << i;
    }
  };
  step("d1/kernel", true);
  step("d1/bias", false);
}

// A user's optimizer with the optional members: global_clipnorm and the step told its variable.
struct PathRecorder {
  std::vector<std::string>* seen;
  std::string name() const { return "PathRecorder"; }
  kdist::OptimizerSlots slots() const { return {}; }
  std::optional<double> global_clipnorm() const { return 2.5; }
  void update_step(const kdist::OptimizerView<float>&, const kdist::OptimizerView<const float>&,
                   std::span<const kdist::OptimizerView<float>>) const {
    seen->push_back("(no path)");
  }
  void update_step(const kdist::OptimizerView<float>&, const kdist::OptimizerView<const float>&,
                   std::span<const kdist::OptimizerView<float>>, std::string_view path) const {
    seen->emplace_back(path);
  }
};

TEST(GlobalClipnorm, AUsersOptimizerDeclaresItAndHearsTheVariablesPath) {
  std::vector<std::string> seen;
  kdist::AnyOptimizer<float> any = PathRecorder{&seen};
  EXPECT_EQ(any.global_clipnorm(), std::optional<double>(2.5));
  const kdist::OptimizerView<float> p;
  const kdist::OptimizerView<const float> g;
  any.update_step(p, g, {}, "d2/kernel");
  any.update_step(p, g, {});
  EXPECT_EQ(seen, (std::vector<std::string>{"d2/kernel", "(no path)"}));
  // The library's others step without the path, and have no clipping unless asked.
  kdist::AnyOptimizer<float> sgd = kdist::SGD(0.1);
  EXPECT_FALSE(sgd.global_clipnorm().has_value());
}

TEST(GlobalClipnorm, IsAnOptionOfEveryLibraryOptimizer) {
  kdist::SGD sgd(0.1, 0.9);
  sgd.set_global_clipnorm(1.5);
  EXPECT_EQ(sgd.global_clipnorm(), std::optional<double>(1.5));
  EXPECT_EQ(sgd.hyperparameters().back(), (std::pair<std::string, double>{"global_clipnorm", 1.5}));
  sgd.set_global_clipnorm(std::nullopt);
  EXPECT_FALSE(sgd.global_clipnorm().has_value());
  EXPECT_EQ(sgd.hyperparameters().size(), 3u);

  const auto adam = kdist::Adam(0.01).with_global_clipnorm(0.5);
  static_assert(std::is_same_v<std::remove_const_t<decltype(adam)>, kdist::Adam>);
  EXPECT_EQ(adam.global_clipnorm(), std::optional<double>(0.5));
  EXPECT_DOUBLE_EQ(adam.learning_rate(), 0.01);
  EXPECT_EQ(kdist::RMSprop().with_global_clipnorm(3.0).global_clipnorm(),
            std::optional<double>(3.0));
  const auto w = kdist::AdamW(0.01, 0.1).with_global_clipnorm(1.0);
  EXPECT_EQ(w.global_clipnorm(), std::optional<double>(1.0));
  EXPECT_DOUBLE_EQ(w.weight_decay(), 0.1);
  kdist::AnyOptimizer<double> any = w;
  EXPECT_EQ(any.global_clipnorm(), std::optional<double>(1.0));
  EXPECT_EQ(any.hyperparameters().back(), (std::pair<std::string, double>{"global_clipnorm", 1.0}));
}

TEST(GlobalClipnorm, KerasScaleOnAKnownVector) {
  // Gradients (3, 4) and (12): the global norm is sqrt(9 + 16 + 144) = 13.
  const std::vector<std::vector<double>> g = {{3.0, 4.0}, {12.0}};
  double sq = 0;
  for (const auto& t : g)
    for (double x : t) sq += x * x;
  const double norm = std::sqrt(sq);
  ASSERT_DOUBLE_EQ(norm, 13.0);
  // clipnorm 6.5: every gradient halves, and the clipped global norm is clipnorm.
  const double scale = kdist::global_clip_scale(norm, 6.5);
  EXPECT_DOUBLE_EQ(scale, 0.5);
  double clipped = 0;
  for (const auto& t : g)
    for (double x : t) clipped += (x * scale) * (x * scale);
  EXPECT_DOUBLE_EQ(std::sqrt(clipped), 6.5);
  // at or under the clipnorm nothing changes; a zero gradient stays zero
  EXPECT_EQ(kdist::global_clip_scale(13.0, 13.0), 1.0);
  EXPECT_EQ(kdist::global_clip_scale(13.0, 100.0), 1.0);
  EXPECT_EQ(kdist::global_clip_scale(0.0, 1.0), 1.0);
  // a norm that is not finite makes the step NaN, as Keras' `scale + (norm - norm)`
  EXPECT_TRUE(std::isnan(kdist::global_clip_scale(std::numeric_limits<double>::infinity(), 1.0)));
  EXPECT_TRUE(std::isnan(kdist::global_clip_scale(std::nan(""), 1.0)));
}

// `f` throws a kdist::ValueError whose message contains `text`.
template <class F>
void expect_value_error(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << text;
  } catch (const kdist::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// Keras gives every optimizer `weight_decay` (BaseOptimizer._apply_weight_decay: the variable
// decays by `variable * wd * lr` before the optimizer's own step) and exclude_from_weight_decay;
// here SGD (plain and with momentum), RMSprop and Adam, against the formulas on doubles.
TEST(WeightDecay, EveryOptimizerDecaysBeforeItsStepUnlessTheVariableIsExcluded) {
  const double lr = 0.1, wd = 0.5;
  const std::vector<double> g = {0.5, -0.1, 0.0, 2.0, -0.3};
  const auto decayed = [&](double p) { return p - p * wd * lr; };
  for (const bool excluded : {false, true}) {
    const char* path = excluded ? "d1/bias" : "d1/kernel";
    // SGD: p -= lr * g after the decay
    auto sgd = kdist::SGD(lr).with_weight_decay(wd);
    sgd.exclude_from_weight_decay({"bias"});
    auto p = host_vec<double>(p0, "p");
    const auto gv = host_vec<double>(g, "g");
    std::vector<kdist::OptimizerView<double>> none;
    sgd.update_step(kdist::OptimizerView<double>(p.data(), p.size()),
                    kdist::OptimizerView<const double>(gv.data(), gv.size()),
                    std::span<const kdist::OptimizerView<double>>(none), path);
    for (std::size_t i = 0; i < p0.size(); ++i) {
      const double base = excluded ? p0[i] : decayed(p0[i]);
      EXPECT_DOUBLE_EQ(p(i), base - lr * g[i]) << path << " SGD " << i;
    }
    // SGD with momentum 0.9: v = 0.9 v - lr g (v starts at 0), p += v
    auto momentum = kdist::SGD(lr, 0.9).with_weight_decay(wd);
    momentum.exclude_from_weight_decay({"bias"});
    p = host_vec<double>(p0, "p");
    auto velocity = host_vec<double>(std::vector<double>(p0.size(), 0.0), "velocity");
    std::vector<kdist::OptimizerView<double>> slot = {
        kdist::OptimizerView<double>(velocity.data(), velocity.size())};
    momentum.update_step(kdist::OptimizerView<double>(p.data(), p.size()),
                         kdist::OptimizerView<const double>(gv.data(), gv.size()),
                         std::span<const kdist::OptimizerView<double>>(slot), path);
    for (std::size_t i = 0; i < p0.size(); ++i) {
      const double base = excluded ? p0[i] : decayed(p0[i]);
      EXPECT_DOUBLE_EQ(p(i), base - lr * g[i]) << path << " SGD momentum " << i;
    }
    // RMSprop: velocity = (1 - rho) g^2, p -= lr g / sqrt(velocity + eps)
    auto rms = kdist::RMSprop(lr).with_weight_decay(wd);
    rms.exclude_from_weight_decay({"bias"});
    p = host_vec<double>(p0, "p");
    auto v = host_vec<double>(std::vector<double>(p0.size(), 0.0), "velocity");
    slot = {kdist::OptimizerView<double>(v.data(), v.size())};
    rms.update_step(kdist::OptimizerView<double>(p.data(), p.size()),
                    kdist::OptimizerView<const double>(gv.data(), gv.size()),
                    std::span<const kdist::OptimizerView<double>>(slot), path);
    for (std::size_t i = 0; i < p0.size(); ++i) {
      const double base = excluded ? p0[i] : decayed(p0[i]);
      const double vi = 0.1 * g[i] * g[i];
      EXPECT_NEAR(p(i), base - lr * g[i] / std::sqrt(vi + 1e-7), 1e-12) << path << " RMSprop " << i;
    }
    // Adam with a weight decay steps as AdamW does.
    auto adam = kdist::Adam(lr).with_weight_decay(wd);
    adam.exclude_from_weight_decay({"bias"});
    ReferenceAdamW want(lr, wd, p0);
    want.step(g, !excluded);
    p = host_vec<double>(p0, "p");
    auto m = host_vec<double>(std::vector<double>(p0.size(), 0.0), "m");
    v = host_vec<double>(std::vector<double>(p0.size(), 0.0), "v");
    slot = {kdist::OptimizerView<double>(m.data(), m.size()),
            kdist::OptimizerView<double>(v.data(), v.size())};
    adam.update_step(kdist::OptimizerView<double>(p.data(), p.size()),
                     kdist::OptimizerView<const double>(gv.data(), gv.size()),
                     std::span<const kdist::OptimizerView<double>>(slot), path);
    for (std::size_t i = 0; i < p0.size(); ++i) {
      EXPECT_NEAR(p(i), want.p[i], 1e-12) << path << " Adam " << i;
    }
  }
  // The configs carry it when it is set; without it they are as before.
  const auto has_decay = [](const auto& config) {
    for (const auto& [k, value] : config) {
      if (k == "weight_decay") return value;
    }
    return -1.0;
  };
  EXPECT_EQ(has_decay(kdist::SGD(lr).with_weight_decay(wd).hyperparameters()), wd);
  EXPECT_EQ(has_decay(kdist::RMSprop(lr).with_weight_decay(wd).hyperparameters()), wd);
  EXPECT_EQ(has_decay(kdist::Adam(lr).with_weight_decay(wd).hyperparameters()), wd);
  EXPECT_EQ(has_decay(kdist::SGD(lr).hyperparameters()), -1.0);
  EXPECT_EQ(has_decay(kdist::Adam(lr).hyperparameters()), -1.0);
  // An AnyOptimizer holding one tells it the variable.
  kdist::AnyOptimizer<double> any = kdist::SGD(lr).with_weight_decay(wd);
  auto p = host_vec<double>(p0, "p");
  const auto gv = host_vec<double>(g, "g");
  std::vector<kdist::OptimizerView<double>> none;
  std::get<kdist::SGD>(any).exclude_from_weight_decay({"gamma"});
  any.update_step(kdist::OptimizerView<double>(p.data(), p.size()),
                  kdist::OptimizerView<const double>(gv.data(), gv.size()),
                  std::span<const kdist::OptimizerView<double>>(none), "ln/gamma");
  for (std::size_t i = 0; i < p0.size(); ++i) EXPECT_DOUBLE_EQ(p(i), p0[i] - lr * g[i]) << i;
}

TEST(WeightDecayErrors, EveryOptimizerRefusesABadDecayOrAnEmptyExclusion) {
  expect_value_error([] { (void)kdist::SGD(0.1).with_weight_decay(-1.0); },
                     "kdist::SGD: weight_decay is -1; it must be a finite number >= 0");
  expect_value_error([] { (void)kdist::RMSprop().with_weight_decay(std::nan("")); },
                     "kdist::RMSprop: weight_decay is nan");
  expect_value_error(
      [] { (void)kdist::Adam().with_weight_decay(std::numeric_limits<double>::infinity()); },
      "kdist::Adam: weight_decay is inf");
  kdist::SGD sgd;
  expect_value_error([&] { sgd.exclude_from_weight_decay({""}); },
                     "kdist::SGD::exclude_from_weight_decay: an empty name matches every variable");
  kdist::RMSprop rms;
  expect_value_error([&] { rms.set_weight_decay(-0.5); }, "kdist::RMSprop: weight_decay is -0.5");
  EXPECT_EQ(rms.weight_decay(), 0.0);  // unchanged
}

TEST(AdamWErrors, InvalidHyperparameters) {
  expect_value_error([] { kdist::AdamW(0.001, -0.1); },
                     "kdist::AdamW: weight_decay is -0.1; it must be a finite number >= 0");
  expect_value_error([] { kdist::AdamW(0.001, std::nan("")); },
                     "kdist::AdamW: weight_decay is nan");
  expect_value_error([] { kdist::AdamW(0.001, std::numeric_limits<double>::infinity()); },
                     "kdist::AdamW: weight_decay is inf");
  expect_value_error([] { kdist::AdamW(-1.0); }, "kdist::AdamW: learning_rate is -1.000000");
  expect_value_error([] { kdist::AdamW(0.001, 0.004, 1.0); },
                     "kdist::AdamW: beta_1 is 1; it must be in [0, 1)");
  expect_value_error([] { kdist::AdamW(0.001, 0.004, 0.9, -0.5); }, "kdist::AdamW: beta_2 is -0.5");
  expect_value_error([] { kdist::AdamW(0.001, 0.004, 0.9, 0.999, -1e-7); },
                     "kdist::AdamW: epsilon is -1e-07; it must be >= 0");
  kdist::AdamW opt;
  expect_value_error([&] { opt.set_learning_rate(std::nan("")); },
                     "kdist::AdamW: learning_rate is");
  expect_value_error(
      [&] {
        opt.exclude_from_weight_decay({"bias", ""});
      },
      "kdist::AdamW::exclude_from_weight_decay: an empty name matches every variable");
  EXPECT_TRUE(opt.excluded_from_weight_decay().empty());  // unchanged by the failed call
}

TEST(AdamWErrors, SlotsAndShapes) {
  kdist::AdamW opt;
  auto p = host_vec<float>({1, 2, 3});
  auto g = host_vec<float>({1, 2, 3});
  auto m = kdist::make_slot(p, "m");
  auto v = kdist::make_slot(p, "v");
  auto bad = host_vec<float>({1, 2});
  expect_value_error([&] { opt.update(p, bad, m, v); }, "kdist::AdamW::update: the gradient is 2");
  expect_value_error([&] { opt.update(p, g, bad, v); }, "kdist::AdamW::update: m (first moment)");
  expect_value_error([&] { opt.update(p, g, m, bad); }, "kdist::AdamW::update: v (second moment)");
  const std::vector<HostVec<float>> one = {m};
  expect_value_error([&] { opt.update_step(p, g, std::span<const HostVec<float>>(one)); },
                     "kdist::AdamW::update_step: 1 slot(s) given but this AdamW declares 2");
  expect_value_error(
      [&] { opt.update_step(p, g, std::span<const HostVec<float>>(one), "d1/kernel"); },
      "kdist::AdamW::update_step: 1 slot(s) given but this AdamW declares 2");
}

TEST(GlobalClipnormErrors, ZeroNegativeOrNotFinite) {
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const std::string value = kdist::detail::number_string(bad);
    const std::string tail = "; it must be a finite number > 0";
    kdist::SGD sgd;
    expect_value_error([&] { sgd.set_global_clipnorm(bad); },
                       "kdist::SGD: global_clipnorm is " + value + tail);
    EXPECT_FALSE(sgd.global_clipnorm().has_value());  // unchanged
    expect_value_error([&] { (void)kdist::Adam().with_global_clipnorm(bad); },
                       "kdist::Adam: global_clipnorm is " + value + tail);
    expect_value_error([&] { (void)kdist::AdamW().with_global_clipnorm(bad); },
                       "kdist::AdamW: global_clipnorm is " + value + tail);
    expect_value_error([&] { kdist::RMSprop().set_global_clipnorm(bad); },
                       "kdist::RMSprop: global_clipnorm is " + value + tail);
    expect_value_error([&] { (void)kdist::global_clip_scale(1.0, bad); },
                       "kdist::clip_by_global_norm: clipnorm is");
  }
}

}  // namespace
