// libFuzzer target for the .keras loader's own checks (saving/saving_lib.h). The first byte picks
// what the rest is:
//   0  a .keras archive: the zip (libzip) and its config.json (JSON, the registry, the model
//      configs); the weights entry is not opened, since Debian's libhdf5 is not instrumented
//   1  the text of a config (models::model_from_json)
//   2  the shapes and dtypes of a well-formed model.weights.h5 for a fixed model: the checks of
//      the HDF5 layout (group present, variable count, shapes, dtypes)
// Every input must either load or throw a lockstep::Error; anything else (a crash, a sanitizer
// report, another exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "lockstep/core/error.h"
#include "lockstep/keras/model.h"
#include "lockstep/keras/saving/h5_store.h"
#include "lockstep/keras/saving/model_config.h"
#include "lockstep/keras/saving/saving_lib.h"
#include "lockstep/keras/saving/zip_archive.h"

namespace {

using namespace lockstep;
using namespace lockstep::keras;

// A model of Input(3) -> Dense(2) compiled with SGD, saved by Keras' layout: its config.
const char* kConfig = R"({"module": "keras", "class_name": "Sequential", "registered_name": null,
  "config": {"name": "s", "layers": [
    {"module": "keras.layers", "class_name": "InputLayer", "registered_name": null,
     "config": {"batch_shape": [null, 3], "dtype": "float32", "name": "in"}},
    {"module": "keras.layers", "class_name": "Dense", "registered_name": null,
     "config": {"name": "dense", "units": 2}}]},
  "compile_config": {"optimizer": "sgd", "loss": "mean_squared_error", "metrics": []}})";

// Shapes and dtypes from the fuzzer's bytes, small enough to allocate.
void weights_case(const uint8_t* d, size_t n) {
  size_t i = 0;
  auto next = [&]() -> uint8_t { return i < n ? d[i++] : 0; };
  saving::H5Writer h5;
  h5.make_vars("", "s");
  const uint8_t groups = next();
  const DType dtypes[] = {DType::float32, DType::float64, DType::int32,
                          DType::int64,   DType::uint8,   DType::bfloat16};
  for (const char* path : {"layers/dense", "optimizer"}) {
    if (!(groups & (path[0] == 'l' ? 1 : 2))) continue;
    h5.make_vars(path, path);
    const int count = next() % 5;
    for (int v = 0; v < count; ++v) {
      const int rank = next() % 4;
      std::vector<int64_t> dims;
      for (int r = 0; r < rank; ++r) dims.push_back(next() % 5);
      h5.write(path, v, Tensor::zeros(Shape(dims), dtypes[next() % 6]));
    }
  }
  const std::string archive = saving::write_zip(
      {{"config.json", kConfig}, {"metadata.json", "{}"}, {"model.weights.h5", h5.finish()}});
  saving::load_model_from_bytes(archive, "fuzz.keras");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        saving::ZipReader zip(rest, "fuzz.keras");
        std::string text = zip.read("config.json", size_t{1} << 20);
        nlohmann::json config;
        try {
          config = nlohmann::json::parse(text);
        } catch (const nlohmann::json::exception&) {
          return 0;  // load_model reports this as DataLoss
        }
        saving::deserialize_model(config);
        break;
      }
      case 1:
        models::model_from_json(rest);
        break;
      default:
        weights_case(data + 1, size - 1);
    }
  } catch (const lockstep::Error&) {
  }
  return 0;
}
