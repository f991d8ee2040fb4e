// kdist/ops/pooling.hpp, kdist/ops/upsampling.hpp and kdist/ops/concatenate.hpp: max and average
// pooling over 1, 2 and 3 spatial axes with strides, overlapping windows and positions marked as
// padding (skipped by the maximum, not counted by the mean: Keras' "same") against the definition,
// their gradients against finite differences (max) and as the exact adjoint (mean); nearest
// upsampling of a block that starts inside the field against the definition and its gradient as the
// adjoint; concatenation along the last axis and its split; every error path with its message.
#include <gtest/gtest.h>

#include "kokkos_environment.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <kdist/ops/concatenate.hpp>
#include <kdist/ops/pooling.hpp>
#include <kdist/ops/upsampling.hpp>

namespace {

namespace ops = kdist::ops;

template <int R>
using HostR = std::conditional_t<
    R == 3, Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>,
    std::conditional_t<R == 4, Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace>,
                       Kokkos::View<double*****, Kokkos::LayoutRight, Kokkos::HostSpace>>>;

// (n, spatial..., c) as a View holding `v`.
template <std::size_t S>
HostR<S + 2> view_of(const std::vector<double>& v, std::size_t n,
                     const std::array<std::size_t, S>& spatial, std::size_t c) {
  std::array<std::size_t, 5> e{n, 1, 1, 1, 1};
  for (std::size_t a = 0; a < S; ++a) e[a + 1] = spatial[a];
  e[S + 1] = c;
  HostR<S + 2> out;
  if constexpr (S == 1) out = HostR<3>("v", e[0], e[1], e[2]);
  if constexpr (S == 2) out = HostR<4>("v", e[0], e[1], e[2], e[3]);
  if constexpr (S == 3) out = HostR<5>("v", e[0], e[1], e[2], e[3], e[4]);
  EXPECT_EQ(out.size(), v.size());
  std::copy(v.begin(), v.end(), out.data());
  return out;
}
template <class V>
std::vector<double> values(const V& v) {
  return std::vector<double>(v.data(), v.data() + v.size());
}
std::vector<double> uniform(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& e : v) e = u(gen);
  return v;
}
template <std::size_t S>
std::size_t product(const std::array<std::size_t, S>& a) {
  std::size_t p = 1;
  for (auto e : a) p *= e;
  return p;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  return "no kdist::ValueError";
}

template <std::size_t S>
struct PoolCase {
  std::size_t n, c;
  std::array<std::size_t, S> in, pool, stride;
  std::array<std::int64_t, S> inside_begin, inside_end;  // in the View's positions
  std::array<std::size_t, S> out() const {
    std::array<std::size_t, S> o{};
    for (std::size_t a = 0; a < S; ++a) o[a] = (in[a] - pool[a]) / stride[a] + 1;
    return o;
  }
};

// The definition: per output, the maximum or the mean of the window's positions that are inside.
template <std::size_t S>
std::vector<double> pooled(ops::PoolingKind kind, const PoolCase<S>& g,
                           const std::vector<double>& x) {
  const auto out = g.out();
  std::vector<double> y;
  for (std::size_t b = 0; b < g.n; ++b)
    for (std::size_t o = 0; o < product(out); ++o)
      for (std::size_t ch = 0; ch < g.c; ++ch) {
        std::array<std::size_t, S> oc{};
        for (std::size_t a = S, r = o; a-- > 0; r /= out[a]) oc[a] = r % out[a];
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        std::size_t count = 0;
        for (std::size_t t = 0; t < product(g.pool); ++t) {
          std::size_t flat = b;
          bool inside = true;
          for (std::size_t a = 0, r = t, div = product(g.pool); a < S; ++a) {
            div /= g.pool[a];
            const std::size_t tap = (r / div) % g.pool[a];
            const auto p = static_cast<std::int64_t>(oc[a] * g.stride[a] + tap);
            inside = inside && p >= g.inside_begin[a] && p < g.inside_end[a];
            flat = flat * g.in[a] + static_cast<std::size_t>(p);
          }
          if (!inside) continue;
          const double v = x[flat * g.c + ch];
          m = std::max(m, v);
          sum += v;
          ++count;
        }
        y.push_back(kind == ops::PoolingKind::max ? m : sum / static_cast<double>(count));
      }
  return y;
}

