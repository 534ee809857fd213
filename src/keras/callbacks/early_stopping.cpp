#include "lockstep/keras/callbacks/early_stopping.h"
#include "lockstep/core/check.h"

#include <cmath>
#include <iostream>
#include <limits>

#include "lockstep/core/error.h"
#include "monitor.h"

namespace lockstep::keras::callbacks {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

bool monitor_maximizes(const std::string& mode, const std::string& monitor, const char* who) {
  if (mode == "max") return true;
  if (mode == "min") return false;
  LOCKSTEP_CHECK(mode == "auto", who, ": expected mode 'auto', 'min' or 'max'. Received: mode='",
                 mode, "'");
  return ends_with(monitor, "acc") || ends_with(monitor, "accuracy") || ends_with(monitor, "auc");
}

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : o_(std::move(options)) {
  maximize_ = monitor_maximizes(o_.mode, o_.monitor, "EarlyStopping");
  LOCKSTEP_CHECK(o_.patience >= 0,
                 "EarlyStopping: expected patience >= 0. Received: patience=", o_.patience);
  o_.min_delta = std::abs(o_.min_delta);
}

bool EarlyStopping::is_improvement(double value, double reference) const {
  return maximize_ ? value - o_.min_delta > reference : value + o_.min_delta < reference;
}

void EarlyStopping::snapshot() {
  best_weights_.clear();
  for (const Variable& v : target_weights()) best_weights_.push_back(v.raw_value().clone());
}

void EarlyStopping::on_train_begin(const Logs&) {
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  auto it = logs.find(o_.monitor);
  if (it == logs.end() || epoch < o_.start_from_epoch) {
    if (it == logs.end() && o_.verbose > 0) {
      std::cerr << "EarlyStopping: the monitored metric '" << o_.monitor
                << "' is not in the logs.\n";
    }
    return;
  }
  const double current = it->second;
  // Restores the first epoch's weights if no epoch ever improves.
  if (o_.restore_best_weights && best_weights_.empty()) snapshot();
  ++wait_;
  if (is_improvement(current, best_)) {
    best_ = current;
    best_epoch_ = epoch;
    if (o_.restore_best_weights) snapshot();
    if (!o_.baseline || is_improvement(current, *o_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= o_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    request_stop();
    if (o_.restore_best_weights && !best_weights_.empty()) {
      if (o_.verbose > 0) {
        std::cout << "Restoring model weights from the end of the best epoch: " << best_epoch_ + 1
                  << ".\n";
      }
      std::vector<Variable> ws = target_weights();
      for (size_t i = 0; i < ws.size() && i < best_weights_.size(); ++i) {
        ws[i].assign(best_weights_[i]);
      }
    }
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  if (stopped_epoch_ > 0 && o_.verbose > 0) {
    std::cout << "Epoch " << stopped_epoch_ + 1 << ": early stopping\n";
  }
}

}  // namespace lockstep::keras::callbacks
