#pragma once
// ModelCheckpoint (keras.callbacks.ModelCheckpoint): saves the whole model as a Keras 3 `.keras`
// archive (saving/saving_lib.h: architecture, weights, optimizer state; Keras' default), or with
// save_weights_only its weights (safetensors, see saving/safetensors.h), at the end of each epoch,
// or only when `monitor` improves with save_best_only. The path may hold Python format fields
// filled from the epoch (1-based) and the logs: "ckpt/model.{epoch:02d}-{val_loss:.2f}.keras".
// As in Keras, a whole-model path must end in ".keras".
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
  // false: Model::save (needs the model fit() binds); true: the weights (safetensors).
  bool save_weights_only = false;
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
  void save(const std::string& path) const;
  std::string filepath_;
  ModelCheckpointOptions o_;
  bool maximize_ = false;
  double best_;
};

}  // namespace lockstep::keras::callbacks
