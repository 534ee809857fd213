#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/ops.h"

namespace lockstep {

using Grads = std::vector<Tensor>;

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  Tensor y = ops::matmul_forward(a, b, transpose_a, transpose_b);
  if (autodiff::should_record({&a, &b})) {
    bool need_da = autodiff::should_record({&a}), need_db = autodiff::should_record({&b});
    autodiff::record(
        "matmul", {a, b}, {y}, [a, b, transpose_a, transpose_b, need_da, need_db](const Grads& g) {
          ops::MatmulGrads d =
              ops::matmul_backward(g[0], a, b, transpose_a, transpose_b, need_da, need_db);
          return Grads{d.da, d.db};
        });
  }
  return y;
}

namespace {
// The one place linear() records itself: inputs x and the weights the gradient is for (`kernel`,
// `bias`); the backward pass multiplies by `mk` (the weights as the forward multiplied them). The
// weights' gradients go straight into the tape's destinations when it has some of their dtype
// (e.g. the packed buffer of the gradient all-reduce).
// gelu_rounded: gelu_to_bfloat16_values; reads_rounded_dy: linear_to_bfloat16_values. Either reads
// the output's gradient rounded.
// bf16_values_kernel: the kernel is multiplied as bfloat16 values (LinearOperands).
void record_linear(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Tensor& mk,
                   const Tensor& y, const Tensor& z, ops::FusedActivation activation,
                   bool gelu_rounded = false, bool reads_rounded_dy = false,
                   bool bf16_values_kernel = false) {
  if (!autodiff::should_record({&x, &kernel, &bias})) return;
  const bool need_dx = autodiff::should_record({&x});
  const bool has_bias = bias.defined();
  std::vector<Tensor> inputs{x, kernel};
  if (has_bias) inputs.push_back(bias);
  const DType wdt = kernel.dtype();
  // A float32 kernel multiplied as bfloat16 values (mixed_bfloat16's copy, bfloat16 or rounded
  // float32): its gradient is the cast's, the product's gradient rounded to bfloat16 and widened,
  // as TensorFlow and PyTorch's autocast compute it. Into a bfloat16 destination it stays bfloat16
  // (half the bytes for the step to sum), else it is widened (exactly).
  const bool bf16_kernel_grad = wdt == DType::float32 && bf16_values_kernel;
  // In mixed_bfloat16's float32 form (float32 operands holding bfloat16 values) a float32 product
  // rounded where it lies gives the bits of the bfloat16 result widened, in one pass and without
  // the bfloat16 scratch, for a destination that is not bfloat16.
  const bool round_f32_kernel_grad = bf16_kernel_grad && x.dtype() == DType::float32;
  // The output is kept only for an activation whose derivative reads it (not gelu's, which reads
  // z): a linear layer's output is otherwise free as soon as its consumers are done.
  const bool keeps_y =
      activation != ops::FusedActivation::none && activation != ops::FusedActivation::gelu;
  autodiff::record(
      "linear", inputs, {y},
      [x, mk, y = keeps_y ? y : Tensor(), z, activation, need_dx, has_bias, wdt, gelu_rounded,
       reads_rounded_dy, bf16_kernel_grad,
       round_f32_kernel_grad](const Grads& g, const Grads& sinks) {
        auto buffer = [](const Tensor& sink, const Shape& shape, DType dt) {
          return sink.defined() && sink.dtype() == dt ? sink : Tensor(shape, dt);
        };
        Grads out(has_bias ? 3 : 2);
        const bool rounds_in_place =
            round_f32_kernel_grad && !(sinks[1].defined() && sinks[1].dtype() == DType::bfloat16);
        if (x.rank() == 2 && mk.rank() == 2) {
          if (need_dx) out[0] = Tensor(x.shape(), x.dtype());
          out[1] = buffer(sinks[1], mk.shape(),
                          bf16_kernel_grad && !rounds_in_place ? DType::bfloat16 : wdt);
          if (has_bias) out[2] = buffer(sinks[2], Shape{mk.dim(1)}, wdt);
        }
        if (gelu_rounded) {  // gelu's gradient of dy read rounded, then the rest
          ops::linear_backward_into(ops::gelu_to_bfloat16_values_backward(g[0], z), x, mk, Tensor(),
                                    ops::FusedActivation::none, out[0], out[1],
                                    has_bias ? out[2] : Tensor());
        } else {
          const Tensor dy = reads_rounded_dy ? ops::to_bfloat16_values_backward(g[0]) : g[0];
          ops::linear_backward_into(dy, x, mk, y, activation, out[0], out[1],
                                    has_bias ? out[2] : Tensor(), z);
        }
        if (rounds_in_place && out[1].defined()) {
          round_to_bfloat16_values(out[1].data<float>(), out[1].data<float>(),
                                   static_cast<size_t>(out[1].num_elements()));
        }
        if (out[1].defined() && out[1].dtype() != wdt && !out[1].shares_storage_with(sinks[1])) {
          // Widened to the variable's float32, straight into its destination when it has one.
          if (sinks[1].defined() && sinks[1].dtype() == wdt) {
            bfloat16_to_float(out[1].data<bfloat16>(), sinks[1].data<float>(),
                              static_cast<size_t>(out[1].num_elements()));
            out[1] = sinks[1];
          } else {
            out[1] = out[1].to(wdt);
          }
        }
        return out;
      });
  if (gelu_rounded || reads_rounded_dy) autodiff::note_rounds_output_gradient(y);
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& kernel, const Tensor& bias,
              ops::FusedActivation activation) {
  // gelu's derivative needs the pre-activation, which the fused kernel does not keep.
  const bool gelu = activation == ops::FusedActivation::gelu;
  Tensor z = gelu ? ops::linear_forward(x, kernel, bias, ops::FusedActivation::none) : Tensor();
  Tensor y = gelu ? ops::gelu_forward(z) : ops::linear_forward(x, kernel, bias, activation);
  record_linear(x, kernel, bias, kernel, y, z, activation);
  return y;
}

Tensor linear(const Tensor& x, const Tensor& kernel, const Tensor& bias,
              ops::FusedActivation activation, const LinearOperands& multiplied, DType out,
              bool gelu_to_bfloat16_values) {
  const PairedRowsLayout* paired = multiplied.kernel_layout;
  if (paired != nullptr) {
    LOCKSTEP_CHECK_AS(Internal, !autodiff::should_record({&x}),
                      "linear: a kernel in a paired layout cannot give x's gradient.");
  }
  // A paired kernel stands in for the backward pass (which reads only its shape and dtype: no
  // dx) as a view of the kernel's shape.
  const Tensor mk = paired != nullptr ? multiplied.kernel.view_as(DType::bfloat16, kernel.shape())
                    : multiplied.kernel.defined() ? multiplied.kernel
                                                  : kernel;
  const Tensor& mb = multiplied.bias.defined() || !bias.defined() ? multiplied.bias : bias;
  LOCKSTEP_CHECK(mk.shape() == kernel.shape() && mb.defined() == bias.defined() &&
                     (!mb.defined() || mb.shape() == bias.shape()),
                 "linear: the multiplied weights must be shaped like the weights. Received: "
                 "kernel ",
                 kernel.describe(), " multiplied as ", mk.describe(), ", bias ",
                 bias.defined() ? bias.describe() : "none", " multiplied as ",
                 mb.defined() ? mb.describe() : "none", ".");
  const Shape shape{x.dim(0), mk.dim(1)};
  const bool gelu = activation == ops::FusedActivation::gelu;
  const bool gelu_rounded = gelu && gelu_to_bfloat16_values && out == DType::float32;
  Tensor z, y;
  const bool all_float32 = x.dtype() == DType::float32 && mk.dtype() == DType::float32 &&
                           (!mb.defined() || mb.dtype() == DType::float32);
  if (gelu_rounded && all_float32) {
    ops::LinearGeluResult r = ops::linear_gelu_to_bfloat16_values_forward(x, mk, mb);
    z = r.z;
    y = r.y;
  } else if (gelu) {
    z = Tensor(shape, out);
    ops::linear_into(x, mk, mb, ops::FusedActivation::none, z);
    y = gelu_rounded ? ops::gelu_to_bfloat16_values_forward(z) : ops::gelu_forward(z);
  } else if (paired != nullptr) {
    y = Tensor(shape, out);
    ops::linear_paired_into(x, multiplied.kernel, *paired, mb, activation, y);
  } else {
    y = Tensor(shape, out);
    ops::linear_into(x, mk, mb, activation, y);
  }
  record_linear(x, kernel, bias, mk, y, z, activation, gelu_rounded, /*reads_rounded_dy=*/false,
                /*bf16_values_kernel=*/multiplied.bfloat16_values);
  return y;
}

Tensor linear_to_bfloat16_values(const Tensor& x, const Tensor& kernel, const Tensor& bias) {
  Tensor y = ops::linear_to_bfloat16_values_forward(x, kernel, bias);
  record_linear(x, kernel, bias, kernel, y, Tensor(), ops::FusedActivation::none,
                /*gelu_rounded=*/false, /*reads_rounded_dy=*/true);
  return y;
}

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  Tensor y = ops::bias_add_forward(x, bias);
  if (autodiff::should_record({&x, &bias})) {
    autodiff::record("bias_add", {x, bias}, {y}, [](const Grads& g) {
      ops::BiasAddGrads d = ops::bias_add_backward(g[0]);
      return Grads{d.dx, d.dbias};
    });
  }
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = ops::add_forward(a, b);
  if (autodiff::should_record({&a, &b})) {
    autodiff::record("add", {a, b}, {y}, [sa = a.shape(), sb = b.shape()](const Grads& g) {
      ops::BinaryGrads d = ops::add_backward(g[0], sa, sb);
      return Grads{d.da, d.db};
    });
  }
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = ops::sub_forward(a, b);
  if (autodiff::should_record({&a, &b})) {
    autodiff::record("sub", {a, b}, {y}, [sa = a.shape(), sb = b.shape()](const Grads& g) {
      ops::BinaryGrads d = ops::sub_backward(g[0], sa, sb);
      return Grads{d.da, d.db};
    });
  }
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = ops::mul_forward(a, b);
  if (autodiff::should_record({&a, &b})) {
    bool need_da = autodiff::should_record({&a}), need_db = autodiff::should_record({&b});
    autodiff::record("mul", {a, b}, {y}, [a, b, need_da, need_db](const Grads& g) {
      ops::BinaryGrads d = ops::mul_backward(g[0], a, b, need_da, need_db);
      return Grads{d.da, d.db};
    });
  }
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = ops::div_forward(a, b);
  if (autodiff::should_record({&a, &b})) {
    bool need_da = autodiff::should_record({&a}), need_db = autodiff::should_record({&b});
    autodiff::record("div", {a, b}, {y}, [a, b, need_da, need_db](const Grads& g) {
      ops::BinaryGrads d = ops::div_backward(g[0], a, b, need_da, need_db);
      return Grads{d.da, d.db};
    });
  }
  return y;
}

