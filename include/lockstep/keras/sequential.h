#pragma once
// Sequential: a plain stack of single-input layers (keras.Sequential).
//
//   keras::Sequential model({
//       keras::Input({784}),
//       layers::Dense({.units = 128, .activation = "relu"}),
//       layers::Dense({.units = 10, .activation = "softmax"}),
//   });
//
// With an Input first, the model is built at once; otherwise at the first call.
#include <initializer_list>
#include <memory>
#include <vector>

#include "lockstep/keras/model.h"

namespace lockstep::keras {

// An entry of Sequential's list: a layer (moved in), a shared_ptr to one, or an Input.
struct LayerArg {
  std::shared_ptr<Layer> layer;
  std::optional<KerasTensor> input;
  LayerArg(const KerasTensor& t) : input(t) {}                 // NOLINT
  LayerArg(std::shared_ptr<Layer> l) : layer(std::move(l)) {}  // NOLINT
  template <typename L>
  requires(std::derived_from<std::decay_t<L>, Layer> && !std::is_lvalue_reference_v<L>)
      LayerArg(L&& l)
      : layer(std::move(l).move_to_shared()) {}  // NOLINT
};

class Sequential : public Model {
 public:
  explicit Sequential(std::vector<LayerArg> layers = {}, const std::string& name = "");
  std::string class_name() const override { return "Sequential"; }
  void add(LayerArg layer);
  std::vector<std::shared_ptr<Layer>> layers() const override { return layers_; }
  Tensor call(const Tensor& inputs, bool training) override;
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Shape> compute_output_shapes(const std::vector<Shape>& input_shapes) const override;
  // Keras 3's Sequential config (saving/model_config.h).
  nlohmann::json get_config() const override;
  std::shared_ptr<Layer> move_to_shared() && override {
    return std::make_shared<Sequential>(std::move(*this));
  }

 private:
  void rebuild_graph();
  std::optional<KerasTensor> input_;
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace lockstep::keras
