#include "lockstep/keras/callbacks/profiler.h"
#include "lockstep/core/check.h"

#include <iostream>

#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/profiler.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/model.h"

namespace lockstep::keras::callbacks {

Profiler::Profiler(ProfilerOptions options) : options_(std::move(options)) {
  LOCKSTEP_CHECK(!options_.log_dir.empty(),
                 "Profiler: expected a log_dir for the profile. Received: \"\".");
  LOCKSTEP_CHECK(options_.first_step >= 1 && options_.last_step >= options_.first_step,
                 "Profiler: expected 1 <= first_step <= last_step. Received: first_step=",
                 options_.first_step, ", last_step=", options_.last_step, ".");
  LOCKSTEP_CHECK(options_.spans_per_thread != 0,
                 "Profiler: expected spans_per_thread >= 1. Received: 0.");
}

Profiler::~Profiler() {
  // A fit that threw leaves the recorder on; the next session must be able to start.
  if (recording_) profiler::stop();
}

void Profiler::on_train_begin(const Logs&) {
  if (recording_) profiler::stop();
  recording_ = done_ = false;
  epoch_base_ = steps_done_ = 0;
  dispatch_ = 1;
  summary_.reset();
}

void Profiler::on_epoch_begin(int, const Logs&) {
  epoch_base_ = steps_done_;
}

void Profiler::on_train_batch_begin(int64_t batch, const Logs&) {
  batch_begin_ = batch;
  if (recording_ || done_) return;
  // This dispatch runs steps [next, next + dispatch_ - 1] (the last one of an epoch may be
  // shorter).
  const int64_t next = epoch_base_ + batch + 1;
  if (next + dispatch_ - 1 >= options_.first_step && next <= options_.last_step) {
    profiler::start({.spans_per_thread = options_.spans_per_thread});
    recording_ = true;
  }
}

void Profiler::on_train_batch_end(int64_t batch, const Logs&) {
  dispatch_ = std::max(dispatch_, batch - batch_begin_ + 1);
  steps_done_ = epoch_base_ + batch + 1;
  if (recording_ && steps_done_ >= options_.last_step) finish();
}

void Profiler::on_train_end(const Logs&) {
  if (recording_) finish();
}

void Profiler::finish() {
  profiler::stop();
  recording_ = false;
  done_ = true;
  summary_ = distribute::write_profile(options_.log_dir, model().distribute_strategy());
  if (summary_ && options_.print_summary) {
    // On a line of its own: a progress bar may be mid-line.
    std::cout << "\n"
              << distribute::format_summary(*summary_) << "Profile written to " << options_.log_dir
              << " (trace.json, summary.txt, steps.svg, report.html)\n"
              << std::flush;
  }
}

}  // namespace lockstep::keras::callbacks
