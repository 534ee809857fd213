#pragma once
// TerminateOnNaN (keras.callbacks.TerminateOnNaN): stops fit after a batch whose loss is NaN or
// infinite, printing "Batch <b>: Invalid loss, terminating training".
#include <iosfwd>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

class TerminateOnNaN final : public Callback {
 public:
  explicit TerminateOnNaN(std::ostream* out = nullptr) : out_(out) {}
  void on_train_batch_end(int64_t batch, const Logs& logs) override;

 private:
  std::ostream* out_;  // default std::cout
};

}  // namespace lockstep::keras::callbacks
