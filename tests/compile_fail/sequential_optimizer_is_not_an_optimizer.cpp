// A model compiled with a type that is not a kdist::Optimizer (here: one without update_step):
// one error naming the type, not a page of overload candidates.
// expect: type_is_not_an_optimizer_on<.*HalfOptimizer
#include <kdist/nn/model.hpp>
#include <kdist/nn/optimizer.hpp>

#include <span>

struct HalfOptimizer {
  std::string name() const { return "half"; }
  kdist::OptimizerSlots slots() const { return {}; }
#ifndef KDIST_BAD
  void update_step(const kdist::OptimizerView<float>&, const kdist::OptimizerView<const float>&,
                   std::span<const kdist::OptimizerView<float>>) const {}
#endif
};

void compile(kdist::Sequential& model) {
  model.compile(kdist::Loss::mean_squared_error, HalfOptimizer{});
}
