#pragma once
// The gradient checker every differentiable op is tested with (one checker for the whole
// project): backprop through the GradientTape against float64 central differences.
//
// For f: inputs -> y and a random seed w of y's shape (uniform in [-1, 1)), the checked scalar is
// s(x) = Σ_i w_i · f(x)_i, summed here by a plain loop (independent of the ops layer). Then
//   analytic  g = tape.gradient(f(x), x, output_gradient = w)
//   numeric   ĝ_j = (s(x + ε e_j) − s(x − ε e_j)) / 2ε     for every element j of every input
//   error_j  = |g_j − ĝ_j| / max(1, |g_j|, |ĝ_j|)          (relative, absolute below 1)
// and the check fails when some error_j ≥ rtol, naming the worst input, flat index and values.
// Inputs must be float64; f must be smooth near them (keep away from relu's kink, clip bounds...).
#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "lockstep/core/random.h"
#include "lockstep/core/tensor.h"

namespace lockstep::testing {

using DifferentiableFunction = std::function<Tensor(const std::vector<Tensor>&)>;

::testing::AssertionResult gradients_match(const DifferentiableFunction& f,
                                           std::vector<Tensor> inputs, double eps = 1e-6,
                                           double rtol = 1e-6, uint64_t seed = 20240601);

#define LOCKSTEP_EXPECT_GRADIENTS_MATCH(f, ...) \
  EXPECT_TRUE(::lockstep::testing::gradients_match(f, __VA_ARGS__))

inline void expect_gradients_match(const DifferentiableFunction& f, std::vector<Tensor> inputs,
                                   double eps = 1e-6, double rtol = 1e-6) {
  EXPECT_TRUE(gradients_match(f, std::move(inputs), eps, rtol));
}

// A float64 tensor with elements drawn uniformly from [lo, hi).
Tensor random_f64(Generator& gen, const Shape& shape, double lo = -1.0, double hi = 1.0);

}  // namespace lockstep::testing
