#pragma once
//! \file nn/train/epoch_loop.hpp
//! `detail::run_epoch`: one epoch of an in-memory kdist::ArrayDataset, each process loading its
//! rows of each global batch (kdist::BatchPlan, detail::BatchLoader) and handing them to a step
//! (kdist::Sequential's train_step or evaluate_batch); Keras' progress line on process 0.

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <optional>

#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/progress.hpp>
#include <kdist/nn/train/metrics.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <kdist/strategy/data_sharding.hpp>

namespace kdist::detail {

//! The epoch's mean accuracy, when the steps report one.
inline std::optional<double> accuracy_of(const Metrics& m, double correct, std::size_t seen) {
  if (!m.has_accuracy || seen == 0) return std::nullopt;
  return correct / double(seen);
}

//! One epoch of `data` in the order `plan` gives epoch `epoch` (at most `max_steps` steps, 0: all),
//! examples of rank R - 1 (R = 2: vectors, 4: images): `step(x, y, global_batch)` returns each
//! batch's Metrics (`train` names it "fit" in the watchdog's messages, else "evaluate"). Prints
//! the progress line when `print`. Returns the epoch's mean metrics.
template <std::size_t R, class T, class Step>
Metrics run_epoch(const ArrayDataset<T>& data, const BatchPlan& plan, std::size_t epoch,
                  std::size_t max_steps, bool train, bool print, Step&& step) {
  const auto order = plan.order(epoch);
  std::size_t steps = plan.steps_per_epoch();
  if (max_steps && max_steps < steps) steps = max_steps;
  const bool tty = print && isatty(STDOUT_FILENO);
  double loss_sum = 0, correct = 0;
  std::size_t seen = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  BatchLoader<T, R> loader(data, steps ? plan.local_indices(order, 0).size() : 0);
  Metrics m;
  for (std::size_t s = 0; s < steps; ++s) {
    const StepScope step_scope(train ? "fit" : "evaluate", epoch, s);  // the watchdog's messages
    const auto idx = plan.local_indices(order, s);
    const std::size_t global = plan.global_batch_size_at(s);
    const auto x = loader.load_examples(idx);
    if (data.has_labels()) {
      m = step(x, loader.load_labels(idx), global);
    } else {
      m = step(x, loader.load_targets(idx), global);
    }
    loss_sum += m.loss * static_cast<double>(global);
    correct += m.accuracy * static_cast<double>(global);
    seen += global;
    const auto now = std::chrono::steady_clock::now();
    if (tty && (now - last > std::chrono::milliseconds(100) || s + 1 == steps)) {
      last = now;
      std::printf("\r%s",
                  progress_line(s + 1, steps, std::chrono::duration<double>(now - t0).count(),
                                loss_sum / double(seen), accuracy_of(m, correct, seen))
                      .c_str());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double n = seen ? double(seen) : 1.0;
  Metrics out{loss_sum / n, data.has_labels() ? correct / n : 0.0, seen, data.has_labels()};
  if (print) {
    std::printf(
        "%s%s\n", tty ? "\r" : "",
        progress_line(steps, steps, secs, out.loss, accuracy_of(out, correct, seen)).c_str());
    std::fflush(stdout);
  }
  return out;
}

}  // namespace kdist::detail
