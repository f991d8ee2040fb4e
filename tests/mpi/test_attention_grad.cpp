// kdist-mpi-ranks: 1
// MultiHeadAttention on one process in double (issue 20): the attention kernels against a naive
// loop (softmax rows, causal mask, large scores), the layer's output against a naive Keras-style
// MultiHeadAttention written here from its variables, the causal mask (the output at position i
// does not change when the inputs at j > i do), Keras' initialisers, and the gradients of every
// variable and of the input against central finite differences.
#include <gtest/gtest.h>

#include <cstdlib>

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/ops/attention.hpp>
#include <kdist/ops/attention_tiled.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

namespace {

using MHA = kdist::layers::BasicMultiHeadAttention<double>;
using Tensor3 = kdist::DistributedTensor<double***>;
static_assert(kdist::Layer<MHA>);
static_assert(kdist::Layer<kdist::layers::MultiHeadAttention>);

constexpr std::size_t B = 2, S = 5, D = 8, H = 2, K = 4;

std::vector<double> normal(std::size_t n, unsigned seed, double sd = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, sd);
  std::vector<double> out(n);
  for (auto& v : out) v = dist(gen);
  return out;
}

std::shared_ptr<const kdist::Distribution> one_device() {
  kdist::RuntimeDeviceMesh mesh({1, 1}, {"data", "model"}, kdist::list_devices());
  return std::make_shared<kdist::ModelParallel>(kdist::LayoutMap(mesh), "data");
}

template <class Tensor>
std::vector<double> values(const Tensor& t) {
  auto h = kdist::full_tensor(t);
  return std::vector<double>(h.data(), h.data() + h.size());
}

template <class DT>
void set_values(kdist::TrainableVariable<DT>& v, const std::vector<double>& data) {
  v.value = kdist::distribute_tensor<DT>(data.data(), v.value.shape(), v.value.layout());
}

Tensor3 tensor(const std::vector<double>& data, const kdist::Distribution& dist) {
  return kdist::distribute_tensor<double***>(data.data(), {B, S, D},
                                             dist.get_data_layout({B, S, D}));
}

// A built layer with non-zero biases (zeros would hide a misplaced bias).
MHA built_layer(const kdist::Distribution& dist, bool causal) {
  MHA mha(H, K, "mha", true, causal);
  mha.build({S, D}, dist, 5);
  unsigned seed = 100;
  for (auto ref : mha.variables()) {
    std::visit(
        [&](auto* v) {
          if (v->value.rank < 3) set_values(*v, normal(v->value.global_size(), ++seed, 0.3));
        },
        ref);
  }
  return mha;
}

// ---- the attention kernels ----------------------------------------------------------------------

using Host4 = Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace>;

Host4 host4(const std::vector<double>& v, std::size_t a, std::size_t b, std::size_t c,
            std::size_t d) {
  Host4 out("host4", a, b, c, d);
  for (std::size_t i = 0; i < v.size(); ++i) out.data()[i] = v[i];
  return out;
}

// probs (b, h, i, j) and out (b, i, h, d) by a naive loop, masked scores skipped.
void naive_attention(const Host4& q, const Host4& k, const Host4& v, double scale, bool causal,
                     Host4& probs, Host4& out) {
  const std::size_t nb = q.extent(0), ns = q.extent(1), nh = q.extent(2), nd = q.extent(3);
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t h = 0; h < nh; ++h)
      for (std::size_t i = 0; i < ns; ++i) {
        std::vector<double> s(ns, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < ns; ++j) {
          if (causal && j > i) continue;
          double dot = 0;
          for (std::size_t d = 0; d < nd; ++d) dot += q(b, i, h, d) * scale * k(b, j, h, d);
          s[j] = dot;
          mx = std::max(mx, dot);
        }
        double sum = 0;
        for (std::size_t j = 0; j < ns; ++j) sum += std::exp(s[j] - mx);
        for (std::size_t j = 0; j < ns; ++j) probs(b, h, i, j) = std::exp(s[j] - mx) / sum;
        for (std::size_t d = 0; d < nd; ++d) {
          double acc = 0;
          for (std::size_t j = 0; j < ns; ++j) acc += probs(b, h, i, j) * v(b, j, h, d);
          out(b, i, h, d) = acc;
        }
      }
}

