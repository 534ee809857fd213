// Model::save / keras::saving::load_model: the Keras 3 .keras archive. Round trips (predictions bit
// for bit; fit continuing exactly), an independent reader (Debian's h5py and json), a fixture laid
// out as Keras 3 writes it (fixtures/make_keras3_fixture.py), and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/core/error.h"
#include "lockstep/keras.h"
#include "lockstep/keras/saving/h5_store.h"
#include "lockstep/keras/saving/zip_archive.h"
#include "saving_test_util.h"

namespace lockstep::keras {
namespace {

using nlohmann::json;
using saving_test::LayerZoo;
using saving_test::same_bits;
namespace fs = std::filesystem;

class KerasArchive : public saving_test::TempDir {
 protected:
  // Saves, loads and checks predictions and every weight bit for bit.
  void expect_round_trip(const LayerZoo& zoo) {
    const std::string p = path("m.keras");
    zoo.model->save(p);
    std::shared_ptr<Model> loaded = saving::load_model(p);
    EXPECT_EQ(loaded->name(), zoo.model->name());
    std::vector<Tensor> a = zoo.model->get_weights(), b = loaded->get_weights();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << i;
    EXPECT_TRUE(same_bits(loaded->predict(zoo.input), zoo.model->predict(zoo.input)));
  }
};

// One training step so that weights, moving statistics and optimizer slots are not initial.
void train_one_step(Model& m, const Tensor& x, int64_t classes) {
  m.compile({.optimizer = "adam", .loss = "categorical_crossentropy", .metrics = {"accuracy"}});
  const int64_t n = x.shape()[0];
  Tensor y = Tensor::zeros({n, classes});
  for (int64_t i = 0; i < n; ++i) y.data<float>()[i * classes + i % classes] = 1.0f;
  m.train_on_batch(x, y);
}

TEST_F(KerasArchive, ImageLayersRoundTrip) {
  LayerZoo zoo = saving_test::image_zoo();
  train_one_step(*zoo.model, zoo.input, 3);
  expect_round_trip(zoo);
}

TEST_F(KerasArchive, SequenceLayersRoundTrip) {
  expect_round_trip(saving_test::sequence_zoo());
}

TEST_F(KerasArchive, NestedModelsRoundTrip) {
  expect_round_trip(saving_test::nested_zoo());
}

TEST_F(KerasArchive, CliModelsRoundTrip) {
  for (const char* name : {"mlp", "wide", "conv", "vit"}) {
    SCOPED_TRACE(name);
    clear_session();
    auto m = std::make_shared<Sequential>(saving_test::cli_model(name));
    Tensor x = saving_test::cli_input(6, 11);
    train_one_step(*m, x, 10);
    expect_round_trip({m, x});
  }
}

// Saved at an epoch boundary, loaded and fitted on: the same weights as the uninterrupted run.
TEST_F(KerasArchive, FitContinuesFromTheSavedOptimizerState) {
  auto data = saving_test::random_input({48, 6}, 21);
  Tensor y = Tensor::zeros({48, 3});
  for (int64_t i = 0; i < 48; ++i) y.data<float>()[i * 3 + (i * 5) % 3] = 1.0f;
  auto make = [] {
    auto schedule = std::make_shared<optimizers::schedules::CosineDecay>(
        optimizers::schedules::CosineDecayOptions{.initial_learning_rate = 0.05,
                                                  .decay_steps = 30});
    auto m = std::make_shared<Sequential>(std::vector<LayerArg>{
        Input({6}), layers::Dense({.units = 8, .activation = "relu"}), layers::BatchNormalization(),
        layers::Dense({.units = 3, .activation = "softmax"})});
    m->compile({.optimizer = optimizers::Adam({.learning_rate = schedule}),
                .loss = "categorical_crossentropy"});
    return m;
  };
  const FitOptions fit{.epochs = 1, .verbose = 0, .batch_size = 12, .shuffle = false};
  auto uninterrupted = make();
  auto resumed = make();
  resumed->set_weights(uninterrupted->get_weights());
  uninterrupted->fit(data, y, fit);
  uninterrupted->fit(data, y, fit);

  resumed->fit(data, y, fit);
  resumed->save(path("epoch1.keras"));
  std::shared_ptr<Model> loaded = saving::load_model(path("epoch1.keras"));
  EXPECT_EQ(loaded->optimizer().iterations(), 4);
  loaded->fit(data, y, fit);
  std::vector<Tensor> a = uninterrupted->get_weights(), b = loaded->get_weights();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << i;
  EXPECT_EQ(loaded->optimizer().iterations(), uninterrupted->optimizer().iterations());
}

TEST_F(KerasArchive, ModelCheckpointSavesTheWholeModelByDefault) {
  auto m = std::make_shared<Sequential>(
      std::vector<LayerArg>{Input({4}), layers::Dense({.units = 3, .activation = "softmax"})});
  m->compile({.optimizer = "sgd", .loss = "categorical_crossentropy"});
  Tensor x = saving_test::random_input({8, 4}, 2);
  Tensor y = Tensor::zeros({8, 3});
  for (int64_t i = 0; i < 8; ++i) y.data<float>()[i * 3 + i % 3] = 1.0f;
  auto ckpt = std::make_shared<callbacks::ModelCheckpoint>(path("m{epoch}.keras"));
  m->fit(x, y, {.epochs = 2, .verbose = 0, .callbacks = {ckpt}, .batch_size = 4});
  std::shared_ptr<Model> last = saving::load_model(path("m2.keras"));
  EXPECT_TRUE(fs::exists(path("m1.keras")));
  std::vector<Tensor> a = m->get_weights(), b = last->get_weights();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i], b[i])) << i;
  EXPECT_EQ(last->optimizer().iterations(), 4);
  EXPECT_THROW(callbacks::ModelCheckpoint(path("w.safetensors")), InvalidArgument);
}

