// Shuffle: tf.data's buffered algorithm. Fill a buffer of `buffer_size` elements; each output is
// buffer[j] for j uniform in the buffer, and its slot is refilled with the next input element (or,
// once the input is exhausted, with the last buffer entry). Over a random-access input the buffer
// holds indices instead of elements: the same random draws give the same order, but nothing is
// copied until batch gathers the chosen rows.
#include <algorithm>

#include "internal.h"
#include "lockstep/core/check.h"
#include "lockstep/core/random.h"

namespace lockstep::data_internal {
namespace {

uint64_t shuffle_stream(const IterContext& ctx, bool reshuffle) {
  return reshuffle ? ctx.key : 0;
}

class IndexShuffleIterator : public IteratorImpl {
 public:
  IndexShuffleIterator(std::shared_ptr<const RandomAccess> ra, int64_t buffer_size, uint64_t seed,
                       uint64_t stream)
      : ra_(std::move(ra)), size_(ra_->size()), buffer_size_(buffer_size), rng_(seed, stream) {
    buffer_.reserve(static_cast<size_t>(std::min(buffer_size_, size_)));
  }
  bool next(Element& out) override {
    int64_t i = next_index();
    if (i < 0) return false;
    ra_->get(i, out);
    return true;
  }
  int64_t next_rows(const Element& dst, int64_t row, int64_t n) override {
    // Draw the batch's indices first, then gather them in one call (which can prefetch ahead).
    draw_indices(n);
    if (indices_.empty()) return 0;
    ra_->check_rows(dst);
    ra_->gather_rows(indices_, dst, row);
    return static_cast<int64_t>(indices_.size());
  }
  int64_t skip(int64_t n) override {
    int64_t k = 0;
    while (k < n && next_index() >= 0) ++k;
    return k;
  }

 private:
  // next_index() n times (fewer at the end) into indices_, with the same random draws and the
  // same buffer updates, but the slots are drawn first and prefetched: each read of buffer_[j]
  // is a random access into a buffer as large as the dataset's index (a cache miss, once per
  // element), and this way the misses of a batch overlap instead of following one another.
  void draw_indices(int64_t n) {
    indices_.clear();
    slots_.clear();
    while (static_cast<int64_t>(buffer_.size()) < buffer_size_ && next_input_ < size_) {
      buffer_.push_back(next_input_++);
    }
    // The buffer's length at each draw is known in advance: it stays full while inputs remain
    // to refill the drawn slot, then shrinks by one per draw.
    size_t len = buffer_.size();
    int64_t refills = size_ - next_input_;
    for (int64_t k = 0; k < n && len > 0; ++k) {
      const size_t j = static_cast<size_t>(rng_.uniform_int(len));
      slots_.push_back(j);
      __builtin_prefetch(buffer_.data() + j);
      if (refills > 0) {
        --refills;
      } else {
        --len;
      }
    }
    for (size_t j : slots_) {
      indices_.push_back(buffer_[j]);
      if (next_input_ < size_) {
        buffer_[j] = next_input_++;
      } else {
        buffer_[j] = buffer_.back();
        buffer_.pop_back();
      }
    }
  }

  int64_t next_index() {
    while (static_cast<int64_t>(buffer_.size()) < buffer_size_ && next_input_ < size_) {
      buffer_.push_back(next_input_++);
    }
    if (buffer_.empty()) return -1;
    size_t j = static_cast<size_t>(rng_.uniform_int(buffer_.size()));
    int64_t result = buffer_[j];
    if (next_input_ < size_) {
      buffer_[j] = next_input_++;
    } else {
      buffer_[j] = buffer_.back();
      buffer_.pop_back();
    }
    return result;
  }

  std::shared_ptr<const RandomAccess> ra_;
  int64_t size_, buffer_size_;
  Generator rng_;
  std::vector<int64_t> buffer_;
  std::vector<int64_t> indices_;
  std::vector<size_t> slots_;
  int64_t next_input_ = 0;
};

class ElementShuffleIterator : public IteratorImpl {
 public:
  ElementShuffleIterator(std::unique_ptr<IteratorImpl> input, int64_t buffer_size, uint64_t seed,
                         uint64_t stream)
      : input_(std::move(input)), buffer_size_(buffer_size), rng_(seed, stream) {}
  bool next(Element& out) override {
    while (!input_done_ && static_cast<int64_t>(buffer_.size()) < buffer_size_) {
      buffer_.emplace_back();
      if (!input_->next(buffer_.back())) {
        buffer_.pop_back();
        input_done_ = true;
      }
    }
    if (buffer_.empty()) return false;
    size_t j = static_cast<size_t>(rng_.uniform_int(buffer_.size()));
    std::swap(out, buffer_[j]);
    if (input_done_ || !input_->next(buffer_[j])) {
      input_done_ = true;
      if (j + 1 != buffer_.size()) buffer_[j] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return true;
  }

 private:
  std::unique_ptr<IteratorImpl> input_;
  int64_t buffer_size_;
  Generator rng_;
  std::vector<Element> buffer_;
  bool input_done_ = false;
};

class ShuffleNode : public Node {
 public:
  ShuffleNode(std::shared_ptr<const Node> input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {
    LOCKSTEP_CHECK(buffer_size > 0, "Dataset::shuffle: buffer_size must be > 0. Received ",
                   buffer_size, ".");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    uint64_t stream = shuffle_stream(ctx, reshuffle_);
    if (auto ra = input_->random_access()) {
      return std::make_unique<IndexShuffleIterator>(std::move(ra), buffer_size_, seed_, stream);
    }
    return std::make_unique<ElementShuffleIterator>(input_->make_iterator(ctx), buffer_size_, seed_,
                                                    stream);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::string to_string() const override {
    return input_->to_string() + " -> Shuffle(" + std::to_string(buffer_size_) + ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_shuffle(std::move(in[0]), buffer_size_, seed_, reshuffle_);
  }

 private:
  std::shared_ptr<const Node> input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

}  // namespace

std::shared_ptr<const Node> make_shuffle(std::shared_ptr<const Node> input, int64_t buffer_size,
                                         uint64_t seed, bool reshuffle) {
  return std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed, reshuffle);
}

}  // namespace lockstep::data_internal
