#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/mixed_precision.h"

namespace lockstep::keras::mixed_precision {

namespace {

// The kinds of copy: float32 holding bfloat16 values, bfloat16, and bfloat16 laid out for a
// matmul's kernel (PairedRowsLayout).
constexpr int kValues = 0, kBfloat16 = 1, kPaired = 2, kKinds = 3;

// The rounded copies of one variable, one per kind and buffer. `current` is read without the lock
// on every forward pass; the lock only serialises the (re)computation when several replicas find
// it stale and the allocation of the next buffer's copy.
class RoundedWeights final : public Variable::Companion {
 public:
  std::mutex mu;
  std::atomic<bool> current[kKinds][2] = {{false, false}, {false, false}, {false, false}};
  Tensor copies[kKinds][2];  // [kind][buffer]
  // The paired copy's layout (process-lifetime; see ops::bf16_kernel_layout), set once.
  std::atomic<const PairedRowsLayout*> layout{nullptr};
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
    for (int k = 0; k < kKinds; ++k) {
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

// A zeroed copy of `kind` for variable value v (the paired layout's padding must read zero).
Tensor new_copy(const RoundedWeights& r, const Tensor& v, int kind) {
  if (kind == kPaired) return Tensor::zeros(Shape{r.layout.load()->size}, DType::bfloat16);
  return Tensor(v.shape(), kind == kValues ? DType::float32 : DType::bfloat16);
}

// Every element of the paired copy from the float32 values, a block at a time.
void fill_paired(const PairedRowsLayout& layout, const float* v, bfloat16* copy, size_t n) {
  constexpr size_t kBlock = 1024;
  bfloat16 block[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    float_to_bfloat16(v + b, block, m);
    store_paired_rows<0>(layout, reinterpret_cast<uint16_t*>(copy), static_cast<int64_t>(b),
                         reinterpret_cast<const uint16_t*>(block), static_cast<int64_t>(m));
  }
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
      if (!copy.defined()) copy = new_copy(r, v, kind);
      if (kind == kValues) {
        round_to_bfloat16_values(v.data<float>(), copy.data<float>(), n);
      } else if (kind == kBfloat16) {
        float_to_bfloat16(v.data<float>(), copy.data<bfloat16>(), n);
      } else {
        fill_paired(*r.layout.load(), v.data<float>(), copy.data<bfloat16>(), n);
      }
      r.current[kind][c].store(true, std::memory_order_release);
    }
  }
  return r.copies[kind][c];
}

// A process-wide switch: off where the environment sets `name` to 0, on where it sets it to
// anything else, `otherwise` where it is unset.
bool environment_switch(const char* name, bool otherwise) {
  const char* e = std::getenv(name);
  return e == nullptr ? otherwise : std::string(e) != "0";
}

std::atomic<bool>& paired_flag() {
  static std::atomic<bool> flag{environment_switch("LOCKSTEP_PAIRED_KERNELS", true)};
  return flag;
}

// On by default where oneDNN's bfloat16 matmul runs on AMX, whose kernel copies a strided xᵀ
// transposed before it multiplies; the AVX512_BF16 kernel reads the strided view nearly as fast
// as a dense copy, and there writing the copy costs the forward pass more than the gradient saves
// (docs/performance.md). LOCKSTEP_TRANSPOSED_INPUTS=0 or 1 decides instead.
std::atomic<bool>& transposed_inputs_flag() {
  static std::atomic<bool> flag{environment_switch("LOCKSTEP_TRANSPOSED_INPUTS",
                                                   effective_cpu_isa() >= CpuIsa::avx512_core_amx)};
  return flag;
}

}  // namespace

void set_transposed_input_copies(bool enabled) {
  transposed_inputs_flag().store(enabled, std::memory_order_relaxed);
}

bool transposed_input_copies() {
  return transposed_inputs_flag().load(std::memory_order_relaxed);
}

void set_paired_kernels(bool enabled) {
  paired_flag().store(enabled, std::memory_order_relaxed);
}

bool paired_kernels() {
  return paired_flag().load(std::memory_order_relaxed);
}

Tensor rounded_weights(const Variable& variable) {
  return current_copy(variable, kValues, "rounded_weights");
}

Tensor bfloat16_weights(const Variable& variable) {
  return current_copy(variable, kBfloat16, "bfloat16_weights");
}

Tensor paired_bfloat16_weights(const Variable& variable, const PairedRowsLayout& layout) {
  const Tensor& v = variable.raw_value();
  LOCKSTEP_CHECK(v.rank() == 2 && v.dim(0) == layout.rows && v.dim(1) == layout.cols,
                 "paired_bfloat16_weights: variable '", variable.name(), "' ", v.describe(),
                 " does not fit a layout for a ", layout.rows, " x ", layout.cols, " matrix.");
  RoundedWeights& r = companion_of(variable);
  const PairedRowsLayout* expected = nullptr;
  if (!r.layout.compare_exchange_strong(expected, &layout) && !(*expected == layout)) return {};
  return current_copy(variable, kPaired, "paired_bfloat16_weights");
}

distribute::RoundedOut rounded_weights_out(const Variable& variable) {
  RoundedWeights* r = existing(variable);
  if (r == nullptr) return {};
  const int c = variable.current_buffer();
  // One writer keeps one kind current: the first of values, bfloat16 and paired in use; the others
  // go stale and are recomputed on their next read.
  int kind = -1;
  for (int k = 0; k < kKinds; ++k) {
    if (!r->current[k][c].load(std::memory_order_acquire)) continue;
    if (kind < 0) {
      kind = k;
    } else {
      r->current[k][c].store(false, std::memory_order_release);
    }
  }
  if (kind == kValues) return {.values = r->copies[kValues][c].data<float>()};
  if (kind == kBfloat16) return {.bf16 = r->copies[kBfloat16][c].data<bfloat16>()};
  if (kind == kPaired) return {.bf16 = r->copies[kPaired][c].data<bfloat16>(), .layout = r->layout};
  return {};
}

distribute::RoundedOut next_rounded_weights_out(const Variable& variable) {
  const Tensor& next = variable.next_value();
  RoundedWeights* r = existing(variable);
  if (r == nullptr) return {};
  const int c = variable.current_buffer();
  // The kind the layers read now (the first in use of bfloat16, values and paired: the others
  // are recomputed).
  int kind = -1;
  for (const int k : {kBfloat16, kValues, kPaired}) {
    if (r->current[k][c].load(std::memory_order_acquire)) {
      kind = k;
      break;
    }
  }
  if (kind < 0) {
    // Every update asks: a promise left by an update that never flipped must not outlive it.
    r->next_promised.store(-1, std::memory_order_release);
    return {};
  }
  std::lock_guard lock(r->mu);
  Tensor& copy = r->copies[kind][1 - c];
  if (!copy.defined()) copy = new_copy(*r, next, kind);
  r->next_kind.store(kind, std::memory_order_release);
  r->next_promised.store(1 - c, std::memory_order_release);
  if (kind == kValues) return {.values = copy.data<float>()};
  if (kind == kPaired) return {.bf16 = copy.data<bfloat16>(), .layout = r->layout};
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
