// Model::get_weights / set_weights in Keras 3's order (Layer.weights: layer by layer, each layer's
// trainable then non-trainable weights, nested models recursively).
#include <gtest/gtest.h>

#include "lockstep/core/error.h"
#include "lockstep/keras.h"
#include "saving_test_util.h"

namespace lockstep::keras {
namespace {

using saving_test::same_bits;

// Keras 3: [dense kernel, dense bias, bn gamma, bn beta, bn moving_mean, bn moving_variance,
// dense_1 kernel, dense_1 bias] — per layer, not all trainable weights first as Keras 2.
TEST(GetWeights, ListsWeightsLayerByLayerInKeras3Order) {
  clear_session();
  Sequential m({Input({4}), layers::Dense({.units = 3}), layers::BatchNormalization(),
                layers::Dense({.units = 2})});
  std::vector<Tensor> w = m.get_weights();
  ASSERT_EQ(w.size(), 8u);
  const std::vector<Shape> shapes = {{4, 3}, {3}, {3}, {3}, {3}, {3}, {3, 2}, {2}};
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i].shape(), shapes[i]) << i;
  // BatchNormalization's initial values: gamma ones, beta zeros, mean zeros, variance ones.
  EXPECT_EQ(w[2].data<float>()[0], 1.0f);
  EXPECT_EQ(w[3].data<float>()[0], 0.0f);
  EXPECT_EQ(w[4].data<float>()[0], 0.0f);
  EXPECT_EQ(w[5].data<float>()[0], 1.0f);
}

TEST(GetWeights, RecursesIntoNestedModels) {
  clear_session();
  auto in = Input({5});
  std::shared_ptr<Layer> inner =
      std::make_shared<Model>(in, layers::Dense({.units = 6})(in), "inner");
  Sequential m({Input({5}), inner, layers::Dense({.units = 2})});
  std::vector<Tensor> w = m.get_weights();
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].shape(), Shape({5, 6}));
  EXPECT_EQ(w[2].shape(), Shape({6, 2}));
}

TEST(GetWeights, ReturnsCopies) {
  clear_session();
  Sequential m({Input({2}), layers::Dense({.units = 1})});
  std::vector<Tensor> w = m.get_weights();
  w[0].data<float>()[0] = 42.0f;
  EXPECT_NE(m.get_weights()[0].data<float>()[0], 42.0f);
}

TEST(SetWeights, AssignsInGetWeightsOrder) {
  clear_session();
  Sequential a({Input({4}), layers::Dense({.units = 3}), layers::BatchNormalization(),
                layers::Dense({.units = 2})});
  Sequential b({Input({4}), layers::Dense({.units = 3}), layers::BatchNormalization(),
                layers::Dense({.units = 2})});
  std::vector<Tensor> w = a.get_weights();
  for (size_t i = 0; i < w.size(); ++i) {
    for (int64_t j = 0; j < w[i].num_elements(); ++j) {
      w[i].data<float>()[j] = static_cast<float>(i) + 0.125f * static_cast<float>(j);
    }
  }
  b.set_weights(w);
  std::vector<Tensor> got = b.get_weights();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(same_bits(got[i], w[i])) << i;
  Tensor x = saving_test::random_input({3, 4}, 1);
  a.set_weights(w);
  EXPECT_TRUE(same_bits(a.predict(x), b.predict(x)));
}

TEST(SetWeights, ShapeMismatchNamesBothShapesAndAssignsNothing) {
  clear_session();
  Sequential m({Input({4}), layers::Dense({.units = 3}), layers::Dense({.units = 2})});
  std::vector<Tensor> before = m.get_weights();
  std::vector<Tensor> w = before;
  w[0] = Tensor::ones({4, 3});
  w[2] = Tensor::zeros({2, 3});  // transposed: [3, 2] expected
  try {
    m.set_weights(w);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("float32[3, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("float32[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dense_1/kernel"), std::string::npos) << msg;
  }
  EXPECT_TRUE(same_bits(m.get_weights()[0], before[0]));
}

TEST(SetWeights, CountMismatchIsAnError) {
  clear_session();
  Sequential m({Input({4}), layers::Dense({.units = 3})});
  EXPECT_THROW(m.set_weights({Tensor::zeros({4, 3})}), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::keras
