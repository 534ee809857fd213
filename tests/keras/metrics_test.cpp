#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/keras/metrics.h"

namespace lockstep::keras::metrics {
namespace {

Tensor f32(std::vector<float> v, Shape s) {
  return Tensor::from_vector(v, s);
}

TEST(Mean, IsTheWeightedMeanOfScalars) {
  Mean m;
  m.update_state(1.0);
  m.update_state(4.0, 2.0);
  EXPECT_DOUBLE_EQ(m.result(), (1.0 + 8.0) / 3.0);
  m.reset_state();
  EXPECT_EQ(m.result(), 0.0);
}

TEST(Mean, AveragesTensorValuesPerSampleThenOverSamples) {
  Mean m;
  // Two samples of three values: per-sample means 2 and 5, weights 1 and 3.
  m.update_values(f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({1, 3}, {2}));
  EXPECT_DOUBLE_EQ(m.result(), (2.0 * 1 + 5.0 * 3) / 4.0);
  EXPECT_DOUBLE_EQ(m.count(), 4.0);
}

TEST(CategoricalAccuracy, ComparesArgmaxOfOneHotAndPrediction) {
  CategoricalAccuracy m;
  Tensor y_true = f32({0, 0, 1, 0, 1, 0, 1, 0, 0}, {3, 3});
  Tensor y_pred = f32({0.1f, 0.2f, 0.7f, 0.6f, 0.3f, 0.1f, 0.4f, 0.4f, 0.2f}, {3, 3});
  m.update_state(y_true, y_pred);
  // Row 0 right, row 1 wrong, row 2: tie between classes 0 and 1, the first wins -> right.
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3.0);
  EXPECT_EQ(m.name(), "categorical_accuracy");
}

TEST(CategoricalAccuracy, AcceptsBfloat16Predictions) {
  CategoricalAccuracy m;
  Tensor y_pred = f32({0.1f, 0.9f, 0.8f, 0.2f}, {2, 2}).to(DType::bfloat16);
  m.update_state(f32({0, 1, 0, 1}, {2, 2}), y_pred);
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
}

TEST(CategoricalAccuracy, WeightsSamples) {
  CategoricalAccuracy m;
  m.update_state(f32({1, 0, 1, 0}, {2, 2}), f32({0.9f, 0.1f, 0.1f, 0.9f}, {2, 2}),
                 f32({3, 1}, {2}));
  EXPECT_DOUBLE_EQ(m.result(), 0.75);
}

TEST(CategoricalAccuracy, RejectsMismatchedShapesNamingBoth) {
  CategoricalAccuracy m;
  try {
    m.update_state(f32({1, 0, 0}, {1, 3}), f32({1, 0}, {1, 2}));
    FAIL();
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("float32[1, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32[1, 2]"), std::string::npos) << msg;
  }
}

TEST(SparseCategoricalAccuracy, AcceptsIntegerLabelsOfEveryDtype) {
  Tensor y_pred =
      f32({0.1f, 0.8f, 0.1f, 0.5f, 0.3f, 0.2f, 0.2f, 0.2f, 0.6f, 0.3f, 0.3f, 0.4f}, {4, 3});
  std::vector<int64_t> labels{1, 0, 1, 2};  // right, right, wrong, right
  for (DType d : {DType::uint8, DType::int32, DType::int64, DType::float32}) {
    SparseCategoricalAccuracy m;
    m.update_state(Tensor::from_vector(labels, {4}).to(d), y_pred);
    EXPECT_DOUBLE_EQ(m.result(), 0.75) << dtype_name(d);
  }
  SparseCategoricalAccuracy m;
  m.update_state(Tensor::from_vector(labels, {4, 1}), y_pred);  // [B, 1] labels
  EXPECT_DOUBLE_EQ(m.result(), 0.75);
}

TEST(SparseCategoricalAccuracy, AveragesSequencePositionsPerSample) {
  SparseCategoricalAccuracy m;
  // [B=2, T=2, C=2]; sample 0: 1 of 2 right, sample 1: 2 of 2 right.
  Tensor y_pred = f32({0.9f, 0.1f, 0.9f, 0.1f, 0.2f, 0.8f, 0.7f, 0.3f}, {2, 2, 2});
  m.update_state(Tensor::from_vector<int32_t>({0, 1, 1, 0}, {2, 2}), y_pred);
  EXPECT_DOUBLE_EQ(m.result(), 0.75);
  EXPECT_DOUBLE_EQ(m.count(), 2.0);
}

