#include "lockstep/distribute/distributed_dataset.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>

#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/data/cardinality.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

int64_t InputContext::get_per_replica_batch_size(int64_t global_batch_size) const {
  if (num_replicas_in_sync <= 0 || global_batch_size % num_replicas_in_sync != 0) {
    throw InvalidArgument("The global batch size (" + std::to_string(global_batch_size) +
                          ") must be divisible by the number of replicas in sync (" +
                          std::to_string(num_replicas_in_sync) + ").");
  }
  return global_batch_size / num_replicas_in_sync;
}

std::vector<Element> split_batch(const Element& batch, int num_slices, int first, int count) {
  if (batch.empty()) throw InvalidArgument("split_batch: the element has no components.");
  int64_t b = batch[0].rank() ? batch[0].dim(0) : 0;
  for (const Tensor& t : batch) {
    if (t.rank() == 0 || t.dim(0) != b) {
      throw InvalidArgument(
          "Cannot split a batch over replicas: every component needs the same leading (batch) "
          "dimension. Received: " +
          describe(batch) + ".");
    }
  }
  int64_t per = (b + num_slices - 1) / num_slices;
  std::vector<Element> out(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    int64_t s = static_cast<int64_t>(first + i);
    int64_t begin = std::min(s * per, b), end = std::min((s + 1) * per, b);
    for (const Tensor& t : batch) out[static_cast<size_t>(i)].push_back(t.slice(begin, end));
  }
  return out;
}

DistributedDataset::DistributedDataset(Dataset dataset, Mode mode, int num_local_replicas,
                                       int num_replicas_in_sync, int first_local_replica)
    : datasets_{std::move(dataset)},
      mode_(mode),
      num_local_(num_local_replicas),
      num_in_sync_(num_replicas_in_sync),
      first_local_(first_local_replica) {
  if (mode == Mode::per_replica_pipelines) {
    throw InvalidArgument(
        "DistributedDataset: per-replica pipelines take one dataset per local replica.");
  }
}

DistributedDataset::DistributedDataset(std::vector<Dataset> per_replica, int num_replicas_in_sync,
                                       int first_local_replica)
    : datasets_(std::move(per_replica)),
      mode_(Mode::per_replica_pipelines),
      num_local_(static_cast<int>(datasets_.size())),
      num_in_sync_(num_replicas_in_sync),
      first_local_(first_local_replica) {
  if (datasets_.empty()) {
    throw InvalidArgument("DistributedDataset: per-replica pipelines need at least one dataset.");
  }
}

int64_t DistributedDataset::cardinality() const {
  if (mode_ != Mode::per_replica_pipelines) {
    const int64_t n = datasets_.front().cardinality();
    if (n < 0 || mode_ != Mode::per_replica_batches) return n;
    return (n + num_local_ - 1) / num_local_;
  }
  // The longest pipeline sets the step count (the others get empty batches once they end).
  int64_t longest = 0;
  bool any_infinite = false;
  for (const Dataset& d : datasets_) {
    const int64_t n = d.cardinality();
    if (n == Dataset::kUnknown) return Dataset::kUnknown;
    if (n == Dataset::kInfinite) {
      any_infinite = true;
    } else {
      longest = std::max(longest, n);
    }
  }
  return any_infinite ? Dataset::kInfinite : longest;
}

DistributedDataset::Iterator::Iterator(const DistributedDataset& owner,
                                       std::vector<lockstep::Iterator> its)
    : owner_(&owner), its_(std::move(its)) {
  if (owner.mode_ == Mode::per_replica_pipelines) {
    for (size_t r = 0; r < its_.size(); ++r) staged_.push_back(std::make_unique<Staged>());
  }
}

std::optional<Element> DistributedDataset::Iterator::take(size_t r) {
  Staged& st = *staged_[r];
  std::lock_guard lock(st.mu);
  if (!st.has) return its_[r].next();
  st.has = false;
  if (st.error) std::rethrow_exception(std::exchange(st.error, nullptr));
  return std::exchange(st.element, std::nullopt);
}

bool DistributedDataset::Iterator::stage_next(int first) {
  const size_t n = staged_.size();
  const size_t start = first > 0 ? static_cast<size_t>(first) % std::max<size_t>(n, 1) : 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t r = (start + k) % n;
    Staged& st = *staged_[r];
    std::unique_lock lock(st.mu, std::try_to_lock);
    if (!lock.owns_lock() || st.has) continue;
    st.before = its_[r].state();
    try {
      profiler::ScopedSpan trace(profiler::Phase::input, static_cast<int>(r));
      st.element = its_[r].next();
    } catch (...) {
      st.element.reset();
      st.error = std::current_exception();
    }
    st.has = true;
    return true;
  }
  return false;
}

