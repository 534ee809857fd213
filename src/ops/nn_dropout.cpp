#include "lockstep/ops/nn_dropout.h"

#include <string>

#include "kernel_util.h"

namespace lockstep::ops {
namespace {

void check_rate(const char* op, double rate) {
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw InvalidArgument(std::string(op) +
                          ": expected 0 <= rate < 1. Received: rate=" + std::to_string(rate) + ".");
  }
}

void apply_mask(const Tensor& x, const uint8_t* mask, double rate, const Tensor& out,
                const char* op) {
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const C scale = static_cast<C>(1.0 / (1.0 - rate));
    const T* in = x.data<T>();
    T* y = out.data<T>();
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      y[i] = detail::store<T>(mask[i] ? detail::load(in[i]) * scale : C(0));
    }
  });
}

}  // namespace

DropoutResult dropout_forward(const Tensor& x, double rate, Generator& generator) {
  check_rate("dropout", rate);
  if (!is_floating(x.dtype())) {
    throw InvalidArgument("dropout: expected a floating tensor. Received: x=" + x.describe() + ".");
  }
  if (rate == 0.0) return {x, Tensor()};
  DropoutResult r{Tensor(x.shape(), x.dtype()), Tensor(x.shape(), DType::uint8)};
  uint8_t* mask = r.mask.data<uint8_t>();
  const float threshold = static_cast<float>(rate);
  for (int64_t i = 0; i < x.num_elements(); ++i) mask[i] = generator.uniform() >= threshold;
  apply_mask(x, mask, rate, r.output, "dropout");
  return r;
}

Tensor dropout_backward(const Tensor& grad_output, const Tensor& mask, double rate) {
  check_rate("dropout_backward", rate);
  if (!mask.defined()) {
    if (rate != 0.0) {
      throw InvalidArgument("dropout_backward: a mask is required when rate > 0. Received: rate=" +
                            std::to_string(rate) + ".");
    }
    return grad_output;
  }
  if (mask.dtype() != DType::uint8 || !(mask.shape() == grad_output.shape())) {
    throw InvalidArgument(
        "dropout_backward: expected a uint8 mask with grad_output's shape. Received: "
        "grad_output=" +
        grad_output.describe() + ", mask=" + mask.describe() + ".");
  }
  Tensor out(grad_output.shape(), grad_output.dtype());
  apply_mask(grad_output, mask.data<uint8_t>(), rate, out, "dropout_backward");
  return out;
}

}  // namespace lockstep::ops
