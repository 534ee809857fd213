// `lockstep evaluate --model M.keras` and `lockstep predict --model M.keras --output FILE.csv`:
// a model saved by `lockstep train --save-model` (or any .keras archive of a model with one input)
// on the built-in test split, or on the user's files (--data SPEC, read as `lockstep train --data`
// reads them: apps/file_data.h).
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "file_data.h"
#include "flag_checks.h"
#include "lockstep/lockstep.h"

namespace lockstep::apps {
namespace {

struct ModelFileArgs {
  std::string model;  // a .keras archive
  std::string dataset = "fashion_mnist";
  std::string data_dir;
  std::string data;  // --data SPEC: the user's files instead of the built-in test split
  DataSpecOptions data_options;
  int64_t batch_size = 256;
  std::string output;  // predict: the CSV written
};

// The built-in test split, images flattened to the model's input shape.
std::pair<Tensor, Tensor> test_split(const ModelFileArgs& a, const keras::Model& model) {
  datasets::TrainTest data = a.dataset == "mnist" ? datasets::mnist::load_data(a.data_dir)
                                                  : datasets::fashion_mnist::load_data(a.data_dir);
  Tensor x = data.second.first, y = data.second.second;
  const std::vector<keras::KerasTensor> inputs = model.inputs();
  if (inputs.size() != 1) {
    throw InvalidArgument("--model '" + a.model + "': expected a model with one input, got " +
                          std::to_string(inputs.size()) + ".");
  }
  std::vector<int64_t> shape = inputs[0].shape().to_vector();
  shape[0] = x.dim(0);
  if (Shape(shape).num_elements() != x.num_elements()) {
    throw InvalidArgument("--model '" + a.model + "': its input " + inputs[0].shape().to_string() +
                          " does not take the " + x.shape().to_string() + " test images.");
  }
  return {x.reshape(Shape(shape)), y};
}

// --data SPEC: batches of (x flattened to the model's input, one-hot label) from the user's files;
// the model's own layers (its Rescaling) scale them as in training.
Dataset file_batches(const ModelFileArgs& a, const keras::Model& model) {
  FileInput in = open_file_input(a.data, a.data_options);
  const std::vector<keras::KerasTensor> inputs = model.inputs();
  if (inputs.size() != 1) {
    throw InvalidArgument("--model '" + a.model + "': expected a model with one input, got " +
                          std::to_string(inputs.size()) + ".");
  }
  const int64_t flat = Shape(in.shape).num_elements();
  const Shape model_input = inputs[0].shape();  // [batch, ...], the batch unknown
  int64_t per_example = 1;
  for (int i = 1; i < model_input.rank(); ++i) per_example *= model_input.dim(i);
  if (model_input.rank() < 2 || per_example != flat) {
    throw InvalidArgument("--model '" + a.model + "': its input " + model_input.to_string() +
                          " does not take the examples of --data '" + a.data + "' (" +
                          Shape(in.shape).to_string() + ").");
  }
  const int64_t classes = model.output().shape().dims().back();
  return in.examples.batch(a.batch_size).map([flat, classes](const Element& batch) {
    return Element{batch[0].reshape({-1, flat}), one_hot(batch[1].to(DType::int64), classes)};
  });
}

std::shared_ptr<keras::Model> load(const ModelFileArgs& a) {
  return keras::saving::load_model(a.model);
}

int run_evaluate(const ModelFileArgs& a) {
  auto model = load(a);
  if (!model->compiled()) {
    throw InvalidArgument("--model '" + a.model +
                          "' was saved without compile_config: evaluate needs its loss.");
  }
  std::map<std::string, double> results;
  if (!a.data.empty()) {
    results = model->evaluate(file_batches(a, *model));
  } else {
    auto [x, y] = test_split(a, *model);
    Tensor labels = one_hot(y.to(DType::int64), 10);
    results = model->evaluate(x, labels, {.batch_size = a.batch_size});
  }
  std::string accuracy;
  for (const auto& [key, value] : results) {
    if (key.find("accuracy") != std::string::npos) accuracy = key;
  }
  std::cout << "test loss: " << results.at("loss");
  if (!accuracy.empty()) std::cout << " - test accuracy: " << results.at(accuracy);
  std::cout << "\n";
  return 0;
}

int run_predict(const ModelFileArgs& a) {
  auto model = load(a);
  Tensor out;
  if (!a.data.empty()) {
    out = model->predict(file_batches(a, *model));
  } else {
    auto [x, y] = test_split(a, *model);
    (void)y;
    out = model->predict(x, a.batch_size);
  }
  if (out.dtype() != DType::float32) out = out.to(DType::float32);
  const int64_t rows = out.dim(0), cols = out.num_elements() / std::max<int64_t>(rows, 1);
  std::ofstream csv(a.output);
  if (!csv) throw NotFound("--output: cannot write '" + a.output + "'.");
  // One row of model outputs per example; 9 significant digits round-trip a float32.
  csv << std::setprecision(9);
  const float* p = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) csv << (c ? "," : "") << p[r * cols + c];
    csv << "\n";
  }
  if (!csv.flush()) throw Unavailable("--output: writing '" + a.output + "' failed.");
  return 0;
}

void add_common_options(CLI::App& cmd, ModelFileArgs& a) {
  cmd.add_option("--model", a.model, "The .keras archive (lockstep train --save-model)")
      ->required();
  cmd.add_option("--dataset", a.dataset, "fashion_mnist or mnist: its test split")
      ->check(CLI::IsMember({"fashion_mnist", "mnist"}));
  cmd.add_option("--data-dir", a.data_dir, "Directory of the four IDX files");
  cmd.add_option("--data", a.data,
                 "Your files instead of the test split, as lockstep train --data reads them: a "
                 "directory of class folders of PNG/JPEG images, a CSV file (or glob), or a glob "
                 "of TFRecord files of tf.train.Example (docs/data.md)");
  cmd.add_option("--label-column", a.data_options.label_column, "CSV: the label column");
  cmd.add_option("--image-feature", a.data_options.image_feature,
                 "TFRecord: the bytes feature holding the image (PNG, JPEG or raw uint8)");
  cmd.add_option("--label-feature", a.data_options.label_feature,
                 "TFRecord: the int64 label feature");
  add_integer_option(cmd, "--batch-size", a.batch_size, "Examples per batch", 1);
}

}  // namespace

std::function<int()> add_evaluate_command(CLI::App& app) {
  auto a = std::make_shared<ModelFileArgs>();
  auto* cmd = app.add_subcommand("evaluate", "Evaluate a saved .keras model on the test split");
  add_common_options(*cmd, *a);
  return [a] { return run_evaluate(*a); };
}

std::function<int()> add_predict_command(CLI::App& app) {
  auto a = std::make_shared<ModelFileArgs>();
  auto* cmd = app.add_subcommand(
      "predict", "Write a saved .keras model's outputs on the test split, one CSV row each");
  add_common_options(*cmd, *a);
  cmd->add_option("--output", a->output, "The CSV file to write")->required();
  return [a] { return run_predict(*a); };
}

}  // namespace lockstep::apps
