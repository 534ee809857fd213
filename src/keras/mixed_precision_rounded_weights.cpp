#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/mixed_precision.h"

namespace lockstep::keras::mixed_precision {

namespace {

// The two kinds of copy: float32 holding bfloat16 values, and bfloat16.
constexpr int kValues = 0, kBfloat16 = 1;

// The rounded copies of one variable, one per kind and buffer. `current` is read without the lock
// on every forward pass; the lock only serialises the (re)computation when several replicas find
// it stale and the allocation of the next buffer's copy.
class RoundedWeights final : public Variable::Companion {
 public:
  std::mutex mu;
  std::atomic<bool> current[2][2] = {{false, false}, {false, false}};  // [kind][buffer]
  Tensor copies[2][2];
  // next_rounded_weights_out() handed out the copy of kind `next_kind`, buffer `next_promised`,
  // since the last flip (-1: not); its writer fills it before the flip.
  std::atomic<int> next_promised{-1};
  std::atomic<int> next_kind{-1};

  void value_assigned(int buffer) override {
    for (auto& kind : current) kind[buffer].store(false, std::memory_order_release);
  }
  void buffers_flipped(int buffer) override {
    const bool written = next_promised.exchange(-1, std::memory_order_acq_rel) == buffer;
    const int kind = next_kind.load(std::memory_order_acquire);
    for (int k = 0; k < 2; ++k) {
      current[k][buffer].store(written && k == kind && copies[k][buffer].defined(),
                               std::memory_order_release);
    }
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

Tensor current_copy(const Variable& variable, int kind, const char* what) {
  const Tensor& v = variable.raw_value();
  LOCKSTEP_CHECK(v.dtype() == DType::float32, what,
                 ": expected a float32 variable. "
                 "Received: variable '",
                 variable.name(), "' ", v.describe(), ".");
  RoundedWeights& r = companion_of(variable);
  const int c = variable.current_buffer();
  if (!r.current[kind][c].load(std::memory_order_acquire)) {
    std::lock_guard lock(r.mu);
    if (!r.current[kind][c].load(std::memory_order_relaxed)) {
      Tensor& copy = r.copies[kind][c];
      const size_t n = static_cast<size_t>(v.num_elements());
      if (kind == kValues) {
        if (!copy.defined()) copy = Tensor(v.shape(), DType::float32);
        round_to_bfloat16_values(v.data<float>(), copy.data<float>(), n);
      } else {
        if (!copy.defined()) copy = Tensor(v.shape(), DType::bfloat16);
        float_to_bfloat16(v.data<float>(), copy.data<bfloat16>(), n);
      }
      r.current[kind][c].store(true, std::memory_order_release);
    }
  }
  return r.copies[kind][c];
}

}  // namespace

Tensor rounded_weights(const Variable& variable) {
  return current_copy(variable, kValues, "rounded_weights");
}

Tensor bfloat16_weights(const Variable& variable) {
  return current_copy(variable, kBfloat16, "bfloat16_weights");
}

distribute::RoundedOut rounded_weights_out(const Variable& variable) {
  RoundedWeights* r = existing(variable);
  if (r == nullptr) return {};
  const int c = variable.current_buffer();
  const bool values = r->current[kValues][c].load(std::memory_order_acquire);
  const bool bf16 = r->current[kBfloat16][c].load(std::memory_order_acquire);
  // One writer keeps one kind current; with both in use the bfloat16 copy goes stale and is
  // recomputed on its next read.
  if (values && bf16) r->current[kBfloat16][c].store(false, std::memory_order_release);
  if (values) return {.values = r->copies[kValues][c].data<float>()};
  if (bf16) return {.bf16 = r->copies[kBfloat16][c].data<bfloat16>()};
  return {};
}

distribute::RoundedOut next_rounded_weights_out(const Variable& variable) {
  const Tensor& next = variable.next_value();
  RoundedWeights* r = existing(variable);
  if (r == nullptr) return {};
  const int c = variable.current_buffer();
  // The kind the layers read now (the bfloat16 copy when both are: the other is recomputed).
  int kind = -1;
  if (r->current[kBfloat16][c].load(std::memory_order_acquire)) {
    kind = kBfloat16;
  } else if (r->current[kValues][c].load(std::memory_order_acquire)) {
    kind = kValues;
  }
  if (kind < 0) {
    // Every update asks: a promise left by an update that never flipped must not outlive it.
    r->next_promised.store(-1, std::memory_order_release);
    return {};
  }
  std::lock_guard lock(r->mu);
  Tensor& copy = r->copies[kind][1 - c];
  if (!copy.defined()) {
    copy = Tensor(next.shape(), kind == kValues ? DType::float32 : DType::bfloat16);
  }
  r->next_kind.store(kind, std::memory_order_release);
  r->next_promised.store(1 - c, std::memory_order_release);
  if (kind == kValues) return {.values = copy.data<float>()};
  return {.bf16 = copy.data<bfloat16>()};
}

void swap_next_rounded_weights(const Variable& variable, Tensor& spare) {
  RoundedWeights* r = existing(variable);
  const int buffer = r != nullptr ? r->next_promised.load(std::memory_order_acquire) : -1;
  LOCKSTEP_CHECK_AS(FailedPrecondition, buffer >= 0, "swap_next_rounded_weights: variable '",
                    variable.name(), "' has no rounded copy handed out for its next buffer.");
  const int kind = r->next_kind.load(std::memory_order_acquire);
  std::lock_guard lock(r->mu);
  Tensor& copy = r->copies[kind][buffer];
  LOCKSTEP_CHECK_AS(
      FailedPrecondition,
      spare.defined() && spare.dtype() == copy.dtype() && spare.shape() == copy.shape(),
      "swap_next_rounded_weights: variable '", variable.name(), "' needs a spare ", copy.describe(),
      ". Received: ", spare.defined() ? spare.describe() : std::string("an undefined tensor"), ".");
  std::swap(copy, spare);
}

}  // namespace lockstep::keras::mixed_precision
