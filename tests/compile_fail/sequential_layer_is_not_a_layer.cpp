// A model's layer list given a type that is not a kdist::Layer (here: a layer without backward):
// one error naming the type, not a page of overload candidates.
// expect: type_is_not_a_layer_on<.*HalfLayer
#include <kdist/nn/layer.hpp>
#include <kdist/nn/model.hpp>

struct HalfLayer {
  using value_type = float;
  std::string name() const { return "half"; }
  kdist::Shape build(const kdist::Shape& in, const kdist::Distribution&, std::uint64_t) {
    return in;
  }
  kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& x, const kdist::StepContext&) {
    return x;
  }
#ifndef KDIST_BAD
  std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy, bool,
                                                    kdist::Gradients<float>&) {
    return dy;
  }
#endif
  std::vector<kdist::VariableRef<float>> variables() {
    return {};
  }
};

std::vector<kdist::Sequential::Layer> layers() {
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(HalfLayer{});
  return l;
}
