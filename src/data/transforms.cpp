// Sequential stages: map, filter, repeat, batch, unbatch, take, skip, shard.
#include <algorithm>
#include <limits>
#include <mutex>

#include "internal.h"
#include "lockstep/core/check.h"

namespace lockstep::data_internal {

std::unique_ptr<IteratorImpl> make_parallel_map_iterator(std::unique_ptr<IteratorImpl> input,
                                                         const Dataset::MapFn* fn,
                                                         const MapOptions& options);

namespace {

constexpr int64_t kAll = std::numeric_limits<int64_t>::max();

// ----- map
class MapIterator : public IteratorImpl {
 public:
  MapIterator(std::unique_ptr<IteratorImpl> input, const Dataset::MapFn* fn)
      : input_(std::move(input)), fn_(fn) {}
  bool next(Element& out) override {
    if (!input_->next(in_)) return false;
    out = (*fn_)(in_);
    return true;
  }
  // Map functions are pure (documented), so skipped elements need not be mapped.
  int64_t skip(int64_t n) override { return input_->skip(n); }

 private:
  std::unique_ptr<IteratorImpl> input_;
  const Dataset::MapFn* fn_;
  Element in_;
};

class MapAccess : public RandomAccess {
 public:
  MapAccess(std::shared_ptr<const RandomAccess> input, const Dataset::MapFn* fn)
      : input_(std::move(input)), fn_(fn) {}
  int64_t size() const override { return input_->size(); }
  void get(int64_t i, Element& out) const override {
    thread_local Element in;
    input_->get(i, in);
    out = (*fn_)(in);
  }

 private:
  std::shared_ptr<const RandomAccess> input_;
  const Dataset::MapFn* fn_;
};

class MapNode : public Node {
 public:
  MapNode(std::shared_ptr<const Node> input, Dataset::MapFn fn, MapOptions options)
      : input_(std::move(input)), fn_(std::move(fn)), options_(std::move(options)) {
    LOCKSTEP_CHECK(fn_, "Dataset::map: the function is empty.");
    LOCKSTEP_CHECK(options_.num_parallel_calls >= Dataset::AUTOTUNE,
                   "Dataset::map: num_parallel_calls must be >= 0 or AUTOTUNE (-1). Received ",
                   options_.num_parallel_calls, ".");
    if (options_.num_parallel_calls == 0) {
      if (auto ra = input_->random_access()) ra_ = std::make_shared<MapAccess>(ra, &fn_);
    }
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    auto in = input_->make_iterator(ctx);
    if (options_.num_parallel_calls == 0) return std::make_unique<MapIterator>(std::move(in), &fn_);
    return make_parallel_map_iterator(std::move(in), &fn_, options_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  ElementSpec element_spec() const override {
    if (options_.output_spec) return *options_.output_spec;
    std::call_once(spec_once_, [&] {
      // Learn the output spec the way tf.data traces a function: apply it to one element.
      auto it = input_->make_iterator({});
      Element in;
      if (it->next(in)) spec_ = element_spec_of(fn_(in));
    });
    return spec_;
  }
  std::shared_ptr<const RandomAccess> random_access() const override { return ra_; }
  std::string to_string() const override {
    std::string p;
    if (options_.num_parallel_calls == Dataset::AUTOTUNE) {
      p = "(AUTOTUNE)";
    } else if (options_.num_parallel_calls > 0) {
      p = "(" + std::to_string(options_.num_parallel_calls) + ")";
    }
    return input_->to_string() + " -> Map" + p;
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_map(std::move(in[0]), fn_, options_);
  }

 private:
  std::shared_ptr<const Node> input_;
  Dataset::MapFn fn_;
  MapOptions options_;
  std::shared_ptr<const RandomAccess> ra_;
  mutable std::once_flag spec_once_;
  mutable ElementSpec spec_;
};

// ----- filter
class FilterIterator : public IteratorImpl {
 public:
  FilterIterator(std::unique_ptr<IteratorImpl> input, const Dataset::Predicate* pred)
      : input_(std::move(input)), pred_(pred) {}
  bool next(Element& out) override {
    while (input_->next(out)) {
      if ((*pred_)(out)) return true;
    }
    return false;
  }

 private:
  std::unique_ptr<IteratorImpl> input_;
  const Dataset::Predicate* pred_;
};

class FilterNode : public Node {
 public:
  FilterNode(std::shared_ptr<const Node> input, Dataset::Predicate pred)
      : input_(std::move(input)), pred_(std::move(pred)) {
    LOCKSTEP_CHECK(pred_, "Dataset::filter: the predicate is empty.");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<FilterIterator>(input_->make_iterator(ctx), &pred_);
  }
  int64_t cardinality() const override { return Dataset::kUnknown; }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::string to_string() const override { return input_->to_string() + " -> Filter"; }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_filter(std::move(in[0]), pred_);
  }

 private:
  std::shared_ptr<const Node> input_;
  Dataset::Predicate pred_;
};

// ----- repeat
class RepeatIterator : public IteratorImpl {
 public:
  RepeatIterator(const Node* input, int64_t count, IterContext ctx)
      : input_(input), count_(count), ctx_(ctx), input_card_(input->cardinality()) {}

