// Compiled twice by check_compile_fail.cmake. Without LOCKSTEP_CALL_RAW_KERNELS every call below
// names a differentiable op, as a layer's forward pass does, and the file must compile. With it,
// the same calls name `ops::<op>`: the mistake of calling a raw kernel where the gradient is
// needed, which must not compile (a raw kernel is `ops::<op>_forward`, never `ops::<op>`). The
// check reads the names to expect in the compiler's errors from the OP(...) calls.
#include "lockstep/autodiff.h"
#include "lockstep/ops.h"

#ifdef LOCKSTEP_CALL_RAW_KERNELS
#define OP(name) ::lockstep::ops::name
#else
#define OP(name) ::lockstep::name
#endif

namespace lockstep::keras {

Tensor layer_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& ids,
                     Generator& generator) {
  std::vector<Tensor> outs;
  outs.push_back(OP(matmul)(x, w));
  outs.push_back(OP(linear)(x, w, b));
  outs.push_back(OP(bias_add)(x, b));
  outs.push_back(OP(add)(x, x));
  outs.push_back(OP(sub)(x, x));
  outs.push_back(OP(mul)(x, x));
  outs.push_back(OP(div)(x, x));
  outs.push_back(OP(neg)(x));
  outs.push_back(OP(exp)(x));
  outs.push_back(OP(log)(x));
  outs.push_back(OP(sqrt)(x));
  outs.push_back(OP(square)(x));
  outs.push_back(OP(relu)(x));
  outs.push_back(OP(sigmoid)(x));
  outs.push_back(OP(tanh)(x));
  outs.push_back(OP(gelu)(x));
  outs.push_back(OP(softmax)(x));
  outs.push_back(OP(log_softmax)(x));
  outs.push_back(OP(reduce_sum)(x));
  outs.push_back(OP(reduce_mean)(x));
  outs.push_back(OP(reduce_max)(x));
  outs.push_back(OP(cast)(x, DType::float64));
  outs.push_back(OP(round_to_bfloat16)(x));
  outs.push_back(OP(concat)({x, x}));
  outs.push_back(OP(reshape)(x, Shape{-1}));
  outs.push_back(OP(transpose)(x));
  outs.push_back(OP(flatten)(x));
  outs.push_back(OP(conv2d)(x, w));
  outs.push_back(OP(max_pool2d)(x));
  outs.push_back(OP(batch_norm)(x, b, b).output);
  outs.push_back(OP(batch_norm_inference)(x, b, b, b, b));
  outs.push_back(OP(layer_norm)(x, b, b));
  outs.push_back(OP(embedding_lookup)(w, ids));
  outs.push_back(OP(dropout)(x, 0.5, generator));
  outs.push_back(OP(batch_matmul)(x, w));
  outs.push_back(OP(masked_softmax)(x, ids));
  outs.push_back(OP(gelu_tanh)(x));
  outs.push_back(OP(dot_product_attention)(x, x, x));
  outs.push_back(OP(categorical_crossentropy)(x, x));
  outs.push_back(OP(softmax_crossentropy)(x, x, x));
  outs.push_back(OP(sparse_categorical_crossentropy)(ids, x));
  outs.push_back(OP(binary_crossentropy)(x, x));
  outs.push_back(OP(mean_squared_error)(x, x));
  outs.push_back(OP(mean_absolute_error)(x, x));
  return outs.front();
}

}  // namespace lockstep::keras
