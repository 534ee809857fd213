#include "epoch_iterator.h"

#include <algorithm>

#include "lockstep/core/check.h"

namespace lockstep::keras {

EpochIterator::EpochIterator(distribute::DistributedDataset data, EpochIteratorOptions options)
    : data_(std::move(data)), options_(options) {
  LOCKSTEP_CHECK(options_.steps_per_epoch >= 0 && options_.steps_per_execution >= 1,
                 "EpochIterator: expected steps_per_epoch >= 0 and steps_per_execution >= 1. "
                 "Received: steps_per_epoch=",
                 options_.steps_per_epoch, ", steps_per_execution=", options_.steps_per_execution,
                 ".");
}

Dataset EpochIterator::from_arrays(const Tensor& x, const Tensor& y, int64_t batch_size,
                                   bool shuffle, uint64_t seed) {
  LOCKSTEP_CHECK(x.rank() > 0 && (!y.defined() || (y.rank() > 0 && x.dim(0) == y.dim(0))),
                 "x and y must have the same number of examples (leading dimension). Received: x=",
                 x.describe(), ", y=", y.defined() ? y.describe() : std::string("none"), ".");
  LOCKSTEP_CHECK(batch_size > 0, "batch_size must be positive. Received: batch_size=", batch_size,
                 ".");
  Dataset ds = y.defined() ? Dataset::from_tensor_slices({x, y}) : Dataset::from_tensor_slices(x);
  if (shuffle) ds = ds.shuffle(x.dim(0), seed, /*reshuffle_each_iteration=*/true);
  return ds.batch(batch_size);
}

void EpochIterator::resume(const IteratorState& position) {
  // Making the restored iterator also moves the data's pass count on: without steps_per_epoch,
  // the next epoch's new pass is then the one after the saved one.
  auto restored = data_.make_iterator(position);
  if (options_.steps_per_epoch > 0) it_.emplace(std::move(restored));
}

void EpochIterator::begin_epoch() {
  // A new pass counts as one of the data's iterations (its shuffle order): make one only when
  // the epoch needs it.
  if (options_.steps_per_epoch == 0 || !it_) it_.emplace(data_.make_iterator());
  step_ = 0;
  exhausted_ = false;
}

int64_t EpochIterator::steps_to_run() const {
  if (exhausted_) return 0;
  if (options_.steps_per_epoch == 0) return options_.steps_per_execution;
  return std::min(options_.steps_per_execution, options_.steps_per_epoch - step_);
}

void EpochIterator::advance(int64_t ran) {
  if (ran == 0) exhausted_ = true;
  step_ += ran;
}

int64_t EpochIterator::num_steps() const {
  if (options_.steps_per_epoch > 0) return options_.steps_per_epoch;
  return std::max<int64_t>(data_.cardinality(), 0);
}

}  // namespace lockstep::keras
