#pragma once
// ElementwiseUpdate: what the replicated training step needs from an optimizer. The strategy sums
// the replicas' gradients and owns the variables' buffers; the optimizer (a Keras optimizer
// implements this) supplies the rule that turns (variable, summed gradient, slots) into their next
// values, one contiguous run of elements at a time. Keeping the rule elementwise is what lets the
// step split the update into blocks that any thread may run, and run again.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/paired_rows_layout.h"

namespace lockstep::distribute {

// Where an update writes the bfloat16 rounding of each new weight for the layers that multiply by
// it: as float32 holding bfloat16 values (round_to_bfloat16_value; the mixed_bfloat16 policy's
// float32 form) or as bfloat16 (what oneDNN's bfloat16 kernels read). At most one is set; neither:
// nothing to write. A bfloat16 copy may be laid out for a matmul's kernel (`layout`, see
// lockstep/core/paired_rows_layout.h): then bf16 is the layout's start, and element i of the
// destination is element `offset` + i of the variable, at its place in the layout.
struct RoundedOut {
  float* values = nullptr;
  bfloat16* bf16 = nullptr;
  const PairedRowsLayout* layout = nullptr;
  size_t offset = 0;

  explicit operator bool() const { return values != nullptr || bf16 != nullptr; }
  // The same destination from element `offset` on.
  RoundedOut at(size_t from) const {
    if (layout != nullptr) return {nullptr, bf16, layout, offset + from};
    return {values != nullptr ? values + from : nullptr, bf16 != nullptr ? bf16 + from : nullptr};
  }
  // Writes count bfloat16 values, elements [from, from + count) of this destination, wherever
  // they go: the copy path of an update that computed them elsewhere first.
  void store(size_t from, const bfloat16* rounded, size_t count) const;
};

// Which of an update's outputs may bypass the caches (non-temporal stores): the new weights, the
// new slots, the rounded copy (RoundedOut). The step asks for it where nothing reads them before
// the next step but other cores or memory (BufferedUpdate's streaming); a hint, which apply() may
// ignore. The caller orders such stores (a fence) before another thread reads them.
struct Streamed {
  bool weights = false;
  bool slots = false;
  bool rounded = false;

  explicit operator bool() const { return weights || slots || rounded; }
};

class ElementwiseUpdate {
 public:
  virtual ~ElementwiseUpdate() = default;

  // Binds the update to the step's variables, in the step's order (index i below is vars[i]).
  virtual void bind(const std::vector<Variable>& vars) = 0;
  // The per-element state kept for variable i (float32, shaped like it: Adam's m and v), in the
  // order apply() receives them. The step double-buffers these with the variable.
  virtual std::vector<Variable> slot_variables(size_t i) const = 0;
  // True when the rule needs each summed gradient's squared L2 norm first (clipping by norm).
  virtual bool wants_gradient_norms() const { return false; }
  // False when apply() never writes g: the step may then hand it a replica's gradient directly.
  virtual bool rewrites_gradient() const { return true; }
  // Once per update, before any apply(), on one thread. `squared_norms[i]` = ||g_i||² of the
  // summed gradient (float64, in a fixed order) when wants_gradient_norms(), else empty. A
  // variable no replica produced a gradient for gets a zero gradient (as the sum of nothing).
  virtual void begin_update(std::span<const double> squared_norms) = 0;
  // The rule on elements [offset, offset + n) of variable i: reads w (the variable), g (the
  // summed gradient, which it may overwrite) and slots (slot_variables(i)'s elements); writes the
  // new values to w_out and slots_out and, when rounded is set, the bfloat16 rounding of the new w
  // to it (RoundedOut), the outputs `streamed` names preferably with non-temporal stores. An
  // output is either an array of its own or the very array of its input (an update in place:
  // element j is read before it is written); no other arrays overlap. Called concurrently for
  // disjoint or identical ranges; must depend on nothing but these elements and what
  // begin_update() computed.
  virtual void apply(size_t i, int64_t offset, const float* w, float* g,
                     std::span<const float* const> slots, float* w_out,
                     std::span<float* const> slots_out, size_t n, RoundedOut rounded,
                     Streamed streamed) const = 0;
  // apply() on the sum of two gradients, g = a + b element by element in float32 (the step's
  // common case: two local replicas), for rules that can add as they read instead of summing into
  // a buffer first. The same bits as writing a + b into g and calling apply(); g is n floats of
  // scratch (the default does exactly that). a and b are not written.
  virtual void apply_sum_of_two(size_t i, int64_t offset, const float* w, const float* a,
                                const float* b, float* g, std::span<const float* const> slots,
                                float* w_out, std::span<float* const> slots_out, size_t n,
                                RoundedOut rounded, Streamed streamed) const;
  // The same on two bfloat16 gradients (two replicas' gradients of a weight multiplied in
  // bfloat16), each widened to float32 before the sum: the same bits as writing the widened
  // a + b into g and calling apply() (the default does exactly that).
  virtual void apply_sum_of_two(size_t i, int64_t offset, const float* w, const bfloat16* a,
                                const bfloat16* b, float* g, std::span<const float* const> slots,
                                float* w_out, std::span<float* const> slots_out, size_t n,
                                RoundedOut rounded, Streamed streamed) const;
  // Once per update, after every apply() and after the step has made the variables' next buffers
  // current (or, in place, written the current ones), on one thread (e.g. iterations += 1).
  virtual void end_update() = 0;
  // Where apply() writes the bfloat16 rounding of variable i's next values, or nothing: a copy the
  // update's owner keeps current beside the variable (Keras' mixed precision keeps the weights'
  // bfloat16 rounding this way). Asked once per variable before each update, on one thread; a
  // destination handed out is written in full before the step flips the variable's buffers.
  virtual RoundedOut rounded_output(size_t /*i*/) const { return {}; }
  // The same for an update in place (the step writes the variable's current buffer and flips
  // nothing): where apply() writes the rounding of variable i's new values so that the copy kept
  // beside the current buffer stays current, or nothing (a copy not in use is recomputed from the
  // weights when next read).
  virtual RoundedOut rounded_output_in_place(size_t /*i*/) const { return {}; }
  // Whether swap_rounded_output() works: the step then writes a first run's rounding straight to
  // rounded_output(i), and a chunk a backup run wins through a spare destination it swaps in (the
  // first run may still be writing the old one). Otherwise every rounding goes through scratch and
  // the winner copies it.
  virtual bool swaps_rounded_output() const { return false; }
  // Makes `spare` (a tensor of the destination's dtype and variable i's shape) the destination
  // rounded_output(i) handed out for this update, and hands the old one back in `spare`. On one
  // thread, after the last apply() and before the step flips the variable's buffers.
  virtual void swap_rounded_output(size_t /*i*/, Tensor& /*spare*/) {}
};

}  // namespace lockstep::distribute
