#pragma once
// What the model tests share (checkpoints, Keras weights, layers): a temporary directory per test
// with the same name on every process, the meshes and distributions of the world's size, small
// models and data, the seeds' model, and full tensors and optimizer state as process 0 sees them.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kdist/io/detail/parallel_hdf5_io.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "common/random_normal.hpp"
#include "common/seeds_model.hpp"
#include "mpi/mpi_test_util.hpp"

namespace kdist::test {

using Dist = std::shared_ptr<const kdist::Distribution>;
using namespace kdist::layers;
using kdist::examples::seeds_data;
using kdist::examples::seeds_model;

//! Every variable's local block of `model`, flattened, in the model's order (to compare two
//! trainings bit for bit).
inline std::vector<float> local_weights(kdist::Sequential& model) {
  std::vector<float> out;
  model.for_each_variable([&](auto& v) {
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v.value.local());
    out.insert(out.end(), h.data(), h.data() + h.size());
  });
  return out;
}

//! `n` random-normal (28, 28, 1) images from `seed`, labelled `i * stride % 10`: the seeds'
//! model with integer labels.
inline kdist::ArrayDataset<float> labeled_images(std::size_t n, std::uint64_t seed,
                                                 std::size_t stride) {
  std::vector<std::int32_t> labels(n);
  for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<std::int32_t>(i * stride % 10);
  return kdist::ArrayDataset<float>(kdist::examples::random_normal(n * 28 * 28, seed), {28, 28, 1},
                                    std::move(labels));
}

// ---- a directory per test, the same name on every process ------------------------------------

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name;
    if (world_rank() == 0) {
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      name = (std::filesystem::temp_directory_path() /
              ("kdist_test_" + std::string(info->test_suite_name()) + "_" +
               std::to_string(::getpid()) + "_" + info->name()))
                 .string();
      std::filesystem::remove_all(name);
      std::filesystem::create_directories(name);
    }
    kdist::detail::checkpoint::broadcast_string(name);
    dir_ = name;
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(dir_);
  }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// ---- models, data, distributions -------------------------------------------------------------

inline std::vector<std::vector<std::size_t>> meshes() {
  const auto n = static_cast<std::size_t>(world_size());
  if (n == 1) return {{1, 1}};
  if (n == 2) return {{2, 1}, {1, 2}};
  return {{4, 1}, {2, 2}, {1, 4}};
}

// The guide's rules: d1 column-parallel, d2's output batch-sharded.
inline Dist guide_model_parallel(const std::vector<std::size_t>& shape) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};
  map["d1/bias"] = {"model"};
  map["d2/output"] = {"data", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}