template <std::size_t S>
void check_pooling(ops::PoolingKind kind, const PoolCase<S>& g, const std::string& what) {
  const auto xs = uniform(g.n * product(g.in) * g.c, 1);
  const auto out = g.out();
  const auto r = uniform(g.n * product(out) * g.c, 2);
  ops::PoolWindow<S> w;
  w.pool_size = g.pool;
  w.strides = g.stride;
  w.inside_begin = g.inside_begin;
  w.inside_end = g.inside_end;
  auto pool = [&](const std::vector<double>& v) {
    const auto y = view_of<S>(std::vector<double>(r.size(), 7.0), g.n, out, g.c);
    ops::pool(kind, view_of<S>(v, g.n, g.in, g.c), y, w);
    return values(y);
  };
  const auto y = pool(xs);
  const auto want = pooled<S>(kind, g, xs);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-14) << what << i;
  const auto dx = view_of<S>(std::vector<double>(xs.size(), 7.0), g.n, g.in, g.c);
  ops::pool_backward(kind, view_of<S>(xs, g.n, g.in, g.c), view_of<S>(r, g.n, out, g.c), dx, w);
  if (kind == ops::PoolingKind::average) {  // linear: the gradient is the exact adjoint
    const auto e = uniform(xs.size(), 3);
    EXPECT_NEAR(dot(pool(e), r), dot(values(dx), e), 1e-12) << what << " adjoint";
  }
  for (std::size_t i = 0; i < xs.size(); ++i) {  // d sum(y * r) / dx_i
    auto plus = xs, minus = xs;
    plus[i] += 1e-6;
    minus[i] -= 1e-6;
    const double fd = (dot(pool(plus), r) - dot(pool(minus), r)) / 2e-6;
    ASSERT_NEAR(dx.data()[i], fd, 1e-8) << what << " dx[" << i << "]";
  }
}

constexpr auto all = std::numeric_limits<std::int64_t>::max();

TEST(PoolingOps, MaxAndMeanOverOneTwoAndThreeAxesMatchTheDefinitionAndItsGradient) {
  for (const auto kind : {ops::PoolingKind::max, ops::PoolingKind::average}) {
    const std::string k = kind == ops::PoolingKind::max ? "max " : "average ";
    check_pooling<1>(kind, {2, 3, {9}, {3}, {2}, {1}, {8}}, k + "1 axis, padding at both ends");
    check_pooling<1>(kind, {1, 2, {6}, {2}, {2}, {0}, {all}}, k + "1 axis, whole");
    check_pooling<2>(kind, {2, 2, {7, 6}, {2, 3}, {2, 1}, {0, 1}, {6, 5}},
                     k + "2 axes, strides (2, 1), padding");
    check_pooling<2>(kind, {1, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {4, 4}},
                     k + "2 axes, overlapping windows, padding all round");
    check_pooling<3>(kind, {1, 2, {4, 5, 3}, {2, 2, 2}, {2, 2, 1}, {0, 0, 0}, {all, 4, all}},
                     k + "3 axes");
  }
}

TEST(PoolingOps, APoolThatDoesNotFitAndWrongShapesAreValueErrors) {
  HostR<4> x("x", 1, 4, 4, 2), y("y", 1, 2, 2, 2), small("y", 1, 3, 2, 2);
  ops::PoolWindow<2> w;
  w.pool_size = {2, 2};
  w.strides = {2, 2};
  EXPECT_EQ(error_of([&] { ops::pool(ops::PoolingKind::max, x, small, w); }),
            "kdist::ops::pool: y is (1, 3, 2, 2), expected (1, 2, 2, 2) for x (1, 4, 4, 2)");
  EXPECT_EQ(error_of([&] { ops::pool_backward(ops::PoolingKind::max, x, y, small, w); }),
            "kdist::ops::pool_backward: dx is (1, 3, 2, 2), expected x's extents (1, 4, 4, 2)");
  auto wide = w;
  wide.pool_size[1] = 5;
  EXPECT_EQ(error_of([&] { ops::pool(ops::PoolingKind::average, x, y, wide); }),
            "kdist::ops::pool: the pool 5 does not fit axis 2 of images (1, 4, 4, 2) (padding "
            "'valid' on the View given)");
  auto zero = w;
  zero.strides[0] = 0;
  EXPECT_EQ(error_of([&] { ops::pool(ops::PoolingKind::average, x, y, zero); }),
            "kdist::ops::pool: pool_size and strides must be >= 1 on every spatial axis");
}

