#pragma once
//! \file model.hpp
//! `kdist::Sequential`: a small model API over distributed layers — named layers whose variables
//! have Keras paths ("d1/kernel"), created sharded from the start by the distribution, trained
//! with a loss that is the mean over the GLOBAL batch and an optimizer whose state is sharded like
//! its variable. The same seed gives the same losses on every mesh.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/apply_gradient.hpp>
#include <kdist/collectives.hpp>
#include <kdist/distribution.hpp>
#include <kdist/layers/dense.hpp>
#include <kdist/layers/dropout.hpp>
#include <kdist/mesh_binding.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/optimizers.hpp>

namespace kdist {

enum class Loss { mean_squared_error, categorical_crossentropy };

//! What a step or an evaluation returns: the global mean loss and accuracy, identical on every
//! process.
struct Metrics {
  double loss = 0;
  double accuracy = 0;
  std::size_t examples = 0;
};

//! A variable as `model.variables` lists it in Keras: path, shape, layout.
struct VariableSummary {
  std::string path;
  std::vector<std::size_t> shape;
  RuntimeTensorLayout layout;
};

//! Sequential on scalars `T` (float or double): its layers, inputs, variables and optimizer state
//! are all `T`. A class template so that including model.hpp (or kdist.hpp) costs only parsing:
//! the training machinery is instantiated by the TUs that train (kdist.hpp's compile-time budget).
template <class T>
class BasicSequential {
 public:
  using value_type = T;
  using Dense = layers::BasicDense<T>;
  using Dropout = layers::BasicDropout<T>;
  using Layer = std::variant<Dense, Dropout>;
  using Matrix = DistributedTensor<T**>;
  using Labels = Kokkos::View<const std::int32_t*, Kokkos::LayoutRight>;
  using Optimizer = std::variant<SGD, Adam>;

  //! Layers applied in order to inputs of `input_dim` features (Flatten is the caller's reshape).
  BasicSequential(std::size_t input_dim, std::vector<Layer> layers)
      : input_dim_(input_dim), layers_(std::move(layers)) {}

  //! Creates every variable, sharded as `dist` says, from `seed`. Also fixes the loss and the
  //! optimizer (Keras' compile).
  void compile(std::shared_ptr<const Distribution> dist, Loss loss, Optimizer optimizer,
               std::uint64_t seed) {
    dist_ = std::move(dist);
    loss_ = loss;
    optimizer_ = std::move(optimizer);
    seed_ = seed;
    std::size_t features = input_dim_;
    for (auto& l : layers_) {
      if (auto* d = std::get_if<Dense>(&l)) {
        d->build(features, *dist_, seed_);
        features = d->units();
      }
    }
    auto& last = std::get<Dense>(layers_.back());
    fused_softmax_ =
        loss_ == Loss::categorical_crossentropy && last.activation() == layers::Activation::softmax;
    slots_.clear();
    for_each_variable([&](auto& v) {
      slots_.push_back(Slots{make_slot(v.value.local(), v.path + "/m"),
                             make_slot(v.value.local(), v.path + "/v")});
    });
  }

  const Distribution& distribution() const { return *dist_; }
  std::int64_t iterations() const {
    return std::visit([](const auto& o) { return o.iterations(); }, optimizer_);
  }

  //! Every variable with its Keras path, global shape and layout.
  std::vector<VariableSummary> variables() {
    std::vector<VariableSummary> out;
    for_each_variable([&](auto& v) { out.push_back({v.path, v.shape(), v.value.layout()}); });
    return out;
  }
  //! Calls f(Variable<...>&) for every variable, in layer order (kernel before bias).
  template <class F>
  void for_each_variable(F&& f) {
    for (auto& l : layers_) {
      if (auto* d = std::get_if<Dense>(&l)) {
        f(d->kernel());
        if (d->bias()) f(*d->bias());
      }
    }
  }

  //! The input layout for a global batch of `global_batch` rows (the distribution's data layout).
  RuntimeTensorLayout input_layout(std::size_t global_batch) const {
    return dist_->get_data_layout({global_batch, input_dim_});
  }

