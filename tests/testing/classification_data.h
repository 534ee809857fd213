#pragma once
// A random classification set for training tests: n examples of `inputs` float32 features
// uniform in [0, 1) and one-hot float32 labels over `classes`, from a fixed seed (all features
// drawn first, then the labels, row by row).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::testing {

struct ClassificationData {
  Tensor x, y;  // float32 [n, inputs], one-hot float32 [n, classes]
};

inline ClassificationData random_classification(int64_t n, int64_t inputs, int64_t classes,
                                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, classes - 1);
  std::vector<float> x(static_cast<size_t>(n * inputs)), y(static_cast<size_t>(n * classes));
  for (float& v : x) v = pixel(rng);
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i * classes + label(rng))] = 1.0f;
  return {Tensor::from_vector(x, {n, inputs}), Tensor::from_vector(y, {n, classes})};
}

// A tensor of `shape` uniform in [-limit, limit), drawn from `rng` (initial weights for tests
// that set them themselves).
inline Tensor uniform_tensor(std::mt19937_64& rng, const Shape& shape, float limit) {
  std::uniform_real_distribution<float> d(-limit, limit);
  std::vector<float> v(static_cast<size_t>(shape.num_elements()));
  for (float& e : v) e = d(rng);
  return Tensor::from_vector(v, shape);
}

// One-hot labels `y` [n, classes] with the last example of each batch of `batch` left out of the
// loss: its row zeroed, so it contributes no gradient (categorical cross-entropy is -Σ y log p).
// A training on them is the wrong training an equivalence bound must tell apart.
inline Tensor without_last_example_of_each_batch(const Tensor& y, int64_t batch) {
  Tensor out = y.clone();
  const int64_t n = y.shape()[0], classes = y.shape()[1];
  float* d = out.data<float>();
  for (int64_t b = 0; b * batch < n; ++b) {
    const int64_t last = std::min(n, (b + 1) * batch) - 1;
    for (int64_t c = 0; c < classes; ++c) d[last * classes + c] = 0.0f;
  }
  return out;
}

}  // namespace lockstep::testing
