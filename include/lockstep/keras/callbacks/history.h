#pragma once
// History (keras.callbacks.History): the epoch logs of fit, one list per key.
//   auto history = model.fit(ds, {.epochs = 5});
//   history.history["loss"]  // std::vector<double>, one value per epoch
//   history.epoch            // {0, 1, 2, 3, 4}
#include <map>
#include <string>
#include <vector>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

class History final : public Callback {
 public:
  History() = default;
  History(const History&) = default;
  History& operator=(const History&) = default;

  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }

  std::map<std::string, std::vector<double>> history;
  std::vector<int> epoch;
};

}  // namespace lockstep::keras::callbacks
