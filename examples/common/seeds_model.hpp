#pragma once
//! \file common/seeds_model.hpp
//! The Keras distribution notebook's model and data, for the examples and tests: inputs
//! `np.random.normal(size=(128, 28, 28, 1))`, targets `np.random.normal(size=(128, 10))`, and
//! Flatten -> Dense(200, relu, no bias) -> Dropout(0.4) -> Dense(10, softmax).

#include <vector>

#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/model.hpp>

#include "common/random_normal.hpp"

namespace kdist::examples {

//! inputs = np.random.normal(size=(128, 28, 28, 1)); labels = np.random.normal(size=(128, 10))
inline ArrayDataset<float> seeds_data() {
  return ArrayDataset<float>(random_normal(128 * 28 * 28, 1), {28, 28, 1},
                             random_normal(128 * 10, 2), 10);
}

//! The notebook's model with its Dense layers named `first` and `second` (the guide's LayoutMap
//! names them "d1" and "d2"; Keras' automatic names are "dense" and "dense_1").
inline Sequential seeds_model(const char* first = "d1", const char* second = "d2") {
  using namespace kdist::layers;
  std::vector<Sequential::Layer> l;
  l.emplace_back(Flatten());
  l.emplace_back(Dense(200, Activation::relu, /*use_bias=*/false, first));
  l.emplace_back(Dropout(0.4, "dropout"));
  l.emplace_back(Dense(10, Activation::softmax, true, second));
  return Sequential({28, 28, 1}, std::move(l));
}

}  // namespace kdist::examples
