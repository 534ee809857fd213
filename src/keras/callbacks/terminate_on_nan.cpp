#include "lockstep/keras/callbacks/terminate_on_nan.h"

#include <cmath>
#include <iostream>

namespace lockstep::keras::callbacks {

void TerminateOnNaN::on_train_batch_end(int64_t batch, const Logs& logs) {
  auto it = logs.find("loss");
  if (it == logs.end() || std::isfinite(it->second)) return;
  (out_ ? *out_ : std::cout) << "Batch " << batch << ": Invalid loss, terminating training\n";
  request_stop();
}

}  // namespace lockstep::keras::callbacks
