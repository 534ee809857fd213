// get_config / from_config through the registry, Model::to_json and models::model_from_json:
// Keras 3's field names, every built-in layer, nested models, dtype policies, user classes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/core/error.h"
#include "lockstep/keras.h"
#include "saving_test_util.h"

namespace lockstep::keras {
namespace {

using nlohmann::json;
using saving_test::LayerZoo;
using saving_test::same_bits;

// to_json -> model_from_json -> set_weights(get_weights): the same predictions, bit for bit.
void expect_json_round_trip(const LayerZoo& zoo) {
  const std::string text = zoo.model->to_json();
  std::shared_ptr<Model> copy = models::model_from_json(text);
  EXPECT_EQ(copy->class_name(), zoo.model->class_name());
  EXPECT_EQ(copy->name(), zoo.model->name());
  copy->set_weights(zoo.model->get_weights());
  EXPECT_TRUE(same_bits(copy->predict(zoo.input), zoo.model->predict(zoo.input)));
  // The copy serializes to the same config.
  EXPECT_EQ(json::parse(copy->to_json()), json::parse(text));
}

TEST(ModelConfig, ImageLayersRoundTrip) {
  clear_session();
  expect_json_round_trip(saving_test::image_zoo());
}

TEST(ModelConfig, SequenceLayersRoundTrip) {
  clear_session();
  expect_json_round_trip(saving_test::sequence_zoo());
}

TEST(ModelConfig, NestedModelsRoundTrip) {
  clear_session();
  expect_json_round_trip(saving_test::nested_zoo());
}

TEST(ModelConfig, CliModelsRoundTrip) {
  for (const char* name : {"mlp", "conv", "vit"}) {
    clear_session();
    auto m = std::make_shared<Sequential>(saving_test::cli_model(name));
    expect_json_round_trip({m, saving_test::cli_input(4, 5)});
  }
}

TEST(ModelConfig, WritesKeras3FieldNames) {
  clear_session();
  LayerZoo zoo = saving_test::image_zoo();
  zoo.model->compile(
      {.optimizer = "adam", .loss = "categorical_crossentropy", .metrics = {"accuracy"}});
  json j = json::parse(zoo.model->to_json());
  EXPECT_EQ(j["module"], "keras.src.models.functional");
  EXPECT_EQ(j["class_name"], "Functional");
  EXPECT_EQ(j["registered_name"], "Functional");
  EXPECT_EQ(j["build_config"]["input_shape"], json::parse("[null, 8, 8, 1]"));
  const json& c = j["config"];
  EXPECT_EQ(c["input_layers"], json::parse(R"(["image", 0, 0])"));
  const json& layers = c["layers"];
  EXPECT_EQ(layers[0]["class_name"], "InputLayer");
  EXPECT_EQ(layers[0]["config"]["batch_shape"], json::parse("[null, 8, 8, 1]"));
  EXPECT_EQ(layers[0]["config"]["dtype"], "uint8");
  const json& conv = layers[2];
  EXPECT_EQ(conv["module"], "keras.layers");
  EXPECT_EQ(conv["class_name"], "Conv2D");
  EXPECT_TRUE(conv["registered_name"].is_null());
  EXPECT_EQ(conv["config"]["dtype"]["class_name"], "DTypePolicy");
  EXPECT_EQ(conv["config"]["dtype"]["config"]["name"], "float32");
  EXPECT_EQ(conv["build_config"]["input_shape"], json::parse("[null, 8, 8, 1]"));
  const json& node = conv["inbound_nodes"][0]["args"][0];
  EXPECT_EQ(node["class_name"], "__keras_tensor__");
  EXPECT_EQ(node["config"]["keras_history"], json::parse(R"(["rescaling", 0, 0])"));
  // The mixed_bfloat16 Dense keeps its policy.
  bool found_mixed = false;
  for (const json& l : layers) {
    if (l["config"].contains("dtype") && l["config"]["dtype"].is_object() &&
        l["config"]["dtype"]["config"]["name"] == "mixed_bfloat16") {
      found_mixed = true;
    }
  }
  EXPECT_TRUE(found_mixed);
  const json& cc = j["compile_config"];
  EXPECT_EQ(cc["optimizer"]["class_name"], "Adam");
  EXPECT_EQ(cc["optimizer"]["module"], "keras.optimizers");
  EXPECT_EQ(cc["loss"]["class_name"], "CategoricalCrossentropy");
  EXPECT_EQ(cc["metrics"].size(), 1u);
  EXPECT_EQ(cc["steps_per_execution"], 1);
}

TEST(ModelConfig, DtypePolicySurvivesTheRoundTrip) {
  clear_session();
  LayerZoo zoo = saving_test::image_zoo();
  auto copy = models::model_from_json(zoo.model->to_json());
  int mixed = 0;
  for (const auto& l : copy->layers()) mixed += l->dtype_policy().name() == "mixed_bfloat16";
  EXPECT_EQ(mixed, 1);
}

TEST(ModelConfig, CompileConfigCompilesTheCopy) {
  clear_session();
  Sequential m({Input({3}), layers::Dense({.units = 2, .activation = "softmax"})});
  m.compile({.optimizer = optimizers::SGD({.learning_rate = 0.05, .momentum = 0.5}),
             .loss = "categorical_crossentropy",
             .metrics = {"accuracy"}});
  auto copy = models::model_from_json(m.to_json());
  ASSERT_TRUE(copy->compiled());
  json opt = copy->optimizer().get_config();
  EXPECT_DOUBLE_EQ(opt["learning_rate"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(opt["momentum"].get<double>(), 0.5);
  EXPECT_EQ(copy->loss().name(), "categorical_crossentropy");
}

TEST(ModelConfig, OptimizersAndSchedulesRoundTrip) {
  auto schedule = std::make_shared<optimizers::schedules::CosineDecay>(
      optimizers::schedules::CosineDecayOptions{.initial_learning_rate = 0.1, .decay_steps = 100});
  std::vector<std::shared_ptr<optimizers::Optimizer>> opts = {
      std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.momentum = 0.9, .nesterov = true}),
      std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = schedule}),
      std::make_shared<optimizers::AdamW>(optimizers::AdamWOptions{.weight_decay = 0.01}),
      std::make_shared<optimizers::RMSprop>(optimizers::RMSpropOptions{.centered = true}),
      std::make_shared<optimizers::Adagrad>(),
  };
  for (const auto& o : opts) {
    json s = saving::serialize_keras_object(*o);
    auto back = saving::deserialize_optimizer(s);
    EXPECT_EQ(saving::serialize_keras_object(*back), s) << s.dump();
  }
}

