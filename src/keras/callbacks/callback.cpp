#include "lockstep/keras/callbacks/callback.h"
#include "lockstep/core/check.h"

#include "lockstep/core/error.h"
#include "lockstep/keras/callbacks/history.h"
#include "lockstep/keras/model.h"

namespace lockstep::keras::callbacks {

TrainingTarget training_target(Model& model) {
  return TrainingTarget{
      .stop_training = [&model] { model.stop_training = true; },
      .optimizer = [&model]() -> optimizers::Optimizer& { return model.optimizer(); },
      .weights = [&model] { return model.weights(); },
      .save_weights = [&model](const std::string& path) { model.save_weights(path); },
  };
}

Callback::~Callback() = default;

void Callback::set_model(Model* model) {
  model_ = model;
  target_ = model == nullptr ? TrainingTarget{} : training_target(*model);
}

Model& Callback::model() const {
  LOCKSTEP_CHECK_AS(FailedPrecondition, model_ != nullptr,
                    "Callback: no model is set. fit() sets it; outside fit, call "
                    "set_model(&model).");
  return *model_;
}

namespace {
[[noreturn]] void unbound(const char* what) {
  throw FailedPrecondition(std::string("Callback: this callback needs the model's ") + what +
                           ", but it is bound to no model. Use it in fit(), or call set_model() "
                           "or set_target() first.");
}
}  // namespace

void Callback::request_stop() const {
  if (!target_.stop_training) unbound("stop_training");
  target_.stop_training();
}

optimizers::Optimizer& Callback::target_optimizer() const {
  if (!target_.optimizer) unbound("optimizer");
  return target_.optimizer();
}

std::vector<Variable> Callback::target_weights() const {
  if (!target_.weights) unbound("weights");
  return target_.weights();
}

void Callback::target_save_weights(const std::string& path) const {
  if (!target_.save_weights) unbound("save_weights");
  target_.save_weights(path);
}

CallbackList::CallbackList(std::vector<std::shared_ptr<Callback>> callbacks)
    : callbacks_(std::move(callbacks)) {
  for (const auto& c : callbacks_) {
    LOCKSTEP_CHECK(c, "CallbackList: expected callbacks. Received: a null pointer.");
  }
}

void CallbackList::append(std::shared_ptr<Callback> callback) {
  LOCKSTEP_CHECK(callback, "CallbackList: expected a callback. Received: nullptr.");
  callbacks_.push_back(std::move(callback));
}

void CallbackList::set_model(Model* model) {
  for (auto& c : callbacks_) c->set_model(model);
}
void CallbackList::set_target(const TrainingTarget& target) {
  for (auto& c : callbacks_) c->set_target(target);
}
void CallbackList::set_params(const Params& params) {
  for (auto& c : callbacks_) c->set_params(params);
}

#define LOCKSTEP_DISPATCH(hook, ...) \
  for (auto& c : callbacks_) c->hook(__VA_ARGS__);

void CallbackList::on_train_begin(const Logs& l) {
  LOCKSTEP_DISPATCH(on_train_begin, l)
}
void CallbackList::on_train_end(const Logs& l) {
  LOCKSTEP_DISPATCH(on_train_end, l)
}
void CallbackList::on_epoch_begin(int e, const Logs& l) {
  LOCKSTEP_DISPATCH(on_epoch_begin, e, l)
}
void CallbackList::on_epoch_end(int e, const Logs& l) {
  LOCKSTEP_DISPATCH(on_epoch_end, e, l)
}
void CallbackList::on_train_batch_begin(int64_t b, const Logs& l) {
  LOCKSTEP_DISPATCH(on_train_batch_begin, b, l)
}
bool CallbackList::uses_train_batch_logs() const {
  for (const auto& c : callbacks_)
    if (c->uses_train_batch_logs()) return true;
  return false;
}

void CallbackList::on_train_batch_end(int64_t b, const Logs& l) {
  LOCKSTEP_DISPATCH(on_train_batch_end, b, l)
}
void CallbackList::on_test_begin(const Logs& l) {
  LOCKSTEP_DISPATCH(on_test_begin, l)
}
void CallbackList::on_test_end(const Logs& l) {
  LOCKSTEP_DISPATCH(on_test_end, l)
}
void CallbackList::on_test_batch_begin(int64_t b, const Logs& l) {
  LOCKSTEP_DISPATCH(on_test_batch_begin, b, l)
}
void CallbackList::on_test_batch_end(int64_t b, const Logs& l) {
  LOCKSTEP_DISPATCH(on_test_batch_end, b, l)
}
void CallbackList::on_predict_begin(const Logs& l) {
  LOCKSTEP_DISPATCH(on_predict_begin, l)
}
void CallbackList::on_predict_end(const Logs& l) {
  LOCKSTEP_DISPATCH(on_predict_end, l)
}
void CallbackList::on_predict_batch_begin(int64_t b, const Logs& l) {
  LOCKSTEP_DISPATCH(on_predict_batch_begin, b, l)
}
void CallbackList::on_predict_batch_end(int64_t b, const Logs& l) {
  LOCKSTEP_DISPATCH(on_predict_batch_end, b, l)
}
#undef LOCKSTEP_DISPATCH

void History::on_train_begin(const Logs&) {
  epoch.clear();
}

void History::on_epoch_end(int e, const Logs& logs) {
  epoch.push_back(e);
  for (const auto& [key, value] : logs) history[key].push_back(value);
}

}  // namespace lockstep::keras::callbacks