TEST(AttentionOps, ForwardMatchesANaiveLoopWithAndWithoutTheCausalMask) {
  const std::size_t nb = 2, ns = 6, nh = 3, nd = 4;
  for (double magnitude : {1.0, 300.0}) {  // 300: scores in the 10^5, finite only if stable
    auto q = host4(normal(nb * ns * nh * nd, 1, magnitude), nb, ns, nh, nd);
    auto k = host4(normal(nb * ns * nh * nd, 2, magnitude), nb, ns, nh, nd);
    auto v = host4(normal(nb * ns * nh * nd, 3), nb, ns, nh, nd);
    for (bool causal : {true, false}) {
      Host4 probs("probs", nb, nh, ns, ns), out("out", nb, ns, nh, nd);
      Host4 want_p("want_p", nb, nh, ns, ns), want_o("want_o", nb, ns, nh, nd);
      const double scale = 1.0 / std::sqrt(double(nd));
      kdist::ops::attention_forward(q, k, v, probs, out, scale, causal);
      Kokkos::fence();
      naive_attention(q, k, v, scale, causal, want_p, want_o);
      for (std::size_t i = 0; i < probs.size(); ++i) {
        ASSERT_TRUE(std::isfinite(probs.data()[i]));
        EXPECT_NEAR(probs.data()[i], want_p.data()[i], 1e-12) << "probs " << i;
      }
      for (std::size_t i = 0; i < out.size(); ++i) {
        EXPECT_NEAR(out.data()[i], want_o.data()[i], 1e-12 * magnitude) << "out " << i;
      }
      for (std::size_t b = 0; b < nb; ++b)
        for (std::size_t h = 0; h < nh; ++h)
          for (std::size_t i = 0; i < ns; ++i) {
            double sum = 0;
            for (std::size_t j = 0; j < ns; ++j) {
              sum += probs(b, h, i, j);
              if (causal && j > i) {
                EXPECT_EQ(probs(b, h, i, j), 0.0);
              }
            }
            EXPECT_NEAR(sum, 1.0, 1e-12);
          }
    }
  }
}

TEST(AttentionOps, MismatchedExtentsAreValueErrors) {
  Host4 q("q", 1, 3, 2, 4), bad("bad", 1, 3, 2, 5), probs("p", 1, 2, 3, 3), out("o", 1, 3, 2, 4);
  EXPECT_THROW(kdist::ops::attention_forward(q, bad, q, probs, out, 0.5, true), kdist::ValueError);
  Host4 bad_p("p", 1, 2, 3, 2);
  EXPECT_THROW(kdist::ops::attention_forward(q, q, q, bad_p, out, 0.5, true), kdist::ValueError);
  // The device path (batched GEMMs over the Views' memory) refuses a padded View (rows of 5
  // doubles are padded to 6 here).
  Host4 q5("q5", 1, 3, 2, 5);
  Host4 padded(Kokkos::view_alloc(std::string("padded"), Kokkos::AllowPadding), 1, 3, 2, 5);
  ASSERT_FALSE(padded.span_is_contiguous());
  std::string msg;
  try {
    kdist::ops::attention_forward(q5, q5, q5, probs, padded, 0.5, true,
                                  kdist::ops::backend::kokkos);
  } catch (const kdist::ValueError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("kdist::ops::attention_forward: a View is padded"), std::string::npos) << msg;
}

// Kokkos' TeamPolicy takes an int league and scratch size: the tiled kernels refuse more (a batch
// x heads x tiles count that Views this size cannot reach here is checked on the count itself).
TEST(AttentionOps, TeamCountsBeyondKokkosIntAreValueErrors) {
  EXPECT_EQ(kdist::ops::detail::team_int(std::size_t{1} << 20, "attention_forward_tiled"), 1 << 20);
  const std::size_t too_many = static_cast<std::size_t>(std::numeric_limits<int>::max()) + 1;
  std::string msg;
  try {
    kdist::ops::detail::team_int(too_many, "attention_forward_tiled");
  } catch (const kdist::ValueError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("kdist::ops::attention_forward_tiled: 2147483648 teams or scratch bytes are "
                     "more than Kokkos' int allows; split the batch"),
            std::string::npos)
      << msg;
}

// ---- the layer ----------------------------------------------------------------------------------

