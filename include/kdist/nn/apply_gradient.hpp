#pragma once
//! \file nn/apply_gradient.hpp
//! `kdist::apply_gradient(optimizer, variable, gradient, slots...)`: one optimizer step of a
//! distributed variable from a distributed gradient, Keras' `optimizer.apply(grads, vars)` for
//! one variable. The optimizers' `update` works on local Views and cannot see what makes a step
//! wrong across processes; this checks it first, on every process alike (the checks read only
//! replicated values):
//! - the gradient is complete, not a pending sum: each process would otherwise step with its own
//!   summand, and the replicas of the variable would drift apart without a word;
//! - it has the variable's shape and layout (same mesh), so that updating each block elementwise
//!   is updating the whole tensor.

#include <string>
#include <type_traits>

#include <kdist/core/concepts.hpp>
#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/pending_sum.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist {

namespace detail {

template <class DataType, class MemorySpace>
void check_gradient_for(
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& variable,
    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& gradient) {
  const std::string who = "kdist::apply_gradient: ";
  if (gradient.is_partial()) {
    throw ValueError(who + "the gradient " + gradient.to_string() + " is a pending sum over " +
                     join_quoted(gradient.partial_axes()) +
                     ": each process holds one summand, and stepping with it would let the "
                     "replicas of the variable drift apart. Sum it first: "
                     "kdist::redistribute(gradient, variable.layout())");
  }
  if (variable.is_partial()) {
    throw ValueError(who + "the variable " + variable.to_string() +
                     " is a pending sum; a variable must hold its values (redistribute it)");
  }
  if (gradient.shape() != variable.shape()) {
    throw ValueError(who + "the gradient " + gradient.to_string() +
                     " does not have the shape of the variable " + variable.to_string());
  }
  if (!(gradient.layout() == variable.layout())) {
    throw ValueError(who + "the gradient " + gradient.to_string() +
                     " is laid out otherwise than the variable " + variable.to_string() +
                     "; its blocks would not match the variable's. Move it first: "
                     "kdist::redistribute(gradient, variable.layout())");
  }
}

}  // namespace detail

//! Updates `variable` from `gradient` with `optimizer` (kdist::SGD or kdist::Adam, or anything
//! with their `update(param, grad, slots...)`), its state in `slots` (Views made with
//! `kdist::make_slot(variable.local(), label)`: none for SGD without momentum, the velocity for
//! SGD with momentum, m and v for Adam). Call the optimizer's `finish_step()` once per step after
//! every variable. Errors (ValueError, on every process alike): a gradient that is a pending sum,
//! or of another shape or layout than the variable; then the optimizer's own errors (slots).
//! Example: `kdist::apply_gradient(adam, w, kdist::redistribute(dw, w.layout()), m, v);`
template <class Optimizer, class DataType, class MemorySpace, class... Slots>
void apply_gradient(const Optimizer& optimizer,
                    DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& variable,
                    const DistributedTensor<DataType, RuntimeTensorLayout, MemorySpace>& gradient,
                    const Slots&... slots) {
  detail::check_gradient_for(variable, gradient);
  optimizer.update(variable.local(), gradient.local(), slots...);
}

namespace error {
//! kdist::apply_gradient with a typed gradient that is a pending sum over mesh axes `Axes`: sum
//! it first (kdist::redistribute(gradient, variable.layout())).
template <class Axes, class Layout>
struct gradient_is_a_pending_sum_over;
//! kdist::apply_gradient with a typed variable whose layout is a pending sum.
template <class VariableLayout>
struct variable_is_a_pending_sum;
//! kdist::apply_gradient with typed gradient and variable of different layouts (or meshes).
template <class GradientLayout, class VariableLayout>
struct gradient_layout_differs_from_the_variables;
//! kdist::apply_gradient with typed gradient and variable whose data types give different static
//! extents (`GradientShape`, `VariableShape`, `?` for a run-time extent) in a dimension.
template <class GradientShape, class VariableShape>
struct gradient_shape_differs_from_the_variables;
}  // namespace error

//! apply_gradient with typed tensors: a gradient that is a pending sum, or of another layout or
//! mesh than the variable, does not compile (the run-time checks still run: shapes, extents).
//! Their data types may differ in which extents are static (`float[784][200]`, `float**`), not in
//! a static extent (`error::gradient_shape_differs_from_the_variables`).
template <class Optimizer, class VariableData, TypedTensorLayout VariableLayout,
          SameDynamicDataType<VariableData> GradientData, TypedTensorLayout GradientLayout,
          class MemorySpace, class... Slots>
void apply_gradient(const Optimizer& optimizer,
                    DistributedTensor<VariableData, VariableLayout, MemorySpace>& variable,
                    const DistributedTensor<GradientData, GradientLayout, MemorySpace>& gradient,
                    const Slots&... slots) {
  using G = DistributedTensor<GradientData, GradientLayout, MemorySpace>;
  using V = DistributedTensor<VariableData, VariableLayout, MemorySpace>;
  static_assert(detail::diagnose<detail::static_extents_agree<GradientData, VariableData>(),
                                 error::gradient_shape_differs_from_the_variables<
                                     detail::diagnostic_name<G::static_shape_string()>,
                                     detail::diagnostic_name<V::static_shape_string()>>>::value,
                "kdist::apply_gradient: the gradient's static extents differ from the variable's");
  static_assert(
      detail::diagnose<!G::is_pending_sum,
                       error::gradient_is_a_pending_sum_over<
                           detail::diagnostic_name<detail::pending_axes_repr<G::pending_axes()>>,
                           detail::diagnostic_name<G::layout_type::axes_repr_string()>>>::value,
      "kdist::apply_gradient: the gradient is a pending sum (each process holds one summand); "
      "sum it first: kdist::redistribute(gradient, variable.layout())");
  static_assert(
      detail::diagnose<!V::is_pending_sum, error::variable_is_a_pending_sum<VariableLayout>>::value,
      "kdist::apply_gradient: the variable is a pending sum; a variable holds values");
  static_assert(detail::diagnose < std::is_same_v<typename G::mesh_type, typename V::mesh_type> &&
                    G::layout_type::dims() == V::layout_type::dims() &&
                    G::layout_type::division() == V::layout_type::division(),
                error::gradient_layout_differs_from_the_variables < typename G::layout_type,
                typename V::layout_type >> ::value,
                "kdist::apply_gradient: the gradient is laid out otherwise than the variable; "
                "kdist::redistribute(gradient, variable.layout()) first");
  apply_gradient(optimizer, variable.runtime(), gradient.runtime(), slots...);
}

}  // namespace kdist
