#include "gradient_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "lockstep/autodiff/gradient_tape.h"

namespace lockstep::testing {

Tensor random_f64(Generator& gen, const Shape& shape, double lo, double hi) {
  Tensor t(shape, DType::float64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = lo + (hi - lo) * gen.uniform_double();
  return t;
}

namespace {

double weighted_sum(const Tensor& y, const Tensor& w) {
  const double* py = y.data<double>();
  const double* pw = w.data<double>();
  double s = 0;
  for (int64_t i = 0; i < y.num_elements(); ++i) s += py[i] * pw[i];
  return s;
}

}  // namespace

::testing::AssertionResult gradients_match(const DifferentiableFunction& f,
                                           std::vector<Tensor> inputs, double eps, double rtol,
                                           uint64_t seed) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].dtype() != DType::float64) {
      return ::testing::AssertionFailure()
             << "gradient check: input " << k << " is " << inputs[k].describe()
             << "; the checker works in float64.";
    }
    inputs[k] = inputs[k].clone();  // perturbed in place below: never touch the caller's data
  }
  Generator gen(seed);
  std::vector<Tensor> analytic;
  Tensor w;
  {
    GradientTape tape;
    for (const Tensor& x : inputs) tape.watch(x);
    Tensor y = f(inputs);
    if (y.dtype() != DType::float64) {
      return ::testing::AssertionFailure()
             << "gradient check: f returned " << y.describe() << "; expected float64.";
    }
    w = random_f64(gen, y.shape());
    analytic = tape.gradient(y, inputs, w);
  }
  double worst = -1;
  std::ostringstream where;
  for (size_t k = 0; k < inputs.size(); ++k) {
    double* x = inputs[k].data<double>();
    for (int64_t j = 0; j < inputs[k].num_elements(); ++j) {
      const double saved = x[j];
      x[j] = saved + eps;
      const double plus = weighted_sum(f(inputs), w);
      x[j] = saved - eps;
      const double minus = weighted_sum(f(inputs), w);
      x[j] = saved;
      const double numeric = (plus - minus) / (2 * eps);
      const double a = analytic[k].defined() ? analytic[k].data<double>()[j] : 0.0;
      const double err = std::abs(a - numeric) / std::max({1.0, std::abs(a), std::abs(numeric)});
      if (!std::isfinite(err) || err > worst) {
        worst = std::isfinite(err) ? err : INFINITY;
        where.str("");
        where << "input " << k << " " << inputs[k].describe() << ", flat index " << j
              << ": analytic " << a << (analytic[k].defined() ? "" : " (no gradient)")
              << ", numeric " << numeric << ", error " << err;
      }
    }
  }
  if (worst < rtol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "gradient mismatch (rtol " << rtol << "), worst element: " << where.str();
}

}  // namespace lockstep::testing