TEST(ModelConfig, UnknownClassNamesIt) {
  json config = json::parse(R"({"module": "keras.layers", "class_name": "Sequential",
    "registered_name": null, "config": {"name": "s", "layers": [
      {"module": "keras.layers", "class_name": "InputLayer", "registered_name": null,
       "config": {"batch_shape": [null, 3], "dtype": "float32", "name": "in"}},
      {"module": "my_module", "class_name": "FancyLayer", "registered_name": "my_package>FancyLayer",
       "config": {"name": "fancy"}}]}})");
  try {
    models::model_from_json(config.dump());
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("FancyLayer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fancy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("register_keras_serializable"), std::string::npos) << msg;
  }
}

TEST(ModelConfig, NotJsonIsAnError) {
  EXPECT_THROW(models::model_from_json("{\"class_name\": "), InvalidArgument);
  EXPECT_THROW(models::model_from_json("[1, 2]"), InvalidArgument);
}

// A user's layer: y = x * factor.
class Scale : public LayerImpl<Scale> {
 public:
  Scale(double factor, const std::string& name) : LayerImpl(name, "scale"), factor_(factor) {}
  std::string class_name() const override { return "Scale"; }
  Tensor call(const Tensor& x, bool) override { return mul(x, Tensor::scalar(factor_, x.dtype())); }
  nlohmann::json get_config() const override {
    auto c = Layer::get_config();
    c["factor"] = factor_;
    return c;
  }

 private:
  double factor_;
};

TEST(ModelConfig, UserLayersRegisterLikeRegisterKerasSerializable) {
  clear_session();
  saving::register_keras_serializable<Layer>("my_package", "Scale", [](const json& c) {
    return std::make_shared<Scale>(c.at("factor").get<double>(), c.value("name", std::string()));
  });
  Sequential m({Input({2}), Scale(2.5, "scale"), layers::Dense({.units = 1})});
  json j = json::parse(m.to_json());
  const json& entry = j["config"]["layers"][1];
  EXPECT_EQ(entry["class_name"], "Scale");
  EXPECT_EQ(entry["registered_name"], "my_package>Scale");
  auto copy = models::model_from_json(m.to_json());
  copy->set_weights(m.get_weights());
  Tensor x = Tensor::from_vector<float>({1.0f, -2.0f}, {1, 2});
  EXPECT_TRUE(same_bits(copy->predict(x), m.predict(x)));
}

}  // namespace
}  // namespace lockstep::keras
