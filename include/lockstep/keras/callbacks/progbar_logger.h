#pragma once
// ProgbarLogger: fit's progress display, in tf.keras' format.
//
//   Epoch 1/5
//   469/469 [==============================] - 2s 4ms/step - loss: 0.5123 - categorical_accuracy:
//   0.8210
//
// verbose 1 on a terminal redraws the line in place ("\r") with an ETA while the epoch runs, at
// most every 50 ms; on anything else (a file, a pipe, a CI log) it prints one line per epoch, at
// its end. verbose 2 prints one line per epoch in Keras' short form:
//   469/469 - 2s - loss: 0.5123 - categorical_accuracy: 0.8210 - 2s/epoch - 4ms/step
// "Epoch i/n" is printed only when n > 1, as Keras does. Values print as "%.4f", or "%.4e" when
// |v| <= 1e-3. Order: loss, the other metrics alphabetically, then val_loss and the other val_*
// (Logs is an ordered map, so compile order is not known here). Time per step excludes the first
// step (which includes one-time setup), as Keras does.
#include <functional>
#include <iosfwd>
#include <optional>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

struct ProgbarLoggerOptions {
  int verbose = 1;
  std::ostream* out = nullptr;  // default std::cout
  // Seconds from an arbitrary origin; default a steady clock. Tests inject a fake.
  std::function<double()> clock{};
  // Whether to redraw in place; default: `out` is std::cout and stdout is a terminal.
  std::optional<bool> interactive{};
};

class ProgbarLogger final : public Callback {
 public:
  explicit ProgbarLogger(int verbose = 1);
  explicit ProgbarLogger(ProgbarLoggerOptions options);

  void set_params(const Params& params) override;
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  // Only a live bar (verbose 1 on a terminal) draws the running values between epoch ends.
  bool uses_train_batch_logs() const override { return o_.verbose == 1 && interactive_; }
  void on_epoch_end(int epoch, const Logs& logs) override;

 private:
  std::string line(int64_t current, const Logs& logs, bool final) const;
  void draw(const std::string& text);

  ProgbarLoggerOptions o_;
  std::ostream* out_;
  bool interactive_ = false;
  int64_t epochs_ = 0, steps_ = 0;
  int64_t seen_ = 0;
  double start_ = 0.0, after_first_ = -1.0, last_draw_ = -1e300;
  size_t drawn_width_ = 0;
};

}  // namespace lockstep::keras::callbacks
