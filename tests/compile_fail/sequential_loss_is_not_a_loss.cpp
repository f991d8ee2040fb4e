// A model compiled with a loss that is not a kdist::LossFunction (here: its sum returns nothing):
// one error naming the type, not a page of overload candidates.
// expect: type_is_not_a_loss_on<.*HalfLoss
#include <kdist/nn/loss.hpp>
#include <kdist/nn/model.hpp>

struct HalfLoss {
  std::string name() const { return "half"; }
#ifdef KDIST_BAD
  void sum(const kdist::LossInput<float>&, const kdist::LossTargets<float>&,
           const kdist::LossGradient<float>&, float) const {}
#else
  double sum(const kdist::LossInput<float>&, const kdist::LossTargets<float>&,
             const kdist::LossGradient<float>&, float) const {
    return 0.0;
  }
#endif
};

void compile(kdist::Sequential& model) {
  model.compile(HalfLoss{}, kdist::SGD());
}
