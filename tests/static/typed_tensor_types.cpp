// The types of typed tensors with static extents (issue 10), and of what kdist::matmul,
// kdist::redistribute and kdist::apply_gradient make of them, instantiated in a translation unit
// that the g++ build and the plain-nvcc checks (tests/nvcc.cmake) both compile: nvcc's front end
// once rejected every typed matmul (a defaulted DimSpec comparison) and a template lambda in the
// typed tensor, and it cannot deduce the run-time base of a typed tensor with static extents
// (full_tensor, visualize_sharding and redistribute to a run-time layout have typed overloads for
// it). Built = passed; tests/mpi/test_typed_tensor.cpp runs the values.
#include <kdist/nn/apply_gradient.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/matmul.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/visualize_sharding.hpp>

#include <cstddef>
#include <type_traits>

namespace {

using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 2>>;
// (No `template <DimSpec... Dims> using Layout = TensorLayout<Mesh, Dims...>` here: nvcc's front
// end cannot hand such an alias to the host compiler; see layout.hpp.)
using kdist::dynamic_extent;
using kdist::replicated;

using Kernel =
    kdist::DistributedTensor<float[784][200], kdist::TensorLayout<Mesh, replicated, "model">>;
static_assert(std::is_same_v<Kernel::runtime_type, kdist::DistributedTensor<float**>>);
static_assert(std::is_same_v<Kernel::view_type::data_type, float[784][100]>);
static_assert(Kernel::static_extent(0) == 784 && Kernel::static_local_extent(1) == 100);

using Batch = kdist::DistributedTensor<float* [784], kdist::TensorLayout<Mesh, "data", replicated>>;
static_assert(std::is_same_v<Batch::view_type::data_type, float* [784]>);
static_assert(Batch::static_local_extent(0) == dynamic_extent);

// Rows over the run-time 'data' axis: run-time; columns over 'model': static.
using BothSharded =
    kdist::DistributedTensor<float[64][200], kdist::TensorLayout<Mesh, "data", "model">>;
static_assert(std::is_same_v<BothSharded::view_type::data_type, float* [100]>);
// Rows replicated (static), columns over the run-time 'data' axis: Kokkos cannot spell a static
// extent before a run-time one, so the rows are run-time in the View too.
using ColumnsOverData =
    kdist::DistributedTensor<float[64][200], kdist::TensorLayout<Mesh, replicated, "data">>;
static_assert(ColumnsOverData::static_local_extent(0) == 64);
static_assert(ColumnsOverData::static_local_extent(1) == dynamic_extent);
static_assert(std::is_same_v<ColumnsOverData::view_type::data_type, float**>);

// Uneven blocks (200 over 3 shards) keep a run-time extent.
using Three = kdist::DeviceMesh<kdist::axis<"model", 3>>;
using Uneven = kdist::DistributedTensor<float[200], kdist::TensorLayout<Three, "model">>;
static_assert(Uneven::static_local_extent(0) == dynamic_extent);
static_assert(std::is_same_v<Uneven::view_type::data_type, float*>);

// Without static extents nothing changes: the View is the run-time tensor's.
using Dynamic = kdist::DistributedTensor<float**, kdist::TensorLayout<Mesh, replicated, "model">>;
static_assert(std::is_same_v<Dynamic::view_type, Dynamic::runtime_view_type>);

}  // namespace

// One training step of a Dense layer, typed end to end (instantiated, never run here).
float typed_dense_step(const Batch& x, Kernel& w) {
  auto h = kdist::matmul(x, w);  // (?, 200) on ('data', 'model')
  static_assert(std::is_same_v<decltype(h)::data_type, float* [200]>);
  static_assert(std::is_same_v<decltype(h)::view_type::data_type, float* [100]>);
  auto dw = kdist::matmul<kdist::ops::Op::transpose>(x, h);  // (784, 200), pending over 'data'
  static_assert(std::is_same_v<decltype(dw)::data_type, float[784][200]>);
  static_assert(decltype(dw)::is_pending_sum);
  const kdist::SGD sgd(0.1f);
  kdist::apply_gradient(sgd, w, kdist::redistribute(dw, w.layout()));
  auto again = kdist::distribute_tensor<float[784][200]>(
      [](std::size_t i, std::size_t j) { return float(i + j); }, w.layout());
  static_assert(std::is_same_v<decltype(again), Kernel>);
  // Functions of run-time tensors take typed ones (nvcc needs the typed overloads for these).
  auto host = kdist::full_tensor(again);
  auto moved = kdist::redistribute(again, w.layout().to_runtime());
  static_assert(std::is_same_v<decltype(moved), kdist::DistributedTensor<float**>>);
  return again.local()(0, 0) + host(0, 0) + float(kdist::visualize_sharding(again).size());
}
