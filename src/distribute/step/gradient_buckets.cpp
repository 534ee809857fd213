// GradientReducer's overlap of the cross-worker all-reduce with the backward pass (DDP's bucket
// hooks): buckets, their claim by the first run to fill one, and their order on the wire.
#include <cstring>

#include "gradient_reducer.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep::distribute {

void GradientReducer::make_buckets(size_t bytes_per_bucket) {
  // Groups of consecutive variables of about bytes_per_bucket, formed from the last variable
  // backwards (the order backward produces them); the first at most 1 MiB so that communication
  // starts early (DDP's first_bucket_bytes).
  const size_t pack = bytes_per_bucket ? bytes_per_bucket : size_t{25} << 20;
  bucket_of_.assign(layout_.num_vars(), 0);
  int64_t end = layout_.total();
  size_t end_var = layout_.num_vars();
  while (end_var > 0) {
    const size_t limit = buckets_.empty() ? std::min(pack, size_t{1} << 20) : pack;
    size_t first = end_var;
    int64_t begin = end;
    do {
      --first;
      begin -= layout_.size(first);
    } while (first > 0 &&
             static_cast<size_t>(end - begin + layout_.size(first - 1)) * sizeof(float) <= limit);
    for (size_t v = first; v < end_var; ++v) bucket_of_[v] = buckets_.size();
    buckets_.push_back({first, end_var, begin, end});
    end_var = first;
    end = begin;
  }
  bucket_claimed_ = std::make_unique<std::atomic<uint32_t>[]>(buckets_.size());
  bucket_filled_.assign(buckets_.size(), 0);
}

size_t GradientReducer::num_buckets() const {
  return buckets_.size();
}

void GradientReducer::begin_overlap() {
  ensure_sum_buffer();
  hook_->reserve(static_cast<size_t>(layout_.total()));
  if (!background_) background_ = std::make_unique<BackgroundReducer>(cross_);
  for (size_t b = 0; b < buckets_.size(); ++b) bucket_claimed_[b].store(0);
  std::fill(bucket_filled_.begin(), bucket_filled_.end(), 0);
  buckets_enqueued_ = 0;
  overlap_accumulator_ = acc_valid_;
}

void GradientReducer::cancel_overlap() {
  // A collective in the forward pass comes before any gradient: no bucket has left.
  std::lock_guard lock(bucket_mu_);
  if (buckets_enqueued_ != 0) {
    throw Internal(
        "ReplicatedStep: a replica function called a collective after gradients had started "
        "crossing workers; call collectives before the backward pass.");
  }
}

void GradientReducer::gradient_ready(ReplicaRun& run, size_t variable) {
  const size_t b = bucket_of_[variable];
  const Bucket& bucket = buckets_[b];
  if (++run.sink_counts()[b] == static_cast<int>(bucket.end_var - bucket.first_var))
    bucket_ready(run, b);
}

void GradientReducer::bucket_ready(const ReplicaRun& run, size_t b) {
  // The first run of the (only local) replica to finish a bucket ships it; every run computes
  // the same bits, so which one does not matter.
  if (bucket_claimed_[b].exchange(1, std::memory_order_acq_rel) != 0) return;
  const Bucket& bucket = buckets_[b];
  const float* acc = accumulator_[acc_current_].data<float>();
  float* sum = summed_.data<float>();
  for (size_t v = bucket.first_var; v < bucket.end_var; ++v) {
    const int64_t flat = layout_.begin(v), n = layout_.size(v);
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (run.has_gradient(v)) {
      std::memcpy(sum + flat, run.flat_gradients() + flat, bytes);
      if (overlap_accumulator_) ops::add_into(sum + flat, acc + flat, n);
    } else if (overlap_accumulator_) {
      std::memcpy(sum + flat, acc + flat, bytes);
    } else {
      std::memset(sum + flat, 0, bytes);
    }
  }
  // Buckets enter the communication thread in bucket order on every worker (collectives must
  // match), whichever run filled them.
  std::lock_guard lock(bucket_mu_);
  bucket_filled_[b] = 1;
  while (buckets_enqueued_ < buckets_.size() && bucket_filled_[buckets_enqueued_]) {
    const Bucket& q = buckets_[buckets_enqueued_];
    hook_->enqueue(*background_, sum, static_cast<size_t>(q.begin), static_cast<size_t>(q.end));
    ++buckets_enqueued_;
  }
  bucket_cv_.notify_all();
}

float* GradientReducer::finish_overlap() {
  // What is left of the all-reduce after backward: the part not hidden under it.
  profiler::ScopedSpan trace(profiler::Phase::all_reduce);
  {
    std::unique_lock lock(bucket_mu_);
    bucket_cv_.wait(lock, [this] { return buckets_enqueued_ == buckets_.size(); });
  }
  background_->wait();
  hook_->finish(summed_.data<float>(), static_cast<size_t>(layout_.total()));
  return summed_.data<float>();
}

}  // namespace lockstep::distribute