TEST(MultiHeadAttentionOneProcess, VariablesHaveKerasPathsShapesAndInitialisers) {
  auto dist = one_device();
  MHA mha(H, K, "mha");
  EXPECT_EQ(mha.build({S, D}, *dist, 5), (kdist::Shape{S, D}));
  std::vector<std::string> paths;
  for (auto ref : mha.variables()) {
    std::visit([&](auto* v) { paths.push_back(v->path); }, ref);
  }
  EXPECT_EQ(paths,
            (std::vector<std::string>{"mha/query/kernel", "mha/query/bias", "mha/key/kernel",
                                      "mha/key/bias", "mha/value/kernel", "mha/value/bias",
                                      "mha/attention_output/kernel", "mha/attention_output/bias"}));
  EXPECT_EQ(mha.query_kernel().shape(), (std::vector<std::size_t>{D, H, K}));
  EXPECT_EQ(mha.query_bias()->shape(), (std::vector<std::size_t>{H, K}));
  EXPECT_EQ(mha.output_kernel().shape(), (std::vector<std::size_t>{H, K, D}));
  EXPECT_EQ(mha.output_bias()->shape(), (std::vector<std::size_t>{D}));
  // glorot_uniform with Keras' fans for rank 3: (D, H, K): fan_in = H * D, fan_out = K * D;
  // (H, K, D): fan_in = K * H, fan_out = D * H.
  auto check_limit = [](const std::vector<double>& w, double fan_in, double fan_out,
                        const std::string& what) {
    const double limit = std::sqrt(6.0 / (fan_in + fan_out));
    double mx = 0;
    for (double x : w) mx = std::max(mx, std::abs(x));
    EXPECT_LE(mx, limit) << what;
    EXPECT_GT(mx, 0.9 * limit) << what;  // 64 draws: the largest is near the limit
  };
  check_limit(values(mha.query_kernel().value), H * D, K * D, "query");
  check_limit(values(mha.key_kernel().value), H * D, K * D, "key");
  check_limit(values(mha.output_kernel().value), K * H, D * H, "attention_output");
  EXPECT_NE(values(mha.query_kernel().value), values(mha.key_kernel().value));
  for (double b : values(mha.query_bias()->value)) EXPECT_EQ(b, 0.0);
  for (double b : values(mha.output_bias()->value)) EXPECT_EQ(b, 0.0);
  MHA no_bias(H, K, "nb", false);
  no_bias.build({S, D}, *dist, 5);
  EXPECT_EQ(no_bias.variables().size(), 4u);
}

TEST(MultiHeadAttentionOneProcess, ForwardMatchesANaiveKerasStyleComputation) {
  auto dist = one_device();
  for (bool causal : {true, false}) {
    MHA mha = built_layer(*dist, causal);
    const auto xv = normal(B * S * D, 1);
    const auto y = values(mha.forward(tensor(xv, *dist)));
    const auto wq = values(mha.query_kernel().value), wk = values(mha.key_kernel().value),
               wv = values(mha.value_kernel().value), wo = values(mha.output_kernel().value);
    const auto bq = values(mha.query_bias()->value), bk = values(mha.key_bias()->value),
               bv = values(mha.value_bias()->value), bo = values(mha.output_bias()->value);
    auto project = [&](const std::vector<double>& w, const std::vector<double>& bias) {
      std::vector<double> p(B * S * H * K);
      for (std::size_t r = 0; r < B * S; ++r)
        for (std::size_t hk = 0; hk < H * K; ++hk) {
          double acc = bias[hk];
          for (std::size_t d = 0; d < D; ++d) acc += xv[r * D + d] * w[d * H * K + hk];
          p[r * H * K + hk] = acc;
        }
      return host4(p, B, S, H, K);
    };
    auto q = project(wq, bq), k = project(wk, bk), v = project(wv, bv);
    Host4 probs("p", B, H, S, S), o("o", B, S, H, K);
    naive_attention(q, k, v, 1.0 / std::sqrt(double(K)), causal, probs, o);
    for (std::size_t r = 0; r < B * S; ++r)
      for (std::size_t e = 0; e < D; ++e) {
        double acc = bo[e];
        for (std::size_t hk = 0; hk < H * K; ++hk) acc += o.data()[r * H * K + hk] * wo[hk * D + e];
        EXPECT_NEAR(y[r * D + e], acc, 1e-12) << "causal " << causal << " at " << r << ", " << e;
      }
  }
}

