#include "lockstep/keras/optimizers/schedules/learning_rate_schedule.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "lockstep/core/error.h"

namespace lockstep::keras::optimizers::schedules {

ExponentialDecay::ExponentialDecay(ExponentialDecayOptions options) : o_(options) {
  if (o_.decay_steps <= 0) {
    throw InvalidArgument("ExponentialDecay: expected decay_steps > 0. Received: decay_steps=" +
                          std::to_string(o_.decay_steps));
  }
  if (!(o_.decay_rate > 0.0)) {
    throw InvalidArgument("ExponentialDecay: expected decay_rate > 0. Received: decay_rate=" +
                          std::to_string(o_.decay_rate));
  }
}

double ExponentialDecay::operator()(int64_t step) const {
  double p = static_cast<double>(step) / static_cast<double>(o_.decay_steps);
  if (o_.staircase) p = std::floor(p);
  return o_.initial_learning_rate * std::pow(o_.decay_rate, p);
}

nlohmann::json ExponentialDecay::get_config() const {
  return {{"initial_learning_rate", o_.initial_learning_rate},
          {"decay_steps", o_.decay_steps},
          {"decay_rate", o_.decay_rate},
          {"staircase", o_.staircase},
          {"name", "ExponentialDecay"}};
}

CosineDecay::CosineDecay(CosineDecayOptions options) : o_(options) {
  if (o_.decay_steps <= 0) {
    throw InvalidArgument("CosineDecay: expected decay_steps > 0. Received: decay_steps=" +
                          std::to_string(o_.decay_steps));
  }
  if (o_.warmup_steps < 0 || (o_.warmup_target && o_.warmup_steps == 0)) {
    throw InvalidArgument(
        "CosineDecay: expected warmup_steps > 0 when warmup_target is set, and >= 0 otherwise. "
        "Received: warmup_steps=" +
        std::to_string(o_.warmup_steps));
  }
}

double CosineDecay::operator()(int64_t step) const {
  auto decay = [&](double s, double from) {
    double fraction = s / static_cast<double>(o_.decay_steps);
    double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * fraction));
    return ((1.0 - o_.alpha) * cosine + o_.alpha) * from;
  };
  if (!o_.warmup_target) {
    return decay(static_cast<double>(std::min(step, o_.decay_steps)), o_.initial_learning_rate);
  }
  int64_t s = std::min(step, o_.decay_steps + o_.warmup_steps);
  if (s < o_.warmup_steps) {
    double fraction = static_cast<double>(s) / static_cast<double>(o_.warmup_steps);
    return (*o_.warmup_target - o_.initial_learning_rate) * fraction + o_.initial_learning_rate;
  }
  return decay(static_cast<double>(s - o_.warmup_steps), *o_.warmup_target);
}

nlohmann::json CosineDecay::get_config() const {
  nlohmann::json target = nullptr;
  if (o_.warmup_target) target = *o_.warmup_target;
  return {{"initial_learning_rate", o_.initial_learning_rate},
          {"decay_steps", o_.decay_steps},
          {"alpha", o_.alpha},
          {"name", "CosineDecay"},
          {"warmup_target", target},
          {"warmup_steps", o_.warmup_steps}};
}

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<int64_t> boundaries,
                                               std::vector<double> values)
    : boundaries_(std::move(boundaries)), values_(std::move(values)) {
  if (values_.size() != boundaries_.size() + 1) {
    throw InvalidArgument(
        "PiecewiseConstantDecay: expected len(values) == len(boundaries) + 1. Received: "
        "len(boundaries)=" +
        std::to_string(boundaries_.size()) + ", len(values)=" + std::to_string(values_.size()));
  }
  if (!std::is_sorted(boundaries_.begin(), boundaries_.end()) ||
      std::adjacent_find(boundaries_.begin(), boundaries_.end()) != boundaries_.end()) {
    throw InvalidArgument("PiecewiseConstantDecay: expected strictly increasing boundaries.");
  }
}

double PiecewiseConstantDecay::operator()(int64_t step) const {
  // The first boundary >= step selects its value: the intervals are closed on the right.
  auto it = std::lower_bound(boundaries_.begin(), boundaries_.end(), step);
  return values_[static_cast<size_t>(it - boundaries_.begin())];
}

nlohmann::json PiecewiseConstantDecay::get_config() const {
  return {{"boundaries", boundaries_}, {"values", values_}, {"name", "PiecewiseConstant"}};
}

nlohmann::json serialize(const LearningRateSchedule& schedule) {
  return {{"class_name", schedule.class_name()}, {"config", schedule.get_config()}};
}

std::shared_ptr<LearningRateSchedule> deserialize(const nlohmann::json& j) {
  std::string cls = j.value("class_name", "");
  const nlohmann::json& c = j.at("config");
  if (cls == "ExponentialDecay") {
    return std::make_shared<ExponentialDecay>(
        ExponentialDecayOptions{.initial_learning_rate = c.at("initial_learning_rate"),
                                .decay_steps = c.at("decay_steps"),
                                .decay_rate = c.at("decay_rate"),
                                .staircase = c.value("staircase", false)});
  }
  if (cls == "CosineDecay") {
    CosineDecayOptions o{.initial_learning_rate = c.at("initial_learning_rate"),
                         .decay_steps = c.at("decay_steps"),
                         .alpha = c.value("alpha", 0.0),
                         .warmup_target = std::nullopt,
                         .warmup_steps = c.value("warmup_steps", int64_t{0})};
    if (c.contains("warmup_target") && !c["warmup_target"].is_null()) {
      o.warmup_target = c["warmup_target"].get<double>();
    }
    return std::make_shared<CosineDecay>(o);
  }
  if (cls == "PiecewiseConstantDecay") {
    return std::make_shared<PiecewiseConstantDecay>(c.at("boundaries").get<std::vector<int64_t>>(),
                                                    c.at("values").get<std::vector<double>>());
  }
  throw InvalidArgument(
      "schedules::deserialize: expected class_name ExponentialDecay, CosineDecay or "
      "PiecewiseConstantDecay. Received: class_name=" +
      cls);
}

}  // namespace lockstep::keras::optimizers::schedules
