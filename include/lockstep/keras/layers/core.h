#pragma once
// Core layers: InputLayer, Dense, Activation, Flatten, Reshape, Dropout.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

// The source of a functional graph (created by keras::Input).
class InputLayer : public LayerImpl<InputLayer> {
 public:
  InputLayer(const Shape& shape, DType dtype = DType::float32, const std::string& name = "");
  std::string class_name() const override { return "InputLayer"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape&) const override { return batch_shape_; }
  nlohmann::json get_config() const override;
  // Shape with batch dimension 0 (unknown).
  const Shape& batch_shape() const { return batch_shape_; }
  DType dtype() const { return dtype_; }

 private:
  Shape batch_shape_;
  DType dtype_;
};

struct DenseOptions {
  int64_t units = 0;
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = "";
  // Mixed precision policy name ("float32", "mixed_bfloat16", "bfloat16"); empty takes the
  // global policy. Keras' idiom: the output layer of a mixed model gets dtype = "float32".
  std::string dtype = "";
};

// y = activation(x · kernel + bias); kernel [in, units], bias [units]. x may have rank > 2: the
// kernel applies to the last axis. relu/sigmoid/tanh/gelu are fused into the matmul.
// Under a bfloat16 compute policy, floating inputs and the (float32) weights are cast to bfloat16
// for the matmul and the output is bfloat16, except softmax, which runs on float32 logits and
// returns float32 (probabilities feed the loss, where bfloat16's 8-bit mantissa would show).
class Dense : public LayerImpl<Dense> {
 public:
  explicit Dense(DenseOptions options);
  std::string class_name() const override { return "Dense"; }
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 private:
  DenseOptions options_;
  Variable kernel_, bias_;
};

class Activation : public LayerImpl<Activation> {
 public:
  explicit Activation(const std::string& activation, const std::string& name = "");
  std::string class_name() const override { return "Activation"; }
  Tensor call(const Tensor& inputs, bool training) override;
  nlohmann::json get_config() const override;

 private:
  std::string activation_;
};

// [batch, d1, d2, ...] -> [batch, d1 * d2 * ...]
class Flatten : public LayerImpl<Flatten> {
 public:
  explicit Flatten(const std::string& name = "");
  std::string class_name() const override { return "Flatten"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
};

// [batch, ...] -> [batch, target_shape...]; target_shape excludes the batch and may hold one -1.
class Reshape : public LayerImpl<Reshape> {
 public:
  explicit Reshape(std::vector<int64_t> target_shape, const std::string& name = "");
  std::string class_name() const override { return "Reshape"; }
  Tensor call(const Tensor& inputs, bool training) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  nlohmann::json get_config() const override;

 private:
  Shape resolve(const Shape& input_shape) const;
  std::vector<int64_t> target_;
};

struct DropoutOptions {
  double rate = 0.0;
  std::optional<uint64_t> seed{};
  std::string name = "";
};

// Training: zeroes each element with probability `rate` and scales the rest by 1 / (1 - rate);
// inference: identity. Masks come from a Philox stream per replica, so runs are reproducible.
class Dropout : public LayerImpl<Dropout> {
 public:
  explicit Dropout(DropoutOptions options);
  explicit Dropout(double rate) : Dropout(DropoutOptions{.rate = rate}) {}
  std::string class_name() const override { return "Dropout"; }
  Tensor call(const Tensor& inputs, bool training) override;
  nlohmann::json get_config() const override;

  // Checkpointing (BackupAndRestore): how far each replica's mask stream has advanced, as
  // {counter, buffered} of Generator::State, indexed by replica_id_in_sync_group; {0, 0} for the
  // first `num_replicas` replicas that have not drawn yet on this process. Setting the positions
  // continues every stream exactly where it was (seed and stream stay this layer's own).
  std::vector<std::pair<uint64_t, uint32_t>> generator_positions(int num_replicas) const;
  void set_generator_positions(const std::vector<std::pair<uint64_t, uint32_t>>& positions);

 private:
  Generator& generator_for_this_thread();
  DropoutOptions options_;
  uint64_t seed_;
  std::vector<std::unique_ptr<Generator>> generators_;  // one per replica
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
};

}  // namespace lockstep::keras::layers
