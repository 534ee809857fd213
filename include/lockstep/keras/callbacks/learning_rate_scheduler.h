#pragma once
// LearningRateScheduler (keras.callbacks.LearningRateScheduler): at each epoch start,
//   optimizer.learning_rate = schedule(epoch, optimizer.learning_rate)
// The optimizer must have a constant learning rate (not a LearningRateSchedule).
// Unlike Keras, the rate is not added to the epoch logs (Logs are read-only for callbacks).
#include <functional>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

class LearningRateScheduler final : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int epoch, double lr)> schedule,
                                 int verbose = 0);
  void on_epoch_begin(int epoch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }

 private:
  std::function<double(int, double)> schedule_;
  int verbose_;
};

}  // namespace lockstep::keras::callbacks