TEST(BinaryAccuracy, ThresholdsPredictionsAtHalfByDefault) {
  BinaryAccuracy m;
  m.update_state(f32({1, 0, 1, 0}, {4, 1}), f32({0.6f, 0.4f, 0.5f, 0.51f}, {4, 1}));
  // 0.5 is not > 0.5, so the third is predicted 0 (wrong); the fourth is predicted 1 (wrong).
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
  BinaryAccuracy strict({.threshold = 0.7});
  strict.update_state(f32({1, 0}, {2}), f32({0.6f, 0.4f}, {2}));
  EXPECT_DOUBLE_EQ(strict.result(), 0.5);
  EXPECT_EQ(strict.get_config()["threshold"], 0.7);
}

TEST(Accuracy, ComparesElementwise) {
  Accuracy m;
  m.update_state(f32({1, 2, 3, 4}, {4}), f32({1, 2, 0, 4}, {4}));
  EXPECT_DOUBLE_EQ(m.result(), 0.75);
}

// tf.argmax's rules, against a reference written here: the first of tied maxima, and the first
// NaN when a row has one (so a NaN prediction matches a label only at the NaN's position).
TEST(CategoricalAccuracy, ArgmaxTakesTheFirstMaximumOrTheFirstNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> rows = {
      {0.1f, 0.7f, 0.2f, 0.7f},  {0.3f, nan, 0.9f, nan},     {nan, 0.5f, 0.1f, 0.2f},
      {0.2f, 0.1f, 0.9f, 0.95f}, {-1.f, -0.5f, -2.f, -0.5f}, {0.25f, 0.25f, 0.25f, 0.25f}};
  auto reference_argmax = [](const std::vector<float>& r) {
    for (size_t j = 0; j < r.size(); ++j)
      if (std::isnan(r[j])) return j;
    return static_cast<size_t>(std::max_element(r.begin(), r.end()) - r.begin());
  };
  for (size_t label = 0; label < 4; ++label) {
    std::vector<float> t, p;
    double expected = 0;
    for (const auto& r : rows) {
      for (size_t j = 0; j < 4; ++j) t.push_back(j == label ? 1.0f : 0.0f);
      p.insert(p.end(), r.begin(), r.end());
      expected += reference_argmax(r) == label ? 1.0 : 0.0;
    }
    CategoricalAccuracy m;
    const int64_t n = static_cast<int64_t>(rows.size());
    m.update_state(f32(t, {n, 4}), f32(p, {n, 4}));
    EXPECT_DOUBLE_EQ(m.result(), expected / static_cast<double>(n)) << "label " << label;
  }
}

// Many rows of a classifier's few classes run in blocks of rows (a vector's lanes): partial blocks,
// class counts up to the blocked path's 32 and one past it, ties and NaNs anywhere in a block,
// against the same reference argmax; the sparse metric reads the labels as class indices.
TEST(CategoricalAccuracy, ManyRowsFollowTheArgmaxRulesForEveryShortClassCount) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto reference_argmax = [](const float* r, int64_t n) {
    for (int64_t j = 0; j < n; ++j)
      if (std::isnan(r[j])) return j;
    return static_cast<int64_t>(std::max_element(r, r + n) - r);
  };
  uint32_t state = 12345;
  auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  for (const int64_t n : {1, 2, 10, 16, 17, 32, 33}) {
    for (const int64_t rows : {1, 15, 16, 37, 128}) {
      std::vector<float> p(static_cast<size_t>(rows * n)), t(p.size(), 0.0f), labels;
      double expected = 0;
      for (int64_t r = 0; r < rows; ++r) {
        float* row = p.data() + r * n;
        // Four values only, so ties are common; a NaN in about one row of eleven.
        for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>(next() >> 30) * 0.25f;
        if (next() % 11 == 0) row[next() % static_cast<uint32_t>(n)] = nan;
        const int64_t label = static_cast<int64_t>(next() % static_cast<uint32_t>(n));
        t[static_cast<size_t>(r * n + label)] = 1.0f;
        labels.push_back(static_cast<float>(label));
        expected += reference_argmax(row, n) == label ? 1.0 : 0.0;
      }
      CategoricalAccuracy m;
      m.update_state(f32(t, {rows, n}), f32(p, {rows, n}));
      EXPECT_DOUBLE_EQ(m.result(), expected / static_cast<double>(rows))
          << "n " << n << ", rows " << rows;
      SparseCategoricalAccuracy sparse;
      sparse.update_state(f32(labels, {rows}), f32(p, {rows, n}));
      EXPECT_DOUBLE_EQ(sparse.result(), expected / static_cast<double>(rows))
          << "n " << n << ", rows " << rows;
    }
  }
}

