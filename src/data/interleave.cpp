// Dataset::interleave: tf.data's cycle over the datasets of consecutive input elements.
#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

#include "internal.h"
#include "lockstep/core/check.h"

namespace lockstep::data_internal {
namespace {

struct InterleaveParams {
  Dataset::InterleaveFn fn;
  int64_t cycle_length;
  int64_t block_length;
  bool parallel;
};

class InterleaveIterator : public IteratorImpl {
 public:
  InterleaveIterator(std::unique_ptr<IteratorImpl> input, const InterleaveParams* p)
      : input_(std::move(input)), p_(p), slots_(static_cast<size_t>(p->cycle_length)) {}

  // The loop of tf.data's InterleaveDatasetOp: an empty slot is filled from the input; a slot whose
  // dataset ends is closed and its turn passes.
  bool next(Element& out) override {
    while (!input_done_ || open_ > 0) {
      std::optional<Iterator>& slot = slots_[cycle_];
      if (slot) {
        if (slot->next(out)) {
          if (++block_ == p_->block_length) advance();
          return true;
        }
        slot.reset();
        --open_;
        advance();
      } else if (!input_done_) {
        if (input_->next(in_)) {
          Dataset ds = p_->fn(in_);
          if (p_->parallel) ds = ds.prefetch(std::max<int64_t>(p_->block_length, 2));
          slot.emplace(ds.make_iterator());
          ++open_;
        } else {
          input_done_ = true;
        }
      } else {
        advance();
      }
    }
    return false;
  }

 private:
  void advance() {
    block_ = 0;
    cycle_ = (cycle_ + 1) % slots_.size();
  }
  std::unique_ptr<IteratorImpl> input_;
  const InterleaveParams* p_;
  std::vector<std::optional<Iterator>> slots_;
  Element in_;
  size_t cycle_ = 0;
  int64_t block_ = 0;
  int64_t open_ = 0;
  bool input_done_ = false;
};

class InterleaveNode : public Node {
 public:
  InterleaveNode(std::shared_ptr<const Node> input, InterleaveParams p)
      : input_(std::move(input)), p_(std::move(p)) {
    LOCKSTEP_CHECK(p_.fn, "Dataset::interleave: the function is empty.");
    if (p_.cycle_length == Dataset::AUTOTUNE) {
      p_.cycle_length = std::max<int64_t>(1, std::thread::hardware_concurrency());
    }
    LOCKSTEP_CHECK(p_.cycle_length > 0,
                   "Dataset::interleave: expected cycle_length > 0 or AUTOTUNE. Received ",
                   p_.cycle_length, ".");
    LOCKSTEP_CHECK(p_.block_length > 0, "Dataset::interleave: expected block_length > 0. Received ",
                   p_.block_length, ".");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    return std::make_unique<InterleaveIterator>(input_->make_iterator(ctx), &p_);
  }
  int64_t cardinality() const override {
    return input_->cardinality() == 0 ? 0 : Dataset::kUnknown;
  }
  ElementSpec element_spec() const override {
    std::call_once(spec_once_, [&] {
      auto it = input_->make_iterator({});
      Element in;
      if (it->next(in)) spec_ = p_.fn(in).element_spec();
    });
    return spec_;
  }
  std::string to_string() const override {
    return input_->to_string() + " -> Interleave(cycle " + std::to_string(p_.cycle_length) +
           ", block " + std::to_string(p_.block_length) + (p_.parallel ? ", parallel)" : ")");
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return std::make_shared<InterleaveNode>(std::move(in[0]), p_);
  }

 private:
  std::shared_ptr<const Node> input_;
  InterleaveParams p_;
  mutable std::once_flag spec_once_;
  mutable ElementSpec spec_;
};

}  // namespace

std::shared_ptr<const Node> make_interleave(std::shared_ptr<const Node> input,
                                            Dataset::InterleaveFn fn, int64_t cycle_length,
                                            int64_t block_length, bool parallel) {
  return std::make_shared<InterleaveNode>(
      std::move(input), InterleaveParams{std::move(fn), cycle_length, block_length, parallel});
}

}  // namespace lockstep::data_internal
