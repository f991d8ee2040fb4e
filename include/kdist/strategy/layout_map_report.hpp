#pragma once
//! \file strategy/layout_map_report.hpp
//! The LayoutMap diagnostics of a distribution, for programs that hold a `kdist::Distribution`
//! (a trainer): `kdist::layout_map_report(dist)` (what the map saw: unused rules, replicated
//! variables, contracted-dimension sharding) and `kdist::check_variable_layouts(dist, variables)`
//! (strict mode's single check point). Both do nothing for a distribution without a LayoutMap
//! (DataParallel).
//!
//! \code
//! model.compile(dist, ...);
//! if (auto report = kdist::layout_map_report(*dist); report && !report->empty())
//!   std::cout << *report;  // from process 0: every process computes the same report
//! \endcode

#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/strategy/runtime_layout_map.hpp>
#include <optional>
#include <ranges>

namespace kdist {

//! The report of `dist`'s LayoutMap when `dist` is a ModelParallel, else nothing. It covers the
//! variables the distribution resolved so far (a model's variables once it is compiled).
inline std::optional<LayoutMapReport> layout_map_report(const Distribution& dist) {
  if (const auto* mp = dynamic_cast<const ModelParallel*>(&dist)) return mp->layout_map().report();
  return std::nullopt;
}

//! `dist`'s LayoutMap's `check_variables(variables)` when `dist` is a ModelParallel (in strict
//! mode: ONE ValueError naming every variable of rank 2 or more that matches no rule), else
//! nothing. `variables`: objects with `path()` and `shape()` (kdist::VariableInfo), or with data
//! members `path` and `shape` (the model's `variables()`).
template <std::ranges::input_range Variables>
void check_variable_layouts(const Distribution& dist, const Variables& variables) {
  if (const auto* mp = dynamic_cast<const ModelParallel*>(&dist))
    (void)mp->layout_map().check_variables(variables);
}

}  // namespace kdist
