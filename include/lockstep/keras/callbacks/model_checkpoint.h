#pragma once
// ModelCheckpoint (keras.callbacks.ModelCheckpoint), weights only: saves the model's weights
// (safetensors, see saving/safetensors.h) at the end of each epoch, or only when `monitor`
// improves with save_best_only. The path may hold Python format fields filled from the epoch
// (1-based) and the logs: "ckpt/weights.{epoch:02d}-{val_loss:.2f}.safetensors".
#include <optional>
#include <string>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

struct ModelCheckpointOptions {
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  std::string mode = "auto";  // "auto", "min" or "max"
  std::optional<double> initial_value_threshold{};
};

class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions options = {});
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }

  // The path for `epoch` (0-based) and `logs`; throws InvalidArgument for an unknown field.
  std::string format_path(int epoch, const Logs& logs) const;
  double best() const { return best_; }

 private:
  std::string filepath_;
  ModelCheckpointOptions o_;
  bool maximize_ = false;
  double best_;
};

}  // namespace lockstep::keras::callbacks
