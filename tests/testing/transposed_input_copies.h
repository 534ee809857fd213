#pragma once
// Turns mixed_precision's transposed input copies on or off for one test and restores the previous
// setting: the default depends on the CPU, and a test of either path runs on every machine.
#include "lockstep/keras/mixed_precision.h"

namespace lockstep::testing {

class TransposedInputCopiesGuard {
 public:
  explicit TransposedInputCopiesGuard(bool on)
      : previous_(keras::mixed_precision::transposed_input_copies()) {
    keras::mixed_precision::set_transposed_input_copies(on);
  }
  ~TransposedInputCopiesGuard() { keras::mixed_precision::set_transposed_input_copies(previous_); }
  TransposedInputCopiesGuard(const TransposedInputCopiesGuard&) = delete;
  TransposedInputCopiesGuard& operator=(const TransposedInputCopiesGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace lockstep::testing
