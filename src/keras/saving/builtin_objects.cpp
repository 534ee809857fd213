// Factories of the built-in losses, metrics, optimizers and learning-rate schedules from the
// configs their get_config writes (and Keras 3 writes: the field names are Keras').
#include <nlohmann/json.hpp>

#include "builtins.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/metrics.h"
#include "lockstep/keras/optimizers.h"
#include "lockstep/keras/saving/object_registration.h"

namespace lockstep::keras::saving::internal {

namespace {

using nlohmann::json;

std::optional<double> optional_double(const json& c, const char* key) {
  if (!c.contains(key) || c[key].is_null()) return std::nullopt;
  return c[key].get<double>();
}

optimizers::LearningRate learning_rate(const json& c, double fallback) {
  if (!c.contains("learning_rate") || c["learning_rate"].is_null()) return fallback;
  const json& lr = c["learning_rate"];
  if (lr.is_number()) return lr.get<double>();
  auto factory = get_registered_object<optimizers::schedules::LearningRateSchedule>(
      lr.value("class_name", std::string()));
  if (!factory) return std::shared_ptr(optimizers::schedules::deserialize(lr));
  return optimizers::LearningRate(std::shared_ptr((*factory)(lr.value("config", json::object()))));
}

optimizers::BaseOptions base_options(const json& c, bool with_weight_decay = true) {
  optimizers::BaseOptions b;
  if (with_weight_decay) b.weight_decay = optional_double(c, "weight_decay");
  b.clipnorm = optional_double(c, "clipnorm");
  b.clipvalue = optional_double(c, "clipvalue");
  b.global_clipnorm = optional_double(c, "global_clipnorm");
  if (c.contains("exclude_from_weight_decay") && c["exclude_from_weight_decay"].is_array()) {
    b.exclude_from_weight_decay = c["exclude_from_weight_decay"].get<std::vector<std::string>>();
  }
  if (c.contains("gradient_accumulation_steps") && !c["gradient_accumulation_steps"].is_null()) {
    b.gradient_accumulation_steps = c["gradient_accumulation_steps"].get<int>();
  }
  return b;
}

template <typename Options>
Options common(const json& c, Options o) {
  o.learning_rate = learning_rate(c, o.learning_rate.value());
  o.name = c.value("name", o.name);
  return o;
}

losses::CrossentropyOptions crossentropy(const json& c) {
  return {.from_logits = c.value("from_logits", false), .name = c.value("name", std::string())};
}

}  // namespace

void register_builtin_objects() {
  using optimizers::Optimizer;
  register_object<Optimizer>("SGD", [](const json& c) -> std::shared_ptr<Optimizer> {
    auto o = common(c, optimizers::SGDOptions{});
    o.momentum = c.value("momentum", o.momentum);
    o.nesterov = c.value("nesterov", o.nesterov);
    o.base = base_options(c);
    return std::make_shared<optimizers::SGD>(o);
  });
  register_object<Optimizer>("Adam", [](const json& c) -> std::shared_ptr<Optimizer> {
    auto o = common(c, optimizers::AdamOptions{});
    o.beta_1 = c.value("beta_1", o.beta_1);
    o.beta_2 = c.value("beta_2", o.beta_2);
    o.epsilon = c.value("epsilon", o.epsilon);
    o.amsgrad = c.value("amsgrad", o.amsgrad);
    o.base = base_options(c);
    return std::make_shared<optimizers::Adam>(o);
  });
  register_object<Optimizer>("AdamW", [](const json& c) -> std::shared_ptr<Optimizer> {
    auto o = common(c, optimizers::AdamWOptions{});
    o.weight_decay = optional_double(c, "weight_decay").value_or(o.weight_decay);
    o.beta_1 = c.value("beta_1", o.beta_1);
    o.beta_2 = c.value("beta_2", o.beta_2);
    o.epsilon = c.value("epsilon", o.epsilon);
    o.amsgrad = c.value("amsgrad", o.amsgrad);
    o.base = base_options(c, /*with_weight_decay=*/false);
    return std::make_shared<optimizers::AdamW>(o);
  });
  register_object<Optimizer>("RMSprop", [](const json& c) -> std::shared_ptr<Optimizer> {
    auto o = common(c, optimizers::RMSpropOptions{});
    o.rho = c.value("rho", o.rho);
    o.momentum = c.value("momentum", o.momentum);
    o.epsilon = c.value("epsilon", o.epsilon);
    o.centered = c.value("centered", o.centered);
    o.base = base_options(c);
    return std::make_shared<optimizers::RMSprop>(o);
  });
  register_object<Optimizer>("Adagrad", [](const json& c) -> std::shared_ptr<Optimizer> {
    auto o = common(c, optimizers::AdagradOptions{});
    o.initial_accumulator_value = c.value("initial_accumulator_value", o.initial_accumulator_value);
    o.epsilon = c.value("epsilon", o.epsilon);
    o.base = base_options(c);
    return std::make_shared<optimizers::Adagrad>(o);
  });

  using optimizers::schedules::LearningRateSchedule;
  for (const char* name : {"ExponentialDecay", "CosineDecay", "PiecewiseConstantDecay"}) {
    register_object<LearningRateSchedule>(name, [name](const json& c) {
      return optimizers::schedules::deserialize({{"class_name", name}, {"config", c}});
    });
  }

  using losses::Loss;
  register_object<Loss>("CategoricalCrossentropy", [](const json& c) -> std::shared_ptr<Loss> {
    return std::make_shared<losses::CategoricalCrossentropy>(crossentropy(c));
  });
  register_object<Loss>(
      "SparseCategoricalCrossentropy", [](const json& c) -> std::shared_ptr<Loss> {
        return std::make_shared<losses::SparseCategoricalCrossentropy>(crossentropy(c));
      });
  register_object<Loss>("BinaryCrossentropy", [](const json& c) -> std::shared_ptr<Loss> {
    return std::make_shared<losses::BinaryCrossentropy>(crossentropy(c));
  });
  register_object<Loss>("MeanSquaredError", [](const json&) -> std::shared_ptr<Loss> {
    return std::make_shared<losses::MeanSquaredError>();
  });
  register_object<Loss>("MeanAbsoluteError", [](const json&) -> std::shared_ptr<Loss> {
    return std::make_shared<losses::MeanAbsoluteError>();
  });
  // Keras writes a loss given by name as that string ("categorical_crossentropy").
  for (const char* name :
       {"categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy",
        "mean_squared_error", "mse", "mean_absolute_error", "mae"}) {
    register_object<Loss>(name, [name](const json&) { return losses::get(name); });
  }

  using metrics::Metric;
  auto name_of = [](const json& c, const char* fallback) {
    return c.value("name", std::string(fallback));
  };
  register_object<Metric>("Accuracy", [name_of](const json& c) -> std::shared_ptr<Metric> {
    return std::make_shared<metrics::Accuracy>(name_of(c, "accuracy"));
  });
  register_object<Metric>("BinaryAccuracy", [name_of](const json& c) -> std::shared_ptr<Metric> {
    return std::make_shared<metrics::BinaryAccuracy>(metrics::BinaryAccuracyOptions{
        .threshold = c.value("threshold", 0.5), .name = name_of(c, "binary_accuracy")});
  });
  register_object<Metric>(
      "CategoricalAccuracy", [name_of](const json& c) -> std::shared_ptr<Metric> {
        return std::make_shared<metrics::CategoricalAccuracy>(name_of(c, "categorical_accuracy"));
      });
  register_object<Metric>("SparseCategoricalAccuracy",
                          [name_of](const json& c) -> std::shared_ptr<Metric> {
                            return std::make_shared<metrics::SparseCategoricalAccuracy>(
                                name_of(c, "sparse_categorical_accuracy"));
                          });
  register_object<Metric>(
      "TopKCategoricalAccuracy", [name_of](const json& c) -> std::shared_ptr<Metric> {
        return std::make_shared<metrics::TopKCategoricalAccuracy>(
            metrics::TopKCategoricalAccuracyOptions{
                .k = c.value("k", 5), .name = name_of(c, "top_k_categorical_accuracy")});
      });
  register_object<Metric>(
      "SparseTopKCategoricalAccuracy", [name_of](const json& c) -> std::shared_ptr<Metric> {
        return std::make_shared<metrics::SparseTopKCategoricalAccuracy>(
            metrics::SparseTopKCategoricalAccuracyOptions{
                .k = c.value("k", 5), .name = name_of(c, "sparse_top_k_categorical_accuracy")});
      });
  register_object<Metric>("Mean", [name_of](const json& c) -> std::shared_ptr<Metric> {
    return std::make_shared<metrics::Mean>(name_of(c, "mean"));
  });
  // Keras writes a metric given by name as that string ("accuracy").
  for (const char* name :
       {"accuracy", "acc", "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy",
        "top_k_categorical_accuracy", "sparse_top_k_categorical_accuracy", "mean"}) {
    register_object<Metric>(
        name, [name](const json&) { return std::shared_ptr<Metric>(metrics::get(name)); });
  }
  // Optimizers by identifier ("adam"), as compile accepts them.
  for (const char* name : {"sgd", "adam", "adamw", "rmsprop", "adagrad"}) {
    register_object<optimizers::Optimizer>(name, [name](const json&) {
      return std::shared_ptr<optimizers::Optimizer>(optimizers::get(name));
    });
  }
}

}  // namespace lockstep::keras::saving::internal
