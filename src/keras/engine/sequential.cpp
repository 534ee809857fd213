#include "lockstep/keras/sequential.h"

#include <nlohmann/json.hpp>
#include "lockstep/core/check.h"

#include "lockstep/keras/layers/core.h"
#include "lockstep/keras/saving/model_config.h"

namespace lockstep::keras {

Sequential::Sequential(std::vector<LayerArg> layers, const std::string& name)
    : Model(name, "sequential") {
  for (LayerArg& l : layers) add(std::move(l));
}

void Sequential::add(LayerArg arg) {
  if (arg.input) {
    LOCKSTEP_CHECK(!input_ && layers_.empty(), "Sequential '", name(),
                   "': an Input can only be the first entry of a Sequential model.");
    input_ = arg.input;
  } else {
    LOCKSTEP_CHECK(arg.layer, "Sequential::add: received a null layer.");
    LOCKSTEP_CHECK(!arg.layer->accepts_multiple_inputs() || dynamic_cast<Model*>(arg.layer.get()),
                   "Sequential '", name(), "': layer '", arg.layer->name(),
                   "' takes several inputs; use the functional Model instead.");
    layers_.push_back(std::move(arg.layer));
  }
  if (input_) rebuild_graph();
}

void Sequential::rebuild_graph() {
  KerasTensor x = *input_;
  for (const auto& l : layers_) x = (*l)(x);
  set_graph({*input_}, x);
}

void Sequential::build(const std::vector<Shape>& input_shapes) {
  if (input_) return;
  LOCKSTEP_CHECK(input_shapes.size() == 1, "Sequential '", name(), "' takes one input. Received ",
                 input_shapes.size(), ".");
  Shape per_example = input_shapes[0].without(0);
  input_ = Input(per_example);
  rebuild_graph();
}

std::vector<Shape> Sequential::compute_output_shapes(const std::vector<Shape>& input_shapes) const {
  Shape s = input_shapes.at(0);
  for (const auto& l : layers_) s = l->compute_output_shapes({s})[0];
  return {s};
}

nlohmann::json Sequential::get_config() const {
  return saving::sequential_config(*this);
}

Tensor Sequential::call(const Tensor& inputs, bool training) {
  detail::LayerCallScope scope;  // the layers' calls are inner ones
  Tensor x = inputs;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const detail::NextOutputReaders readers(
        false, training && i + 1 < layers_.size() && layers_[i + 1]->reads_input_transposed());
    x = (*layers_[i])(x, training);
  }
  return x;
}

}  // namespace lockstep::keras
