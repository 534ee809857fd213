#include "lockstep/ops/nn_embedding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/core/random.h"

namespace lockstep::ops {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<int64_t> kIds = {3, 0, 10, 3, 7, 7, 7, 1, 0, 9, 2, 3};  // [3, 4], repeats

Tensor ids_tensor(DType dtype) {
  Tensor ids = Tensor::from_vector<int64_t>(kIds, {3, 4});
  if (dtype == DType::int64) return ids;
  Tensor out({3, 4}, DType::int32);
  for (size_t i = 0; i < kIds.size(); ++i) out.data<int32_t>()[i] = static_cast<int32_t>(kIds[i]);
  return out;
}

class EmbeddingMatchesReference : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

TEST_P(EmbeddingMatchesReference, GathersRowsAndScatterAddsGradients) {
  auto [dtype, id_dtype] = GetParam();
  const int64_t vocab = 11, dim = 5;
  Generator gen(17);
  Tensor table = gen.uniform({vocab, dim}, -1, 1, DType::float64).to(dtype);
  Tensor ids = ids_tensor(id_dtype);
  std::vector<double> t = table.to_vector<double>();

  Tensor y = embedding_lookup_forward(table, ids);
  ASSERT_EQ(y.shape(), Shape({3, 4, dim}));
  EXPECT_EQ(y.dtype(), dtype);
  std::vector<double> expected;
  for (int64_t id : kIds)
    for (int64_t j = 0; j < dim; ++j) expected.push_back(t[static_cast<size_t>(id * dim + j)]);
  EXPECT_EQ(y.to_vector<double>(), expected);

  Tensor dy = gen.uniform({3, 4, dim}, -1, 1, DType::float64).to(dtype);
  std::vector<double> d = dy.to_vector<double>();
  std::vector<double> grad(static_cast<size_t>(vocab * dim), 0.0);
  for (size_t i = 0; i < kIds.size(); ++i)
    for (int64_t j = 0; j < dim; ++j)
      grad[static_cast<size_t>(kIds[i] * dim + j)] += d[i * static_cast<size_t>(dim) + j];
  Tensor g = embedding_lookup_backward(dy, ids, vocab);
  ASSERT_EQ(g.shape(), table.shape());
  std::vector<double> got = g.to_vector<double>();
  double tol = dtype == DType::bfloat16 ? 1e-2 : dtype == DType::float32 ? 1e-6 : 1e-15;
  for (size_t i = 0; i < grad.size(); ++i) {
    EXPECT_NEAR(got[i], grad[i], tol * std::max(1.0, std::abs(grad[i]))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, EmbeddingMatchesReference,
                         ::testing::Combine(::testing::Values(DType::float32, DType::bfloat16,
                                                              DType::float64),
                                            ::testing::Values(DType::int32, DType::int64)));

TEST(Embedding, ScalarIdGivesOneRow) {
  Tensor table = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor y = embedding_lookup_forward(table, Tensor::full({}, 1, DType::int32));
  EXPECT_EQ(y.shape(), Shape({2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 4}));
}

TEST(Embedding, OutOfRangeIdNamesTheIdAndVocabularySize) {
  Tensor table = Tensor::zeros({10, 4});
  Tensor ids = Tensor::from_vector<int64_t>({1, 12, 3}, {3});
  try {
    embedding_lookup_forward(table, ids);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("id 12"), HasSubstr("position 1"),
                                HasSubstr("vocabulary of size 10")));
  }
  Tensor negative = Tensor::from_vector<int64_t>({-1}, {1});
  EXPECT_THROW(embedding_lookup_forward(table, negative), InvalidArgument);
  EXPECT_THROW(embedding_lookup_backward(Tensor::zeros({3, 4}), ids, 10), InvalidArgument);
}

TEST(Embedding, RejectsTableOfWrongRankAndFloatIdsNamingBothShapes) {
  Tensor ids = Tensor::from_vector<int64_t>({1}, {1});
  try {
    embedding_lookup_forward(Tensor::zeros({10}), ids);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[10]"), HasSubstr("int64[1]")));
  }
  try {
    embedding_lookup_forward(Tensor::zeros({10, 2}), Tensor::zeros({1}));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("int32 or int64"), HasSubstr("float32[1]")));
  }
}

TEST(Embedding, BackwardRejectsGradientOfWrongShape) {
  Tensor ids = Tensor::from_vector<int64_t>({1, 2}, {2});
  try {
    embedding_lookup_backward(Tensor::zeros({3, 4}), ids, 10);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("float32[3, 4]"), HasSubstr("int64[2]")));
  }
}

}  // namespace
}  // namespace lockstep::ops
