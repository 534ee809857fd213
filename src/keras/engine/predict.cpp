// Model::predict: the model's outputs over a dataset, in the dataset's order.
#include "lockstep/core/check.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/model.h"
#include "lockstep/ops/shape_ops.h"
#include "trainer.h"

namespace lockstep::keras {

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  LOCKSTEP_CHECK(batch_size > 0, "predict: batch_size must be positive.");
  return predict(Dataset::from_tensor_slices(x).batch(batch_size));
}

Tensor Model::predict(const Dataset& dataset, int64_t steps) {
  auto dist = strategy_->experimental_distribute_dataset(dataset);
  auto it = dist.make_iterator();
  std::vector<Tensor> outputs;
  for (int64_t step = 0; steps == 0 || step < steps; ++step) {
    auto next = it.next();
    if (!next) break;
    if (!built()) {
      auto scope = strategy_->scope();
      (*this)(Trainer::as_model_input(*this, (*next)[0][0]));
    }
    auto per_replica = strategy_->run(
        [&](ReplicaContext&, const Element& e) {
          return e[0].dim(0) ? call(Trainer::as_model_input(*this, e[0]), false) : Tensor();
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
