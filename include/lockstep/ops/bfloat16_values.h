#pragma once
// float32 tensors that hold bfloat16 values: mixed_bfloat16's form on CPUs without bfloat16 math
// (keras/layer.h). A cast to bfloat16 and back would give the same values; keeping them in
// float32 lets every kernel run its float32 build, with no widening before it and no narrowing
// after it. Outputs are marked (Tensor::holds_bfloat16_values) so that the next layer does not
// round them again. Gradients are marked by the kernels that store them rounded (the backward
// ops below, ops::dot_product_attention_backward with bfloat16_values), and the rounding backward
// passes a marked gradient on as it is (e.g. the one gradient an add hands both its inputs).
// Writers of other values into a marked tensor clear the mark (Tensor::copy_from,
// ops::add_into).
//   round    y = round(x)                       dx = round(dy)
//   relu     y = relu(round(x))                 dx = round(dy) · [y > 0]
//   add      y = round(a + b)  (one shape)      da = db = round(dy)
//            or, round_inputs, y = round(round(a) + round(b)), the same gradients: a layer's
//            sum of inputs its producers left unrounded (the rounding of a bfloat16 value is
//            itself, so marked inputs need nothing)
// round(v) is round_to_bfloat16_value: to nearest even, a NaN stays a quiet NaN. relu keeps NaN
// (y = x < 0 ? 0 : x), as ops::linear's relu does. Same bits in every ISA build. Asked to
// (reuse_sole_handle, for a layer's fresh output), the rounding forward rewrites x in place when
// x's handle is the only one on its memory (Tensor::sole_handle: nothing saved it) and returns a
// new handle on it; never for a tensor that belongs to a caller. The backward ops write into dy
// when it is the only handle on its memory (an intermediate gradient the tape has let go of).
#include "lockstep/core/tensor.h"

namespace lockstep::ops {

Tensor to_bfloat16_values_forward(const Tensor& x, bool reuse_sole_handle = false);
Tensor to_bfloat16_values_backward(const Tensor& dy);
Tensor add_to_bfloat16_values_forward(const Tensor& a, const Tensor& b, bool round_inputs = false);
Tensor relu_to_bfloat16_values_forward(const Tensor& x);
Tensor relu_to_bfloat16_values_backward(const Tensor& dy, const Tensor& y);

}  // namespace lockstep::ops
