#pragma once
// Turns mixed_precision's transposed input copies on or off for one test and restores the previous
// setting: the default depends on the CPU, and a test of either path runs on every machine.
#include "lockstep/keras/mixed_precision.h"
#include "testing/setting_guard.h"

namespace lockstep::testing {

class TransposedInputCopiesGuard : public SettingGuard<bool> {
 public:
  explicit TransposedInputCopiesGuard(bool on)
      : SettingGuard(keras::mixed_precision::transposed_input_copies,
                     keras::mixed_precision::set_transposed_input_copies, on) {}
};

}  // namespace lockstep::testing
