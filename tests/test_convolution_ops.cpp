// kdist/ops/conv2d.hpp and kdist/ops/convolution.hpp: the three convolution kernels against a
// direct sum in long double, for kernel shapes 1x1 to 3x3 (square and not), 1 to 3 input and 1 to
// 5 output channels, batches of 0 to 4, images as small as the kernel, float and double, both
// backends (Eigen's GEMM and the portable Kokkos kernels); 1, 2 and 3 spatial axes with strides
// and dilation against the definitions; the two gradients against finite differences of
// sum(y * r); every error path with its message.
#include <gtest/gtest.h>

#include "kokkos_environment.hpp"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <kdist/ops/conv2d.hpp>
#include <kdist/ops/convolution.hpp>

namespace {

namespace ops = kdist::ops;
template <class T>
using T4 = Kokkos::View<T****, Kokkos::LayoutRight, Kokkos::HostSpace>;

template <class T>
T4<T> random4(std::size_t a, std::size_t b, std::size_t c, std::size_t d, std::uint64_t seed) {
  T4<T> v("v", a, b, c, d);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] = static_cast<T>(u(gen));
  return v;
}

// The definitions, summed directly.
template <class T>
T4<T> direct_conv(const T4<T>& x, const T4<T>& k) {
  const std::size_t oh = x.extent(1) - k.extent(0) + 1, ow = x.extent(2) - k.extent(1) + 1;
  T4<T> y("y", x.extent(0), oh, ow, k.extent(3));
  for (std::size_t n = 0; n < x.extent(0); ++n)
    for (std::size_t i = 0; i < oh; ++i)
      for (std::size_t j = 0; j < ow; ++j)
        for (std::size_t o = 0; o < k.extent(3); ++o) {
          long double s = 0;
          for (std::size_t a = 0; a < k.extent(0); ++a)
            for (std::size_t b = 0; b < k.extent(1); ++b)
              for (std::size_t c = 0; c < k.extent(2); ++c)
                s += static_cast<long double>(x(n, i + a, j + b, c)) * k(a, b, c, o);
          y(n, i, j, o) = static_cast<T>(s);
        }
  return y;
}
template <class T>
T4<T> direct_dkernel(const T4<T>& x, const T4<T>& dy, const T4<T>& k) {
  T4<T> dk("dk", k.extent(0), k.extent(1), k.extent(2), k.extent(3));
  for (std::size_t a = 0; a < k.extent(0); ++a)
    for (std::size_t b = 0; b < k.extent(1); ++b)
      for (std::size_t c = 0; c < k.extent(2); ++c)
        for (std::size_t o = 0; o < k.extent(3); ++o) {
          long double s = 0;
          for (std::size_t n = 0; n < dy.extent(0); ++n)
            for (std::size_t i = 0; i < dy.extent(1); ++i)
              for (std::size_t j = 0; j < dy.extent(2); ++j)
                s += static_cast<long double>(x(n, i + a, j + b, c)) * dy(n, i, j, o);
          dk(a, b, c, o) = static_cast<T>(s);
        }
  return dk;
}
template <class T>
T4<T> direct_dx(const T4<T>& dy, const T4<T>& k, const T4<T>& x) {
  T4<T> dx("dx", x.extent(0), x.extent(1), x.extent(2), x.extent(3));
  for (std::size_t n = 0; n < dy.extent(0); ++n)
    for (std::size_t i = 0; i < dy.extent(1); ++i)
      for (std::size_t j = 0; j < dy.extent(2); ++j)
        for (std::size_t a = 0; a < k.extent(0); ++a)
          for (std::size_t b = 0; b < k.extent(1); ++b)
            for (std::size_t c = 0; c < k.extent(2); ++c)
              for (std::size_t o = 0; o < k.extent(3); ++o)
                dx(n, i + a, j + b, c) += dy(n, i, j, o) * k(a, b, c, o);
  return dx;
}

template <class T>
void expect_near_all(const T4<T>& got, const T4<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got.data()[i], want.data()[i], tol * (1 + std::abs(double(want.data()[i]))))
        << what << " at " << i;
  }
}

