#include "lockstep/keras/layers/dropout.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/core/check.h"
#include "lockstep/distribute/replica_context.h"

namespace lockstep::keras::layers {

Dropout::Dropout(DropoutOptions options)
    : LayerImpl(options.name, "dropout"),
      options_(options),
      seed_(options.seed ? *options.seed : next_seed()) {
  LOCKSTEP_CHECK(options_.rate >= 0 && options_.rate < 1,
                 "Dropout: expected 0 <= rate < 1. Received: rate=", options_.rate, ".");
}

Generator& Dropout::generator_for_this_thread() {
  auto* ctx = distribute::get_replica_context();
  size_t r = ctx ? static_cast<size_t>(ctx->replica_id_in_sync_group()) : 0;
  Generator* shared = nullptr;
  {
    std::lock_guard lock(*mu_);
    if (generators_.size() <= r) generators_.resize(r + 1);
    if (!generators_[r]) generators_[r] = std::make_unique<Generator>(seed_, r);
    shared = generators_[r].get();
  }
  // A training step may run a replica's task twice (a backup); the stream advances once, by the
  // run that commits.
  return ctx ? ctx->replica_local(*shared, *mu_) : *shared;
}

std::vector<std::pair<uint64_t, uint32_t>> Dropout::generator_positions(int num_replicas) const {
  std::lock_guard lock(*mu_);
  std::vector<std::pair<uint64_t, uint32_t>> out(static_cast<size_t>(num_replicas), {0, 0});
  for (size_t r = 0; r < generators_.size() && r < out.size(); ++r) {
    if (!generators_[r]) continue;
    Generator::State s = generators_[r]->state();
    out[r] = {s.counter, s.buffered};
  }
  return out;
}

void Dropout::set_generator_positions(const std::vector<std::pair<uint64_t, uint32_t>>& positions) {
  std::lock_guard lock(*mu_);
  generators_.resize(std::max(generators_.size(), positions.size()));
  for (size_t r = 0; r < positions.size(); ++r) {
    generators_[r] = std::make_unique<Generator>(seed_, r);
    generators_[r]->set_state({seed_, r, positions[r].first, positions[r].second});
  }
}

Tensor Dropout::call(const Tensor& inputs, bool training) {
  if (!training || options_.rate == 0) return inputs;
  return dropout(inputs, options_.rate, generator_for_this_thread());
}

nlohmann::json Dropout::get_config() const {
  auto c = Layer::get_config();
  c["rate"] = options_.rate;
  if (options_.seed) c["seed"] = *options_.seed;
  return c;
}

}  // namespace lockstep::keras::layers
