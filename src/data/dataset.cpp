#include "lockstep/data/dataset.h"
#include "lockstep/core/check.h"

#include <random>

#include "internal.h"

namespace lockstep {

using data_internal::IterContext;

Iterator::Iterator(std::shared_ptr<const data_internal::Node> node,
                   std::unique_ptr<data_internal::IteratorImpl> impl, uint64_t iteration)
    : node_(std::move(node)), impl_(std::move(impl)), iteration_(iteration) {}
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&&) noexcept = default;
Iterator::~Iterator() = default;

bool Iterator::next(Element& out) {
  if (!impl_->next(out)) return false;
  ++position_;
  return true;
}

std::optional<Element> Iterator::next() {
  Element e;
  if (!next(e)) return std::nullopt;
  return e;
}

Dataset::Dataset(std::shared_ptr<const data_internal::Node> node) : node_(std::move(node)) {}

Dataset Dataset::from_tensor_slices(const Element& tensors) {
  return Dataset(data_internal::make_tensor_slices(tensors));
}
Dataset Dataset::from_generator(GeneratorFactory factory, ElementSpec spec) {
  return Dataset(data_internal::make_generator(std::move(factory), std::move(spec)));
}
Dataset Dataset::range(int64_t start, int64_t stop, int64_t step) {
  return Dataset(data_internal::make_range(start, stop, step));
}
Dataset Dataset::zip(const std::vector<Dataset>& datasets) {
  std::vector<std::shared_ptr<const data_internal::Node>> nodes;
  for (const Dataset& d : datasets) nodes.push_back(d.node_);
  return Dataset(data_internal::make_zip(std::move(nodes)));
}

Dataset Dataset::map(MapFn fn, int64_t num_parallel_calls, bool deterministic) const {
  return map(std::move(fn), MapOptions{.num_parallel_calls = num_parallel_calls,
                                       .deterministic = deterministic,
                                       .output_spec = std::nullopt});
}
Dataset Dataset::map(MapFn fn, MapOptions options) const {
  return Dataset(data_internal::make_map(node_, std::move(fn), std::move(options)));
}
Dataset Dataset::filter(Predicate predicate) const {
  return Dataset(data_internal::make_filter(node_, std::move(predicate)));
}
Dataset Dataset::shuffle(int64_t buffer_size, std::optional<uint64_t> seed,
                         bool reshuffle_each_iteration) const {
  uint64_t s = seed ? *seed : (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  return Dataset(data_internal::make_shuffle(node_, buffer_size, s, reshuffle_each_iteration));
}
Dataset Dataset::repeat(int64_t count) const {
  return Dataset(data_internal::make_repeat(node_, count));
}
Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  return Dataset(data_internal::make_batch(node_, batch_size, drop_remainder));
}
Dataset Dataset::interleave(InterleaveFn fn, int64_t cycle_length, int64_t block_length,
                            int64_t num_parallel_calls, bool /*deterministic*/) const {
  LOCKSTEP_CHECK(num_parallel_calls >= 0 || num_parallel_calls == AUTOTUNE,
                 "Dataset::interleave: num_parallel_calls must be >= 0 or AUTOTUNE (-1). Received ",
                 num_parallel_calls, ".");
  return Dataset(data_internal::make_interleave(node_, std::move(fn), cycle_length, block_length,
                                                num_parallel_calls != 0));
}
Dataset Dataset::unbatch() const {
  return Dataset(data_internal::make_unbatch(node_));
}
Dataset Dataset::prefetch(int64_t buffer_size) const {
  return Dataset(data_internal::make_prefetch(node_, buffer_size));
}
Dataset Dataset::cache() const {
  return Dataset(data_internal::make_memory_cache(node_));
}
Dataset Dataset::cache(const std::string& path) const {
  if (path.empty()) return cache();
  return Dataset(data_internal::make_file_cache(node_, path));
}
Dataset Dataset::take(int64_t count) const {
  return Dataset(data_internal::make_take(node_, count));
}
Dataset Dataset::skip(int64_t count) const {
  return Dataset(data_internal::make_skip(node_, count));
}
Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  return Dataset(data_internal::make_shard(node_, num_shards, index));
}

int64_t Dataset::cardinality() const {
  return node_->cardinality();
}
ElementSpec Dataset::element_spec() const {
  return node_->element_spec();
}
std::string Dataset::to_string() const {
  return node_->to_string();
}

Iterator Dataset::make_iterator() const {
  uint64_t iteration = node_->iterations.fetch_add(1, std::memory_order_relaxed);
  return Iterator(node_, node_->make_iterator(IterContext{iteration}), iteration);
}

Iterator Dataset::make_iterator(const IteratorState& state) const {
  LOCKSTEP_CHECK(state.position >= 0, "Dataset::make_iterator: position must be >= 0. Received ",
                 state.position, ".");
  // Later fresh iterators must not repeat the restored iteration's order.
  uint64_t want = state.iteration + 1;
  uint64_t cur = node_->iterations.load(std::memory_order_relaxed);
  while (cur < want &&
         !node_->iterations.compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
  }
  Iterator it(node_, node_->make_iterator(IterContext{state.iteration}), state.iteration);
  int64_t skipped = it.impl_->skip(state.position);
  LOCKSTEP_CHECK_AS(OutOfRange, skipped == state.position,
                    "Dataset::make_iterator: cannot restore position ", state.position,
                    ": the dataset ", to_string(), " has only ", skipped, " elements.");
  it.position_ = state.position;
  return it;
}

Dataset::RangeIterator::RangeIterator(Iterator it)
    : it_(std::make_unique<Iterator>(std::move(it))) {
  ++*this;
}

Dataset::RangeIterator& Dataset::RangeIterator::operator++() {
  done_ = !it_->next(current_);
  return *this;
}

}  // namespace lockstep