struct Case {
  std::size_t n, h, w, c, kh, kw, co;
};
const Case cases[] = {{2, 5, 5, 1, 1, 1, 1}, {4, 6, 5, 3, 3, 3, 5}, {1, 4, 7, 2, 2, 3, 4},
                      {3, 3, 3, 1, 3, 3, 2}, {0, 4, 4, 2, 2, 2, 3}, {2, 8, 7, 2, 3, 2, 1}};

template <class T>
class Conv2DOps : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Conv2DOps, Scalars);

template <class F>
void for_each_backend(F&& f) {
  f(ops::backend::automatic, "automatic (Eigen)");
  f(ops::backend::kokkos, "kokkos");
}

TYPED_TEST(Conv2DOps, AllThreeMatchTheDefinitions) {
  using T = TypeParam;
  for (const auto& s : cases) {
    const auto x = random4<T>(s.n, s.h, s.w, s.c, 1);
    const auto k = random4<T>(s.kh, s.kw, s.c, s.co, 2);
    const auto dy = random4<T>(s.n, s.h - s.kh + 1, s.w - s.kw + 1, s.co, 3);
    const std::string shape = "x (" + std::to_string(s.n) + ", " + std::to_string(s.h) + ", " +
                              std::to_string(s.w) + ", " + std::to_string(s.c) + ") kernel (" +
                              std::to_string(s.kh) + ", " + std::to_string(s.kw) + ", ..., " +
                              std::to_string(s.co) + ")";
    for_each_backend([&](auto backend, const char* name) {
      T4<T> y("y", dy.extent(0), dy.extent(1), dy.extent(2), dy.extent(3));
      Kokkos::deep_copy(y, T(7));  // overwritten, never read
      ops::conv2d(x, k, y, backend);
      expect_near_all(y, direct_conv(x, k), shape + " forward " + name);
      T4<T> dk("dk", s.kh, s.kw, s.c, s.co);
      Kokkos::deep_copy(dk, T(7));
      ops::conv2d_backward_kernel(x, dy, dk, backend);
      expect_near_all(dk, direct_dkernel(x, dy, k), shape + " kernel gradient " + name);
      T4<T> dx("dx", s.n, s.h, s.w, s.c);
      Kokkos::deep_copy(dx, T(7));
      ops::conv2d_backward_input(dy, k, dx, backend);
      expect_near_all(dx, direct_dx(dy, k, x), shape + " input gradient " + name);
      // With the patch matrix in a scratch the caller keeps (what it held is never read).
      const auto e = ops::conv2d_scratch_extents(x, k);
      Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace> scratch("scratch", e[0], e[1]);
      Kokkos::deep_copy(scratch, T(-3));
      ops::conv2d(x, k, y, backend, scratch);
      expect_near_all(y, direct_conv(x, k), shape + " forward, kept scratch, " + name);
      Kokkos::deep_copy(scratch, T(-3));
      ops::conv2d_backward_kernel(x, dy, dk, backend, scratch);
      expect_near_all(dk, direct_dkernel(x, dy, k),
                      shape + " kernel gradient, kept scratch, " + name);
      Kokkos::deep_copy(scratch, T(-3));
      ops::conv2d_backward_input(dy, k, dx, backend, scratch);
      expect_near_all(dx, direct_dx(dy, k, x), shape + " input gradient, kept scratch, " + name);
    });
  }
}