  bool next(Element& out) override {
    while (start_epoch_if_needed()) {
      if (cur_->next(out)) {
        ++in_epoch_;
        return true;
      }
      end_epoch();
    }
    return false;
  }
  int64_t next_rows(const Element& dst, int64_t row, int64_t n) override {
    int64_t k = 0;
    while (k < n && start_epoch_if_needed()) {
      int64_t got = cur_->next_rows(dst, row + k, n - k);
      in_epoch_ += got;
      k += got;
      if (k < n) end_epoch();
    }
    return k;
  }
  int64_t skip(int64_t n) override {
    int64_t k = 0;
    while (k < n) {
      if (!cur_ && input_card_ > 0 && (count_ < 0 || epoch_ < count_)) {
        // Whole epochs are skipped without iterating them: only the epoch number changes.
        int64_t epochs = (n - k) / input_card_;
        if (count_ >= 0) epochs = std::min(epochs, count_ - epoch_);
        epoch_ += epochs;
        k += epochs * input_card_;
        if (k == n) break;
      }
      if (!start_epoch_if_needed()) break;
      int64_t got = cur_->skip(n - k);
      in_epoch_ += got;
      k += got;
      if (k < n) end_epoch();
    }
    return k;
  }

 private:
  bool start_epoch_if_needed() {
    if (done_) return false;
    if (cur_) return true;
    if (count_ >= 0 && epoch_ >= count_) {
      done_ = true;
      return false;
    }
    cur_ = input_->make_iterator({mix_key(ctx_.key, static_cast<uint64_t>(epoch_))});
    in_epoch_ = 0;
    return true;
  }
  void end_epoch() {
    cur_.reset();
    ++epoch_;
    if (in_epoch_ == 0) done_ = true;  // an empty input would otherwise repeat forever
  }

  const Node* input_;
  int64_t count_;
  IterContext ctx_;
  int64_t input_card_;
  std::unique_ptr<IteratorImpl> cur_;
  int64_t epoch_ = 0;
  int64_t in_epoch_ = 0;
  bool done_ = false;
};

class RepeatNode : public Node {
 public:
  RepeatNode(std::shared_ptr<const Node> input, int64_t count)
      : input_(std::move(input)), count_(count < 0 ? -1 : count) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<RepeatIterator>(input_.get(), count_, ctx);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c == 0 || count_ == 0) return 0;
    if (c == Dataset::kInfinite) return Dataset::kInfinite;
    if (count_ < 0) return c == Dataset::kUnknown ? Dataset::kUnknown : Dataset::kInfinite;
    if (c == Dataset::kUnknown) return Dataset::kUnknown;
    return c * count_;
  }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::string to_string() const override {
    return input_->to_string() + " -> Repeat(" + std::to_string(count_) + ")";
  }

