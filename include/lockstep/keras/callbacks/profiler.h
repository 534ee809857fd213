#pragma once
// Profiler: records a range of fit's training steps with the step profiler and writes the profile
// when the range ends (in the spirit of keras.callbacks.TensorBoard(profile_batch=(first, last))):
//
//   model.fit(ds, {.epochs = 5, .callbacks = {std::make_shared<callbacks::Profiler>(
//                                                 callbacks::ProfilerOptions{.log_dir = "prof",
//                                                                            .first_step = 10,
//                                                                            .last_step = 40})}});
//
// writes prof/trace.json, summary.txt, steps.svg and report.html (lockstep/distribute/profiler.h)
// and prints the summary on the chief. Steps are counted from 1 over the whole fit call, across
// epochs. With steps_per_execution k the range is rounded out to whole dispatches of k steps.
// Every worker of a multi-worker job must use it with the same range: the chief gathers the
// workers' spans when the range ends.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "lockstep/distribute/profiler.h"
#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

struct ProfilerOptions {
  std::string log_dir;  // required
  // The first and last step recorded, from 1. The default skips step 1, which builds the model
  // and oneDNN's primitives, and runs to the end of training.
  int64_t first_step = 2;
  int64_t last_step = std::numeric_limits<int64_t>::max();
  bool print_summary = true;  // on the chief, when the profile is written
  size_t spans_per_thread = size_t{1} << 18;
};

class Profiler : public Callback {
 public:
  // Throws InvalidArgument for an empty log_dir or a range with first_step < 1 or
  // last_step < first_step.
  explicit Profiler(ProfilerOptions options);
  ~Profiler() override;

  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_train_batch_begin(int64_t batch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }
  void on_train_end(const Logs& logs) override;

  // The summary of the profile written (on the chief), once the range has ended.
  const std::optional<distribute::ProfileSummary>& summary() const { return summary_; }

 private:
  void finish();

  ProfilerOptions options_;
  bool recording_ = false, done_ = false;
  int64_t epoch_base_ = 0;   // steps finished before this epoch
  int64_t steps_done_ = 0;   // steps finished in this fit
  int64_t dispatch_ = 1;     // steps per dispatch, as seen so far
  int64_t batch_begin_ = 0;  // `batch` of the dispatch that began last
  std::optional<distribute::ProfileSummary> summary_;
};

}  // namespace lockstep::keras::callbacks