// L = sum(conv2d(x, k) * r): dL/dk and dL/dx are the backward kernels with dy = r.
TEST(Conv2DOps, GradientsAreFiniteDifferencesOfTheForward) {
  const auto x = random4<double>(2, 5, 4, 2, 4);
  const auto k = random4<double>(3, 2, 2, 3, 5);
  const auto r = random4<double>(2, 3, 3, 3, 6);
  auto loss = [&](const T4<double>& xx, const T4<double>& kk) {
    T4<double> y("y", 2, 3, 3, 3);
    ops::conv2d(xx, kk, y);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y.data()[i] * r.data()[i];
    return s;
  };
  T4<double> dk("dk", 3, 2, 2, 3), dx("dx", 2, 5, 4, 2);
  ops::conv2d_backward_kernel(x, r, dk);
  ops::conv2d_backward_input(r, k, dx);
  const double eps = 1e-6;
  for (std::size_t i = 0; i < k.size(); ++i) {
    T4<double> kp("kp", 3, 2, 2, 3), km("km", 3, 2, 2, 3);
    Kokkos::deep_copy(kp, k);
    Kokkos::deep_copy(km, k);
    kp.data()[i] += eps;
    km.data()[i] -= eps;
    EXPECT_NEAR(dk.data()[i], (loss(x, kp) - loss(x, km)) / (2 * eps), 1e-7) << "kernel " << i;
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    T4<double> xp("xp", 2, 5, 4, 2), xm("xm", 2, 5, 4, 2);
    Kokkos::deep_copy(xp, x);
    Kokkos::deep_copy(xm, x);
    xp.data()[i] += eps;
    xm.data()[i] -= eps;
    EXPECT_NEAR(dx.data()[i], (loss(xp, k) - loss(xm, k)) / (2 * eps), 1e-7) << "input " << i;
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kdist::ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no kdist::ValueError";
  return {};
}

TEST(Conv2DOps, ShapesThatDoNotFitAreValueErrorsNamingThem) {
  T4<float> x("x", 2, 5, 5, 3), k("k", 3, 3, 3, 4), y("y", 2, 3, 3, 4);
  T4<float> k2("k2", 3, 3, 2, 4), big("big", 6, 3, 3, 4), y_bad("y_bad", 2, 3, 4, 4);
  EXPECT_EQ(error_of([&] { ops::conv2d(x, k2, y); }),
            "kdist::ops::conv2d: the kernel (3, 3, 2, 4) takes 2 input channels but x (2, 5, 5, "
            "3) has 3");
  EXPECT_EQ(error_of([&] { ops::conv2d(x, big, y); }),
            "kdist::ops::conv2d: the kernel (6, 3, 3, 4) does not fit images of (2, 5, 5, 3) "
            "(padding 'valid' on the View given: each (kernel extent - 1) * dilation_rate + 1 "
            "must be <= the image's extent, and kernel extents >= 1)");
  EXPECT_EQ(error_of([&] { ops::conv2d(x, k, y_bad); }),
            "kdist::ops::conv2d: y is (2, 3, 4, 4), expected (2, 3, 3, 4) for x (2, 5, 5, 3) and "
            "the kernel (3, 3, 3, 4)");
  EXPECT_EQ(error_of([&] { ops::conv2d_backward_kernel(x, y_bad, k); }),
            "kdist::ops::conv2d_backward_kernel: dy is (2, 3, 4, 4), expected (2, 3, 3, 4) for x "
            "(2, 5, 5, 3) and the kernel (3, 3, 3, 4)");
  EXPECT_EQ(error_of([&] { ops::conv2d_backward_input(y_bad, k, x); }),
            "kdist::ops::conv2d_backward_input: dy is (2, 3, 4, 4), expected (2, 3, 3, 4) for x "
            "(2, 5, 5, 3) and the kernel (3, 3, 3, 4)");
  // A kept scratch of other extents than the (2 * 3 * 3, 3 * 3 * 3) patch matrix.
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> wrong("wrong", 18, 26);
  const auto e = ops::conv2d_scratch_extents(x, k);
  EXPECT_EQ(e[0], 18u);
  EXPECT_EQ(e[1], 27u);
  EXPECT_EQ(error_of([&] { ops::conv2d(x, k, y, ops::backend::automatic, wrong); }),
            "kdist::ops::conv2d: the scratch View is (18, 26) but the shapes need a contiguous "
            "(18, 27) one (kdist::ops::conv_scratch_extents gives them)");
  EXPECT_EQ(error_of([&] { ops::conv2d_backward_kernel(x, y, k, ops::backend::kokkos, wrong); }),
            "kdist::ops::conv2d_backward_kernel: the scratch View is (18, 26) but the shapes need "
            "a contiguous (18, 27) one (kdist::ops::conv_scratch_extents gives them)");
  EXPECT_EQ(error_of([&] { ops::conv2d_backward_input(y, k, x, ops::backend::automatic, wrong); }),
            "kdist::ops::conv2d_backward_input: the scratch View is (18, 26) but the shapes need "
            "a contiguous (18, 27) one (kdist::ops::conv_scratch_extents gives them)");
}

// ---- 1, 2 and 3 spatial axes, strides and dilation ------------------------------------------------

// A convolution's sizes, and its three products summed from the definitions over flat arrays.
struct Geometry {
  std::size_t n, c, co;
  std::vector<std::size_t> in, k, stride, dilation;
  std::vector<std::size_t> out() const {
    std::vector<std::size_t> o;
    for (std::size_t a = 0; a < in.size(); ++a) {
      o.push_back((in[a] - (k[a] - 1) * dilation[a] - 1) / stride[a] + 1);
    }
    return o;
  }
};
std::size_t product(const std::vector<std::size_t>& v) {
  std::size_t p = 1;
  for (auto e : v) p *= e;
  return p;
}
// Row-major coordinates of flat index i over extents e.
std::vector<std::size_t> coords(std::size_t i, const std::vector<std::size_t>& e) {
  std::vector<std::size_t> c(e.size());
  for (std::size_t a = e.size(); a-- > 0;) {
    c[a] = i % e[a];
    i /= e[a];
  }
  return c;
}
std::size_t flat(const std::vector<std::size_t>& c, const std::vector<std::size_t>& e) {
  std::size_t i = 0;
  for (std::size_t a = 0; a < e.size(); ++a) i = i * e[a] + c[a];
  return i;
}
// Calls f(x index, kernel index, y index) for every term of the convolution's sum.
template <class F>
void for_each_term(const Geometry& g, F&& f) {
  const auto out = g.out();
  for (std::size_t b = 0; b < g.n; ++b)
    for (std::size_t o = 0; o < product(out); ++o)
      for (std::size_t t = 0; t < product(g.k); ++t) {
        const auto oc = coords(o, out), tc = coords(t, g.k);
        std::vector<std::size_t> p(g.in.size());
        for (std::size_t a = 0; a < p.size(); ++a)
          p[a] = oc[a] * g.stride[a] + tc[a] * g.dilation[a];
        const std::size_t xi = b * product(g.in) + flat(p, g.in), yi = b * product(out) + o;
        for (std::size_t c = 0; c < g.c; ++c)
          for (std::size_t co = 0; co < g.co; ++co) {
            f((xi * g.c + c), ((t * g.c + c) * g.co + co), (yi * g.co + co));
          }
      }
}

template <int R>
using HostR = std::conditional_t<
    R == 3, Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>,
    std::conditional_t<R == 4, Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace>,
                       Kokkos::View<double*****, Kokkos::LayoutRight, Kokkos::HostSpace>>>;

template <std::size_t S>
HostR<S + 2> view_of(const std::vector<double>& v, std::size_t first,
                     const std::vector<std::size_t>& middle, std::size_t last) {
  std::array<std::size_t, 5> e{first, 1, 1, 1, 1};
  for (std::size_t a = 0; a < S; ++a) e[a + 1] = middle[a];
  e[S + 1] = last;
  HostR<S + 2> out;
  if constexpr (S == 1) out = HostR<3>("v", e[0], e[1], e[2]);
  if constexpr (S == 2) out = HostR<4>("v", e[0], e[1], e[2], e[3]);
  if constexpr (S == 3) out = HostR<5>("v", e[0], e[1], e[2], e[3], e[4]);
  for (std::size_t i = 0; i < v.size(); ++i) out.data()[i] = v[i];
  return out;
}

std::vector<double> uniform(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& e : v) e = u(gen);
  return v;
}

