#include "lockstep/keras/layers/dense.h"

#include <nlohmann/json.hpp>

#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/check.h"
#include "lockstep/keras/activations.h"
#include "lockstep/keras/initializers.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/matmul.h"
#include "lockstep/ops/shape_ops.h"

namespace lockstep::keras::layers {

Dense::Dense(DenseOptions options)
    : LayerImpl(options.name, "dense", options.dtype), options_(options) {
  LOCKSTEP_CHECK(options_.units > 0, "Dense: expected units > 0. Received: units=", options_.units,
                 ".");
  activations::get(options_.activation);  // validates the name now, not at first call
}

void Dense::build(const Shape& input_shape) {
  LOCKSTEP_CHECK(input_shape.rank() >= 2, "Dense '", name(),
                 "' expects inputs of rank >= 2 ([batch, features]). Received shape ", input_shape,
                 ".");
  int64_t in = input_shape[input_shape.rank() - 1];
  const DType vdt = dtype_policy().variable_dtype();
  kernel_ = add_weight("kernel", {in, options_.units},
                       *initializers::get(options_.kernel_initializer), true, vdt);
  if (options_.use_bias) {
    bias_ = add_weight("bias", {options_.units}, *initializers::get(options_.bias_initializer),
                       true, vdt);
  }
}

// mixed_bfloat16's float32 form: the weights' bfloat16 values are the rounded copies the
// optimizer keeps; relu and gelu round as they store, so their output is what the next layer
// reads (the other activations' outputs are rounded as the layer returns them).
Tensor Dense::float32_form_linear(const Tensor& inputs, ops::FusedActivation kind) {
  const Tensor x = autocast(inputs);
  const Tensor kernel = mixed_precision::rounded_weights(kernel_);
  kernel_.set_gradient_dtype(DType::bfloat16);  // the gradient of bfloat16 values (linear)
  const Tensor bias = options_.use_bias ? mixed_precision::rounded_weights(bias_) : Tensor();
  const bool relu = kind == ops::FusedActivation::relu;
  Tensor y = linear(x, kernel_.value(), options_.use_bias ? bias_.value() : Tensor(),
                    relu ? ops::FusedActivation::none : kind,
                    LinearOperands{kernel, bias, /*bfloat16_values=*/true}, DType::float32,
                    /*gelu_to_bfloat16_values=*/true);
  return relu ? relu_to_bfloat16_values(y) : y;
}

Tensor Dense::bfloat16_or_float32_linear(const Tensor& x, ops::FusedActivation kind) {
  const DType compute = compute_dtype();
  const bool f32_weights = kernel_.dtype() == DType::float32;
  Tensor y;
  if (x.dtype() == DType::bfloat16 && f32_weights && kind != ops::FusedActivation::gelu &&
      (compute == DType::float32 || compute == DType::bfloat16)) {
    // bfloat16 activations, float32 variables. A float32 layer keeps its
    // weights. Under mixed_bfloat16 the weights are multiplied as bfloat16 values: the policy's
    // copies, which the optimizer rewrites as it updates the weights — rounded float32 ones when
    // this shape computes in float32, else bfloat16 ones for oneDNN's bfloat16 kernels
    // (ops::bf16_matmul_computes_in_f32 picks the faster). Either way the activations stay
    // bfloat16 and the gradients reach the variables in float32.
    Tensor kernel = kernel_.raw_value(), bias = options_.use_bias ? bias_.raw_value() : Tensor();
    const PairedRowsLayout* kernel_layout = nullptr;
    if (compute == DType::bfloat16) {
      // Multiplied as bfloat16 values, the kernel gets their gradient: bfloat16 (linear).
      kernel_.set_gradient_dtype(DType::bfloat16);
      if (ops::bf16_matmul_computes_in_f32(x.dim(0), x.dim(1), options_.units)) {
        kernel = mixed_precision::rounded_weights(kernel_);
        if (bias.defined()) bias = mixed_precision::rounded_weights(bias_);
      } else {
        // Where only the product reads the kernel (no tape wants x's gradient: a first layer),
        // the copy is kept in the layout the bfloat16 kernel reads, which spares the product a
        // copy of it into that layout on every call (docs/performance.md, "Measured design
        // choices").
        if (mixed_precision::paired_kernels() && !autodiff::should_record({&x})) {
          kernel_layout =
              ops::bf16_kernel_layout(x.dim(0), x.dim(1), options_.units, bias.defined(), kind);
        }
        if (kernel_layout != nullptr) {
          kernel = mixed_precision::paired_bfloat16_weights(kernel_, *kernel_layout);
          if (!kernel.defined()) kernel_layout = nullptr;  // the copy keeps another layout
        }
        if (kernel_layout == nullptr) kernel = mixed_precision::bfloat16_weights(kernel_);
        if (bias.defined()) bias = mixed_precision::bfloat16_weights(bias_);
      }
    }
    // Recorded on the variables' values (which notes the reads for the tapes): their gradients
    // go straight to the tape's destinations — the kernel's as the gradient of its bfloat16
    // values under mixed_bfloat16 (LinearOperands) — and only the bfloat16 x is kept for the
    // backward pass.
    y = linear(
        x, kernel_.value(), options_.use_bias ? bias_.value() : Tensor(), kind,
        LinearOperands{kernel, bias, /*bfloat16_values=*/compute == DType::bfloat16, kernel_layout},
        compute);
  } else {
    Tensor kernel = autocast(kernel_.value());
    Tensor bias = options_.use_bias ? autocast(bias_.value()) : Tensor();
    y = linear(x, kernel, bias, kind);
  }
  return y;
}

bool Dense::reads_input_transposed() const {
  // Only oneDNN's bfloat16 kernels read the copy (ops::linear_backward_into); a frozen kernel
  // takes no gradient.
  return trainable() && compute_dtype() == DType::bfloat16 && ops::has_native_bfloat16_math() &&
         ops::bf16_matmul_mode() != ops::Bf16MatmulMode::float32_compute;
}

Tensor Dense::call(const Tensor& inputs, bool) {
  int64_t in = kernel_.shape()[0];
  LOCKSTEP_CHECK(inputs.rank() >= 1 && inputs.dim(-1) == in, "Dense '", name(),
                 "' expects inputs with last dimension ", in, " (kernel ", kernel_.shape(),
                 "). Received: ", inputs.describe(), ".");
  Shape out_shape = compute_output_shape(inputs.shape());
  Tensor x = inputs.rank() != 2 ? reshape(inputs, Shape{inputs.num_elements() / in, in}) : inputs;
  const DType compute = compute_dtype();
  const bool f32_weights = kernel_.dtype() == DType::float32;
  const bool fusable = activations::is_fusable(options_.activation);
  const ops::FusedActivation kind =
      fusable ? activations::fused_kind(options_.activation) : ops::FusedActivation::none;
  Tensor y;
  if (computes_bfloat16_in_float32() && f32_weights) {
    y = float32_form_linear(x, kind);
    if (options_.activation == "softmax") keep_float32_output();
  } else {
    // A float32 layer fed bfloat16 activations (a float32 output layer under mixed_bfloat16)
    // takes them as they are instead of autocasting them to a float32 copy: the matmul widens
    // them anyway.
    if (!(x.dtype() == DType::bfloat16 && compute == DType::float32 && f32_weights &&
          kind != ops::FusedActivation::gelu)) {
      x = autocast(x);  // Keras: floating inputs take the compute dtype
    }
    y = bfloat16_or_float32_linear(x, kind);
  }
  if (!fusable) {
    if (options_.activation == "softmax" && y.dtype() == DType::bfloat16) {
      y = cast(y, DType::float32);
    }
    y = activations::get(options_.activation)(y);
  }
  return inputs.rank() != 2 ? reshape(y, out_shape) : y;
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  return input_shape.with_dim(-1, options_.units);
}

nlohmann::json Dense::get_config() const {
  auto c = Layer::get_config();
  c["units"] = options_.units;
  c["activation"] = options_.activation;
  c["use_bias"] = options_.use_bias;
  c["kernel_initializer"] = options_.kernel_initializer;
  c["bias_initializer"] = options_.bias_initializer;
  c["dtype"] = dtype_policy().name();
  return c;
}

}  // namespace lockstep::keras::layers