// Lists every dataset of model.weights.h5 with h5py: "<path> <dtype> <shape> <values...>".
const char* kListWeights = R"(
import io, sys, zipfile
import h5py
with zipfile.ZipFile(sys.argv[1]) as z:
    data = z.read("model.weights.h5")
with h5py.File(io.BytesIO(data), "r") as f:
    def show(name, obj):
        if isinstance(obj, h5py.Dataset):
            v = obj[()]
            flat = v.reshape(-1) if hasattr(v, "reshape") else [v]
            print(name, obj.dtype, list(obj.shape), " ".join(repr(float(e)) for e in flat))
    f.visititems(show)
    print("model-name", f["vars"].attrs["name"])
)";

TEST_F(KerasArchive, H5pyListsEveryVariableAtItsKeras3Path) {
  Sequential m({Input({5}), layers::Dense({.units = 4, .activation = "relu"}),
                layers::BatchNormalization(), layers::Dense({.units = 3, .activation = "softmax"})},
               "probe");
  train_one_step(m, saving_test::random_input({6, 5}, 4), 3);
  m.save(path("m.keras"));
  int status = 0;
  const std::string out = saving_test::run_python(kListWeights, path("m.keras"), &status);
  ASSERT_EQ(status, 0) << out;
  std::map<std::string, std::pair<std::string, std::vector<double>>>
      seen;  // path -> dtype+shape, values
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::string name, dtype, shape;
    ls >> name;
    if (name == "model-name") {
      std::string n;
      ls >> n;
      EXPECT_EQ(n, "probe");
      continue;
    }
    ls >> dtype;
    std::getline(ls, shape, ']');
    std::vector<double> values;
    double v;
    while (ls >> v) values.push_back(v);
    seen[name] = {dtype + shape + "]", values};
  }
  // Keras 3's layout: layers/<snake_case class, made unique>/vars/<i>; optimizer/vars/<i> =
  // iterations, learning_rate, then (m, v) per trainable variable in the model's order.
  std::vector<Tensor> w = m.get_weights();
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"layers/dense/vars/0", "float32 [5, 4]"},
      {"layers/dense/vars/1", "float32 [4]"},
      {"layers/batch_normalization/vars/0", "float32 [4]"},
      {"layers/batch_normalization/vars/1", "float32 [4]"},
      {"layers/batch_normalization/vars/2", "float32 [4]"},
      {"layers/batch_normalization/vars/3", "float32 [4]"},
      {"layers/dense_1/vars/0", "float32 [4, 3]"},
      {"layers/dense_1/vars/1", "float32 [3]"},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [p, type] = expected[i];
    ASSERT_TRUE(seen.count(p)) << p << "\n" << out;
    EXPECT_EQ(seen[p].first, type) << p;
    ASSERT_EQ(static_cast<int64_t>(seen[p].second.size()), w[i].num_elements()) << p;
    for (int64_t j = 0; j < w[i].num_elements(); ++j) {
      EXPECT_EQ(seen[p].second[static_cast<size_t>(j)], static_cast<double>(w[i].data<float>()[j]))
          << p << "[" << j << "]";
    }
  }
  ASSERT_TRUE(seen.count("optimizer/vars/0"));
  EXPECT_EQ(seen["optimizer/vars/0"].first, "int64 []");
  EXPECT_EQ(seen["optimizer/vars/0"].second, std::vector<double>{1.0});
  EXPECT_TRUE(seen.count("optimizer/vars/1"));  // the learning rate
  // m and v of the 6 trainable variables (dense k, b; gamma, beta; dense_1 k, b).
  for (int i = 2; i < 14; ++i) EXPECT_TRUE(seen.count("optimizer/vars/" + std::to_string(i))) << i;
  EXPECT_FALSE(seen.count("optimizer/vars/14"));
  EXPECT_EQ(seen.size(), expected.size() + 14);
}

