#include "lockstep/keras/metrics/metric.h"

#include <nlohmann/json.hpp>
#include <typeinfo>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/metrics/mean.h"

namespace lockstep::keras::metrics {

Metric::~Metric() = default;

double Metric::result() const {
  return count_ == 0.0 ? 0.0 : total_ / count_;
}

void Metric::reset_state() {
  total_ = 0.0;
  count_ = 0.0;
}

void Metric::merge_state(const Metric& other) {
  LOCKSTEP_CHECK(typeid(*this) == typeid(other), "Metric '", name(),
                 "'.merge_state: expected a metric of the same kind. Received: '", other.name(),
                 "'.");
  total_ += other.total_;
  count_ += other.count_;
}

std::vector<double> Metric::state() const {
  return {total_, count_};
}

void Metric::set_state(const std::vector<double>& state) {
  LOCKSTEP_CHECK(state.size() == 2, "Metric '", name(),
                 "'.set_state: expected 2 values (total, count). Received ", state.size(), ".");
  total_ = state[0];
  count_ = state[1];
}

nlohmann::json Metric::get_config() const {
  return {{"name", name_}, {"dtype", "float32"}};
}

Tensor Metric::prepare_weights(const Tensor& sample_weight, int64_t rows, int64_t samples) const {
  LOCKSTEP_CHECK_AS(Internal, rows % samples == 0, "Metric '", name(), "': ", rows,
                    " rows do not split into ", samples, " samples.");
  if (!sample_weight.defined()) return {};
  const int64_t n = sample_weight.num_elements();
  LOCKSTEP_CHECK(n == 1 || n == samples || n == rows, "Metric '", name(),
                 "'.update_state: expected sample_weight to be a scalar, one weight per sample (",
                 samples, ") or one per value (", rows, "). Received: sample_weight ",
                 sample_weight.describe(), ".");
  return as_float32(sample_weight);
}

Tensor as_float32(const Tensor& t) {
  return t.dtype() == DType::float32 ? t : t.to(DType::float32);
}

void Mean::update_values(const Tensor& values, const Tensor& sample_weight) {
  const Tensor v = as_float32(values);
  const float* p = v.data<float>();
  const int64_t rows = v.num_elements();
  const int64_t samples = v.rank() == 0 ? 1 : v.dim(0);
  accumulate_rows(rows, samples, sample_weight, [p](int64_t j) { return double{p[j]}; });
}

void Mean::update_state(const Tensor& /*y_true*/, const Tensor& y_pred,
                        const Tensor& sample_weight) {
  update_values(y_pred, sample_weight);
}

std::unique_ptr<Metric> Mean::clone() const {
  return std::make_unique<Mean>(name());
}

}  // namespace lockstep::keras::metrics
