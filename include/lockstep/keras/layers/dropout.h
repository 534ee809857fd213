#pragma once
// Dropout (keras.layers.Dropout), with a reproducible mask stream per replica.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/random.h"
#include "lockstep/keras/layer.h"

namespace lockstep::keras::layers {

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