TEST_F(KerasArchive, H5pyFindsMultiHeadAttentionInItsEinsumDenseGroups) {
  auto in = Input({3, 8});
  auto out = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4})({in, in});
  Model m(in, out, "attention");
  m.save(path("m.keras"));
  int status = 0;
  const std::string out_text = saving_test::run_python(kListWeights, path("m.keras"), &status);
  ASSERT_EQ(status, 0) << out_text;
  for (const char* p : {"layers/multi_head_attention/_query_dense/vars/0 float32 [8, 2, 4]",
                        "layers/multi_head_attention/_query_dense/vars/1 float32 [2, 4]",
                        "layers/multi_head_attention/_key_dense/vars/0 float32 [8, 2, 4]",
                        "layers/multi_head_attention/_value_dense/vars/0 float32 [8, 2, 4]",
                        "layers/multi_head_attention/_output_dense/vars/0 float32 [2, 4, 8]",
                        "layers/multi_head_attention/_output_dense/vars/1 float32 [8]"}) {
    EXPECT_NE(out_text.find(p), std::string::npos) << p << "\n" << out_text;
  }
}

TEST_F(KerasArchive, ConfigJsonParsesWithKeras3FieldNames) {
  auto m = std::make_shared<Sequential>(saving_test::cli_model("vit"));
  m->compile({.optimizer = "adam", .loss = "categorical_crossentropy", .metrics = {"accuracy"}});
  m->save(path("vit.keras"));
  int status = 0;
  const std::string out = saving_test::run_python(R"(
import json, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    print(sorted(z.namelist()))
    c = json.loads(z.read("config.json"))
    meta = json.loads(z.read("metadata.json"))
for key in ("module", "class_name", "config", "registered_name", "build_config", "compile_config"):
    assert key in c, key
assert c["class_name"] == "Sequential" and c["module"] == "keras"
assert set(meta) == {"keras_version", "date_saved"}, meta
assert meta["keras_version"].startswith("3.")
layers = c["config"]["layers"]
print([l["class_name"] for l in layers])
vit = layers[2]
assert vit["registered_name"] == "Functional"
inner = [l["class_name"] for l in vit["config"]["layers"]]
print(inner.count("MultiHeadAttention"), inner.count("LayerNormalization"))
for l in vit["config"]["layers"]:
    for key in ("module", "class_name", "config", "registered_name", "name", "inbound_nodes"):
        assert key in l, (l["class_name"], key)
print(sorted(c["compile_config"]))
print("ok")
)",
                                                  path("vit.keras"), &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("['config.json', 'metadata.json', 'model.weights.h5']"), std::string::npos)
      << out;
  EXPECT_NE(out.find("['InputLayer', 'Rescaling', 'Functional', 'Dense']"), std::string::npos)
      << out;
  EXPECT_NE(out.find("4 9"), std::string::npos) << out;
  EXPECT_NE(out.find("'jit_compile', 'loss', 'loss_weights', 'metrics', 'optimizer'"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("ok"), std::string::npos) << out;
}

