#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/storage.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/keras/model.h"

namespace lockstep::keras::mixed_precision {

StepMemory measure_step_memory(Model& model, const Tensor& x, const Tensor& y,
                               const losses::Loss& loss) {
  std::vector<Variable> vars = model.trainable_weights();
  {
    GradientTape tape;
    Tensor l = loss(y, model(x, /*training=*/true));
    tape.gradient(l, vars);
  }
  StepMemory m;
  for (const Variable& v : vars) {
    const distribute::RoundedOut r = rounded_weights_out(v);
    if (r.values != nullptr) m.rounded_weight_copies += v.raw_value().nbytes();
    if (r.bf16 != nullptr) {
      m.rounded_weight_copies += r.layout != nullptr
                                     ? static_cast<size_t>(r.layout->size) * sizeof(bfloat16)
                                     : v.raw_value().nbytes() / 2;
    }
  }
  const size_t start = storage_pool_stats().live_bytes;
  storage_pool_reset_peak();
  {
    GradientTape tape;
    Tensor l;
    {
      Tensor y_pred = model(x, /*training=*/true);
      l = loss(y, y_pred);
    }
    // Only the tape's saved tensors and the loss itself are alive here.
    const size_t live = storage_pool_stats().live_bytes;
    m.saved_for_backward = live > start + l.nbytes() ? live - start - l.nbytes() : 0;
    tape.gradient(l, vars);
  }
  const size_t peak = storage_pool_stats().peak_live_bytes;
  m.step_peak = peak > start ? peak - start : 0;
  return m;
}

}  // namespace lockstep::keras::mixed_precision