  bool repeats_forever() const override { return count_ < 0 && input_->cardinality() != 0; }
  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_repeat(std::move(in[0]), count_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t count_;
};

// ----- batch
class BatchIterator : public IteratorImpl {
 public:
  BatchIterator(std::unique_ptr<IteratorImpl> input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}
  bool next(Element& out) override {
    if (done_ || !input_->next(first_)) {
      done_ = true;
      return false;
    }
    // A fresh batch tensor each step (cheap: storage is pooled) so that the consumer may keep it.
    out.resize(first_.size());
    for (size_t c = 0; c < first_.size(); ++c) {
      out[c] = Tensor(first_[c].shape().with_inserted(0, batch_size_), first_[c].dtype());
    }
    copy_element_into_rows(first_, out, 0, "batch");
    int64_t got = 1 + input_->next_rows(out, 1, batch_size_ - 1);
    if (got < batch_size_) {
      done_ = true;
      if (drop_remainder_) return false;
      for (Tensor& t : out) t = t.slice(0, got);
    }
    return true;
  }
  int64_t skip(int64_t n) override {
    int64_t k = 0;
    for (; k < n && !done_; ++k) {
      int64_t got = input_->skip(batch_size_);
      if (got < batch_size_) {
        done_ = true;
        return got > 0 && !drop_remainder_ ? k + 1 : k;
      }
    }
    return k;
  }

 private:
  std::unique_ptr<IteratorImpl> input_;
  int64_t batch_size_;
  bool drop_remainder_;
  Element first_;
  bool done_ = false;
};

class BatchNode : public Node {
 public:
  BatchNode(std::shared_ptr<const Node> input, int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {
    LOCKSTEP_CHECK(batch_size > 0, "Dataset::batch: batch_size must be > 0. Received ", batch_size,
                   ".");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<BatchIterator>(input_->make_iterator(ctx), batch_size_,
                                           drop_remainder_);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c < 0) return c;
    return drop_remainder_ ? c / batch_size_ : (c + batch_size_ - 1) / batch_size_;
  }
  ElementSpec element_spec() const override {
    ElementSpec spec = input_->element_spec();
    for (TensorSpec& s : spec) {
      s.shape.insert(s.shape.begin(), drop_remainder_ ? batch_size_ : TensorSpec::kUnknownDim);
    }
    return spec;
  }
  std::string to_string() const override {
    return input_->to_string() + " -> Batch(" + std::to_string(batch_size_) +
           (drop_remainder_ ? ", drop_remainder" : "") + ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_batch(std::move(in[0]), batch_size_, drop_remainder_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t batch_size_;
  bool drop_remainder_;
};

// ----- unbatch
class UnbatchIterator : public IteratorImpl {
 public:
  explicit UnbatchIterator(std::unique_ptr<IteratorImpl> input) : input_(std::move(input)) {}
  bool next(Element& out) override {
    while (index_ >= rows_) {
      if (!input_->next(current_)) return false;
      if (current_.empty()) continue;
      rows_ = -1;
      for (const Tensor& t : current_) {
        LOCKSTEP_CHECK(t.rank() > 0 && (rows_ < 0 || t.dim(0) == rows_),
                       "Dataset::unbatch: every component needs the same leading dimension. "
                       "Received ",
                       describe(current_), ".");
        rows_ = t.dim(0);
      }
      index_ = 0;
    }
    out.resize(current_.size());
    for (size_t c = 0; c < current_.size(); ++c) out[c] = current_[c].row(index_);
    ++index_;
    return true;
  }

 private:
  std::unique_ptr<IteratorImpl> input_;
  Element current_;
  int64_t rows_ = 0, index_ = 0;
};

class UnbatchNode : public Node {
 public:
  explicit UnbatchNode(std::shared_ptr<const Node> input) : input_(std::move(input)) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<UnbatchIterator>(input_->make_iterator(ctx));
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c == 0 || c == Dataset::kInfinite) return c;
    return Dataset::kUnknown;
  }
  ElementSpec element_spec() const override {
    ElementSpec spec = input_->element_spec();
    for (TensorSpec& s : spec) {
      LOCKSTEP_CHECK(!s.shape.empty(),
                     "Dataset::unbatch: components must have rank >= 1. Received ",
                     lockstep::to_string(spec), ".");
      s.shape.erase(s.shape.begin());
    }
    return spec;
  }
  std::string to_string() const override { return input_->to_string() + " -> Unbatch"; }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_unbatch(std::move(in[0]));
  }

