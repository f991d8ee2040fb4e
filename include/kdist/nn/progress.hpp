#pragma once
//! \file nn/progress.hpp
//! Keras' progress line, as `fit` and `evaluate` print it:
//! `469/469 ━━━━━━━━━━━━━━━━━━━━ 2s 4ms/step - loss: 0.4312 - accuracy: 0.8451`.

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

namespace kdist {

//! The line after `step` of `steps` steps in `seconds`, with the running loss and, when there is
//! one, the running accuracy. Below one millisecond per step the time is in microseconds, as
//! Keras prints it ("977us/step").
inline std::string progress_line(std::size_t step, std::size_t steps, double seconds, double loss,
                                 std::optional<double> accuracy) {
  const std::size_t width = 20, done = steps ? step * width / steps : width;
  std::string bar;
  for (std::size_t i = 0; i < width; ++i) bar += i < done ? "━" : "─";
  const double per_step_ms = step ? seconds * 1000.0 / static_cast<double>(step) : 0.0;
  const bool micro = per_step_ms < 1.0;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%zu/%zu %s %.0fs %.0f%s/step - loss: %.4f", step, steps,
                bar.c_str(), seconds, micro ? per_step_ms * 1000.0 : per_step_ms,
                micro ? "us" : "ms", loss);
  std::string out = buf;
  if (accuracy) {
    std::snprintf(buf, sizeof buf, " - accuracy: %.4f", *accuracy);
    out += buf;
  }
  return out;
}

}  // namespace kdist