// fixtures/keras3_mlp.keras, made by hand with h5py as Keras 3 lays the archive out.
TEST_F(KerasArchive, LoadsAnArchiveLaidOutAsKeras3WritesIt) {
  std::shared_ptr<Model> m =
      saving::load_model(std::string(LOCKSTEP_KERAS_FIXTURES) + "/keras3_mlp.keras");
  EXPECT_EQ(m->class_name(), "Sequential");
  ASSERT_TRUE(m->compiled());
  EXPECT_EQ(m->optimizer().iterations(), 0);
  std::vector<Tensor> w = m->get_weights();
  ASSERT_EQ(w.size(), 4u);
  // The generator's formulas.
  float k[4][3], b[3] = {0.1f, -0.2f, 0.3f}, k1[3][2], b1[2] = {0.5f, -0.5f};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) k[i][j] = static_cast<float>((3 * i + j - 5) / 10.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) k1[i][j] = static_cast<float>((2 * i + j - 2) / 4.0);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(w[0].data<float>()[i], k[i / 3][i % 3]);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w[1].data<float>()[i], b[i]);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w[2].data<float>()[i], k1[i / 2][i % 2]);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w[3].data<float>()[i], b1[i]);
  // relu(x·k + b)·k1 + b1, softmax, in double.
  const double x[4] = {1.0, -0.5, 2.0, 0.25};
  double h[3], z[2];
  for (int j = 0; j < 3; ++j) {
    h[j] = b[j];
    for (int i = 0; i < 4; ++i) h[j] += x[i] * k[i][j];
    h[j] = std::max(h[j], 0.0);
  }
  for (int j = 0; j < 2; ++j) {
    z[j] = b1[j];
    for (int i = 0; i < 3; ++i) z[j] += h[i] * k1[i][j];
  }
  const double e0 = std::exp(z[0]), e1 = std::exp(z[1]);
  Tensor p = m->predict(Tensor::from_vector<float>({1.0f, -0.5f, 2.0f, 0.25f}, {1, 4}));
  EXPECT_NEAR(p.data<float>()[0], e0 / (e0 + e1), 1e-6);
  EXPECT_NEAR(p.data<float>()[1], e1 / (e0 + e1), 1e-6);
}

// ---- bad input: each a clear error naming the file and the entry.

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// An archive with `entries` replaced (or added), the rest copied from `base`.
std::string patched_archive(const std::string& base,
                            const std::map<std::string, std::string>& replace) {
  saving::ZipReader zip(read_bytes(base), base);
  std::vector<std::pair<std::string, std::string>> entries;
  for (const std::string& n : zip.names()) {
    auto it = replace.find(n);
    if (it == replace.end()) {
      entries.emplace_back(n, zip.read(n));
    } else if (!it->second.empty()) {
      entries.emplace_back(n, it->second);
    }
  }
  return saving::write_zip(entries);
}

