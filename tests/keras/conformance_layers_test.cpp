// Every layer through the conformance harness (conformance.h). Expected parameter counts are
// worked out by hand in each case's comment.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "conformance.h"
#include "conformance_transformer_cases.h"
#include "lockstep/autodiff/functions.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/optimizers/sgd.h"
#include "testing/gradient_check.h"

namespace lockstep::keras::conformance {
namespace {

using nlohmann::json;

// The dtype policy that computes and stores variables in `d` ("float32", "float64").
std::string policy(DType d) {
  return std::string(dtype_name(d));
}

std::vector<LayerCase> all_layer_cases() {
  using namespace layers;
  std::vector<LayerCase> cases;
  cases.push_back({
      .name = "Dense",
      .make =
          [](DType d) {
            return Dense({.units = 3, .activation = "tanh", .dtype = policy(d)}).move_to_shared();
          },
      .input_shapes = {{5, 7}},
      .expected_params = 7 * 3 + 3,  // kernel [7, 3] + bias [3]
      .expected_weights = 2,
      .expected_trainable_weights = 2,
      .expected_config = {{"units", 3},
                          {"activation", "tanh"},
                          {"use_bias", true},
                          {"kernel_initializer", "glorot_uniform"},
                          {"bias_initializer", "zeros"},
                          {"dtype", "float32"}},
  });
  cases.push_back({
      .name = "Activation",
      .make = [](DType) { return Activation("tanh").move_to_shared(); },
      .input_shapes = {{3, 5}},
      .expected_config = {{"activation", "tanh"}},
  });
  cases.push_back({
      .name = "Flatten",
      .make = [](DType) { return Flatten().move_to_shared(); },
      .input_shapes = {{3, 5, 7}},
  });
  cases.push_back({
      .name = "Reshape",
      .make =
          [](DType) {
            return Reshape({7, -1}).move_to_shared();
          },
      .input_shapes = {{3, 5, 7}},
      .expected_config = {{"target_shape", {7, -1}}},
  });
  cases.push_back({
      .name = "Rescaling",
      .make =
          [](DType d) {
            return Rescaling({.scale = 0.5, .offset = -1.0, .dtype = policy(d)}).move_to_shared();
          },
      .input_shapes = {{3, 5}},
      .expected_config = {{"scale", 0.5}, {"offset", -1.0}},
  });
  cases.push_back({
      .name = "DropoutInference",
      .make = [](DType) { return Dropout({.rate = 0.25, .seed = 7}).move_to_shared(); },
      .input_shapes = {{3, 5}},
      .expected_config = {{"rate", 0.25}, {"seed", 7}},
  });
  cases.push_back({
      .name = "DropoutTrainingSeeded",
      .make = [](DType) { return Dropout({.rate = 0.25, .seed = 7}).move_to_shared(); },
      .input_shapes = {{3, 5}},
      .expected_config = {{"rate", 0.25}, {"seed", 7}},
      .training = true,
      .fresh_layer_per_call = true,
  });
  cases.push_back({
      .name = "Conv2DValid",
      .make =
          [](DType d) {
            return Conv2D({.filters = 2,
                           .kernel_size = {3, 2},
                           .strides = {2, 1},
                           .activation = "tanh",
                           .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{2, 7, 5, 3}},
      .expected_params = 3 * 2 * 3 * 2 + 2,  // kernel [3, 2, 3, 2] + bias [2]
      .expected_weights = 2,
      .expected_trainable_weights = 2,
      .expected_config = {{"filters", 2},
                          {"kernel_size", {3, 2}},
                          {"strides", {2, 1}},
                          {"padding", "valid"},
                          {"activation", "tanh"},
                          {"use_bias", true},
                          {"kernel_initializer", "glorot_uniform"},
                          {"bias_initializer", "zeros"},
                          {"data_format", "channels_last"}},
  });
  cases.push_back({
      .name = "Conv2DSameNoBias",
      .make =
          [](DType d) {
            return Conv2D({.filters = 3,
                           .kernel_size = {3, 3},
                           .strides = {2, 2},
                           .padding = "same",
                           .use_bias = false,
                           .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{1, 5, 7, 2}},
      .expected_params = 3 * 3 * 2 * 3,  // kernel [3, 3, 2, 3]
      .expected_weights = 1,
      .expected_trainable_weights = 1,
      .expected_config = {{"filters", 3}, {"padding", "same"}, {"use_bias", false}},
  });
  cases.push_back({
      .name = "MaxPooling2D",
      .make =
          [](DType d) {
            return MaxPooling2D({.pool_size = {2, 3}, .padding = "same", .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{2, 5, 7, 3}},
      .expected_config = {{"pool_size", {2, 3}}, {"strides", {2, 3}}, {"padding", "same"}},
  });
  cases.push_back({
      .name = "BatchNormalizationTraining",
      .make = [](DType d) { return BatchNormalization({.dtype = policy(d)}).move_to_shared(); },
      .input_shapes = {{5, 3, 7}},
      .expected_params = 4 * 7,  // gamma, beta, moving_mean, moving_variance [7]
      .expected_weights = 4,
      .expected_trainable_weights = 2,
      .expected_config =
          {{"axis", -1}, {"momentum", 0.99}, {"epsilon", 1e-3}, {"center", true}, {"scale", true}},
      .training = true,
  });
  cases.push_back({
      .name = "BatchNormalizationInference",
      .make =
          [](DType d) {
            return BatchNormalization(
                       {.momentum = 0.9, .epsilon = 1e-2, .center = false, .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{5, 3}},
      .expected_params = 3 * 3,  // gamma, moving_mean, moving_variance [3]
      .expected_weights = 3,
      .expected_trainable_weights = 1,
      .expected_config = {{"momentum", 0.9}, {"epsilon", 1e-2}, {"center", false}},
  });
  cases.push_back({
      .name = "LayerNormalization",
      .make = [](DType d) { return LayerNormalization({.dtype = policy(d)}).move_to_shared(); },
      .input_shapes = {{3, 5, 7}},
      .expected_params = 2 * 7,  // gamma, beta [7]
      .expected_weights = 2,
      .expected_trainable_weights = 2,
      .expected_config = {{"axis", -1}, {"epsilon", 1e-3}, {"center", true}, {"scale", true}},
  });
  cases.push_back({
      .name = "Embedding",
      .make =
          [](DType d) {
            return Embedding({.input_dim = 11, .output_dim = 3, .dtype = policy(d)})
                .move_to_shared();
          },
      .input_shapes = {{5, 3}},
      .id_vocab = 11,
      .expected_params = 11 * 3,  // embeddings [11, 3]
      .expected_weights = 1,
      .expected_trainable_weights = 1,
      .expected_config = {{"input_dim", 11},
                          {"output_dim", 3},
                          {"embeddings_initializer", "uniform"}},
  });
  cases.push_back({
      .name = "Add",
      .make = [](DType d) { return Add("", policy(d)).move_to_shared(); },
      .input_shapes = {{3, 5}, {3, 5}, {3, 5}},
  });
  cases.push_back({
      .name = "Concatenate",
      .make = [](DType d) { return Concatenate({.axis = 1, .dtype = policy(d)}).move_to_shared(); },
      .input_shapes = {{3, 2, 5}, {3, 3, 5}},
      .expected_config = {{"axis", 1}},
  });
  for (LayerCase& c : transformer_layer_cases()) cases.push_back(std::move(c));
  return cases;
}

std::vector<Tensor> make_inputs(const LayerCase& c, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (const Shape& s : c.input_shapes) {
    if (c.id_vocab > 0) {
      Tensor ids(s, DType::int64);
      for (int64_t i = 0; i < ids.num_elements(); ++i)
        ids.data<int64_t>()[i] = static_cast<int64_t>(gen.next_u64() % uint64_t(c.id_vocab));
      out.push_back(ids);
    } else {
      out.push_back(lockstep::testing::random_f64(gen, s).to(dtype));
    }
  }
  return out;
}

Tensor call_layer(Layer& layer, const std::vector<Tensor>& inputs, bool training) {
  return inputs.size() == 1 ? layer(inputs[0], training) : layer(inputs, training);
}

class LayerConformance : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerConformance, OutputShapeMatchesComputeOutputShape) {
  const LayerCase& c = GetParam();
  auto layer = c.make(DType::float32);
  Tensor y = call_layer(*layer, make_inputs(c, DType::float32, 1), c.training);
  EXPECT_EQ(y.shape(), layer->compute_output_shapes(c.input_shapes)[0]);
  std::vector<Shape> symbolic;
  for (const Shape& s : c.input_shapes) symbolic.push_back(s.with_dim(0, 0));
  EXPECT_EQ(layer->compute_output_shapes(symbolic)[0], y.shape().with_dim(0, 0));
}

TEST_P(LayerConformance, CountsTheExpectedWeights) {
  const LayerCase& c = GetParam();
  auto layer = c.make(DType::float32);
  EXPECT_FALSE(layer->built());
  call_layer(*layer, make_inputs(c, DType::float32, 1), c.training);
  EXPECT_TRUE(layer->built());
  EXPECT_EQ(layer->count_params(), c.expected_params);
  EXPECT_EQ(layer->weights().size(), c.expected_weights);
  EXPECT_EQ(layer->trainable_weights().size(), c.expected_trainable_weights);
  for (const Variable& w : layer->weights())
    EXPECT_EQ(w.name().rfind(layer->name() + "/", 0), 0u) << w.name();
}

TEST_P(LayerConformance, ConfigHoldsTheOptionsAndRoundTrips) {
  const LayerCase& c = GetParam();
  json first = c.make(DType::float32)->get_config();
  json second = c.make(DType::float32)->get_config();
  EXPECT_TRUE(first.contains("name"));
  EXPECT_EQ(first.value("trainable", false), true);
  for (const auto& [key, value] : c.expected_config.items()) {
    ASSERT_TRUE(first.contains(key)) << key << " missing from " << first.dump();
    EXPECT_EQ(first[key], value) << key;
  }
  first.erase("name");
  second.erase("name");
  EXPECT_EQ(first, second);
}

TEST_P(LayerConformance, Float64GradientsMatchCentralDifferences) {
  const LayerCase& c = GetParam();
  std::shared_ptr<Layer> layer = c.make(DType::float64);
  const std::vector<Tensor> inputs = make_inputs(c, DType::float64, 2);
  call_layer(*layer, inputs, c.training);  // builds
  const std::vector<Variable> weights = layer->trainable_weights();
  // Randomized weights: initial zeros / ones would hide a swapped gamma and beta.
  Generator gen(3);
  std::vector<Tensor> checked;
  const bool differentiable_inputs = c.id_vocab == 0;
  if (differentiable_inputs) checked = inputs;
  for (const Variable& w : weights)
    checked.push_back(lockstep::testing::random_f64(gen, w.shape(), 0.5, 1.5));
  const size_t n_inputs = differentiable_inputs ? inputs.size() : 0;
  auto f = [&](const std::vector<Tensor>& xs) {
    std::shared_ptr<Layer> target = layer;
    std::vector<Tensor> layer_inputs(xs.begin(), xs.begin() + static_cast<long>(n_inputs));
    if (!differentiable_inputs) layer_inputs = inputs;
    if (c.fresh_layer_per_call) {
      target = c.make(DType::float64);
      call_layer(*target, layer_inputs, false);  // builds outside the training path
    }
    std::vector<Tensor> values(xs.begin() + static_cast<long>(n_inputs), xs.end());
    return call_with_weights(*target, target->trainable_weights(), values, layer_inputs,
                             c.training);
  };
  ASSERT_EQ(checked.size(), n_inputs + weights.size());
  EXPECT_TRUE(lockstep::testing::gradients_match(f, checked, 1e-6, 1e-6));
}

TEST_P(LayerConformance, OneSgdStepLowersMseOnAFixedBatch) {
  const LayerCase& c = GetParam();
  auto layer = c.make(DType::float32);
  const std::vector<Tensor> inputs = make_inputs(c, DType::float32, 4);
  Tensor y0 = call_layer(*layer, inputs, c.training);
  const std::vector<Variable> vars = layer->trainable_weights();
  ASSERT_EQ(vars.size(), c.expected_trainable_weights);
  if (vars.empty()) return;  // nothing to train: the gradient check covers the backward pass
  Generator gen(5);
  const Tensor target = lockstep::testing::random_f64(gen, y0.shape()).to(DType::float32);
  // A layer with random masks (fresh_layer_per_call) is compared on its first training call before
  // and after the step: a fresh layer with the weights of the moment, so both losses see the same
  // mask.
  auto with_weights = [&](const std::vector<Variable>& from) {
    if (!c.fresh_layer_per_call) return layer;
    std::shared_ptr<Layer> fresh = c.make(DType::float32);
    call_layer(*fresh, inputs, false);  // builds
    std::vector<Variable> to = fresh->trainable_weights();
    for (size_t i = 0; i < to.size(); ++i) to[i].assign(from[i].raw_value());
    return fresh;
  };
  auto loss_of = [&](Layer& l) {
    return reduce_mean(square(sub(call_layer(l, inputs, c.training), target)));
  };
  std::shared_ptr<Layer> stepped = with_weights(vars);
  const std::vector<Variable> stepped_vars = stepped->trainable_weights();
  optimizers::SGD sgd({.learning_rate = 0.05});
  double before = 0;
  {
    GradientTape tape;
    Tensor loss = loss_of(*stepped);
    before = loss.item();
    std::vector<Tensor> grads = tape.gradient(loss, stepped_vars);
    for (const Tensor& g : grads) ASSERT_TRUE(g.defined()) << "a trainable weight got no gradient";
    sgd.apply_gradients(grads, stepped_vars);
  }
  const double after = loss_of(*with_weights(stepped_vars)).item();
  EXPECT_LT(after, before);
  EXPECT_EQ(sgd.iterations(), 1);
}

INSTANTIATE_TEST_SUITE_P(AllLayers, LayerConformance, ::testing::ValuesIn(all_layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace lockstep::keras::conformance