namespace {

// Records a unary op whose backward is kernel(dy, saved).
template <typename Backward>
Tensor record_unary(const char* name, const Tensor& x, Tensor y, const Tensor& saved,
                    Backward backward) {
  if (autodiff::should_record({&x})) {
    autodiff::record(name, {x}, {y},
                     [saved, backward](const Grads& g) { return Grads{backward(g[0], saved)}; });
  }
  return y;
}

}  // namespace

Tensor neg(const Tensor& x) {
  Tensor y = ops::neg_forward(x);
  return record_unary("neg", x, y, Tensor(),
                      [](const Tensor& dy, const Tensor&) { return ops::neg_backward(dy); });
}
Tensor exp(const Tensor& x) {
  Tensor y = ops::exp_forward(x);
  return record_unary("exp", x, y, y, ops::exp_backward);
}
Tensor log(const Tensor& x) {
  return record_unary("log", x, ops::log_forward(x), x, ops::log_backward);
}
Tensor sqrt(const Tensor& x) {
  Tensor y = ops::sqrt_forward(x);
  return record_unary("sqrt", x, y, y, ops::sqrt_backward);
}
Tensor square(const Tensor& x) {
  return record_unary("square", x, ops::square_forward(x), x, ops::square_backward);
}
Tensor relu(const Tensor& x) {
  Tensor y = ops::relu_forward(x);
  return record_unary("relu", x, y, y, ops::relu_backward);
}
Tensor sigmoid(const Tensor& x) {
  Tensor y = ops::sigmoid_forward(x);
  return record_unary("sigmoid", x, y, y, ops::sigmoid_backward);
}
Tensor tanh(const Tensor& x) {
  Tensor y = ops::tanh_forward(x);
  return record_unary("tanh", x, y, y, ops::tanh_backward);
}
Tensor gelu(const Tensor& x) {
  return record_unary("gelu", x, ops::gelu_forward(x), x, ops::gelu_backward);
}

