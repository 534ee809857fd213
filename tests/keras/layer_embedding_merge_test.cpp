// Embedding lookups and Keras' default initializer; Add and Concatenate values and errors.
#include <gtest/gtest.h>

#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/layers/embedding.h"
#include "lockstep/keras/layers/merge.h"

namespace lockstep::keras::layers {
namespace {

TEST(Embedding, LooksUpRowsForIntegerAndFloatIds) {
  Embedding emb({.input_dim = 3, .output_dim = 2});
  const Tensor ids = Tensor::from_vector<int64_t>({2, 0, 1, 2}, {2, 2});
  emb(ids);
  emb.embeddings().assign(Tensor::from_vector<float>({0, 1, 10, 11, 20, 21}, {3, 2}));
  const Tensor y = emb(ids);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 2}));
  const std::vector<float> want{20, 21, 0, 1, 10, 11, 20, 21};
  EXPECT_EQ(y.to_vector<float>(), want);
  EXPECT_EQ(emb(Tensor::from_vector<int32_t>({2, 0, 1, 2}, {2, 2})).to_vector<float>(), want);
  EXPECT_EQ(emb(Tensor::from_vector<float>({2, 0, 1, 2}, {2, 2})).to_vector<float>(), want);
}

TEST(Embedding, DefaultInitializerIsUniformWithinFiveHundredths) {
  Embedding emb({.input_dim = 50, .output_dim = 20});
  emb(Tensor::zeros({1}, DType::int64));
  const std::vector<float> v = emb.embeddings().raw_value().to_vector<float>();
  float lo = 1, hi = -1;
  for (float x : v) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, -0.05f);
  EXPECT_LT(hi, 0.05f);
  // 1000 draws from U(-0.05, 0.05): the extremes land within 0.01 of the bounds.
  EXPECT_LT(lo, -0.04f);
  EXPECT_GT(hi, 0.04f);
}

TEST(Embedding, RejectsIdsOutsideTheVocabulary) {
  Embedding emb({.input_dim = 3, .output_dim = 2});
  EXPECT_THROW(emb(Tensor::from_vector<int64_t>({3}, {1})), InvalidArgument);
  EXPECT_THROW(Embedding({.input_dim = 0, .output_dim = 2}), InvalidArgument);
  EXPECT_THROW(Embedding({.input_dim = 3, .output_dim = 2, .embeddings_initializer = "nope"}),
               InvalidArgument);
}

TEST(Add, SumsEveryInput) {
  Add add;
  const Tensor y = add({Tensor::from_vector<float>({1, 2, 3}, {1, 3}),
                        Tensor::from_vector<float>({10, 20, 30}, {1, 3}),
                        Tensor::from_vector<float>({100, 200, 300}, {1, 3})});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{111, 222, 333}));
}

TEST(Add, RejectsMismatchedShapesAndSingleInputs) {
  Add add;
  EXPECT_THROW(add({Tensor::zeros({2, 3}), Tensor::zeros({2, 4})}), InvalidArgument);
  EXPECT_THROW(Add().compute_output_shapes({Shape{2, 3}}), InvalidArgument);
}

TEST(Concatenate, JoinsAlongTheAxis) {
  Concatenate cat({.axis = 1});
  const Tensor y = cat({Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}),
                        Tensor::from_vector<float>({5, 6}, {2, 1})});
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  EXPECT_THROW(cat({Tensor::zeros({2, 2}), Tensor::zeros({3, 1})}), InvalidArgument);
  EXPECT_THROW(Concatenate({.axis = 0}).compute_output_shapes({Shape{2, 2}, Shape{2, 2}}),
               InvalidArgument);
}

TEST(Concatenate, SymbolicShapesKeepTheBatchUnknown) {
  auto a = Input({4});
  auto b = Input({3});
  EXPECT_EQ(Concatenate()({a, b}).shape(), (Shape{0, 7}));
  EXPECT_EQ(Add()({a, a}).shape(), (Shape{0, 4}));
}

}  // namespace
}  // namespace lockstep::keras::layers