// Nearest upsampling: y covers field positions [output_begin, +out) of the upsampled field, x the
// field positions [input_begin, +in) of the input.
template <std::size_t S>
void check_upsampling(std::size_t n, std::size_t c, const std::array<std::size_t, S>& in,
                      const std::array<std::size_t, S>& out, const ops::UpsamplingWindow<S>& w,
                      const std::string& what) {
  const auto xs = uniform(n * product(in) * c, 4);
  const auto yv = view_of<S>(std::vector<double>(n * product(out) * c, 7.0), n, out, c);
  ops::upsample_nearest(view_of<S>(xs, n, in, c), yv, w);
  for (std::size_t b = 0; b < n; ++b)
    for (std::size_t o = 0; o < product(out); ++o)
      for (std::size_t ch = 0; ch < c; ++ch) {
        std::size_t flat = b;
        for (std::size_t a = 0, div = product(out); a < S; ++a) {
          div /= out[a];
          const auto field = w.output_begin[a] + static_cast<std::int64_t>((o / div) % out[a]);
          flat =
              flat * in[a] + static_cast<std::size_t>(field / static_cast<std::int64_t>(w.size[a]) -
                                                      w.input_begin[a]);
        }
        ASSERT_EQ(yv.data()[(b * product(out) + o) * c + ch], xs[flat * c + ch])
            << what << " output " << o;
      }
  const auto dys = uniform(yv.size(), 5);
  const auto dx = view_of<S>(std::vector<double>(xs.size(), 7.0), n, in, c);
  ops::upsample_nearest_backward(view_of<S>(dys, n, out, c), dx, w);
  EXPECT_NEAR(dot(values(yv), dys), dot(xs, values(dx)), 1e-12) << what << " adjoint";
}

TEST(UpsamplingOps, NearestRepeatsOfABlockMatchTheDefinitionAndTheAdjoint) {
  check_upsampling<1>(2, 3, {4}, {8}, {{2}, {0}, {0}}, "1 axis, whole");
  check_upsampling<1>(1, 2, {3}, {7}, {{3}, {2}, {7}}, "1 axis, a block inside the field");
  check_upsampling<2>(2, 2, {3, 4}, {5, 7}, {{2, 2}, {1, 0}, {3, 1}}, "2 axes, a block");
  check_upsampling<3>(1, 2, {2, 2, 3}, {4, 3, 6}, {{2, 3, 2}, {0, 1, 1}, {0, 4, 2}}, "3 axes");
  // an empty block of outputs reads nothing
  check_upsampling<2>(1, 1, {0, 2}, {0, 4}, {{2, 2}, {0, 0}, {6, 0}}, "an empty block");
}

TEST(UpsamplingOps, AViewThatDoesNotHoldWhatTheOutputsReadIsAValueError) {
  HostR<4> x("x", 1, 2, 2, 1), y("y", 1, 4, 4, 1), other("o", 1, 4, 4, 2);
  ops::UpsamplingWindow<2> w{{2, 2}, {0, 0}, {1, 0}};  // rows 1..4 read input rows 0..2
  EXPECT_EQ(error_of([&] { ops::upsample_nearest(x, y, w); }),
            "kdist::ops::upsample_nearest: y (1, 4, 4, 1) from field position 1 on axis 1 reads "
            "positions x (1, 2, 2, 1) from field position 0 does not hold");
  EXPECT_EQ(error_of([&] {
              ops::upsample_nearest_backward(other, x, {{2, 2}, {}, {}});
            }),
            "kdist::ops::upsample_nearest_backward: x (1, 2, 2, 1) and y (1, 4, 4, 2) differ in "
            "examples or channels");
  EXPECT_EQ(error_of([&] {
              ops::upsample_nearest(x, y, {{0, 2}, {}, {}});
            }),
            "kdist::ops::upsample_nearest: size must be >= 1 on every spatial axis");
}

TEST(ConcatenateOps, ColumnsJoinAndSplitBack) {
  using M = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  M a("a", 3, 2), b("b", 3, 1), whole("whole", 3, 3);
  for (int r = 0; r < 3; ++r) {
    a(r, 0) = 10.0 * r;
    a(r, 1) = 10.0 * r + 1;
    b(r, 0) = -1.0 * r;
  }
  ops::concatenate_columns(a, b, whole);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(whole(r, 0), 10.0 * r);
    EXPECT_EQ(whole(r, 1), 10.0 * r + 1);
    EXPECT_EQ(whole(r, 2), -1.0 * r);
  }
  M a2("a2", 3, 2), b2("b2", 3, 1);
  ops::split_columns(whole, a2, b2);
  EXPECT_EQ(values(a2), values(a));
  EXPECT_EQ(values(b2), values(b));
  M wrong("w", 3, 4);
  EXPECT_EQ(error_of([&] { ops::concatenate_columns(a, b, wrong); }),
            "kdist::ops::concatenate_columns: the parts are 3x2 and 3x1 but the whole is 3x4; "
            "expected the parts' rows and the sum of their columns");
}

}  // namespace
