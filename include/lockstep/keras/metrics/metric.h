#pragma once
// Metric: the base of keras.metrics — a stateful running value with update_state / result /
// reset_state. Every metric here is a weighted mean, result = total / count (0 when count is 0,
// Keras' divide_no_nan), so per-replica copies merge exactly by summing totals and counts
// (sync-on-read, as tf.distribute does with metric variables).
//
// Accumulators are double; Keras keeps them in float32 variables, which drift once the count
// passes ~2^24 samples. Lockstep's results are therefore at least as accurate as Keras' and differ
// from them only in float32 rounding.
//
// Sample weighting follows Keras' reduce_to_samplewise_values. A metric computes one value per
// "row" (an element, or a class vector for the categorical metrics); the rows of one sample
// (axis 0) are averaged, then
//   total += sum_b mean_t(v[b, t] * w[b, t]),   count += sum_b mean_t(w[b, t])
// where sample_weight is a scalar, one weight per sample ([B] or [B, 1]) or one per row; no
// weight means w = 1, i.e. count += B.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "lockstep/core/tensor.h"

namespace lockstep::keras::metrics {

class Metric {
 public:
  virtual ~Metric();

  // y_pred float32, bfloat16 or float64; y_true one-hot or labels in any dtype (uint8, int32,
  // int64, float). Throws InvalidArgument naming the shapes when they do not fit.
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred,
                            const Tensor& sample_weight = {}) = 0;
  virtual double result() const;
  virtual void reset_state();
  // A fresh metric (zero state) with the same configuration: one per replica.
  virtual std::unique_ptr<Metric> clone() const = 0;
  // Adds `other`'s state into this one; `other` must be the same kind of metric.
  virtual void merge_state(const Metric& other);
  // The state as a few doubles that merge by elementwise SUM (here {total, count}): what a
  // cross-worker all-reduce sums so that every worker reports the global result.
  // set_state(state()) restores the metric exactly; set_state throws InvalidArgument when the
  // vector does not have state().size() elements.
  virtual std::vector<double> state() const;
  virtual void set_state(const std::vector<double>& state);

  const std::string& name() const { return name_; }
  virtual nlohmann::json get_config() const;
  double total() const { return total_; }
  double count() const { return count_; }

 protected:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  Metric(const Metric&) = default;

  // Accumulates `rows` row values (value(j) for row j, in [0, rows)) grouped into `samples`
  // samples of rows / samples consecutive rows, weighted as described at the top of the file.
  template <typename RowValue>
  void accumulate_rows(int64_t rows, int64_t samples, const Tensor& sample_weight, RowValue value);

  double total_ = 0.0;
  double count_ = 0.0;

 private:
  // The weights as float32 (undefined when none); validates their element count.
  Tensor prepare_weights(const Tensor& sample_weight, int64_t rows, int64_t samples) const;
  std::string name_;
};

// Converts to float32 unless already float32 (no copy then).
Tensor as_float32(const Tensor& t);

template <typename RowValue>
void Metric::accumulate_rows(int64_t rows, int64_t samples, const Tensor& sample_weight,
                             RowValue value) {
  if (rows == 0 || samples == 0) return;
  const Tensor w = prepare_weights(sample_weight, rows, samples);
  const float* wp = w.defined() ? w.data<float>() : nullptr;
  const int64_t wn = w.defined() ? w.num_elements() : 0;
  const int64_t per = rows / samples;
  for (int64_t b = 0; b < samples; ++b) {
    double v = 0.0, ws = 0.0;
    for (int64_t t = 0; t < per; ++t) {
      const int64_t j = b * per + t;
      const double wj = wp == nullptr ? 1.0 : wn == 1 ? wp[0] : wn == samples ? wp[b] : wp[j];
      v += value(j) * wj;
      ws += wj;
    }
    // x / 1.0 is x: one-row samples (the usual case) skip two divisions per row.
    total_ += per == 1 ? v : v / static_cast<double>(per);
    count_ += per == 1 ? ws : ws / static_cast<double>(per);
  }
}

}  // namespace lockstep::keras::metrics