template <std::size_t S, class Backend>
void check_geometry(const Geometry& g, Backend backend, const std::string& what) {
  const auto out = g.out();
  const auto xs = uniform(g.n * product(g.in) * g.c, 1), ks = uniform(product(g.k) * g.c * g.co, 2);
  const auto dys = uniform(g.n * product(out) * g.co, 3);
  std::vector<double> y(dys.size()), dk(ks.size()), dx(xs.size());
  for_each_term(g, [&](std::size_t xi, std::size_t ki, std::size_t yi) {
    y[yi] += xs[xi] * ks[ki];
    dk[ki] += xs[xi] * dys[yi];
    dx[xi] += dys[yi] * ks[ki];
  });
  kdist::ops::ConvWindow<S> window;
  for (std::size_t a = 0; a < S; ++a) {
    window.strides[a] = g.stride[a];
    window.dilation_rate[a] = g.dilation[a];
  }
  const auto x = view_of<S>(xs, g.n, g.in, g.c);
  const auto kernel = [&] {  // (k..., c, co)
    HostR<S + 2> v;
    if constexpr (S == 1) v = HostR<3>("k", g.k[0], g.c, g.co);
    if constexpr (S == 2) v = HostR<4>("k", g.k[0], g.k[1], g.c, g.co);
    if constexpr (S == 3) v = HostR<5>("k", g.k[0], g.k[1], g.k[2], g.c, g.co);
    for (std::size_t i = 0; i < ks.size(); ++i) v.data()[i] = ks[i];
    return v;
  }();
  const auto dy = view_of<S>(dys, g.n, out, g.co);
  auto yv = view_of<S>(std::vector<double>(y.size(), 7.0), g.n, out, g.co);
  auto dkv = HostR<S + 2>("dk", kernel.layout());
  auto dxv = view_of<S>(std::vector<double>(dx.size(), 7.0), g.n, g.in, g.c);
  kdist::ops::conv(x, kernel, yv, window, backend);
  kdist::ops::conv_backward_kernel(x, dy, dkv, window, backend);
  kdist::ops::conv_backward_input(dy, kernel, dxv, window, backend);
  const auto e = kdist::ops::conv_scratch_extents(x, kernel, window);
  EXPECT_EQ(e[0], g.n * product(out));
  EXPECT_EQ(e[1], product(g.k) * g.c);
  auto expect = [&](const auto& got, const std::vector<double>& want, const char* which) {
    ASSERT_EQ(got.size(), want.size()) << what << which;
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got.data()[i], want[i], 1e-12) << what << which << " at " << i;
    }
  };
  expect(yv, y, " forward");
  expect(dkv, dk, " kernel gradient");
  expect(dxv, dx, " input gradient");
}