TEST(MultiHeadAttentionOneProcess, TheCausalMaskHidesLaterPositions) {
  auto dist = one_device();
  MHA causal = built_layer(*dist, true);
  MHA full = built_layer(*dist, false);
  const auto xv = normal(B * S * D, 1);
  const auto y = values(causal.forward(tensor(xv, *dist)));
  const auto y_full = values(full.forward(tensor(xv, *dist)));
  for (std::size_t i = 0; i + 1 < S; ++i) {
    auto changed = xv;
    const auto noise = normal(B * S * D, 50 + static_cast<unsigned>(i));
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t j = i + 1; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d)
          changed[(b * S + j) * D + d] += noise[(b * S + j) * D + d];
    const auto y2 = values(causal.forward(tensor(changed, *dist)));
    const auto y2_full = values(full.forward(tensor(changed, *dist)));
    double full_moved = 0;
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t p = 0; p <= i; ++p)
        for (std::size_t d = 0; d < D; ++d) {
          const std::size_t at = (b * S + p) * D + d;
          EXPECT_EQ(y2[at], y[at]) << "position " << p << " after changing positions > " << i;
          full_moved = std::max(full_moved, std::abs(y2_full[at] - y_full[at]));
        }
      for (std::size_t d = 0; d < D; ++d) {  // the changed positions' own outputs do move
        const std::size_t at = (b * S + S - 1) * D + d;
        EXPECT_NE(y2[at], y[at]);
      }
    }
    EXPECT_GT(full_moved, 1e-6) << "without the mask, earlier positions see later ones";
  }
}

template <class DT>
void check_variable_gradient(MHA& mha, kdist::TrainableVariable<DT>& v, const Tensor3& x,
                             const std::vector<double>& r, const std::string& what) {
  auto loss = [&] {
    const auto y = values(mha.forward(x));
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
    return l;
  };
  const auto grad = values(v.grad);
  const auto base = values(v.value);
  const double eps = 1e-6;
  for (std::size_t i = 0; i < base.size(); ++i) {
    auto w = base;
    w[i] = base[i] + eps;
    set_values(v, w);
    const double up = loss();
    w[i] = base[i] - eps;
    set_values(v, w);
    const double down = loss();
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(grad[i], fd, 1e-7 * std::max(1.0, std::abs(fd)))
        << what << " " << v.path << "[" << i << "]";
  }
  set_values(v, base);
}

TEST(MultiHeadAttentionOneProcess, GradientsOfEveryVariableAndTheInputMatchFiniteDifferences) {
  auto dist = one_device();
  for (bool causal : {true, false}) {
    const std::string what = causal ? "causal" : "not causal";
    MHA mha = built_layer(*dist, causal);
    const auto xv = normal(B * S * D, 1);
    const auto r = normal(B * S * D, 2);
    const Tensor3 x = tensor(xv, *dist);
    const Tensor3 y = mha.forward(x);
    const auto dy = kdist::distribute_tensor<double***>(r.data(), {B, S, D}, y.layout());
    const auto dx = kdist::backward_and_resolve(mha, dy, true);
    ASSERT_TRUE(dx.has_value());
    const auto dxv = values(*dx);
    // The variables' gradients are kept before the finite differences run forward again.
    for (auto ref : mha.variables()) {
      std::visit([&](auto* v) { check_variable_gradient(mha, *v, x, r, what); }, ref);
    }
    const double eps = 1e-6;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      auto loss = [&](double delta) {
        auto xp = xv;
        xp[i] += delta;
        const auto yv = values(mha.forward(tensor(xp, *dist)));
        double l = 0;
        for (std::size_t j = 0; j < yv.size(); ++j) l += yv[j] * r[j];
        return l;
      };
      const double fd = (loss(eps) - loss(-eps)) / (2 * eps);
      EXPECT_NEAR(dxv[i], fd, 1e-7 * std::max(1.0, std::abs(fd))) << what << " dx[" << i << "]";
    }
    // need_input_grad = false: the variables' gradients only.
    (void)mha.forward(x);
    EXPECT_FALSE(kdist::backward_and_resolve(mha, dy, false).has_value());
  }
}