Tensor softmax(const Tensor& x, int axis) {
  Tensor y = ops::softmax_forward(x, axis);
  return record_unary("softmax", x, y, y, [axis](const Tensor& dy, const Tensor& s) {
    return ops::softmax_backward(dy, s, axis);
  });
}
Tensor log_softmax(const Tensor& x, int axis) {
  Tensor y = ops::log_softmax_forward(x, axis);
  return record_unary("log_softmax", x, y, y, [axis](const Tensor& dy, const Tensor& s) {
    return ops::log_softmax_backward(dy, s, axis);
  });
}

Tensor reduce_sum(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  Tensor y = ops::reduce_sum_forward(x, axes, keepdims);
  return record_unary("reduce_sum", x, y, Tensor(),
                      [shape = x.shape(), axes, keepdims](const Tensor& dy, const Tensor&) {
                        return ops::reduce_sum_backward(dy, shape, axes, keepdims);
                      });
}
Tensor reduce_mean(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  Tensor y = ops::reduce_mean_forward(x, axes, keepdims);
  return record_unary("reduce_mean", x, y, Tensor(),
                      [shape = x.shape(), axes, keepdims](const Tensor& dy, const Tensor&) {
                        return ops::reduce_mean_backward(dy, shape, axes, keepdims);
                      });
}
Tensor reduce_max(const Tensor& x, const std::vector<int>& axes, bool keepdims) {
  Tensor y = ops::reduce_max_forward(x, axes, keepdims);
  return record_unary("reduce_max", x, y, x,
                      [y, axes, keepdims](const Tensor& dy, const Tensor& s) {
                        return ops::reduce_max_backward(dy, s, y, axes, keepdims);
                      });
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor y = ops::cast_forward(x, dtype);
  if (y.id() == x.id()) y = stop_gradient(y);  // a no-op cast still needs its own node
  return record_unary("cast", x, y, Tensor(), [from = x.dtype()](const Tensor& dy, const Tensor&) {
    return ops::cast_backward(dy, from);
  });
}

