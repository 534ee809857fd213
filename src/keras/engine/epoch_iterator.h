#pragma once
// EpochIterator (Keras 3's trainers/epoch_iterator.py): the steps of each epoch over the input of
// fit, evaluate or predict — in-memory arrays (batched here, shuffled each epoch when asked) or
// any Dataset, file sources included — as the model's strategy distributes it. It owns the
// iteration (a new pass per epoch, or one pass across epochs when steps_per_epoch is given),
// where it stands in the epoch, and the resume position; the caller runs the steps.
#include <cstdint>
#include <optional>

#include "lockstep/core/tensor.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/distributed_dataset.h"

namespace lockstep::keras {

struct EpochIteratorOptions {
  // Steps per epoch; 0 runs each epoch until the data ends (it must then be finite). With a
  // value, one iteration continues across epochs (use repeat()).
  int64_t steps_per_epoch = 0;
  // Steps handed to the caller at a time (compile's steps_per_execution).
  int64_t steps_per_execution = 1;
};

class EpochIterator {
 public:
  EpochIterator(distribute::DistributedDataset data, EpochIteratorOptions options);
  // The iterator refers to data_.
  EpochIterator(const EpochIterator&) = delete;
  EpochIterator& operator=(const EpochIterator&) = delete;

  // fit(x, y) / evaluate(x, y) / predict(x): the arrays as a dataset of batches of `batch_size`
  // examples (x alone when y is undefined), shuffled each epoch with `seed` when asked.
  static Dataset from_arrays(const Tensor& x, const Tensor& y, int64_t batch_size, bool shuffle,
                             uint64_t seed);

  // Continues at `position` (Iterator::state()): with steps_per_epoch the iteration goes on from
  // there; otherwise the next epoch's pass is the one after the saved one.
  void resume(const IteratorState& position);
  // Starts an epoch: a new pass over the data, unless steps_per_epoch is set and a pass began.
  void begin_epoch();
  // How many steps to run next (up to steps_per_execution, within steps_per_epoch); 0 when the
  // epoch is done.
  int64_t steps_to_run() const;
  // Records that `ran` of them ran; 0 means the data ended, which ends the epoch.
  void advance(int64_t ran);

  // The steps of the current epoch so far, and whether the data ended in it.
  int64_t step() const { return step_; }
  bool exhausted() const { return exhausted_; }
  // The steps in an epoch when known (steps_per_epoch, or the data's cardinality), else 0.
  int64_t num_steps() const;

  // The current pass (after begin_epoch or resume), and whether there is one.
  distribute::DistributedDataset::Iterator& iterator() { return *it_; }
  bool has_iterator() const { return it_.has_value(); }
  const distribute::DistributedDataset& data() const { return data_; }

 private:
  distribute::DistributedDataset data_;
  EpochIteratorOptions options_;
  std::optional<distribute::DistributedDataset::Iterator> it_;
  int64_t step_ = 0;
  bool exhausted_ = false;
};

}  // namespace lockstep::keras