// Row-parallel kernels: 10 rows of d2/kernel over a model axis of 4 are blocks of 3, 3, 3, 1.
inline Dist row_model_parallel(const std::vector<std::size_t>& shape) {
  kdist::RuntimeDeviceMesh mesh(shape, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {"model", kdist::replicated};
  map["d2/kernel"] = {"model", kdist::replicated};
  map["d2/bias"] = {"model"};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

// DataParallel, the guide's rules on every mesh, the row rules on the mesh of the widest model
// axis (each save and load costs about a second on 4 processes sharing 2 cores).
inline std::vector<Dist> distributions() {
  std::vector<Dist> out{std::make_shared<kdist::DataParallel>()};
  for (const auto& s : meshes()) out.push_back(guide_model_parallel(s));
  out.push_back(row_model_parallel(meshes().back()));
  return out;
}

inline std::string name_of(const kdist::Distribution& d) {
  return d.name() + " " + d.device_mesh().to_string();
}
inline std::string layouts_of(kdist::Sequential& m) {
  std::string out = m.distribution().name() + " " + m.distribution().device_mesh().to_string();
  for (const auto& v : m.variables()) out += " " + v.path + "=" + v.layout.axes_repr();
  return out;
}

// Flatten -> Dense(units, relu) -> Dropout(0.4) -> Dense(10, softmax): with units 10, the guide's
// d1/kernel (None, 'model') splits 10 columns over the model axis (3, 3, 3, 1 on 4).
template <class T = float>
kdist::BasicSequential<T> small_model(std::size_t units = 10, bool extra_layer = false) {
  using M = kdist::BasicSequential<T>;
  std::vector<typename M::Layer> l;
  l.emplace_back(typename M::Flatten());
  l.emplace_back(typename M::Dense(units, Activation::relu, true, "d1"));
  l.emplace_back(typename M::Dropout(0.4, "dropout"));
  if (extra_layer) l.emplace_back(typename M::Dense(10, Activation::relu, true, "d3"));
  l.emplace_back(typename M::Dense(10, Activation::softmax, true, "d2"));
  return M({8, 8, 1}, std::move(l));
}

template <class T = float>
kdist::ArrayDataset<T> small_data() {
  const auto x = kdist::examples::random_normal(48 * 64, 1);
  const auto y = kdist::examples::random_normal(48 * 10, 2);
  return kdist::ArrayDataset<T>(std::vector<T>(x.begin(), x.end()), {8, 8, 1},
                                std::vector<T>(y.begin(), y.end()), 10);
}

// The full tensor as process 0 gathers it, on every process. For a block replicated over some
// mesh axes that is the replica at coordinate 0 along them: the one a checkpoint holds. (Replicas
// need not be equal bit for bit: on a (4, 1) mesh, training leaves d2/kernel's replicas on
// processes 2 and 3 an ulp away from those on 0 and 1.)
template <class Tensor>
std::vector<typename Tensor::value_type> full_from_zero(const Tensor& t) {
  using T = typename Tensor::value_type;
  auto full = kdist::full_tensor(t, 0);
  std::vector<T> out(t.global_size());
  if (world_rank() == 0) out.assign(full.data(), full.data() + full.size());
  MPI_Bcast(out.data(), static_cast<int>(out.size() * sizeof(T)), MPI_BYTE, 0, MPI_COMM_WORLD);
  return out;
}

// Every variable and optimizer slot as full tensors ("d1/kernel", "d1/kernel/slot0", ...).
template <class T>
std::map<std::string, std::vector<T>> state_of(kdist::BasicSequential<T>& m) {
  const std::size_t slots = std::visit([](const auto& o) { return o.slot_count(); }, m.optimizer());
  std::map<std::string, std::vector<T>> out;
  m.for_each_variable_with_slots([&](auto& v, auto& s) {
    out[v.path] = full_from_zero(v.value);
    for (std::size_t k = 0; k < slots; ++k) {
      out[v.path + "/slot" + std::to_string(k)] = full_from_zero(s.at(k));
    }
  });
  return out;
}

template <class T>
void expect_bitwise_equal(const std::map<std::string, std::vector<T>>& got,
                          const std::map<std::string, std::vector<T>>& want,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [path, w] : want) {
    ASSERT_TRUE(got.count(path)) << what << ": " << path << " missing";
    const auto& g = got.at(path);
    ASSERT_EQ(g.size(), w.size()) << what << " " << path;
    const bool same = std::memcmp(g.data(), w.data(), w.size() * sizeof(T)) == 0;
    EXPECT_TRUE(same) << what << ": " << path << " differs";
  }
}

inline double worst_relative(const std::vector<float>& g, const std::vector<float>& w) {
  double worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    worst = std::max(
        worst, std::abs(double(g[i]) - double(w[i])) / std::max(1e-2, std::abs(double(w[i]))));
  }
  return worst;
}

// A message every process must have alike: compared to the one of process 0.
inline void expect_same_on_every_process(const std::string& msg) {
  std::string zero = msg;
  kdist::detail::checkpoint::broadcast_string(zero);
  EXPECT_EQ(msg, zero) << "process " << world_rank() << " got another message";
}

// Process 0 writes `bytes` to `path`; every process returns after it.
inline void write_file_on_zero(const std::string& path, const std::string& bytes) {
  if (world_rank() == 0) std::ofstream(path, std::ios::binary) << bytes;
  MPI_Barrier(MPI_COMM_WORLD);
}

#ifdef KDIST_TEST_H5LS
// What `h5ls -r` prints for `path` (the HDF5 tools' view of a file), with a failure if it fails.
inline std::string h5ls_listing(const std::string& path) {
  std::string listing;
  if (FILE* p = popen((std::string(KDIST_TEST_H5LS) + " -r " + path).c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) listing += buf;
    EXPECT_EQ(pclose(p), 0) << listing;
  }
  return listing;
}
#endif

}  // namespace kdist::test
