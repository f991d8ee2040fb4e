#pragma once
// Mesh types shared by the core's unit tests: each mesh shape of the distributed-training guide
// ((8,1), (4,2), (2,4), (1,8), and the seeds' (2,1)) over axes ("data", "model"), with every mix of
// static and dynamic extents, for typed tests.

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kdist/core/axis.hpp>
#include <kdist/core/mesh.hpp>

namespace kdist_test {

//! A 2-D ("data", "model") mesh of shape (D, M); each extent static (S*=true) or dynamic.
template <std::size_t D, std::size_t M, bool StaticData, bool StaticModel>
struct Mesh2 {
  using type = kdist::DeviceMesh<kdist::axis<"data", StaticData ? D : kdist::dynamic_extent>,
                                 kdist::axis<"model", StaticModel ? M : kdist::dynamic_extent>>;
  static constexpr std::array<std::size_t, 2> shape{D, M};
  static constexpr std::size_t size = D * M;
  static constexpr std::size_t rank_dynamic = (StaticData ? 0 : 1) + (StaticModel ? 0 : 1);

  //! The mesh over devices "cpu:0" ... "cpu:N-1", built the way a user would: from the device
  //! list when at most one extent is dynamic, else with the shape spelt out.
  static type make() {
    std::vector<std::string> devices;
    for (std::size_t i = 0; i < size; ++i) devices.push_back("cpu:" + std::to_string(i));
    if constexpr (rank_dynamic <= 1) {
      return type(devices);
    } else {
      return type(shape, devices);
    }
  }
};

//! The four static/dynamic variants of one shape.
template <std::size_t D, std::size_t M>
using Variants = ::testing::Types<Mesh2<D, M, true, true>, Mesh2<D, M, false, true>,
                                  Mesh2<D, M, true, false>, Mesh2<D, M, false, false>>;

//! Every guide shape, each in its four variants (20 mesh types).
using GuideMeshes =
    ::testing::Types<Mesh2<8, 1, true, true>, Mesh2<8, 1, false, true>, Mesh2<8, 1, true, false>,
                     Mesh2<8, 1, false, false>, Mesh2<4, 2, true, true>, Mesh2<4, 2, false, true>,
                     Mesh2<4, 2, true, false>, Mesh2<4, 2, false, false>, Mesh2<2, 4, true, true>,
                     Mesh2<2, 4, false, true>, Mesh2<2, 4, true, false>, Mesh2<2, 4, false, false>,
                     Mesh2<1, 8, true, true>, Mesh2<1, 8, false, true>, Mesh2<1, 8, true, false>,
                     Mesh2<1, 8, false, false>, Mesh2<2, 1, true, true>, Mesh2<2, 1, false, true>,
                     Mesh2<2, 1, true, false>, Mesh2<2, 1, false, false>>;

//! Readable typed-test names: "s8xd1" = data static 8, model dynamic 1.
struct Mesh2Name {
  template <class C>
  static std::string GetName(int) {
    using M = typename C::type;
    auto part = [](std::size_t r, std::size_t e) {
      return std::string(M::static_extent(r) == kdist::dynamic_extent ? "d" : "s") +
             std::to_string(e);
    };
    return part(0, C::shape[0]) + "x" + part(1, C::shape[1]);
  }
};

}  // namespace kdist_test