Tensor round_to_bfloat16(const Tensor& x) {
  Tensor y = ops::round_to_bfloat16_forward(x);
  return record_unary("round_to_bfloat16", x, y, Tensor(),
                      [](const Tensor& dy, const Tensor&) { return dy; });
}

Tensor rounded_as_recorded(const Tensor& x, const Tensor& rounded) {
  LOCKSTEP_CHECK(x.dtype() == DType::float32 && x.shape() == rounded.shape() &&
                     (rounded.dtype() == DType::bfloat16 || rounded.dtype() == DType::float32),
                 "rounded_as_recorded: expected a float32 x and its rounding of the same shape, in "
                 "bfloat16 or float32. Received: x=",
                 x.describe(), ", rounded=", rounded.describe(), ".");
  // A handle of its own: the tape tells tensors apart by id, and the copy outlives this call.
  Tensor y = rounded.reshape(rounded.shape());
  if (rounded.dtype() == DType::float32) {
    return record_unary("round_to_bfloat16", x, y, Tensor(),
                        [](const Tensor& dy, const Tensor&) { return dy; });
  }
  return record_unary("cast", x, y, Tensor(), [](const Tensor& dy, const Tensor&) {
    return ops::cast_backward(dy, DType::float32);
  });
}

Tensor to_bfloat16_values(const Tensor& x, bool reuse_sole_handle) {
  Tensor y = ops::to_bfloat16_values_forward(x, reuse_sole_handle);
  y = record_unary("to_bfloat16_values", x, y, Tensor(), [](const Tensor& dy, const Tensor&) {
    return ops::to_bfloat16_values_backward(dy);
  });
  autodiff::note_rounds_output_gradient(y);
  return y;
}

Tensor add_to_bfloat16_values(const Tensor& a, const Tensor& b, bool round_inputs) {
  Tensor y = ops::add_to_bfloat16_values_forward(a, b, round_inputs);
  if (autodiff::should_record({&a, &b})) {
    autodiff::record("add_to_bfloat16_values", {a, b}, {y}, [](const Grads& g) {
      Tensor d = ops::to_bfloat16_values_backward(g[0]);
      return Grads{d, d};
    });
    autodiff::note_rounds_output_gradient(y);
  }
  return y;
}

Tensor relu_to_bfloat16_values(const Tensor& x) {
  Tensor y = ops::relu_to_bfloat16_values_forward(x);
  return record_unary("relu_to_bfloat16_values", x, y, y, [](const Tensor& dy, const Tensor& s) {
    return ops::relu_to_bfloat16_values_backward(dy, s);
  });
}

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  Tensor y = ops::concat_forward(xs, axis);
  if (autodiff::should_record(xs)) {
    std::vector<int64_t> sizes;
    for (const Tensor& t : xs) sizes.push_back(t.dim(axis));
    autodiff::record("concat", xs, {y}, [sizes, axis](const Grads& g) {
      return ops::concat_backward(g[0], sizes, axis);
    });
  }
  return y;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor y = ops::reshape_forward(x, shape);
  return record_unary(
      "reshape", x, y, Tensor(),
      [from = x.shape()](const Tensor& dy, const Tensor&) { return dy.reshape(from); });
}

Tensor flatten(const Tensor& x) {
  Tensor y = ops::flatten_forward(x);
  return record_unary(
      "flatten", x, y, Tensor(),
      [from = x.shape()](const Tensor& dy, const Tensor&) { return dy.reshape(from); });
}

Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  Tensor y = ops::transpose_forward(x, perm);
  return record_unary("transpose", x, y, Tensor(), [perm](const Tensor& dy, const Tensor&) {
    return ops::transpose_backward(dy, perm);
  });
}

}  // namespace lockstep