TEST(ConvolutionOps, OneTwoAndThreeSpatialAxesWithStridesAndDilationMatchTheDefinitions) {
  const std::vector<Geometry> one{{2, 2, 3, {9}, {3}, {2}, {1}}, {1, 1, 2, {7}, {2}, {1}, {3}}},
      two{{2, 2, 3, {7, 6}, {3, 2}, {2, 1}, {1, 1}},
          {1, 3, 2, {9, 8}, {3, 3}, {1, 1}, {2, 3}},
          {3, 1, 1, {5, 5}, {1, 1}, {3, 2}, {1, 1}}},
      three{{2, 2, 2, {5, 4, 6}, {3, 2, 2}, {1, 2, 1}, {1, 1, 2}},
            {1, 1, 3, {4, 4, 4}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}}};
  for_each_backend([&](auto backend, const char* name) {
    for (const auto& g : one) check_geometry<1>(g, backend, std::string("1 axis ") + name);
    for (const auto& g : two) check_geometry<2>(g, backend, std::string("2 axes ") + name);
    for (const auto& g : three) check_geometry<3>(g, backend, std::string("3 axes ") + name);
  });
}

TEST(ConvolutionOps, AZeroStrideOrDilationAndAWindowThatDoesNotFitAreValueErrors) {
  HostR<5> x("x", 1, 4, 4, 4, 2), k("k", 2, 2, 2, 2, 3), y("y", 1, 3, 3, 3, 3);
  kdist::ops::ConvWindow<3> zero;
  zero.strides[1] = 0;
  EXPECT_EQ(error_of([&] { kdist::ops::conv(x, k, y, zero); }),
            "kdist::ops::conv: strides and dilation_rate must be >= 1 on every spatial axis");
  kdist::ops::ConvWindow<3> wide;
  wide.dilation_rate[2] = 4;  // a dilated kernel of 5 on 4 positions
  EXPECT_EQ(error_of([&] { kdist::ops::conv_backward_kernel(x, y, k, wide); }),
            "kdist::ops::conv_backward_kernel: the kernel (2, 2, 2, 2, 3) does not fit images of "
            "(1, 4, 4, 4, 2) (padding 'valid' on the View given: each (kernel extent - 1) * "
            "dilation_rate + 1 must be <= the image's extent, and kernel extents >= 1)");
  kdist::ops::ConvWindow<3> strided;
  strided.strides = {2, 2, 2};  // out 2 per axis, not 3
  EXPECT_EQ(error_of([&] { kdist::ops::conv_backward_input(y, k, x, strided); }),
            "kdist::ops::conv_backward_input: dy is (1, 3, 3, 3, 3), expected (1, 2, 2, 2, 3) for "
            "x (1, 4, 4, 4, 2) and the kernel (2, 2, 2, 2, 3)");
}

}  // namespace
