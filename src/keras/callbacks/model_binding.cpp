// The one place callbacks see the Model class: binding a callback's TrainingTarget to a model.
#include "lockstep/keras/callbacks/callback.h"
#include "lockstep/keras/model.h"

namespace lockstep::keras::callbacks {

void Callback::set_model(Model* model) {
  model_ = model;
  if (model == nullptr) {
    target_ = {};
    return;
  }
  target_ = TrainingTarget{
      .stop_training = [model] { model->stop_training = true; },
      .optimizer = [model]() -> optimizers::Optimizer& { return model->optimizer(); },
      .weights = [model] { return model->weights(); },
      .save_weights = [model](const std::string& path) { model->save_weights(path); },
  };
}

}  // namespace lockstep::keras::callbacks
