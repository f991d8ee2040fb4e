#pragma once
//! \file nn/gradients.hpp
//! `kdist::Gradients<T>`: what a layer's backward pass hands back besides dL/d(input), each of its
//! variables' gradients as the layer computed it: in its compute layout, and often a pending sum
//! over the batch axes (dW = x^T dz of data-sharded rows). The layer does not resolve them: the
//! training step (kdist/nn/train/) does, as soon as the layer's backward returns (llm.c's
//! backward-and-reduce order): a plain all-reduce starts without blocking, shares a bucket or is
//! a reduce-scatter under ZeRO-1 (kdist/nn/train/gradient_sync.hpp); anything else is
//! redistributed into the variable's layout. So a user's layer gets overlap and ZeRO-1 with no
//! code of its own. The step owns one and reuses its memory from step to step (no allocation). A
//! layer that wraps others (Residual) calls `ready()` after each, so that their sums start one
//! inner layer at a time rather than when the whole block returns.
//!
//! Outside a model (a test, a hand-written loop), `resolve()` writes each into its variable's
//! `grad` on the spot, and `kdist::backward_and_resolve(layer, dy, ...)` calls a layer's backward
//! and resolves what it handed back.
//!
//! \code
//! std::optional<kdist::LayerTensor<float>> backward(const kdist::LayerTensor<float>& dy,
//!                                                   bool need_input_grad,
//!                                                   kdist::Gradients<float>& grads) {
//!   auto dw = kdist::matmul(x_, dz, kdist::ops::Op::transpose);  // pending over "batch"
//!   grads.add(kernel_, dw);                                      // the step sums it
//!   ...
//! }
//! \endcode

#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/nn/variable.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

//! A variable's gradient as a layer hands it back, of any rank (see the file's comment).
template <class T>
using GradientTensor =
    std::variant<DistributedTensor<T*>, DistributedTensor<T**>, DistributedTensor<T***>,
                 DistributedTensor<T****>, DistributedTensor<T*****>>;

template <class T>
class Gradients {
 public:
  //! One variable's gradient: the variable and what the layer computed for it.
  struct Entry {
    VariableRef<T> variable;
    GradientTensor<T> gradient;
  };

  //! Hands the gradient of `variable` to whoever resolves these: `gradient` has the variable's
  //! global shape and mesh, any layout, and may be a pending sum. Its block must stay unwritten
  //! until then (a kept View of the layer's, handed out again only when nothing holds it, is).
  //! Errors: kdist::ValueError for another shape or scalar type (naming the variable).
  template <class DataType>
  void add(TrainableVariable<DataType>& variable, DistributedTensor<DataType> gradient) {
    static_assert(std::is_same_v<typename DistributedTensor<DataType>::value_type, T>,
                  "kdist::Gradients<T>::add: the variable's scalars are not the model's T");
    if (gradient.shape() != variable.value.shape()) {
      throw ValueError("kdist::Gradients::add: the gradient of '" + variable.path + "' has shape " +
                       detail::shape_repr(gradient.shape()) + " but the variable has shape " +
                       detail::shape_repr(variable.value.shape()) +
                       "; a layer hands back the gradient of the whole variable (its global "
                       "shape), in any layout");
    }
    entries_.push_back({&variable, GradientTensor<T>(std::move(gradient))});
  }

  //! Says that the gradients handed back so far are final: whoever resolves them may start now
  //! instead of when the layer's backward returns (a Residual block calls it after each of its
  //! layers, so their sums start one layer at a time). Errors: those of the resolver.
  void ready() {
    if (resolver_ && !entries_.empty()) resolver_(*this);
  }
  //! What ready() calls (the training step's sync, which takes the entries and clears them);
  //! none: ready() does nothing and the entries wait for resolve() or the step.
  void set_resolver(std::function<void(Gradients&)> resolver) { resolver_ = std::move(resolver); }

  const std::vector<Entry>& entries() const noexcept { return entries_; }
  bool empty() const noexcept { return entries_.empty(); }
  std::size_t size() const noexcept { return entries_.size(); }
  //! Forgets the entries (keeps the memory).
  void clear() noexcept { entries_.clear(); }

  //! Calls f(gradient, variable) for each entry, in the order they were added, each with its own
  //! types (`DistributedTensor<T**>`, `TrainableVariable<T**>&`, ...).
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) {
      std::visit(
          [&](auto* v) {
            using Tensor = std::decay_t<decltype(v->grad)>;
            f(std::get<Tensor>(e.gradient), *v);
          },
          e.variable);
    }
  }

  //! Writes each gradient into its variable's `grad` (in the variable's layout, pending sums
  //! summed: kdist::redistribute_into, collective as it is) and forgets them.
  void resolve() {
    for_each([](const auto& gradient, auto& variable) { resolve_into(gradient, variable); });
    entries_.clear();
  }

  //! `gradient` written into `variable.grad` (nothing to do when the layer computed it there).
  template <class DataType>
  static void resolve_into(const DistributedTensor<DataType>& gradient,
                           TrainableVariable<DataType>& variable) {
    if (!gradient.is_partial() && gradient.layout() == variable.grad.layout() &&
        gradient.local().data() == variable.grad.local().data()) {
      return;
    }
    redistribute_into(gradient, variable.grad);
  }

 private:
  std::vector<Entry> entries_;
  std::function<void(Gradients&)> resolver_;
};

//! `layer.backward(args..., grads)` with the gradients it hands back resolved into its variables'
//! `grad` (Gradients::resolve); returns what backward returns. For a layer used outside a model.
template <class L, class... Args>
decltype(auto) backward_and_resolve(L& layer, const Args&... args) {
  Gradients<typename L::value_type> grads;
  if constexpr (std::is_void_v<decltype(layer.backward(args..., grads))>) {
    layer.backward(args..., grads);
    grads.resolve();
  } else {
    auto dx = layer.backward(args..., grads);
    grads.resolve();
    return dx;
  }
}

}  // namespace kdist