TEST(TopKCategoricalAccuracy, CountsTargetsAmongTheKHighestScores) {
  TopKCategoricalAccuracy m({.k = 2});
  Tensor y_true = f32({0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}, {3, 4});
  Tensor y_pred =
      f32({0.1f, 0.5f, 0.3f, 0.1f, 0.4f, 0.3f, 0.2f, 0.1f, 0.4f, 0.3f, 0.2f, 0.1f}, {3, 4});
  m.update_state(y_true, y_pred);
  // Row 0: class 2 is second -> in; row 1: class 1 is second -> in; row 2: class 3 last -> out.
  EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3.0);
  EXPECT_EQ(TopKCategoricalAccuracy().get_config()["k"], 5);
}

TEST(TopKCategoricalAccuracy, TiesAtTheBoundaryCountAsInAndNaNNever) {
  TopKCategoricalAccuracy m({.k = 1});
  m.update_state(f32({0, 1, 0}, {1, 3}), f32({0.4f, 0.4f, 0.2f}, {1, 3}));
  EXPECT_DOUBLE_EQ(m.result(), 1.0);
  m.reset_state();
  float nan = std::numeric_limits<float>::quiet_NaN();
  m.update_state(f32({0, 1, 0}, {1, 3}), f32({0.4f, nan, 0.2f}, {1, 3}));
  EXPECT_DOUBLE_EQ(m.result(), 0.0);
}

TEST(SparseTopKCategoricalAccuracy, UsesLabels) {
  SparseTopKCategoricalAccuracy m({.k = 2});
  m.update_state(Tensor::from_vector<int64_t>({2, 3}, {2}),
                 f32({0.1f, 0.5f, 0.3f, 0.1f, 0.4f, 0.3f, 0.2f, 0.1f}, {2, 4}));
  EXPECT_DOUBLE_EQ(m.result(), 0.5);
}

TEST(Metric, ReplicaClonesMergeToTheSingleMetricResult) {
  Tensor y_true = f32({1, 0, 0, 1, 1, 0, 0, 1}, {4, 2});
  Tensor y_pred = f32({0.9f, 0.1f, 0.8f, 0.2f, 0.3f, 0.7f, 0.4f, 0.6f}, {4, 2});
  Tensor w = f32({1, 2, 3, 4}, {4});
  CategoricalAccuracy whole;
  whole.update_state(y_true, y_pred, w);
  auto a = whole.clone();
  auto b = whole.clone();
  EXPECT_EQ(a->count(), 0.0);
  a->update_state(y_true.slice(0, 1), y_pred.slice(0, 1), w.slice(0, 1));
  b->update_state(y_true.slice(1, 4), y_pred.slice(1, 4), w.slice(1, 4));
  a->merge_state(*b);
  EXPECT_DOUBLE_EQ(a->result(), whole.result());
  EXPECT_DOUBLE_EQ(a->result(), (1.0 + 4.0) / 10.0);
  Mean other;
  EXPECT_THROW(a->merge_state(other), InvalidArgument);
}

TEST(Metric, EmptyMetricResultIsZero) {
  EXPECT_EQ(SparseCategoricalAccuracy().result(), 0.0);
}

TEST(Metric, RejectsSampleWeightOfTheWrongSize) {
  Accuracy m;
  EXPECT_THROW(
      m.update_state(f32({1, 2, 3, 4}, {2, 2}), f32({1, 2, 3, 4}, {2, 2}), f32({1, 2, 3}, {3})),
      InvalidArgument);
}

TEST(Metric, GetResolvesKerasNames) {
  EXPECT_EQ(get("accuracy")->name(), "accuracy");
  EXPECT_EQ(get("categorical_accuracy")->name(), "categorical_accuracy");
  EXPECT_EQ(get("sparse_categorical_accuracy")->name(), "sparse_categorical_accuracy");
  EXPECT_EQ(get("binary_accuracy")->name(), "binary_accuracy");
  EXPECT_EQ(get("top_k_categorical_accuracy")->get_config()["k"], 5);
  EXPECT_THROW(get("f1"), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::keras::metrics
