#include <atomic>
#include <memory>
#include <mutex>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/mixed_precision.h"

namespace lockstep::keras::mixed_precision {

namespace {

// The rounded copies of one variable, one per buffer. `current` is read without the lock on every
// forward pass; the lock only serialises the (re)computation when several replicas find it stale
// and the allocation of the next buffer's copy.
class RoundedWeights final : public Variable::Companion {
 public:
  std::mutex mu;
  std::atomic<bool> current[2] = {false, false};
  Tensor copies[2];
  // next_rounded_weights_data() handed out the copy of buffer `next_promised` since the last
  // flip (-1: not), whose writer fills it before the flip.
  std::atomic<int> next_promised{-1};

  void value_assigned(int buffer) override {
    current[buffer].store(false, std::memory_order_release);
  }
  void buffers_flipped(int buffer) override {
    const bool written = next_promised.exchange(-1, std::memory_order_acq_rel) == buffer;
    current[buffer].store(written && copies[buffer].defined(), std::memory_order_release);
  }
};

RoundedWeights* existing(const Variable& v) {
  Variable::Companion* c = v.companion();
  if (c == nullptr) return nullptr;
  auto* r = dynamic_cast<RoundedWeights*>(c);
  LOCKSTEP_CHECK_AS(Internal, r != nullptr, "mixed precision: variable '", v.name(),
                    "' carries a companion of another kind; it cannot keep a rounded copy.");
  return r;
}

RoundedWeights& companion_of(const Variable& v) {
  if (RoundedWeights* r = existing(v)) return *r;
  v.attach_companion(std::make_unique<RoundedWeights>());
  return *existing(v);
}

}  // namespace

Tensor rounded_weights(const Variable& variable) {
  const Tensor& v = variable.raw_value();
  LOCKSTEP_CHECK(v.dtype() == DType::float32,
                 "rounded_weights: expected a float32 variable. "
                 "Received: variable '",
                 variable.name(), "' ", v.describe(), ".");
  RoundedWeights& r = companion_of(variable);
  const int c = variable.current_buffer();
  if (!r.current[c].load(std::memory_order_acquire)) {
    std::lock_guard lock(r.mu);
    if (!r.current[c].load(std::memory_order_relaxed)) {
      if (!r.copies[c].defined()) r.copies[c] = Tensor(v.shape(), DType::float32);
      round_to_bfloat16_values(v.data<float>(), r.copies[c].data<float>(),
                               static_cast<size_t>(v.num_elements()));
      r.current[c].store(true, std::memory_order_release);
    }
  }
  return r.copies[c];
}

float* rounded_weights_data(const Variable& variable) {
  RoundedWeights* r = existing(variable);
  if (r == nullptr) return nullptr;
  const int c = variable.current_buffer();
  if (!r->current[c].load(std::memory_order_acquire)) return nullptr;
  return r->copies[c].data<float>();
}

float* next_rounded_weights_data(const Variable& variable) {
  const Tensor& next = variable.next_value();
  RoundedWeights* r = existing(variable);
  if (r == nullptr) return nullptr;
  const int c = variable.current_buffer();
  if (!r->current[c].load(std::memory_order_acquire)) {
    // Every update asks: a promise left by an update that never flipped must not outlive it.
    r->next_promised.store(-1, std::memory_order_release);
    return nullptr;
  }
  std::lock_guard lock(r->mu);
  if (!r->copies[1 - c].defined()) r->copies[1 - c] = Tensor(next.shape(), DType::float32);
  r->next_promised.store(1 - c, std::memory_order_release);
  return r->copies[1 - c].data<float>();
}

}  // namespace lockstep::keras::mixed_precision