// The host path (Eigen GEMMs per (batch, head)) and the device path (strided batched GEMMs over the
// heads and a softmax kernel over the rows; cuBLAS on a GPU, a Kokkos kernel here, forced with
// backend::kokkos) give the same probabilities, outputs and gradients.
TEST(AttentionOps, EigenAndKokkosBackendsAgree) {
  const std::size_t nb = 2, ns = 7, nh = 3, nd = 5;
  const std::size_t n = nb * ns * nh * nd;
  auto q = host4(normal(n, 11), nb, ns, nh, nd), k = host4(normal(n, 12), nb, ns, nh, nd);
  auto v = host4(normal(n, 13), nb, ns, nh, nd), dout = host4(normal(n, 14), nb, ns, nh, nd);
  const double scale = 1.0 / std::sqrt(double(nd));
  for (bool causal : {true, false}) {
    std::vector<Host4> got[2];
    for (int which = 0; which < 2; ++which) {
      Host4 probs("probs", nb, nh, ns, ns), out("out", nb, ns, nh, nd);
      Host4 dq("dq", nb, ns, nh, nd), dk("dk", nb, ns, nh, nd), dv("dv", nb, ns, nh, nd);
      if (which == 0) {
        kdist::ops::attention_forward(q, k, v, probs, out, scale, causal,
                                      kdist::ops::backend::eigen);
        kdist::ops::attention_backward(q, k, v, probs, dout, dq, dk, dv, scale, causal,
                                       kdist::ops::backend::eigen);
      } else {
        kdist::ops::attention_forward(q, k, v, probs, out, scale, causal,
                                      kdist::ops::backend::kokkos);
        kdist::ops::attention_backward(q, k, v, probs, dout, dq, dk, dv, scale, causal,
                                       kdist::ops::backend::kokkos);
      }
      Kokkos::fence();
      got[which] = {probs, out, dq, dk, dv};
    }
    const char* names[] = {"probs", "out", "dq", "dk", "dv"};
    for (std::size_t t = 0; t < 5; ++t) {
      for (std::size_t i = 0; i < got[0][t].size(); ++i) {
        EXPECT_NEAR(got[0][t].data()[i], got[1][t].data()[i], 1e-12)
            << names[t] << " " << i << (causal ? " causal" : "");
      }
    }
  }
}

// The tiled kernels (FlashAttention-2's online softmax, no (seq, seq) buffer; the device path of
// MultiHeadAttention) against the matrix kernels: the same outputs and gradients, and per row the
// log-sum-exp of the scores; sequences of several tiles and a partial last one (70 = 32 + 32 + 6
// for head_dim 5 in double), scores in the 10^5 (finite only if the online softmax is stable).
TEST(AttentionOps, TiledKernelsMatchTheMatrixKernels) {
  using Host3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  const std::size_t nb = 2, ns = 70, nh = 3, nd = 5;
  ASSERT_EQ(kdist::ops::detail::attention_tile(nd, sizeof(double), 4, true), 32u);
  const std::size_t n = nb * ns * nh * nd;
  for (double magnitude : {1.0, 300.0}) {
    auto q = host4(normal(n, 21, magnitude), nb, ns, nh, nd);
    auto k = host4(normal(n, 22, magnitude), nb, ns, nh, nd);
    auto v = host4(normal(n, 23), nb, ns, nh, nd), dout = host4(normal(n, 24), nb, ns, nh, nd);
    const double scale = 1.0 / std::sqrt(double(nd));
    for (bool causal : {true, false}) {
      Host4 probs("probs", nb, nh, ns, ns), want_o("out", nb, ns, nh, nd);
      Host4 want_dq("dq", nb, ns, nh, nd), want_dk("dk", nb, ns, nh, nd),
          want_dv("dv", nb, ns, nh, nd);
      kdist::ops::attention_forward(q, k, v, probs, want_o, scale, causal);
      kdist::ops::attention_backward(q, k, v, probs, dout, want_dq, want_dk, want_dv, scale,
                                     causal);
      Host4 out("out", nb, ns, nh, nd), dq("dq", nb, ns, nh, nd), dk("dk", nb, ns, nh, nd),
          dv("dv", nb, ns, nh, nd);
      Host3 lse("lse", nb, nh, ns), delta("delta", nb, nh, ns);
      kdist::ops::attention_forward_tiled(q, k, v, out, lse, scale, causal);
      kdist::ops::attention_backward_tiled(q, k, v, out, lse, dout, delta, dq, dk, dv, scale,
                                           causal);
      Kokkos::fence();
      const std::string what =
          std::string(causal ? "causal" : "full") + ", magnitude " + std::to_string(magnitude);
      const std::pair<const char*, std::pair<Host4, Host4>> pairs[] = {{"out", {out, want_o}},
                                                                       {"dq", {dq, want_dq}},
                                                                       {"dk", {dk, want_dk}},
                                                                       {"dv", {dv, want_dv}}};
      for (const auto& [name, views] : pairs) {
        double scale_of = 0;
        for (std::size_t i = 0; i < views.second.size(); ++i) {
          scale_of = std::max(scale_of, std::abs(views.second.data()[i]));
        }
        for (std::size_t i = 0; i < views.first.size(); ++i) {
          ASSERT_TRUE(std::isfinite(views.first.data()[i])) << name << " " << i << " " << what;
          // (scores of 10^5 carry absolute errors of 10^-11, recomputed from lse: x magnitude)
          ASSERT_NEAR(views.first.data()[i], views.second.data()[i],
                      1e-12 * magnitude * (1 + scale_of))
              << name << " " << i << " " << what;
        }
      }
      // lse: log sum_j exp(scale q_i . k_j) over the unmasked j, from the probabilities: p(i, j) =
      // exp(s_ij - lse_i), so lse_i = s_i0 - log p(i, 0) (key 0 is never masked)
      for (std::size_t b = 0; b < nb; ++b)
        for (std::size_t h = 0; h < nh; ++h)
          for (std::size_t i = 0; i < ns; ++i) {
            double s0 = 0;
            for (std::size_t d = 0; d < nd; ++d) s0 += q(b, i, h, d) * scale * k(b, 0, h, d);
            if (probs(b, h, i, 0) < 1e-200) continue;  // underflowed: no reference
            EXPECT_NEAR(lse(b, h, i), s0 - std::log(probs(b, h, i, 0)), 1e-10 * (1 + std::abs(s0)))
                << "lse " << b << " " << h << " " << i << " " << what;
          }
    }
  }
}

