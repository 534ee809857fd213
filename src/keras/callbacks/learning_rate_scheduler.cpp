#include "lockstep/keras/callbacks/learning_rate_scheduler.h"
#include "lockstep/core/check.h"

#include <cmath>
#include <iostream>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::callbacks {

LearningRateScheduler::LearningRateScheduler(std::function<double(int, double)> schedule,
                                             int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  LOCKSTEP_CHECK(schedule_, "LearningRateScheduler: expected a schedule function.");
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  optimizers::Optimizer& opt = target_optimizer();
  const double lr = schedule_(epoch, opt.learning_rate());
  LOCKSTEP_CHECK(
      std::isfinite(lr),
      "LearningRateScheduler: the schedule should return a finite float. Received: ", lr);
  opt.set_learning_rate(lr);
  if (verbose_ > 0) {
    std::cout << "\nEpoch " << epoch + 1 << ": LearningRateScheduler setting learning rate to "
              << lr << ".\n";
  }
}

}  // namespace lockstep::keras::callbacks
