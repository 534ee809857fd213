#include "lockstep/distribute/distributed_dataset.h"

#include "lockstep/core/error.h"
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
    : dataset_(std::move(dataset)),
      mode_(mode),
      num_local_(num_local_replicas),
      num_in_sync_(num_replicas_in_sync),
      first_local_(first_local_replica) {}

DistributedDataset::Iterator::Iterator(const DistributedDataset& owner, lockstep::Iterator it)
    : owner_(&owner), it_(std::move(it)) {}

DistributedDataset::Iterator DistributedDataset::make_iterator() const {
  return Iterator(*this, dataset_.make_iterator());
}
DistributedDataset::Iterator DistributedDataset::make_iterator(const IteratorState& state) const {
  return Iterator(*this, dataset_.make_iterator(state));
}

std::optional<PerReplica<Element>> DistributedDataset::Iterator::next() {
  const DistributedDataset& o = *owner_;
  PerReplica<Element> out;
  if (o.mode_ == Mode::kSplitGlobalBatches) {
    std::optional<Element> batch = it_.next();
    if (!batch) return std::nullopt;
    last_global_batch_ = (*batch)[0].rank() ? (*batch)[0].dim(0) : 0;
    out.values = split_batch(*batch, o.num_in_sync_, o.first_local_, o.num_local_);
    return out;
  }
  if (o.mode_ == Mode::kSplitWorkerBatches) {
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
  return DistributedDataset(dataset, DistributedDataset::Mode::kSplitGlobalBatches,
                            num_local_replicas(), num_replicas_in_sync(),
                            worker_index() * num_local_replicas());
}

DistributedDataset Strategy::experimental_distribute_dataset(const Dataset& dataset,
                                                             AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::AUTO:
    case AutoShardPolicy::DATA:
      return experimental_distribute_dataset(dataset);
    case AutoShardPolicy::OFF:
      return DistributedDataset(dataset, DistributedDataset::Mode::kSplitWorkerBatches,
                                num_local_replicas(), num_replicas_in_sync(),
                                worker_index() * num_local_replicas());
    case AutoShardPolicy::FILE:
      break;
  }
  throw InvalidArgument(
      "experimental_distribute_dataset: AutoShardPolicy::FILE shards the files a dataset reads, "
      "but this pipeline (" +
      dataset.to_string() +
      ") reads no files: Lockstep's sources are in memory. Use DATA (every worker iterates the "
      "same global batches and keeps its replicas' slices) or OFF.");
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<Dataset(const InputContext&)>& fn) {
  InputContext ctx{num_workers(), worker_index(), num_replicas_in_sync()};
  return DistributedDataset(fn(ctx), DistributedDataset::Mode::kPerReplicaBatches,
                            num_local_replicas(), num_replicas_in_sync(),
                            worker_index() * num_local_replicas());
}

}  // namespace lockstep::distribute
