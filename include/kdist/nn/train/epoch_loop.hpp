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
inline std::optional<double> accuracy_of(bool has_accuracy, double correct, std::size_t seen) {
  if (!has_accuracy || seen == 0) return std::nullopt;
  return correct / double(seen);
}

//! One epoch of `data` in the order `plan` gives epoch `epoch` (at most `max_steps` steps, 0: all),
//! examples of rank R - 1 (R = 2: vectors, 4: images), loaded by `loader` (the caller's, for
//! every epoch of a fit: its buffers keep their addresses, which a step recorded as a device
//! graph reads): `step(x, y, global_batch)` runs each batch
//! (`train` names it "fit" in the watchdog's messages, else "evaluate") and `read()` returns what
//! the steps since its last call add up to (OutputLoss::Totals: loss and correct sums, examples),
//! called after every `read_every` steps and after the last, at the same steps on every process
//! (it may be collective: metrics kept on the device, Keras' steps_per_execution). The progress
//! line, when `print`, shows the metrics of the last read. Returns the epoch's mean metrics.
template <std::size_t R, class T, class Step, class Read>
Metrics run_epoch(BatchLoader<T, R>& loader, const ArrayDataset<T>& data, const BatchPlan& plan,
                  std::size_t epoch, std::size_t max_steps, bool train, bool print,
                  std::size_t read_every, Step&& step, Read&& read) {
  const auto order = plan.order(epoch);
  std::size_t steps = plan.steps_per_epoch();
  if (max_steps && max_steps < steps) steps = max_steps;
  if (read_every == 0) read_every = 1;
  const bool tty = print && isatty(STDOUT_FILENO);
  double loss_sum = 0, correct = 0;
  std::size_t seen = 0;
  bool has_accuracy = data.has_labels();
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  for (std::size_t s = 0; s < steps; ++s) {
    const StepScope step_scope(train ? "fit" : "evaluate", epoch, s);  // the watchdog's messages
    const auto idx = plan.local_indices(order, s);
    const std::size_t global = plan.global_batch_size_at(s);
    const auto x = loader.load_examples(idx);
    if (data.has_labels()) {
      step(x, loader.load_labels(idx), global);
    } else {
      step(x, loader.load_targets(idx), global);
    }
    if ((s + 1) % read_every != 0 && s + 1 != steps) continue;
    const auto totals = read();
    loss_sum += totals.loss;
    correct += totals.correct;
    seen += totals.examples;
    has_accuracy = totals.has_accuracy;
    const auto now = std::chrono::steady_clock::now();
    if (tty && (now - last > std::chrono::milliseconds(100) || s + 1 == steps)) {
      last = now;
      std::printf("\r%s",
                  progress_line(s + 1, steps, std::chrono::duration<double>(now - t0).count(),
                                loss_sum / double(seen ? seen : 1),
                                accuracy_of(has_accuracy, correct, seen))
                      .c_str());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double n = seen ? double(seen) : 1.0;
  Metrics out{loss_sum / n, has_accuracy ? correct / n : 0.0, seen, has_accuracy};
  if (print) {
    std::printf(
        "%s%s\n", tty ? "\r" : "",
        progress_line(steps, steps, secs, out.loss, accuracy_of(has_accuracy, correct, seen))
            .c_str());
    std::fflush(stdout);
  }
  return out;
}

}  // namespace kdist::detail