DistributedDataset::Iterator DistributedDataset::make_iterator() const {
  std::vector<lockstep::Iterator> its;
  for (const Dataset& d : datasets_) its.push_back(d.make_iterator());
  return Iterator(*this, std::move(its));
}
DistributedDataset::Iterator DistributedDataset::make_iterator(const IteratorState& state) const {
  IteratorState at = state;
  if (mode_ == Mode::per_replica_batches) {
    // Steps to elements of this worker's dataset; a finite one that ended inside the saved last
    // step resumes at its end.
    at.position = state.position * num_local_;
    const int64_t n = datasets_.front().cardinality();
    if (n >= 0) at.position = std::min(at.position, n);
  }
  std::vector<lockstep::Iterator> its;
  for (const Dataset& d : datasets_) its.push_back(d.make_iterator(at));
  return Iterator(*this, std::move(its));
}

bool DistributedDataset::Iterator::fetches_on_replicas() const {
  return owner_->mode_ == Mode::per_replica_pipelines &&
         std::all_of(owner_->datasets_.begin(), owner_->datasets_.end(),
                     [](const Dataset& d) { return d.cardinality() == Dataset::kInfinite; });
}

Element DistributedDataset::Iterator::next_on_replica(int local_replica) {
  if (owner_->mode_ != Mode::per_replica_pipelines || local_replica < 0 ||
      local_replica >= static_cast<int>(its_.size())) {
    throw InvalidArgument("DistributedDataset::Iterator::next_on_replica(" +
                          std::to_string(local_replica) +
                          "): needs per-replica pipelines and a local replica id below " +
                          std::to_string(its_.size()) + ".");
  }
  profiler::ScopedSpan trace(profiler::Phase::input, local_replica);
  std::optional<Element> e = take(static_cast<size_t>(local_replica));
  trace.end();
  if (!e) {
    throw OutOfRange("The input pipeline of replica " +
                     std::to_string(owner_->first_local_ + local_replica) +
                     " ended, but per-replica pipelines pulled on the replicas must be infinite "
                     "(repeat()).");
  }
  return std::move(*e);
}

IteratorState DistributedDataset::Iterator::state() const {
  // A staged element is not pulled yet: its pipeline resumes before it.
  auto state_of = [&](size_t r) {
    if (r < staged_.size()) {
      std::lock_guard lock(staged_[r]->mu);
      if (staged_[r]->has) return staged_[r]->before;
    }
    return its_[r].state();
  };
  IteratorState s = state_of(0);
  for (size_t r = 1; r < its_.size(); ++r) s.position = std::max(s.position, state_of(r).position);
  if (owner_->mode_ == Mode::per_replica_batches) {
    const int64_t local = owner_->num_local_;
    s.position = (s.position + local - 1) / local;  // a step cut short by the end counts
  }
  return s;
}

std::optional<PerReplica<Element>> DistributedDataset::Iterator::next() {
  profiler::ScopedSpan trace(profiler::Phase::input);
  const DistributedDataset& o = *owner_;
  PerReplica<Element> out;
  if (o.mode_ == Mode::per_replica_pipelines) {
    std::vector<std::optional<Element>> got;
    for (size_t r = 0; r < its_.size(); ++r) got.push_back(take(r));
    auto first = std::find_if(got.begin(), got.end(), [](const auto& e) { return e.has_value(); });
    if (first == got.end()) return std::nullopt;
    // For a replica whose pipeline ended before the others': an empty batch shaped like theirs.
    Element empty;
    for (const Tensor& t : **first) empty.push_back(t.slice(0, 0));
    int64_t total = 0;
    for (auto& e : got) {
      if (!e) {
        out.values.push_back(empty);
        continue;
      }
      total += (*e)[0].rank() ? (*e)[0].dim(0) : 1;
      out.values.push_back(std::move(*e));
    }
    last_global_batch_ = total * (o.num_in_sync_ / o.num_local_);
    return out;
  }
  lockstep::Iterator& it_ = its_.front();
  if (o.mode_ == Mode::split_global_batches) {
    std::optional<Element> batch = it_.next();
    if (!batch) return std::nullopt;
    last_global_batch_ = (*batch)[0].rank() ? (*batch)[0].dim(0) : 0;
    out.values = split_batch(*batch, o.num_in_sync_, o.first_local_, o.num_local_);
    return out;
  }
  if (o.mode_ == Mode::split_worker_batches) {
    std::optional<Element> batch = it_.next();
    if (!batch) return std::nullopt;
    int64_t local = (*batch)[0].rank() ? (*batch)[0].dim(0) : 0;
    // As for per-worker datasets: exact while every worker's batch has the same size.
    last_global_batch_ = local * (o.num_in_sync_ / o.num_local_);
    out.values = split_batch(*batch, o.num_local_, 0, o.num_local_);
    return out;
  }
  int64_t total = 0;
  for (int r = 0; r < o.num_local_; ++r) {
    std::optional<Element> e = it_.next();
    if (!e) {
      if (r == 0) return std::nullopt;
      // The dataset ended inside this step: the remaining replicas get empty batches.
      Element empty;
      for (const Tensor& t : out.values[0]) empty.push_back(t.slice(0, 0));
      for (; r < o.num_local_; ++r) out.values.push_back(empty);
      break;
    }
    total += (*e)[0].rank() ? (*e)[0].dim(0) : 1;
    out.values.push_back(std::move(*e));
  }
  // Per-worker batches: all workers' batches have the same size except at the end, so the
  // global size is this worker's count times the workers (exact for one worker).
  last_global_batch_ = total * (o.num_in_sync_ / o.num_local_);
  return out;
}

