// Trains a model designed in Keras (issue 39): loads a Keras model file (`model.save("x.keras")`
// in Keras) with kdist::load_model - layers, compile config, weights and optimizer state - on
// every process (DataParallel), evaluates it on Fashion-MNIST's test set, fits it on the training
// set and evaluates again, then writes the trained model as a Keras file (kdist::save_model) that
// `keras.saving.load_model` reads. scripts/keras/check_model_file.py checks both directions
// against Keras. The model's input must be Fashion-MNIST's (28, 28, 1) images (or (784,)) with 10
// classes, compiled with sparse_categorical_crossentropy.
//
//   mpiexec -n 2 build/examples/keras_model_trainer --model seeds.keras --out trained.keras
#include <CLI/CLI.hpp>
#include <cstdio>
#include <kdist/io/keras_model_file.hpp>
#include <kdist/kdist.hpp>
#include <kdist/parallel/run.hpp>
#include <memory>
#include <string>

#include "common/trainer.hpp"

int main(int argc, char** argv) {
  return kdist::run(argc, argv, [](int argc, char** argv) {
    CLI::App app{"Trains a Keras model file (.keras) on Fashion-MNIST with kdist",
                 "keras_model_trainer"};
    std::string model_path, out;
    std::size_t epochs = 1, batch_size = 128, max_steps = 0;
    std::uint64_t seed = 1337;
    app.add_option("--model", model_path, "the Keras model file to load (.keras)")->required();
    app.add_option("--out", out, "where to write the trained model (.keras); none: not saved");
    app.add_option("--epochs", epochs, "epochs of training (0: evaluate only)");
    app.add_option("--batch-size", batch_size, "global batch size")->check(CLI::PositiveNumber);
    app.add_option("--max-steps", max_steps, "steps per epoch at most (0: all)");
    app.add_option("--seed", seed, "seed of dropout and shuffling");
    CLI11_PARSE(app, argc, argv);

    using namespace kdist::examples;
    const bool root = kdist::process_id() == 0;
    auto dist = std::make_shared<kdist::DataParallel>();
    auto model = kdist::load_model(model_path, dist, {.seed = seed});
    if (root) {
      std::printf("Loaded %s: %zu layers, input %s, %s (iterations %lld), loss %s\n",
                  model_path.c_str(), model.layers().size(),
                  kdist::detail::shape_repr(model.input_shape()).c_str(),
                  model.optimizer().name().c_str(), static_cast<long long>(model.iterations()),
                  model.loss().name().c_str());
    }
    const auto& shape = model.input_shape();
    if (shape != kdist::Shape{28, 28, 1} && shape != kdist::Shape{fashion_mnist_features}) {
      throw kdist::ValueError("the model's input is " + kdist::detail::shape_repr(shape) +
                              "; this trainer feeds Fashion-MNIST's (28, 28, 1) images: give a "
                              "model whose keras.Input is (28, 28, 1) or (784,)");
    }
    const auto train = as_dataset(load_fashion_mnist(Split::train), model.input_shape());
    const auto test = as_dataset(load_fashion_mnist(Split::test), model.input_shape());
    const kdist::EvaluateOptions evaluate{.batch_size = batch_size, .verbose = 0};
    const auto before = model.evaluate(test, evaluate);
    if (root) {
      std::printf("test loss before: %.9g accuracy: %.6f\n", before.loss, before.accuracy);
    }
    if (epochs > 0) {
      model.fit(train, {.batch_size = batch_size,
                        .epochs = epochs,
                        .shuffle = true,
                        .steps_per_epoch = max_steps,
                        .verbose = root ? 1 : 0});
      const auto after = model.evaluate(test, evaluate);
      if (root) std::printf("test loss after: %.9g accuracy: %.6f\n", after.loss, after.accuracy);
    }
    if (!out.empty()) {
      kdist::save_model(model, out);
      if (root) std::printf("Saved %s\n", out.c_str());
    }
    return 0;
  });
}
