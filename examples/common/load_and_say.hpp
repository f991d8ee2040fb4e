#pragma once
//! \file common/load_and_say.hpp
//! The example trainers' loads of a checkpoint or a Keras weights file, each followed, from process
//! 0, by one line saying what was loaded (even with --quiet: the losses that follow are of these
//! weights). Shared by common/trainer.hpp and gpt_trainer.cpp.

#include <cstdio>
#include <string>

#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/nn/model.hpp>

namespace kdist::examples {

//! load_checkpoint(model, path), then "<what> <path>: epoch E, step S (saved by <distribution> on
//! <mesh>)".
inline LoadedCheckpoint load_checkpoint_and_say(Sequential& model, const std::string& path,
                                                const char* what, bool root) {
  const LoadedCheckpoint saved = load_checkpoint(model, path);
  if (root) {
    std::printf("%s %s: epoch %zu, step %lld (saved by %s on %s)\n", what, path.c_str(),
                saved.epoch, static_cast<long long>(saved.step), saved.distribution.c_str(),
                saved.mesh.c_str());
  }
  return saved;
}

//! load_keras_weights(model, path), then "Loaded Keras weights from <path> (optimizer state: ...)
//! at step S (a Keras weights file records no epoch)".
inline LoadedKerasWeights load_keras_weights_and_say(Sequential& model, const std::string& path,
                                                     bool root) {
  const LoadedKerasWeights loaded = load_keras_weights(model, path);
  if (root) {
    std::printf(
        "Loaded Keras weights from %s (optimizer state: %s) at step %lld (a Keras weights file "
        "records no epoch)\n",
        path.c_str(), loaded.optimizer_loaded ? "restored" : loaded.optimizer_note.c_str(),
        static_cast<long long>(loaded.iterations));
  }
  return loaded;
}

}  // namespace kdist::examples
