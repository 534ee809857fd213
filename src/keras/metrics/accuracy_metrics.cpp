#include "lockstep/keras/metrics/accuracy_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/cpu_dispatch.h"
#include "core/rows_to_columns.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::metrics {

namespace {

int64_t samples_of(const Tensor& t, int class_axis_rank) {
  // The batch axis is axis 0 unless the tensor is a single unbatched sample.
  return t.rank() > class_axis_rank ? t.dim(0) : 1;
}

[[noreturn]] void shape_error(const std::string& metric, const std::string& expected,
                              const Tensor& y_true, const Tensor& y_pred) {
  throw InvalidArgument("Metric '" + metric + "'.update_state: expected " + expected +
                        ". Received: y_true " + y_true.describe() + ", y_pred " +
                        y_pred.describe() + ".");
}

// The first index of the largest value; with a NaN in the row, the first NaN's (tf.argmax).
int64_t argmax(const float* p, int64_t n) {
  // Branch-free select (the comparisons are data-dependent, so a branch mispredicts on about
  // every other row), then a NaN check that almost never fires.
  float m = p[0];
  int64_t best = 0;
  bool nan = std::isnan(p[0]);
  for (int64_t j = 1; j < n; ++j) {
    const bool greater = p[j] > m;
    m = greater ? p[j] : m;
    best = greater ? j : best;
    nan |= std::isnan(p[j]);
  }
  if (!nan) return best;
  for (int64_t j = 0; j < n; ++j)
    if (std::isnan(p[j])) return j;
  return best;
}

// argmax() of each of `rows` rows of n values (1 <= n <= kMaxBlockedClasses) into `out`, a block of
// rows at a time transposed into columns, so that each lane of a vector runs argmax()'s select loop
// for one row; a row holding a NaN takes argmax() itself. A classifier's metric, like its softmax
// and loss, sees many rows of a few classes: row by row, each is a chain of dependent selects.
constexpr int64_t kMaxBlockedClasses = 32;

LOCKSTEP_DISPATCHED_LANES(void, argmax_short_rows,
                          (const float* __restrict x, int64_t rows, int64_t n,
                           int32_t* __restrict out),
                          (x, rows, n, out)) {
  constexpr int W = kFloatLanes;
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
  alignas(64) float columns[kMaxBlockedClasses * W];
  alignas(64) int32_t best_out[W], nan_out[W];
  for (int64_t r0 = 0; r0 < rows; r0 += W) {
    const int64_t count = std::min<int64_t>(W, rows - r0);
    ::lockstep::detail::rows_to_columns<W>(x + r0 * n, count, n, W, 0.0f, columns, (rows - r0) * n);
    F m, v;
    std::memcpy(&m, columns, sizeof m);
    I best = I{} + 0, nan = m != m;
    for (int64_t k = 1; k < n; ++k) {
      std::memcpy(&v, columns + k * W, sizeof v);
      const I greater = v > m;
      m = greater ? v : m;
      best = greater ? I{} + static_cast<int32_t>(k) : best;
      nan |= v != v;
    }
    std::memcpy(best_out, &best, sizeof best);
    std::memcpy(nan_out, &nan, sizeof nan);
    for (int64_t i = 0; i < count; ++i) {
      out[r0 + i] =
          nan_out[i] != 0 ? static_cast<int32_t>(argmax(x + (r0 + i) * n, n)) : best_out[i];
    }
  }
}

// tf.math.in_top_k: fewer than k scores strictly above the target's, and a finite target.
bool in_top_k(const float* p, int64_t n, int64_t target, int k) {
  if (target < 0 || target >= n || !std::isfinite(p[target])) return false;
  int64_t above = 0;
  for (int64_t j = 0; j < n; ++j) above += p[j] > p[target] ? 1 : 0;
  return above < k;
}

int64_t num_classes(const std::string& name, const Tensor& y_true, const Tensor& y_pred) {
  if (y_pred.rank() == 0 || y_pred.dim(-1) == 0) {
    shape_error(name, "y_pred with a non-empty class axis", y_true, y_pred);
  }
  return y_pred.dim(-1);
}

// Labels as double: a float label that is not an integer matches no class, as in Keras.
double label(const Tensor& labels, int64_t j) {
  return static_cast<double>(labels.data<float>()[j]);
}

void check_labels(const std::string& name, const Tensor& y_true, const Tensor& y_pred,
                  int64_t rows) {
  if (y_true.num_elements() != rows) {
    shape_error(name,
                "one label per row of y_pred (y_true shaped like y_pred without its last axis)",
                y_true, y_pred);
  }
}

// The validated float32 inputs of a metric, shared by the update_state bodies below so that each
// states only its per-row comparison: `rows` rows of `width` values (1 for the elementwise metrics,
// the class count otherwise) in `samples` samples.
struct Rows {
  Rows(Tensor t_, Tensor p_, int64_t width_, int64_t rows_, int64_t samples_)
      : t(std::move(t_)),
        p(std::move(p_)),
        width(width_),
        rows(rows_),
        samples(samples_),
        tp(t.data<float>()),
        pp(p.data<float>()) {}
  const float* true_row(int64_t j) const { return tp + j * width; }
  const float* pred_row(int64_t j) const { return pp + j * width; }