 private:
  std::shared_ptr<const Node> input_;
};

// ----- take / skip / shard
class TakeIterator : public IteratorImpl {
 public:
  TakeIterator(std::unique_ptr<IteratorImpl> input, int64_t count)
      : input_(std::move(input)), left_(count) {}
  bool next(Element& out) override {
    if (left_ == 0 || !input_->next(out)) return false;
    --left_;
    return true;
  }
  int64_t next_rows(const Element& dst, int64_t row, int64_t n) override {
    int64_t got = left_ ? input_->next_rows(dst, row, std::min(n, left_)) : 0;
    left_ -= got;
    return got;
  }
  int64_t skip(int64_t n) override {
    int64_t got = left_ ? input_->skip(std::min(n, left_)) : 0;
    left_ -= got;
    return got;
  }

 private:
  std::unique_ptr<IteratorImpl> input_;
  int64_t left_;
};

// Shard, skip and take of a random-access input are random access (with offset and stride), so
// shuffle and batch keep their fast paths after them.
class StridedAccess : public RandomAccess {
 public:
  StridedAccess(std::shared_ptr<const RandomAccess> input, int64_t begin, int64_t stride,
                int64_t limit)
      : input_(std::move(input)), begin_(begin), stride_(stride) {
    int64_t n = input_->size();
    size_ = begin >= n ? 0 : (n - begin + stride - 1) / stride;
    if (limit >= 0) size_ = std::min(size_, limit);
  }
  int64_t size() const override { return size_; }
  void get(int64_t i, Element& out) const override { input_->get(begin_ + i * stride_, out); }
  void check_rows(const Element& dst) const override { input_->check_rows(dst); }
  void copy_row(int64_t i, const Element& dst, int64_t row) const override {
    input_->copy_row(begin_ + i * stride_, dst, row);
  }
  void copy_rows(int64_t i, int64_t n, const Element& dst, int64_t row) const override {
    if (stride_ == 1) return input_->copy_rows(begin_ + i, n, dst, row);
    RandomAccess::copy_rows(i, n, dst, row);
  }
  void gather_rows(std::span<const int64_t> idx, const Element& dst, int64_t row) const override {
    thread_local std::vector<int64_t> mapped;
    mapped.resize(idx.size());
    for (size_t k = 0; k < idx.size(); ++k) mapped[k] = begin_ + idx[k] * stride_;
    input_->gather_rows(mapped, dst, row);
  }

