#include "deferred_sums.h"

#include <algorithm>
#include <functional>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/ops/elementwise.h"
#include "replica_runs.h"

namespace lockstep::distribute {

namespace {

[[noreturn]] void throw_count_mismatch(const std::string& counts) {
  throw FailedPrecondition(
      "ReplicatedStep: the workers' replicas produced different numbers of statistics to sum "
      "after this step (" +
      counts +
      "): a worker had no examples for a layer that sums statistics across replicas "
      "(BatchNormalization). Use a global batch of at least one example per worker.");
}

}  // namespace

int64_t DeferredSums::count_from_sums(double sum, double sum_of_squares, int workers) {
  // Sums of small whole numbers are exact in float32 below 2^24, whatever order they were added in.
  constexpr double kExact = 16777216.0;
  if (!(sum >= 0 && sum_of_squares >= 0 && sum < kExact && sum_of_squares < kExact)) return -1;
  if (static_cast<double>(workers) * sum_of_squares != sum * sum) {
    throw_count_mismatch(std::to_string(static_cast<int64_t>(sum)) + " in all over " +
                         std::to_string(workers) + " workers, not the same on each");
  }
  return static_cast<int64_t>(sum) / workers;
}

size_t DeferredSums::count(const std::vector<ReplicaRun*>& runs) {
  std::vector<const void*> keys;
  for (const ReplicaRun* r : runs) {
    for (const auto& d : r->deferred_) {
      if (std::find(keys.begin(), keys.end(), d.key) == keys.end()) keys.push_back(d.key);
    }
  }
  return keys.size();
}

void DeferredSums::apply(const std::vector<ReplicaRun*>& runs, Communicator* cross,
                         const float* carried) {
  struct Entry {
    const void* key;
    Tensor total;
    std::function<void(const Tensor&)>* apply;
  };
  std::vector<Entry> entries;
  for (ReplicaRun* r : runs) {
    for (auto& d : r->deferred_) {
      auto it = std::find_if(entries.begin(), entries.end(),
                             [&](const Entry& e) { return e.key == d.key; });
      if (it == entries.end()) {
        entries.push_back({d.key, d.value.clone(), &d.apply});
        continue;
      }
      if (!(it->total.shape() == d.value.shape())) {
        throw InvalidArgument("sum_after_step: replicas summed values of different shapes: " +
                              it->total.describe() + " and " + d.value.describe() + ".");
      }
      ops::add_into(it->total, d.value);
    }
  }
  if (cross != nullptr) {
    profiler::ScopedSpan trace(profiler::Phase::all_reduce);
    const bool checked =
        carried != nullptr && count_from_sums(carried[0], carried[1], cross->size()) >= 0;
    if (!checked) {
      int64_t counts[2] = {static_cast<int64_t>(entries.size()),
                           -static_cast<int64_t>(entries.size())};
      cross->all_reduce(counts, 2, DType::int64, ReduceOp::MAX);
      const int64_t most = counts[0], fewest = -counts[1];
      if (most != fewest)
        throw_count_mismatch(std::to_string(fewest) + " to " + std::to_string(most));
    }
    for (Entry& e : entries) cross->all_reduce(e.total, ReduceOp::SUM);
  }
  for (Entry& e : entries) (*e.apply)(e.total);
}

}  // namespace lockstep::distribute
