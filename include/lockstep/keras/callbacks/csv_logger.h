#pragma once
// CSVLogger (keras.callbacks.CSVLogger): one row per epoch,
//   epoch,<key 1>,<key 2>,...
//   0,0.8210,0.5123,...
// The columns are the keys of the first epoch's logs, sorted; a key missing later is written
// "NA". Numbers are written as Python's repr(float) writes them (shortest round-trip form).
// With append, an existing non-empty file keeps its header and gets new rows.
#include <fstream>
#include <string>
#include <vector>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

class CSVLogger final : public Callback {
 public:
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }
  void on_train_end(const Logs& logs) override;

 private:
  std::string filename_;
  char separator_;
  bool append_;
  bool write_header_ = true;
  std::vector<std::string> keys_;
  std::ofstream file_;
};

// Python's repr() of a float: "0.1", "1e-05", "1.0", "nan", "inf".
std::string python_float_repr(double v);

}  // namespace lockstep::keras::callbacks