  Tensor t, p;
  int64_t width, rows, samples;

 private:
  const float* tp;  // cached: data<float>() checks the dtype on every call
  const float* pp;
};

// Accuracy, BinaryAccuracy: y_true and y_pred compared element by element.
Rows elementwise_rows(const std::string& name, const Tensor& y_true, const Tensor& y_pred) {
  if (y_true.num_elements() != y_pred.num_elements()) {
    shape_error(name, "y_true and y_pred with the same number of elements", y_true, y_pred);
  }
  return {as_float32(y_true), as_float32(y_pred), 1, y_pred.num_elements(), samples_of(y_pred, 0)};
}

// Categorical metrics: one-hot y_true shaped like y_pred.
Rows one_hot_rows(const std::string& name, const Tensor& y_true, const Tensor& y_pred) {
  const int64_t c = num_classes(name, y_true, y_pred);
  if (!(y_true.shape() == y_pred.shape())) {
    shape_error(name, "one-hot y_true shaped like y_pred", y_true, y_pred);
  }
  return {as_float32(y_true), as_float32(y_pred), c, y_pred.num_elements() / c,
          samples_of(y_pred, 1)};
}

// Sparse categorical metrics: one label per row of y_pred (read with label()).
Rows sparse_rows(const std::string& name, const Tensor& y_true, const Tensor& y_pred) {
  const int64_t c = num_classes(name, y_true, y_pred);
  const int64_t rows = y_pred.num_elements() / c;
  check_labels(name, y_true, y_pred, rows);
  return {as_float32(y_true), as_float32(y_pred), c, rows, samples_of(y_pred, 1)};
}

}  // namespace

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                            const Tensor& sample_weight) {
  const Rows r = elementwise_rows(name(), y_true, y_pred);
  accumulate_rows(r.rows, r.samples, sample_weight,
                  [&](int64_t j) { return *r.true_row(j) == *r.pred_row(j) ? 1.0 : 0.0; });
}

std::unique_ptr<Metric> Accuracy::clone() const {
  return std::make_unique<Accuracy>(name());
}

BinaryAccuracy::BinaryAccuracy(BinaryAccuracyOptions options)
    : Metric(options.name), o_(std::move(options)) {}

void BinaryAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                  const Tensor& sample_weight) {
  const Rows r = elementwise_rows(name(), y_true, y_pred);
  const double threshold = o_.threshold;
  accumulate_rows(r.rows, r.samples, sample_weight, [&](int64_t j) {
    const float predicted = static_cast<double>(*r.pred_row(j)) > threshold ? 1.0f : 0.0f;
    return *r.true_row(j) == predicted ? 1.0 : 0.0;
  });
}

std::unique_ptr<Metric> BinaryAccuracy::clone() const {
  return std::make_unique<BinaryAccuracy>(o_);
}

nlohmann::json BinaryAccuracy::get_config() const {
  nlohmann::json c = Metric::get_config();
  c["threshold"] = o_.threshold;
  return c;
}

void CategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                       const Tensor& sample_weight) {
  const Rows r = one_hot_rows(name(), y_true, y_pred);
  if (r.width <= kMaxBlockedClasses) {
    // Kept from call to call: the training step updates the metric every step.
    thread_local std::vector<int32_t> classes;
    classes.resize(static_cast<size_t>(2 * r.rows));
    int32_t* const true_class = classes.data();
    int32_t* const pred_class = classes.data() + r.rows;
    argmax_short_rows(r.true_row(0), r.rows, r.width, true_class);
    argmax_short_rows(r.pred_row(0), r.rows, r.width, pred_class);
    accumulate_rows(r.rows, r.samples, sample_weight,
                    [&](int64_t j) { return true_class[j] == pred_class[j] ? 1.0 : 0.0; });
    return;
  }
  accumulate_rows(r.rows, r.samples, sample_weight, [&](int64_t j) {
    return argmax(r.true_row(j), r.width) == argmax(r.pred_row(j), r.width) ? 1.0 : 0.0;
  });
}

std::unique_ptr<Metric> CategoricalAccuracy::clone() const {
  return std::make_unique<CategoricalAccuracy>(name());
}

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                             const Tensor& sample_weight) {
  const Rows r = sparse_rows(name(), y_true, y_pred);
  if (r.width <= kMaxBlockedClasses) {
    thread_local std::vector<int32_t> pred_class;
    pred_class.resize(static_cast<size_t>(r.rows));
    argmax_short_rows(r.pred_row(0), r.rows, r.width, pred_class.data());
    accumulate_rows(r.rows, r.samples, sample_weight, [&](int64_t j) {
      return label(r.t, j) == static_cast<double>(pred_class[static_cast<size_t>(j)]) ? 1.0 : 0.0;
    });
    return;
  }
  accumulate_rows(r.rows, r.samples, sample_weight, [&](int64_t j) {
    return label(r.t, j) == static_cast<double>(argmax(r.pred_row(j), r.width)) ? 1.0 : 0.0;
  });
}

std::unique_ptr<Metric> SparseCategoricalAccuracy::clone() const {
  return std::make_unique<SparseCategoricalAccuracy>(name());
}

TopKCategoricalAccuracy::TopKCategoricalAccuracy(TopKCategoricalAccuracyOptions options)
    : Metric(options.name), o_(std::move(options)) {
  LOCKSTEP_CHECK(o_.k >= 1, "TopKCategoricalAccuracy: expected k >= 1. Received: k=", o_.k);
}

void TopKCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                           const Tensor& sample_weight) {
  const Rows r = one_hot_rows(name(), y_true, y_pred);
  accumulate_rows(r.rows, r.samples, sample_weight, [&](int64_t j) {
    return in_top_k(r.pred_row(j), r.width, argmax(r.true_row(j), r.width), o_.k) ? 1.0 : 0.0;
  });
}

std::unique_ptr<Metric> TopKCategoricalAccuracy::clone() const {
  return std::make_unique<TopKCategoricalAccuracy>(o_);
}

nlohmann::json TopKCategoricalAccuracy::get_config() const {
  nlohmann::json c = Metric::get_config();
  c["k"] = o_.k;
  return c;
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(
    SparseTopKCategoricalAccuracyOptions options)
    : Metric(options.name), o_(std::move(options)) {
  LOCKSTEP_CHECK(o_.k >= 1, "SparseTopKCategoricalAccuracy: expected k >= 1. Received: k=", o_.k);
}

void SparseTopKCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred,
                                                 const Tensor& sample_weight) {
  const Rows r = sparse_rows(name(), y_true, y_pred);
  accumulate_rows(r.rows, r.samples, sample_weight, [&](int64_t j) {
    const double l = label(r.t, j);
    if (l != std::floor(l)) return 0.0;
    return in_top_k(r.pred_row(j), r.width, static_cast<int64_t>(l), o_.k) ? 1.0 : 0.0;
  });
}

std::unique_ptr<Metric> SparseTopKCategoricalAccuracy::clone() const {
  return std::make_unique<SparseTopKCategoricalAccuracy>(o_);
}

nlohmann::json SparseTopKCategoricalAccuracy::get_config() const {
  nlohmann::json c = Metric::get_config();
  c["k"] = o_.k;
  return c;
}

}  // namespace lockstep::keras::metrics