TEST_F(KerasArchive, NonZipAndTruncatedFilesNameTheFile) {
  write_bytes(path("text.keras"), "this is not a zip file at all");
  std::string msg = error_of([&] { saving::load_model(path("text.keras")); });
  EXPECT_NE(msg.find("text.keras"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a .keras archive"), std::string::npos) << msg;

  Sequential m({Input({3}), layers::Dense({.units = 2})});
  m.save(path("good.keras"));
  const std::string good = read_bytes(path("good.keras"));
  for (size_t cut : {good.size() / 2, good.size() - 10, size_t(30)}) {
    write_bytes(path("cut.keras"), good.substr(0, cut));
    EXPECT_THROW(saving::load_model(path("cut.keras")), DataLoss) << cut;
    msg = error_of([&] { saving::load_model(path("cut.keras")); });
    EXPECT_NE(msg.find("cut.keras"), std::string::npos) << msg;
  }
  EXPECT_THROW(saving::load_model(path("missing.keras")), NotFound);
}

TEST_F(KerasArchive, MissingEntriesNameTheEntry) {
  Sequential m({Input({3}), layers::Dense({.units = 2})});
  m.save(path("good.keras"));
  write_bytes(path("noweights.keras"),
              patched_archive(path("good.keras"), {{"model.weights.h5", ""}}));
  std::string msg = error_of([&] { saving::load_model(path("noweights.keras")); });
  EXPECT_NE(msg.find("model.weights.h5"), std::string::npos) << msg;
  write_bytes(path("noconfig.keras"), patched_archive(path("good.keras"), {{"config.json", ""}}));
  msg = error_of([&] { saving::load_model(path("noconfig.keras")); });
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  write_bytes(path("badjson.keras"), patched_archive(path("good.keras"), {{"config.json", "{"}}));
  msg = error_of([&] { saving::load_model(path("badjson.keras")); });
  EXPECT_NE(msg.find("badjson.keras/config.json"), std::string::npos) << msg;
}

TEST_F(KerasArchive, UnknownClassInConfigNamesItAndTheFile) {
  Sequential m({Input({3}), layers::Dense({.units = 2})}, "s");
  m.save(path("good.keras"));
  saving::ZipReader zip(read_bytes(path("good.keras")), "good");
  json c = json::parse(zip.read("config.json"));
  c["config"]["layers"][1]["class_name"] = "Dense3D";
  write_bytes(path("unknown.keras"),
              patched_archive(path("good.keras"), {{"config.json", c.dump()}}));
  std::string msg = error_of([&] { saving::load_model(path("unknown.keras")); });
  EXPECT_NE(msg.find("unknown.keras/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Dense3D"), std::string::npos) << msg;
}

TEST_F(KerasArchive, WeightsThatDoNotFitTheConfigNameTheEntry) {
  Sequential m({Input({3}), layers::Dense({.units = 2})}, "s");
  m.save(path("good.keras"));
  saving::ZipReader zip(read_bytes(path("good.keras")), "good");
  json c = json::parse(zip.read("config.json"));
  c["config"]["layers"][1]["config"]["units"] = 5;
  write_bytes(path("wide.keras"), patched_archive(path("good.keras"), {{"config.json", c.dump()}}));
  std::string msg = error_of([&] { saving::load_model(path("wide.keras")); });
  EXPECT_NE(msg.find("wide.keras/model.weights.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers/dense/vars/0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32[3, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float32[3, 5]"), std::string::npos) << msg;
}

TEST_F(KerasArchive, MissingVariablesNameTheGroup) {
  Sequential m({Input({3}), layers::Dense({.units = 2})}, "s");
  m.save(path("good.keras"));
  // An h5 holding only the first layer's kernel, and one with no layers at all.
  saving::H5Writer partial;
  partial.make_vars("", "s");
  partial.make_vars("layers/dense", "dense");
  partial.write("layers/dense", 0, m.get_weights()[0]);
  write_bytes(path("partial.keras"),
              patched_archive(path("good.keras"), {{"model.weights.h5", partial.finish()}}));
  std::string msg = error_of([&] { saving::load_model(path("partial.keras")); });
  EXPECT_NE(msg.find("partial.keras/model.weights.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers/dense/vars"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 1 variables"), std::string::npos) << msg;

  saving::H5Writer empty;
  empty.make_vars("", "s");
  write_bytes(path("empty.keras"),
              patched_archive(path("good.keras"), {{"model.weights.h5", empty.finish()}}));
  EXPECT_THROW(saving::load_model(path("empty.keras")), NotFound);
  msg = error_of([&] { saving::load_model(path("empty.keras")); });
  EXPECT_NE(msg.find("layers/dense/vars"), std::string::npos) << msg;

  write_bytes(path("nothdf5.keras"),
              patched_archive(path("good.keras"), {{"model.weights.h5", "not hdf5"}}));
  msg = error_of([&] { saving::load_model(path("nothdf5.keras")); });
  EXPECT_NE(msg.find("nothdf5.keras/model.weights.h5"), std::string::npos) << msg;
}

TEST_F(KerasArchive, FailedSaveLeavesNoFile) {
  Sequential m({Input({3}), layers::Dense({.units = 2})});
  EXPECT_THROW(m.save(path("no_such_dir/m.keras")), NotFound);
  EXPECT_FALSE(fs::exists(path("no_such_dir")));
  EXPECT_THROW(m.save(path("m.h5")), InvalidArgument);
  EXPECT_FALSE(fs::exists(path("m.h5")));
  // Overwriting keeps the old file until the new one is complete; nothing else is left behind.
  m.save(path("m.keras"));
  m.save(path("m.keras"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace lockstep::keras