DistributedDataset Strategy::experimental_distribute_dataset(const Dataset& dataset) {
  return DistributedDataset(dataset, DistributedDataset::Mode::split_global_batches,
                            num_local_replicas(), num_replicas_in_sync(),
                            worker_index() * num_local_replicas());
}

namespace {

// AutoShardPolicy::FILE: this worker reads its own files. Workers whose files hold different
// numbers of batches agree on the smallest count (an all-reduce before the first step), so that
// none of them waits in a step's all-reduce for a worker that has run out of data. An infinite
// (repeated) pipeline needs no count: fit's steps_per_epoch bounds every worker alike.
Dataset equal_steps(Strategy& strategy, Dataset mine) {
  int64_t count = mine.cardinality();
  if (count == Dataset::kInfinite || repeats_forever(mine) || strategy.num_workers() == 1) {
    return mine;
  }
  if (count == Dataset::kUnknown) {
    // One pass to count this worker's batches (a cache() in the pipeline keeps what it read).
    count = 0;
    Element e;
    for (lockstep::Iterator it = mine.make_iterator(); it.next(e);) ++count;
  }
  double negated = -static_cast<double>(count);  // min(counts) = -max(-counts)
  strategy.all_reduce_across_workers(std::span<double>(&negated, 1), ReduceOp::MAX);
  return mine.take(static_cast<int64_t>(-negated));
}

}  // namespace

DistributedDataset Strategy::experimental_distribute_dataset(const Dataset& dataset,
                                                             AutoShardPolicy policy) {
  auto per_worker = [&](const Dataset& ds) {
    return DistributedDataset(ds, DistributedDataset::Mode::split_worker_batches,
                              num_local_replicas(), num_replicas_in_sync(),
                              worker_index() * num_local_replicas());
  };
  auto by_file = [&](const Dataset& mine) {
    DistributedDataset d = per_worker(equal_steps(*this, mine));
    d.sharded_by_file_ = true;
    return d;
  };
  switch (policy) {
    case AutoShardPolicy::AUTO:
      // tf.data's AUTO: by file when the pipeline reads at least one file per worker, else by
      // data. One worker reads everything either way.
      if (num_workers() > 1 && !dataset.input_files().empty()) {
        std::optional<Dataset> mine;
        try {
          mine = dataset.shard_files(num_workers(), worker_index());
        } catch (const InvalidArgument&) {
          // A file list shorter than the workers: shard by data, as tf.data falls back.
        }
        if (mine) return by_file(*mine);
      }
      return experimental_distribute_dataset(dataset);
    case AutoShardPolicy::DATA:
      return experimental_distribute_dataset(dataset);
    case AutoShardPolicy::OFF:
      return per_worker(dataset);
    case AutoShardPolicy::FILE:
      return by_file(dataset.shard_files(num_workers(), worker_index()));
  }
  throw InvalidArgument("experimental_distribute_dataset: unknown AutoShardPolicy " +
                        std::to_string(static_cast<int>(policy)) + ".");
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<Dataset(const InputContext&)>& fn) {
  return distribute_datasets_from_function(fn, InputOptions{});
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<Dataset(const InputContext&)>& fn, const InputOptions& options) {
  if (options.experimental_replication_mode == InputReplicationMode::PER_REPLICA) {
    std::vector<Dataset> per_replica;
    const int first = worker_index() * num_local_replicas();
    for (int r = 0; r < num_local_replicas(); ++r) {
      per_replica.push_back(
          fn(InputContext{num_replicas_in_sync(), first + r, num_replicas_in_sync()}));
    }
    return DistributedDataset(std::move(per_replica), num_replicas_in_sync(), first);
  }
  InputContext ctx{num_workers(), worker_index(), num_replicas_in_sync()};
  return DistributedDataset(fn(ctx), DistributedDataset::Mode::per_replica_batches,
                            num_local_replicas(), num_replicas_in_sync(),
                            worker_index() * num_local_replicas());
}

}  // namespace lockstep::distribute
