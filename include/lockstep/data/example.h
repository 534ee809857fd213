#pragma once
// tf.train.Example parsing, as tf.io.parse_single_example / tf.io.parse_example.
//
//   FeatureSpecs spec = {{"image", FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes}},
//                        {"label", FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}},
//                        {"boxes", VarLenFeature{.dtype = FeatureType::float32}}};
//   ds.map([spec](const Element& e) {
//     ParsedFeatures f = parse_single_example(e[0], spec);
//     return Element{decode_png(f.at("image").bytes_at(0)), f.at("label").values};
//   });
//
// The wire format is protobuf's, parsed by libprotobuf with TensorFlow's example.proto and
// feature.proto schema (src/data/proto). Values, per feature kind:
//   FixedLenFeature{shape, int64 | float32}: `values` int64 / float32 tensor of `shape`
//     (parse_example: [batch, shape...]); the Example must hold exactly prod(shape) values, or
//     none when a default_value is given.
//   FixedLenFeature{shape, bytes}: `bytes`, prod(shape) strings (batch: batch * prod(shape)), row
//     major; `shape` says how they are arranged.
//   VarLenFeature{dtype}: TensorFlow's SparseTensor: `indices` int64[n, 1] (batch: [n, 2],
//   (example,
//     position)), `values` int64/float32[n] or `bytes` (n strings), `dense_shape` int64[1] = {n}
//     (batch: {batch, longest list}). A missing feature is an empty list.
// Errors name the feature and what was expected and received; a record that is not a valid
// Example is DataLoss, a feature of the wrong kind or count (or missing without a default) is
// InvalidArgument. `where` (e.g. "train.tfrecord, record 7") is put in front of the message.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/data/bytes.h"

namespace lockstep {

// The three kinds of tf.train.Feature (tf.string is `bytes`).
enum class FeatureType { int64, float32, bytes };

using FeatureValues =
    std::variant<std::vector<int64_t>, std::vector<float>, std::vector<std::string>>;

struct FixedLenFeature {
  std::vector<int64_t> shape;
  FeatureType dtype = FeatureType::float32;
  // Used when the Example lacks the feature; prod(shape) values of `dtype`'s kind.
  std::optional<FeatureValues> default_value;
};
struct VarLenFeature {
  FeatureType dtype = FeatureType::float32;
};
using FeatureSpec = std::variant<FixedLenFeature, VarLenFeature>;
using FeatureSpecs = std::map<std::string, FeatureSpec>;

struct ParsedFeature {
  FeatureType dtype = FeatureType::float32;
  Tensor values;       // int64 / float32 features
  RaggedBytes bytes;   // bytes features
  Tensor indices;      // VarLenFeature only
  Tensor dense_shape;  // VarLenFeature only
  std::string_view bytes_at(int64_t j) const { return bytes.at(j); }
  // bytes value j as a byte string tensor uint8[n] (copied).
  Tensor bytes_tensor_at(int64_t j) const { return bytes_tensor(bytes.at(j)); }
};
using ParsedFeatures = std::map<std::string, ParsedFeature>;

ParsedFeatures parse_single_example(std::span<const uint8_t> serialized, const FeatureSpecs& specs,
                                    const std::string& where = "");
// `serialized` is a byte string (uint8[n]).
ParsedFeatures parse_single_example(const Tensor& serialized, const FeatureSpecs& specs,
                                    const std::string& where = "");
// A batch of serialized Examples (each uint8[n]); values gain a leading batch dimension.
ParsedFeatures parse_example(const std::vector<Tensor>& serialized, const FeatureSpecs& specs);

// The serialized tf.train.Example holding `features` (for writing TFRecords of Examples).
std::string serialize_example(const std::map<std::string, FeatureValues>& features);

}  // namespace lockstep
