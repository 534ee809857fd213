#pragma once
// Preprocessing layers that run inside the model, on each replica's own core.
#include <string>

#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

struct RescalingOptions {
  double scale = 1.0;
  double offset = 0.0;
  std::string name = "";
  std::string dtype = "";  // policy; empty = the global policy
};

// y = x * scale + offset (keras.layers.Rescaling). Integer inputs (uint8 images) are converted to
// the compute dtype in the same pass, so a pipeline can ship uint8 batches — a quarter of the
// bytes of float32 — and leave the conversion to the replicas, in parallel, instead of the host
// thread. Floating inputs are rescaled differentiably. In a model's training step under a
// bfloat16 compute dtype (mixed_bfloat16 where the CPU has bfloat16 math), when the output's
// readers are Dense layers that read it transposed (Layer::reads_input_transposed), uint8 rows
// also get their output's transpose written beside it (Tensor::transposed_copy), from which those
// layers' kernel gradients read a dense xᵀ (mixed_precision::set_transposed_input_copies).
class Rescaling : public LayerImpl<Rescaling> {
 public:
  explicit Rescaling(RescalingOptions options);
  Rescaling(double scale, double offset = 0.0)
      : Rescaling(RescalingOptions{.scale = scale, .offset = offset}) {}
  std::string class_name() const override { return "Rescaling"; }
  Tensor call(const Tensor& inputs, bool training) override;
  nlohmann::json get_config() const override;

 private:
  RescalingOptions options_;
};

}  // namespace lockstep::keras::layers