 private:
  std::shared_ptr<const RandomAccess> input_;
  int64_t begin_, stride_, size_;
};

class TakeNode : public Node {
 public:
  TakeNode(std::shared_ptr<const Node> input, int64_t count)
      : input_(std::move(input)), count_(count < 0 ? kAll : count) {
    if (auto ra = input_->random_access()) ra_ = std::make_shared<StridedAccess>(ra, 0, 1, count_);
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<TakeIterator>(input_->make_iterator(ctx), count_);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c >= 0) return std::min(c, count_);
    if (count_ == kAll) return c;
    return c == Dataset::kInfinite ? count_ : Dataset::kUnknown;
  }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::shared_ptr<const RandomAccess> random_access() const override { return ra_; }
  std::string to_string() const override {
    return input_->to_string() + " -> Take(" + (count_ == kAll ? "-1" : std::to_string(count_)) +
           ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_take(std::move(in[0]), count_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t count_;
  std::shared_ptr<const RandomAccess> ra_;
};

// Skips `pending` input elements lazily before each element (skip: once; shard: between).
class StrideIterator : public IteratorImpl {
 public:
  StrideIterator(std::unique_ptr<IteratorImpl> input, int64_t first, int64_t gap)
      : input_(std::move(input)), pending_(first), gap_(gap) {}
  bool next(Element& out) override {
    if (!catch_up() || !input_->next(out)) return end();
    pending_ = gap_;
    return true;
  }
  int64_t next_rows(const Element& dst, int64_t row, int64_t n) override {
    if (gap_ != 0) return IteratorImpl::next_rows(dst, row, n);
    if (!catch_up()) return end();
    return input_->next_rows(dst, row, n);
  }
  int64_t skip(int64_t n) override {
    if (gap_ != 0) return IteratorImpl::skip(n);
    if (!catch_up()) return end();
    return input_->skip(n);
  }

 private:
  bool catch_up() {
    if (done_) return false;
    if (pending_ > 0) {
      if (input_->skip(pending_) < pending_) return false;
      pending_ = 0;
    }
    return true;
  }
  bool end() {
    done_ = true;
    return false;
  }
  std::unique_ptr<IteratorImpl> input_;
  int64_t pending_, gap_;
  bool done_ = false;
};

class SkipNode : public Node {
 public:
  SkipNode(std::shared_ptr<const Node> input, int64_t count)
      : input_(std::move(input)), count_(count < 0 ? kAll : count) {
    if (auto ra = input_->random_access()) {
      ra_ = std::make_shared<StridedAccess>(ra, std::min(count_, ra->size()), 1, -1);
    }
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<StrideIterator>(input_->make_iterator(ctx), count_, 0);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c >= 0) return std::max<int64_t>(c - count_, 0);
    if (count_ == kAll && c == Dataset::kInfinite) return 0;
    return c;
  }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::shared_ptr<const RandomAccess> random_access() const override { return ra_; }
  std::string to_string() const override {
    return input_->to_string() + " -> Skip(" + (count_ == kAll ? "-1" : std::to_string(count_)) +
           ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_skip(std::move(in[0]), count_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t count_;
  std::shared_ptr<const RandomAccess> ra_;
};

class ShardNode : public Node {
 public:
  ShardNode(std::shared_ptr<const Node> input, int64_t num_shards, int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), index_(index) {
    LOCKSTEP_CHECK(num_shards > 0 && index >= 0 && index < num_shards,
                   "Dataset::shard: expected num_shards > 0 and 0 <= index < num_shards. "
                   "Received num_shards=",
                   num_shards, ", index=", index, ".");
    if (auto ra = input_->random_access()) {
      ra_ = std::make_shared<StridedAccess>(ra, index, num_shards, -1);
    }
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<StrideIterator>(input_->make_iterator(ctx), index_, num_shards_ - 1);
  }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c < 0) return c;
    return c > index_ ? (c - index_ + num_shards_ - 1) / num_shards_ : 0;
  }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::shared_ptr<const RandomAccess> random_access() const override { return ra_; }
  std::string to_string() const override {
    return input_->to_string() + " -> Shard(" + std::to_string(num_shards_) + ", " +
           std::to_string(index_) + ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_shard(std::move(in[0]), num_shards_, index_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t num_shards_, index_;
  std::shared_ptr<const RandomAccess> ra_;
};

}  // namespace

std::shared_ptr<const Node> make_map(std::shared_ptr<const Node> input, Dataset::MapFn fn,
                                     MapOptions options) {
  return std::make_shared<MapNode>(std::move(input), std::move(fn), std::move(options));
}
std::shared_ptr<const Node> make_filter(std::shared_ptr<const Node> input,
                                        Dataset::Predicate predicate) {
  return std::make_shared<FilterNode>(std::move(input), std::move(predicate));
}
std::shared_ptr<const Node> make_repeat(std::shared_ptr<const Node> input, int64_t count) {
  return std::make_shared<RepeatNode>(std::move(input), count);
}
std::shared_ptr<const Node> make_batch(std::shared_ptr<const Node> input, int64_t batch_size,
                                       bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}
std::shared_ptr<const Node> make_unbatch(std::shared_ptr<const Node> input) {
  return std::make_shared<UnbatchNode>(std::move(input));
}
std::shared_ptr<const Node> make_take(std::shared_ptr<const Node> input, int64_t count) {
  return std::make_shared<TakeNode>(std::move(input), count);
}
std::shared_ptr<const Node> make_skip(std::shared_ptr<const Node> input, int64_t count) {
  return std::make_shared<SkipNode>(std::move(input), count);
}
std::shared_ptr<const Node> make_shard(std::shared_ptr<const Node> input, int64_t num_shards,
                                       int64_t index) {
  return std::make_shared<ShardNode>(std::move(input), num_shards, index);
}

}  // namespace lockstep::data_internal
