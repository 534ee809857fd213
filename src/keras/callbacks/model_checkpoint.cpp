#include "lockstep/keras/callbacks/model_checkpoint.h"
#include "lockstep/core/check.h"

#include <cstdio>
#include <iostream>
#include <limits>

#include "lockstep/core/error.h"
#include "lockstep/keras/callbacks/csv_logger.h"
#include "lockstep/keras/model.h"
#include "monitor.h"

namespace lockstep::keras::callbacks {

ModelCheckpoint::ModelCheckpoint(std::string filepath, ModelCheckpointOptions options)
    : filepath_(std::move(filepath)), o_(std::move(options)) {
  maximize_ = monitor_maximizes(o_.mode, o_.monitor, "ModelCheckpoint");
  const std::string suffix = ".keras";
  LOCKSTEP_CHECK(o_.save_weights_only || (filepath_.size() >= suffix.size() &&
                                          filepath_.compare(filepath_.size() - suffix.size(),
                                                            suffix.size(), suffix) == 0),
                 "ModelCheckpoint: the filepath must end in '.keras' (whole-model saving) unless "
                 "save_weights_only=true. Received: filepath='",
                 filepath_, "'.");
  best_ = o_.initial_value_threshold.value_or(maximize_ ? -std::numeric_limits<double>::infinity()
                                                        : std::numeric_limits<double>::infinity());
}

std::string ModelCheckpoint::format_path(int epoch, const Logs& logs) const {
  std::string out;
  const std::string& f = filepath_;
  for (size_t i = 0; i < f.size(); ++i) {
    if ((f[i] == '{' || f[i] == '}') && i + 1 < f.size() && f[i + 1] == f[i]) {
      out += f[i++];
      continue;
    }
    if (f[i] != '{') {
      out += f[i];
      continue;
    }
    const size_t close = f.find('}', i);
    LOCKSTEP_CHECK(close != std::string::npos, "ModelCheckpoint: unbalanced '{' in filepath '", f,
                   "'.");
    const std::string field = f.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    double value;
    if (name == "epoch") {
      value = epoch + 1;
    } else if (auto it = logs.find(name); it != logs.end()) {
      value = it->second;
    } else {
      throw InvalidArgument("ModelCheckpoint: filepath field '{" + field +
                            "}' names no value; expected 'epoch' or a key of the logs.");
    }
    char buf[128];
    if (spec.empty()) {
      out += name == "epoch" ? std::to_string(epoch + 1) : python_float_repr(value);
    } else if (spec.back() == 'd') {
      std::snprintf(buf, sizeof buf, ("%" + spec.substr(0, spec.size() - 1) + "lld").c_str(),
                    static_cast<long long>(value));
      out += buf;
    } else if (spec.back() == 'f' || spec.back() == 'e' || spec.back() == 'g') {
      std::snprintf(buf, sizeof buf, ("%" + spec).c_str(), value);
      out += buf;
    } else {
      throw InvalidArgument("ModelCheckpoint: unsupported format spec '" + spec +
                            "' in filepath; use d, f, e or g.");
    }
    i = close;
  }
  return out;
}

void ModelCheckpoint::save(const std::string& path) const {
  if (o_.save_weights_only) {
    target_save_weights(path);
  } else {
    model().save(path);
  }
}

void ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  const std::string path = format_path(epoch, logs);
  if (!o_.save_best_only) {
    if (o_.verbose > 0)
      std::cout << "\nEpoch " << epoch + 1 << ": saving model to " << path << "\n";
    save(path);
    return;
  }
  auto it = logs.find(o_.monitor);
  if (it == logs.end()) {
    std::cerr << "ModelCheckpoint: can save best model only with " << o_.monitor
              << " available, skipping.\n";
    return;
  }
  const double current = it->second;
  if (maximize_ ? current > best_ : current < best_) {
    if (o_.verbose > 0) {
      std::cout << "\nEpoch " << epoch + 1 << ": " << o_.monitor << " improved from " << best_
                << " to " << current << ", saving model to " << path << "\n";
    }
    best_ = current;
    save(path);
  } else if (o_.verbose > 0) {
    std::cout << "\nEpoch " << epoch + 1 << ": " << o_.monitor << " did not improve from " << best_
              << "\n";
  }
}

}  // namespace lockstep::keras::callbacks
