// Factories of the built-in layers from their configs: the fields their get_config writes, which
// are Keras 3's names, in Lockstep's form (initializers as names) or in Keras 3's (initializers and
// dtype policies as serialized objects), so that a config.json Keras 3 wrote loads too.
#include <cctype>
#include <nlohmann/json.hpp>

#include "builtins.h"
#include "lockstep/core/error.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/keras/saving/model_config.h"
#include "lockstep/keras/saving/object_registration.h"
#include "lockstep/keras/saving/serialization_lib.h"
#include "lockstep/keras/sequential.h"

namespace lockstep::keras::saving::internal {

namespace {

using nlohmann::json;

std::string name_of(const json& c) {
  return c.value("name", std::string());
}

std::string dtype_of(const json& c) {
  return c.contains("dtype") ? deserialize_dtype_policy(c["dtype"]) : std::string();
}

// "GlorotUniform" -> "glorot_uniform" (Keras' serialized initializer objects); names pass through.
std::string initializer(const json& c, const char* key, const std::string& fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  if (v.is_string()) return v;
  const std::string cls = v.at("class_name");
  if (cls == "RandomUniform") {
    // Keras' "uniform" is RandomUniform(-0.05, 0.05), the only uniform range Lockstep names.
    const json& ic = v.value("config", json::object());
    if (ic.value("minval", -0.05) != -0.05 || ic.value("maxval", 0.05) != 0.05) {
      throw InvalidArgument(
          "RandomUniform initializer: only minval=-0.05, maxval=0.05 is "
          "supported. Received: " +
          ic.dump());
    }
    return "uniform";
  }
  std::string out;
  for (char ch : cls) {
    if (std::isupper(static_cast<unsigned char>(ch))) {
      if (!out.empty()) out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else {
      out += ch;
    }
  }
  return out;
}

template <size_t N>
std::array<int64_t, N> pair_of(const json& c, const char* key, std::array<int64_t, N> fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  if (v.is_number()) return {v.get<int64_t>(), v.get<int64_t>()};
  return v.get<std::array<int64_t, N>>();
}

std::string activation(const json& c) {
  if (!c.contains("activation") || c["activation"].is_null()) return "linear";
  const json& a = c["activation"];
  if (a.is_string()) return a;
  // Keras 3 writes a built-in activation as its name; a serialized function names it too.
  if (a.is_object() && a.contains("config") && a["config"].is_string()) return a["config"];
  throw InvalidArgument("activation: expected a name. Received: " + a.dump());
}

// Layers whose constructor takes no dtype read the global policy when constructed (Keras
// semantics): construct them under the config's policy.
class PolicyScope {
 public:
  explicit PolicyScope(const std::string& policy) : saved_(mixed_precision::global_policy()) {
    if (!policy.empty()) mixed_precision::set_global_policy(policy);
  }
  ~PolicyScope() { mixed_precision::set_global_policy(saved_); }
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;

 private:
  mixed_precision::Policy saved_;
};

template <typename L, typename... Args>
std::shared_ptr<Layer> under_policy(const json& c, Args&&... args) {
  PolicyScope scope(dtype_of(c));
  return std::make_shared<L>(std::forward<Args>(args)...);
}

}  // namespace

DType dtype_from_name(const std::string& name) {
  for (DType d : {DType::float32, DType::bfloat16, DType::float64, DType::int32, DType::int64,
                  DType::uint8}) {
    if (dtype_name(d) == name) return d;
  }
  throw InvalidArgument(
      "expected a dtype name (float32, bfloat16, float64, int32, int64, uint8). "
      "Received: '" +
      name + "'");
}

std::vector<int64_t> batch_shape_of(const json& c) {
  const json& s = c.contains("batch_shape") ? c["batch_shape"] : c.at("batch_input_shape");
  std::vector<int64_t> out;
  for (const json& d : s) out.push_back(d.is_null() ? 0 : d.get<int64_t>());
  if (out.empty() || out.size() > static_cast<size_t>(Shape::kMaxRank)) {
    throw InvalidArgument("InputLayer: expected a batch_shape of rank 1 to " +
                          std::to_string(Shape::kMaxRank) + ". Received: " + s.dump());
  }
  return out;
}

void register_builtin_layers() {
  using namespace layers;
  register_object<Layer>("InputLayer", [](const json& c) -> std::shared_ptr<Layer> {
    std::vector<int64_t> b = batch_shape_of(c);
    return std::make_shared<InputLayer>(
        Shape(b).without(0), dtype_from_name(c.value("dtype", std::string("float32"))), name_of(c));
  });
  register_object<Layer>("Dense", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<Dense>(
        DenseOptions{.units = c.at("units"),
                     .activation = activation(c),
                     .use_bias = c.value("use_bias", true),
                     .kernel_initializer = initializer(c, "kernel_initializer", "glorot_uniform"),
                     .bias_initializer = initializer(c, "bias_initializer", "zeros"),
                     .name = name_of(c),
                     .dtype = dtype_of(c)});
  });
  register_object<Layer>("Activation", [](const json& c) {
    return under_policy<Activation>(c, activation(c), name_of(c));
  });
  register_object<Layer>("Flatten",
                         [](const json& c) { return under_policy<Flatten>(c, name_of(c)); });
  register_object<Layer>("Reshape", [](const json& c) {
    return under_policy<Reshape>(c, c.at("target_shape").get<std::vector<int64_t>>(), name_of(c));
  });
  register_object<Layer>("Dropout", [](const json& c) {
    DropoutOptions o{.rate = c.at("rate"), .name = name_of(c)};
    if (c.contains("seed") && !c["seed"].is_null()) o.seed = c["seed"].get<uint64_t>();
    return under_policy<Dropout>(c, o);
  });
  register_object<Layer>("Conv2D", [](const json& c) -> std::shared_ptr<Layer> {
    if (c.value("data_format", std::string("channels_last")) != "channels_last") {
      throw InvalidArgument("Conv2D: only data_format='channels_last' is supported. Received: " +
                            c["data_format"].dump());
    }
    return std::make_shared<Conv2D>(
        Conv2DOptions{.filters = c.at("filters"),
                      .kernel_size = pair_of<2>(c, "kernel_size", {0, 0}),
                      .strides = pair_of<2>(c, "strides", {1, 1}),
                      .padding = c.value("padding", std::string("valid")),
                      .activation = activation(c),
                      .use_bias = c.value("use_bias", true),
                      .kernel_initializer = initializer(c, "kernel_initializer", "glorot_uniform"),
                      .bias_initializer = initializer(c, "bias_initializer", "zeros"),
                      .dtype = dtype_of(c),
                      .name = name_of(c)});
  });
  register_object<Layer>("MaxPooling2D", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<MaxPooling2D>(
        MaxPooling2DOptions{.pool_size = pair_of<2>(c, "pool_size", {2, 2}),
                            .strides = pair_of<2>(c, "strides", {0, 0}),
                            .padding = c.value("padding", std::string("valid")),
                            .dtype = dtype_of(c),
                            .name = name_of(c)});
  });
  register_object<Layer>("GlobalAveragePooling1D", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<GlobalAveragePooling1D>(GlobalAveragePooling1DOptions{
        .keepdims = c.value("keepdims", false), .dtype = dtype_of(c), .name = name_of(c)});
  });
  register_object<Layer>("BatchNormalization", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<BatchNormalization>(BatchNormalizationOptions{
        .axis = c.value("axis", -1),
        .momentum = c.value("momentum", 0.99),
        .epsilon = c.value("epsilon", 1e-3),
        .center = c.value("center", true),
        .scale = c.value("scale", true),
        .beta_initializer = initializer(c, "beta_initializer", "zeros"),
        .gamma_initializer = initializer(c, "gamma_initializer", "ones"),
        .moving_mean_initializer = initializer(c, "moving_mean_initializer", "zeros"),
        .moving_variance_initializer = initializer(c, "moving_variance_initializer", "ones"),
        .dtype = dtype_of(c),
        .name = name_of(c)});
  });
  register_object<Layer>("LayerNormalization", [](const json& c) -> std::shared_ptr<Layer> {
    int axis = -1;
    if (c.contains("axis"))
      axis = c["axis"].is_array() ? c["axis"].at(0).get<int>() : c["axis"].get<int>();
    return std::make_shared<LayerNormalization>(
        LayerNormalizationOptions{.axis = axis,
                                  .epsilon = c.value("epsilon", 1e-3),
                                  .center = c.value("center", true),
                                  .scale = c.value("scale", true),
                                  .beta_initializer = initializer(c, "beta_initializer", "zeros"),
                                  .gamma_initializer = initializer(c, "gamma_initializer", "ones"),
                                  .dtype = dtype_of(c),
                                  .name = name_of(c)});
  });
  register_object<Layer>("Embedding", [](const json& c) -> std::shared_ptr<Layer> {
    if (c.value("mask_zero", false)) {
      throw InvalidArgument("Embedding: mask_zero=true is not supported.");
    }
    return std::make_shared<Embedding>(EmbeddingOptions{
        .input_dim = c.at("input_dim"),
        .output_dim = c.at("output_dim"),
        .embeddings_initializer = initializer(c, "embeddings_initializer", "uniform"),
        .dtype = dtype_of(c),
        .name = name_of(c)});
  });
  register_object<Layer>("PositionEmbedding", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<PositionEmbedding>(
        PositionEmbeddingOptions{.sequence_length = c.at("sequence_length"),
                                 .initializer = initializer(c, "initializer", "glorot_uniform"),
                                 .dtype = dtype_of(c),
                                 .name = name_of(c)});
  });
  register_object<Layer>("MultiHeadAttention", [](const json& c) -> std::shared_ptr<Layer> {
    MultiHeadAttentionOptions o{
        .num_heads = c.at("num_heads"),
        .key_dim = c.at("key_dim"),
        .dropout = c.value("dropout", 0.0),
        .use_bias = c.value("use_bias", true),
        .kernel_initializer = initializer(c, "kernel_initializer", "glorot_uniform"),
        .bias_initializer = initializer(c, "bias_initializer", "zeros"),
        .dtype = dtype_of(c),
        .name = name_of(c)};
    if (c.contains("value_dim") && !c["value_dim"].is_null()) o.value_dim = c["value_dim"];
    if (c.contains("output_shape") && !c["output_shape"].is_null()) {
      const json& s = c["output_shape"];
      o.output_shape = s.is_array() ? s.at(0).get<int64_t>() : s.get<int64_t>();
    }
    if (c.contains("seed") && !c["seed"].is_null()) o.seed = c["seed"].get<uint64_t>();
    return std::make_shared<MultiHeadAttention>(o);
  });
  register_object<Layer>("Add", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<Add>(name_of(c), dtype_of(c));
  });
  register_object<Layer>("Concatenate", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<Concatenate>(
        ConcatenateOptions{.axis = c.value("axis", -1), .dtype = dtype_of(c), .name = name_of(c)});
  });
  register_object<Layer>("Rescaling", [](const json& c) -> std::shared_ptr<Layer> {
    return std::make_shared<Rescaling>(RescalingOptions{.scale = c.at("scale"),
                                                        .offset = c.value("offset", 0.0),
                                                        .name = name_of(c),
                                                        .dtype = dtype_of(c)});
  });
  register_object<Layer>("Sequential", [](const json& c) -> std::shared_ptr<Layer> {
    return sequential_from_config(c);
  });
  register_object<Layer>("Functional", [](const json& c) -> std::shared_ptr<Layer> {
    return functional_from_config(c);
  });
  // Keras writes a plain keras.Model(inputs, outputs) as "Functional"; older files say "Model".
  register_object<Layer>(
      "Model", [](const json& c) -> std::shared_ptr<Layer> { return functional_from_config(c); });
}

}  // namespace lockstep::keras::saving::internal
