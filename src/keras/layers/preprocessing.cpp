#include "lockstep/keras/layers/preprocessing.h"

#include "lockstep/autodiff/functions.h"

namespace lockstep::keras::layers {

namespace {
template <typename T>
void rescale_into(const T* x, float* y, int64_t n, float scale, float offset) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]) * scale + offset;
}
}  // namespace

Rescaling::Rescaling(RescalingOptions options)
    : LayerImpl(options.name, "rescaling", options.dtype), options_(options) {}

Tensor Rescaling::call(const Tensor& inputs, bool) {
  if (is_floating(inputs.dtype())) {
    Tensor x = autocast(inputs);
    Tensor y = mul(x, Tensor::scalar(options_.scale, x.dtype()));
    return options_.offset == 0.0 ? y : add(y, Tensor::scalar(options_.offset, x.dtype()));
  }
  Tensor y(inputs.shape(), DType::float32);
  float scale = static_cast<float>(options_.scale), offset = static_cast<float>(options_.offset);
  int64_t n = inputs.num_elements();
  switch (inputs.dtype()) {
    case DType::uint8:
      rescale_into(inputs.data<uint8_t>(), y.data<float>(), n, scale, offset);
      break;
    case DType::int32:
      rescale_into(inputs.data<int32_t>(), y.data<float>(), n, scale, offset);
      break;
    case DType::int64:
      rescale_into(inputs.data<int64_t>(), y.data<float>(), n, scale, offset);
      break;
    default:
      throw InvalidArgument("Rescaling '" + name() + "': unsupported input " + inputs.describe() +
                            ".");
  }
  return compute_dtype() == DType::float32 ? y : y.to(compute_dtype());
}

nlohmann::json Rescaling::get_config() const {
  auto c = Layer::get_config();
  c["scale"] = options_.scale;
  c["offset"] = options_.offset;
  return c;
}

}  // namespace lockstep::keras::layers
