#include "lockstep/keras/callbacks/progbar_logger.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

namespace lockstep::keras::callbacks {

namespace {

constexpr int kWidth = 30;
constexpr double kInterval = 0.05;  // seconds between redraws, as Keras' Progbar

std::string printf_string(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string format_value(double v) {
  return printf_string(std::abs(v) > 1e-3 ? "%.4f" : "%.4e", v);
}

std::string format_time(double seconds_per_unit, const char* unit) {
  if (seconds_per_unit >= 1 || seconds_per_unit == 0) {
    return printf_string("%.0fs/", seconds_per_unit) + unit;
  }
  if (seconds_per_unit >= 1e-3) return printf_string("%.0fms/", seconds_per_unit * 1e3) + unit;
  return printf_string("%.0fus/", seconds_per_unit * 1e6) + unit;
}

std::string format_eta(double eta) {
  char buf[64];
  const long e = static_cast<long>(eta);
  if (eta > 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", e / 3600, (e % 3600) / 60, e % 60);
  } else if (eta > 60) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", e / 60, e % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", e);
  }
  return buf;
}

std::vector<std::string> ordered_keys(const Logs& logs) {
  std::vector<std::string> keys;
  auto add_group = [&](bool val) {
    const std::string loss = val ? "val_loss" : "loss";
    if (logs.count(loss)) keys.push_back(loss);
    for (const auto& [k, v] : logs) {
      const bool is_val = k.rfind("val_", 0) == 0;
      if (is_val == val && k != loss) keys.push_back(k);
    }
  };
  add_group(false);
  add_group(true);
  return keys;
}

std::string count_prefix(int64_t current, int64_t target) {
  const int digits = static_cast<int>(std::to_string(target).size());
  std::string c = std::to_string(current);
  if (static_cast<int>(c.size()) < digits) c.insert(0, static_cast<size_t>(digits) - c.size(), ' ');
  return c + "/" + std::to_string(target);
}

}  // namespace

ProgbarLogger::ProgbarLogger(int verbose)
    : ProgbarLogger(ProgbarLoggerOptions{.verbose = verbose}) {}

ProgbarLogger::ProgbarLogger(ProgbarLoggerOptions options) : o_(std::move(options)) {
  out_ = o_.out ? o_.out : &std::cout;
  if (!o_.clock) {
    o_.clock = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  interactive_ = o_.interactive.value_or(out_ == &std::cout && ::isatty(STDOUT_FILENO) == 1);
}

void ProgbarLogger::set_params(const Params& params) {
  Callback::set_params(params);
  auto get = [&](const char* k) {
    auto it = params.find(k);
    return it == params.end() ? int64_t{0} : it->second;
  };
  epochs_ = get("epochs");
  steps_ = get("steps");
}

void ProgbarLogger::on_epoch_begin(int epoch, const Logs&) {
  seen_ = 0;
  start_ = o_.clock();
  after_first_ = -1.0;
  last_draw_ = -1e300;
  drawn_width_ = 0;
  if (o_.verbose > 0 && epochs_ > 1) {
    *out_ << "Epoch " << epoch + 1 << "/" << epochs_ << "\n" << std::flush;
  }
}

void ProgbarLogger::on_train_batch_end(int64_t batch, const Logs& logs) {
  seen_ = batch + 1;
  const double now = o_.clock();
  if (seen_ == 1) after_first_ = now;
  if (o_.verbose != 1 || !interactive_) return;
  if (steps_ > 0 && seen_ >= steps_) return;  // the epoch end draws the final line
  if (now - last_draw_ < kInterval) return;
  last_draw_ = now;
  draw(line(seen_, logs, false));
}

void ProgbarLogger::on_epoch_end(int, const Logs& logs) {
  if (o_.verbose <= 0) return;
  const std::string text = line(seen_, logs, true);
  if (interactive_ && o_.verbose == 1) {
    draw(text);
    *out_ << "\n" << std::flush;
  } else {
    *out_ << text << "\n" << std::flush;
  }
}

void ProgbarLogger::draw(const std::string& text) {
  *out_ << "\r" << text;
  if (text.size() < drawn_width_) *out_ << std::string(drawn_width_ - text.size(), ' ');
  drawn_width_ = text.size();
  *out_ << std::flush;
}

std::string ProgbarLogger::line(int64_t current, const Logs& logs, bool final) const {
  const double now = o_.clock();
  double per_step = 0.0;
  if (current > 0) {
    per_step = after_first_ >= 0.0 && current > 1
                   ? (now - after_first_) / static_cast<double>(current - 1)
                   : (now - start_) / static_cast<double>(current);
  }
  std::string metrics;
  for (const std::string& k : ordered_keys(logs)) {
    metrics += " - " + k + ": " + format_value(logs.at(k));
  }
  const std::string elapsed = printf_string("%.0fs", now - start_);
  if (o_.verbose == 2) {
    const std::string count =
        steps_ > 0 ? count_prefix(current, steps_) : std::to_string(current) + "/Unknown";
    return count + " - " + elapsed + metrics + " - " + format_time(now - start_, "epoch") + " - " +
           format_time(per_step, "step");
  }
  std::string s;
  if (steps_ > 0) {
    s = count_prefix(current, steps_) + " [";
    const int filled = static_cast<int>(std::min<int64_t>(
        kWidth,
        static_cast<int64_t>(kWidth * static_cast<double>(current) / static_cast<double>(steps_))));
    if (filled > 0) {
      s += std::string(static_cast<size_t>(filled - 1), '=');
      s += current < steps_ ? '>' : '=';
    }
    s += std::string(static_cast<size_t>(kWidth - filled), '.');
    s += "]";
  } else {
    std::string c = std::to_string(current);
    if (c.size() < 7) c.insert(0, 7 - c.size(), ' ');
    s = c + "/Unknown";
  }
  if (final || steps_ <= 0) {
    s += " - " + elapsed + " " + format_time(per_step, "step");
  } else {
    s += " - ETA: " + format_eta(per_step * static_cast<double>(steps_ - current));
  }
  return s + metrics;
}

}  // namespace lockstep::keras::callbacks
