// Model::predict: the model's outputs over a dataset, in the dataset's order.
#include "epoch_iterator.h"
#include "lockstep/core/check.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/model.h"
#include "lockstep/ops/shape_ops.h"
#include "trainer.h"

namespace lockstep::keras {

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  LOCKSTEP_CHECK(batch_size > 0, "predict: batch_size must be positive.");
  return predict(EpochIterator::from_arrays(x, Tensor(), batch_size, false, 0));
}

Tensor Model::predict(const Dataset& dataset, int64_t steps) {
  EpochIterator epoch(strategy_->experimental_distribute_dataset(dataset),
                      {.steps_per_epoch = steps});
  epoch.begin_epoch();
  std::vector<Tensor> outputs;
  while (epoch.steps_to_run() > 0) {
    auto next = epoch.iterator().next();
    epoch.advance(next ? 1 : 0);
    if (!next) break;
    if (!built()) {
      auto scope = strategy_->scope();
      (*this)(Trainer::as_model_input(*this, (*next)[0][0]));
    }
    auto per_replica = strategy_->run(
        [&](ReplicaContext&, const Element& e) {
          // Called as a layer, so the outputs take the policy's dtype (Layer::finish_call).
          return e[0].dim(0) ? (*this)(Trainer::as_model_input(*this, e[0]), false) : Tensor();
        },
        *next);
    for (const Tensor& t : per_replica.values)
      if (t.defined()) outputs.push_back(t);
  }
  LOCKSTEP_CHECK_AS(OutOfRange, !outputs.empty(), "predict: the dataset produced no batch.");
  // Concatenation in step and replica order is the dataset's order.
  return ops::concat_forward(outputs, 0);
}

}  // namespace lockstep::keras