// Float: within a few float roundings of the double result.
TEST(AttentionOps, TiledKernelsInFloatAgreeWithDouble) {
  using F4 = Kokkos::View<float****, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using F3 = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  const std::size_t nb = 1, ns = 40, nh = 2, nd = 16;
  const std::size_t n = nb * ns * nh * nd;
  std::array<Host4, 4> dbl{
      host4(normal(n, 31), nb, ns, nh, nd), host4(normal(n, 32), nb, ns, nh, nd),
      host4(normal(n, 33), nb, ns, nh, nd), host4(normal(n, 34), nb, ns, nh, nd)};
  std::array<F4, 4> flt;
  for (std::size_t t = 0; t < 4; ++t) {
    flt[t] = F4("f", nb, ns, nh, nd);
    for (std::size_t i = 0; i < n; ++i) flt[t].data()[i] = static_cast<float>(dbl[t].data()[i]);
  }
  const double scale = 0.25;
  Host4 probs("p", nb, nh, ns, ns), o("o", nb, ns, nh, nd), dq("dq", nb, ns, nh, nd),
      dk("dk", nb, ns, nh, nd), dv("dv", nb, ns, nh, nd);
  kdist::ops::attention_forward(dbl[0], dbl[1], dbl[2], probs, o, scale, true);
  kdist::ops::attention_backward(dbl[0], dbl[1], dbl[2], probs, dbl[3], dq, dk, dv, scale, true);
  F4 fo("o", nb, ns, nh, nd), fdq("dq", nb, ns, nh, nd), fdk("dk", nb, ns, nh, nd),
      fdv("dv", nb, ns, nh, nd);
  F3 lse("lse", nb, nh, ns), delta("delta", nb, nh, ns);
  kdist::ops::attention_forward_tiled(flt[0], flt[1], flt[2], fo, lse, 0.25f, true);
  kdist::ops::attention_backward_tiled(flt[0], flt[1], flt[2], fo, lse, flt[3], delta, fdq, fdk,
                                       fdv, 0.25f, true);
  Kokkos::fence();
  const std::pair<F4, Host4> pairs[] = {{fo, o}, {fdq, dq}, {fdk, dk}, {fdv, dv}};
  for (const auto& [got, want] : pairs) {
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(got.data()[i], want.data()[i], 1e-5 * (1 + std::abs(want.data()[i]))) << i;
    }
  }
}

