// keras::export_onnx: the exported graphs of the CLI's models (mlp, conv, vit) and of models
// holding every exportable layer run in ONNX Runtime (npm's onnxruntime-node, under Node.js) on
// the same inputs as Model::predict, and pass onnx.checker.check_model(full_check=True) of
// Debian's python3-onnx.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "lockstep/autodiff/functions.h"
#include "lockstep/core/error.h"
#include "lockstep/keras.h"
#include "saving_test_util.h"

namespace lockstep::keras {
namespace {

namespace fs = std::filesystem;

const char* kRunOnnx = R"(
const fs = require('fs');
const [, , ortDir, model, inputPath, dtype, dims, outPath] = process.argv;
let ort;
try {
  ort = require(ortDir + '/node_modules/onnxruntime-node');
} catch (e) {
  console.log('MISSING onnxruntime-node in ' + ortDir + ': ' + e.message);
  process.exit(3);
}
(async () => {
  const buf = fs.readFileSync(inputPath);
  const bytes = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length);
  const data = dtype === 'uint8' ? new Uint8Array(bytes)
             : dtype === 'int32' ? new Int32Array(bytes) : new Float32Array(bytes);
  const session = await ort.InferenceSession.create(model);
  const out = await session.run({input: new ort.Tensor(dtype, data, dims.split(',').map(Number))});
  const o = out.output;
  fs.writeFileSync(outPath, Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength));
  console.log('ok ' + o.dims.join(','));
})().catch((e) => { console.error(String(e)); process.exit(1); });
)";

std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = p ? ::pclose(p) : -1;
  if (status != 0) out += "\n(exit status " + std::to_string(status) + ")";
  return out;
}

class ExportOnnx : public saving_test::TempDir {
 protected:
  // Exports `m`, runs it in ONNX Runtime on `x`, and returns the largest absolute difference
  // from Model::predict (infinity when ORT fails; the failure is reported).
  double max_abs_diff(Model& m, const Tensor& x) {
    const std::string model_path = path(m.name() + ".onnx");
    export_onnx(m, model_path, {.opset = 17});
    const std::string in = path("input.bin"), out = path("output.bin"), js = path("run.js");
    std::ofstream(in, std::ios::binary)
        .write(static_cast<const char*>(x.raw_data()), static_cast<std::streamsize>(x.nbytes()));
    std::ofstream(js) << kRunOnnx;
    std::string dims;
    for (int i = 0; i < x.rank(); ++i) dims += (i ? "," : "") + std::to_string(x.shape()[i]);
    const std::string dtype = x.dtype() == DType::uint8   ? "uint8"
                              : x.dtype() == DType::int32 ? "int32"
                                                          : "float32";
    if (::access("/usr/bin/node", X_OK) != 0) {
      ADD_FAILURE() << "/usr/bin/node is missing: run scripts/setup (Debian's nodejs).";
      return INFINITY;
    }
    const std::string ort_dir = LOCKSTEP_ONNXRUNTIME_NODE_DIR;
    const std::string log = run("/usr/bin/node " + js + " '" + ort_dir + "' " + model_path + " " +
                                in + " " + dtype + " " + dims + " " + out);
    if (log.find("MISSING onnxruntime-node") != std::string::npos) {
      ADD_FAILURE() << log << "\nRun scripts/setup --tests: it installs onnxruntime-node with "
                    << "`npm install --ignore-scripts onnxruntime-node` into " << ort_dir;
      return INFINITY;
    }
    if (log.rfind("ok ", 0) != 0) {
      ADD_FAILURE() << "ONNX Runtime failed on " << model_path << ":\n" << log;
      return INFINITY;
    }
    Tensor expected = m.predict(x);
    std::ifstream f(out, std::ios::binary);
    std::vector<float> got(static_cast<size_t>(expected.num_elements()));
    f.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * 4));
    EXPECT_EQ(f.gcount(), static_cast<std::streamsize>(got.size() * 4)) << log;
    double worst = 0;
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(got[static_cast<size_t>(i)]) -
                                       expected.data<float>()[i]));
    }
    check_model(model_path);
    std::cout << "[ onnx ] " << m.name() << ": max |ORT - predict| = " << worst << "\n";
    return worst;
  }

  void check_model(const std::string& model_path) {
    int status = 0;
    const std::string out = saving_test::run_python(R"(
import sys
import onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
print("checked", m.opset_import[0].version)
)",
                                                    model_path, &status);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("checked 17"), std::string::npos)
        << out << "\n(python3-onnx missing? run scripts/setup)";
  }
};

void train_one_step(Model& m, const Tensor& x, int64_t classes) {
  m.compile({.optimizer = "adam", .loss = "categorical_crossentropy"});
  const int64_t n = x.shape()[0];
  Tensor y = Tensor::zeros({n, classes});
  for (int64_t i = 0; i < n; ++i) y.data<float>()[i * classes + i % classes] = 1.0f;
  m.train_on_batch(x, y);
}

// Softmax probabilities of float32 graphs computed in another order of operations (oneDNN's
// matmuls and convolutions vs ONNX Runtime's): within 1e-5 absolute.
TEST_F(ExportOnnx, CliModelsMatchPredictInOnnxRuntime) {
  for (const char* name : {"mlp", "conv", "vit"}) {
    SCOPED_TRACE(name);
    clear_session();
    Sequential m = saving_test::cli_model(name);
    Tensor x = saving_test::cli_input(16, 3);
    train_one_step(m, x, 10);
    EXPECT_LE(max_abs_diff(m, x), 1e-5);
  }
}

TEST_F(ExportOnnx, ImageLayersMatchPredict) {
  saving_test::LayerZoo zoo = saving_test::image_zoo();
  train_one_step(*zoo.model, zoo.input, 3);  // non-trivial moving statistics
  // The zoo's one mixed_bfloat16 Dense computes in bfloat16 in Lockstep and in float32 in the
  // exported graph: its outputs differ by bfloat16 rounding (8 bits of mantissa, ~4e-3 relative)
  // before a 3-way softmax, so the bound here is 1e-2.
  EXPECT_LE(max_abs_diff(*zoo.model, zoo.input), 1e-2);
}

TEST_F(ExportOnnx, SequenceLayersMatchPredict) {
  saving_test::LayerZoo zoo = saving_test::sequence_zoo();
  EXPECT_LE(max_abs_diff(*zoo.model, zoo.input), 1e-5);
}

class Twice : public LayerImpl<Twice> {
 public:
  Twice() : LayerImpl("", "twice") {}
  std::string class_name() const override { return "Twice"; }
  Tensor call(const Tensor& x, bool) override { return add(x, x); }
};

TEST_F(ExportOnnx, LayerWithoutExportIsNamed) {
  Sequential m({Input({3}), Twice(), layers::Dense({.units = 2})});
  try {
    export_onnx(m, path("m.onnx"));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'twice' (Twice)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("m.onnx")));
}

}  // namespace
}  // namespace lockstep::keras
