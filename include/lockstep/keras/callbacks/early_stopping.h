#pragma once
// EarlyStopping (keras.callbacks.EarlyStopping): stops fit when `monitor` stops improving.
// At each epoch end (from start_from_epoch on), with delta = min_delta signed by the mode:
//   improved = mode == min ? value - min_delta < best : value + min_delta > best
//   improved: best = value, wait = 0 (unless a baseline is set and not beaten), snapshot the
//             weights when restore_best_weights
//   otherwise: wait += 1; when wait >= patience (and epoch > 0): stop_training, and restore
//             the best weights when asked.
// mode "auto" is "max" for monitors ending in "acc", "accuracy" or "auc", else "min".
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int patience = 0;
  int verbose = 0;
  std::string mode = "auto";  // "auto", "min" or "max"
  std::optional<double> baseline{};
  bool restore_best_weights = false;
  int start_from_epoch = 0;
};

class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }
  void on_train_end(const Logs& logs) override;

  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }
  double best() const { return best_; }
  int wait() const { return wait_; }

 private:
  bool is_improvement(double value, double reference) const;
  void snapshot();

  EarlyStoppingOptions o_;
  bool maximize_ = false;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  double best_ = 0.0;
  std::vector<Tensor> best_weights_;
};

}  // namespace lockstep::keras::callbacks