TEST(AttentionOps, TiledKernelsCheckTheirExtents) {
  using Host3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  Host4 q("q", 1, 3, 2, 4), bad("bad", 1, 3, 2, 5), out("o", 1, 3, 2, 4);
  Host3 lse("lse", 1, 2, 3), bad_lse("lse", 1, 3, 2), delta("delta", 1, 2, 3);
  EXPECT_THROW(kdist::ops::attention_forward_tiled(q, bad, q, out, lse, 0.5, true),
               kdist::ValueError);
  const auto msg = [&] {
    try {
      kdist::ops::attention_forward_tiled(q, q, q, out, bad_lse, 0.5, true);
    } catch (const kdist::ValueError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(msg.find("kdist::ops::attention_forward_tiled: lse is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 1x2x3 (batch, heads, seq)"), std::string::npos) << msg;
  EXPECT_THROW(
      kdist::ops::attention_backward_tiled(q, q, q, out, lse, q, bad_lse, q, q, q, 0.5, false),
      kdist::ValueError);
}

// The layer on the tiled kernels (the default on a GPU; forced here on the host) gives the
// matrix kernels' output, input gradient and variable gradients, and keeps no (seq, seq) buffer.
TEST(MultiHeadAttentionOneProcess, TiledAttentionKernelsGiveTheMatrixKernelsResults) {
  auto dist = one_device();
  for (bool causal : {true, false}) {
    std::vector<std::vector<double>> got[2];
    for (int which = 0; which < 2; ++which) {
      MHA mha = built_layer(*dist, causal);
      EXPECT_EQ(mha.attention_kernel(), kdist::ops::AttentionKernel::automatic);
      mha.set_attention_kernel(which == 0 ? kdist::ops::AttentionKernel::matrices
                                          : kdist::ops::AttentionKernel::tiled);
      const Tensor3 x = tensor(normal(B * S * D, 1), *dist);
      const auto r = normal(B * S * D, 2);
      const Tensor3 y = mha.forward(x);
      const auto dy = kdist::distribute_tensor<double***>(r.data(), {B, S, D}, y.layout());
      got[which].push_back(values(y));
      got[which].push_back(values(*kdist::backward_and_resolve(mha, dy, true)));
      for (auto ref : mha.variables()) {
        std::visit([&](auto* v) { got[which].push_back(values(v->grad)); }, ref);
      }
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    for (std::size_t t = 0; t < got[0].size(); ++t) {
      for (std::size_t i = 0; i < got[0][t].size(); ++i) {
        EXPECT_NEAR(got[1][t][i], got[0][t][i], 1e-12 * (1 + std::abs(got[0][t][i])))
            << "result " << t << " at " << i << (causal ? " causal" : "");
      }
    }
  }
}

// KDIST_ATTENTION_KERNEL overrides `automatic` (the GPU runs compare the two this way): tiled on
// the host here, the same results; a bad value is a ValueError naming it; an explicit setting
// wins over the environment.
TEST(MultiHeadAttentionOneProcess, KdistAttentionKernelChoosesTheKernelsOfAutomatic) {
  auto dist = one_device();
  const Tensor3 x = tensor(normal(B * S * D, 1), *dist);
  MHA plain = built_layer(*dist, true);
  const auto want = values(plain.forward(x));
  EXPECT_EQ(plain.kernels_of_last_forward(), kdist::ops::AttentionKernel::matrices);
  ::setenv("KDIST_ATTENTION_KERNEL", "tiled", 1);
  MHA from_env = built_layer(*dist, true);
  const auto got = values(from_env.forward(x));
  EXPECT_EQ(from_env.kernels_of_last_forward(), kdist::ops::AttentionKernel::tiled);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  from_env.set_attention_kernel(kdist::ops::AttentionKernel::matrices);
  (void)from_env.forward(x);
  EXPECT_EQ(from_env.kernels_of_last_forward(), kdist::ops::AttentionKernel::matrices);
  ::setenv("KDIST_ATTENTION_KERNEL", "flash", 1);
  MHA bad = built_layer(*dist, true);
  std::string msg;
  try {
    (void)bad.forward(x);
  } catch (const kdist::ValueError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("KDIST_ATTENTION_KERNEL is 'flash', not matrices, tiled or automatic"),
            std::string::npos)
      << msg;
  ::unsetenv("KDIST_ATTENTION_KERNEL");
}

}  // namespace
