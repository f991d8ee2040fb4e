// A layer written to the old contract, whose backward(dy, need_input_grad) resolved its variables'
// gradients itself: a layer's backward now hands them back (kdist::Gradients) so that the training
// step sums them, overlapped and sharded. The error names the type and the signature it needs.
// expect: bool, kdist::Gradients<T>&\) -> std::optional
#include <kdist/nn/layer.hpp>
#include <kdist/nn/model.hpp>

struct OldContract {
  using value_type = float;
  std::string name() const { return "old"; }
  kdist::Shape build(const kdist::Shape& in, const kdist::Distribution&, std::uint64_t) {
    return in;
  }
  kdist::LayerTensor<float> forward(const kdist::LayerTensor<float>& x, const kdist::StepContext&) {
    return x;
  }
#ifdef KDIST_BAD
  std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy, bool) {
    return dy;
  }
#else
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
  l.emplace_back(OldContract{});
  return l;
}
