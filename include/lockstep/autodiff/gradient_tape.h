#pragma once
// GradientTape: records differentiable operations on the current thread and computes gradients
// by reverse accumulation, as tf.GradientTape does.
//
//   GradientTape tape;
//   Tensor loss = mean(square(sub(matmul(x, w.value()), y)));
//   std::vector<Tensor> grads = tape.gradient(loss, {w});
//
// An op is recorded when one of its inputs is watched by, or was produced under, a tape that is
// recording on this thread (tapes nest; each sees ops run while it is alive). Trainable variables
// are watched when read. Ops are differentiated once: backward functions run the raw kernels of
// the ops layer and are not themselves recorded (no higher-order gradients).
//
// Each replica thread records on its own tapes: the tape stack is thread-local.
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/core/tensor.h"

namespace lockstep {

// Given the gradients of an op's outputs (one per output, never undefined: missing ones are
// zeros), returns one gradient per input; an undefined Tensor means "no gradient" for that input.
using BackwardFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// The same, for ops that can write an input's gradient into a caller's buffer: `sinks` has one
// entry per input; a defined sink is where the tape wants that input's gradient (a buffer of the
// input's shape, usually float32). The function may write it there and return the sink, or
// ignore it and return a tensor of its own (the tape then copies).
using BackwardIntoFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads,
                                                               const std::vector<Tensor>& sinks)>;

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false, bool watch_accessed_variables = true);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& tensor);
  void watch(const Variable& variable);

  // d(target)/d(source) for each source. `output_gradient` seeds the target's gradient (default:
  // ones, i.e. the gradient of sum(target)). Sources the target does not depend on get an
  // undefined Tensor (TensorFlow's None). A non-persistent tape can compute gradients once.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_gradient = Tensor());
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               const Tensor& output_gradient = Tensor());
  // As above, with a destination per source (undefined: none): the gradient of sources[i] is
  // written into destinations[i] (same shape and dtype as the gradient) and the returned tensor
  // is destinations[i] itself. Ops that support it (linear) write their result there directly, so
  // a caller that wants all gradients in one flat buffer (the gradient all-reduce) passes views
  // of that buffer and saves a copy and an allocation per gradient. A source without a gradient
  // still returns an undefined tensor and leaves its destination untouched.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               const std::vector<Tensor>& destinations,
                               const Tensor& output_gradient = Tensor());
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const std::vector<Tensor>& destinations,
                               const Tensor& output_gradient = Tensor());

  // `fn(i, g)` is called by later gradient() calls once for each source i, as soon as that
  // source's gradient g is final — every op using it has been differentiated and g is in its
  // destination, if it has one — while the backward pass goes on with the remaining ops. Sources
  // without a gradient are reported at the end with an undefined g (their destination untouched).
  // The gradient all-reduce uses it to start on the last layers' gradients while the first
  // layers' are still being computed (DDP's bucket hooks).
  using GradientReadyCallback = std::function<void(size_t source, const Tensor& gradient)>;
  void set_gradient_ready_callback(GradientReadyCallback fn);

  // Pauses recording on this tape while alive (tf.GradientTape.stop_recording).
  class StopRecording {
   public:
    explicit StopRecording(GradientTape& tape);
    ~StopRecording();

   private:
    GradientTape& tape_;
    bool was_recording_;
  };

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

namespace autodiff {

// True when some tape recording on this thread tracks one of `inputs`: the caller must then
// call `record` with its outputs. Cheap when no tape is active.
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);

// Records an op on every recording tape that tracks one of its inputs. `inputs` are the op's
// differentiable inputs in the order `backward` returns their gradients.
void record(std::string_view op_name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFunction backward);
void record(std::string_view op_name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardIntoFunction backward);

// Says that the op just recorded with `output` among its outputs reads that output's float32
// gradient rounded to bfloat16 values (ops::to_bfloat16_values_backward, which takes a gradient
// already marked as holding them as it is). Where the gradient is a sum of several ops'
// contributions, the tape then rounds the sum as it adds the last one in and marks it: one pass
// over the gradient instead of two, the same bits.
void note_rounds_output_gradient(const Tensor& output);

// Adds `b` into `a` elementwise (same shape and dtype), returning the sum; used to accumulate
// gradients where a tensor feeds several ops.
Tensor accumulate(const Tensor& a, const Tensor& b);
// a += b in place (the same values as accumulate(a, b)).
void accumulate_into(const Tensor& a, const Tensor& b);

// Called by Variable::value(): recording tapes that watch accessed variables start tracking `v`.
void note_variable_read(const Tensor& v);

}  // namespace autodiff

// A new handle to the same values that no tape connects to its inputs.
Tensor stop_gradient(const Tensor& x);

}  // namespace lockstep