  //! One training step on this process's rows `x_local` (its block of the global batch under
  //! input_layout) and their labels. Returns the global mean loss and accuracy.
  Metrics train_step(Kokkos::View<T**, Kokkos::LayoutRight> x_local, Labels labels,
                     std::size_t global_batch) {
    Kokkos::Profiling::pushRegion("kdist::Sequential::train_step");
    Matrix x = Matrix::from_local(x_local, {global_batch, input_dim_}, input_layout(global_batch));
    const auto step = static_cast<std::uint64_t>(iterations());
    // forward
    Matrix h = x;
    for (auto& l : layers_) {
      if (auto* d = std::get_if<Dense>(&l)) {
        h = d->forward(h, fused_softmax_ && &l == &layers_.back());
      } else {
        h = std::get<Dropout>(l).forward(h, seed_, step);
      }
    }
    // loss, d loss / d output
    typename Matrix::view_type grad(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dloss"),
                                    h.local().extent(0), h.local().extent(1));
    const T scale = T(1) / static_cast<T>(global_batch);
    double local_sum = fused_softmax_ ? ops::softmax_cross_entropy(h.local(), labels, grad, scale)
                       : loss_ == Loss::mean_squared_error
                           ? ops::mean_squared_error(h.local(), labels, grad, scale)
                           : ops::cross_entropy(h.local(), labels, grad, scale);
    const auto correct = static_cast<double>(ops::count_correct(h.local(), labels));
    Matrix dh = Matrix::from_local(grad, h.shape(), h.layout());
    // backward
    for (std::size_t i = layers_.size(); i-- > 0;) {
      auto& l = layers_[i];
      if (auto* d = std::get_if<Dense>(&l)) {
        auto dx = d->backward(dh, i > 0);
        if (dx) dh = *dx;
      } else {
        dh = std::get<Dropout>(l).backward(dh);
      }
    }
    // update every variable's shard with its shard of the gradient
    std::size_t k = 0;
    for_each_variable([&](auto& v) {
      using View = std::decay_t<decltype(v.value.local())>;
      auto& m = std::get<View>(slots_[k].m);
      auto& vv = std::get<View>(slots_[k].v);
      ++k;
      std::visit(
          [&](auto& opt) {
            using O = std::decay_t<decltype(opt)>;
            if constexpr (std::is_same_v<O, Adam>) {
              apply_gradient(opt, v.value, v.grad, m, vv);
            } else if (opt.momentum() != 0.0) {
              apply_gradient(opt, v.value, v.grad, m);
            } else {
              apply_gradient(opt, v.value, v.grad);
            }
          },
          optimizer_);
    });
    std::visit([](auto& o) { o.finish_step(); }, optimizer_);
    Kokkos::Profiling::popRegion();
    return reduce_metrics(h, local_sum, correct, global_batch);
  }

  //! Loss and accuracy of the rows `x_local` (no dropout, no update).
  Metrics evaluate_batch(Kokkos::View<T**, Kokkos::LayoutRight> x_local, Labels labels,
                         std::size_t global_batch) {
    Matrix h = Matrix::from_local(x_local, {global_batch, input_dim_}, input_layout(global_batch));
    for (auto& l : layers_) {
      if (auto* d = std::get_if<Dense>(&l)) {
        h = d->forward(h, fused_softmax_ && &l == &layers_.back());
      }
    }
    double local_sum = fused_softmax_ ? ops::softmax_cross_entropy(h.local(), labels)
                       : loss_ == Loss::mean_squared_error
                           ? ops::mean_squared_error(h.local(), labels)
                           : ops::cross_entropy(h.local(), labels);
    const auto correct = static_cast<double>(ops::count_correct(h.local(), labels));
    return reduce_metrics(h, local_sum, correct, global_batch);
  }

 private:
  //! Sums over the processes holding distinct rows (the batch axes), so model replicas count once.
  Metrics reduce_metrics(const Matrix& out, double local_sum, double correct,
                         std::size_t global_batch) {
    double buf[2] = {local_sum, correct};
    const auto& row_axes = out.layout().axes()[0].names();
    if (!row_axes.empty()) {
      const auto& comm =
          communicators(out.device_mesh()).comm(std::span<const std::string>(row_axes));
      MPI_Allreduce(MPI_IN_PLACE, buf, 2, MPI_DOUBLE, MPI_SUM, comm.get());
    }
    return {buf[0] / static_cast<double>(global_batch), buf[1] / static_cast<double>(global_batch),
            global_batch};
  }

  std::size_t input_dim_;
  std::vector<Layer> layers_;
  std::shared_ptr<const Distribution> dist_;
  Loss loss_ = Loss::categorical_crossentropy;
  Optimizer optimizer_ = Adam();
  std::uint64_t seed_ = 0;
  bool fused_softmax_ = false;
  //! Optimizer state of one variable, shaped like its local shard (rank 2 kernel or rank 1 bias).
  struct Slots {
    std::variant<typename DistributedTensor<T**>::view_type,
                 typename DistributedTensor<T*>::view_type>
        m, v;
  };
  std::vector<Slots> slots_;
};

//! Keras' Sequential on float32, the default dtype.
using Sequential = BasicSequential<float>;

}  // namespace kdist
