#include "lockstep/data/example.h"

#include <cstring>

#include "data/proto/example.pb.h"
#include "lockstep/core/check.h"

namespace lockstep {
namespace {

namespace tfp = lockstep::tensorflow;

const char* type_name(FeatureType t) {
  switch (t) {
    case FeatureType::int64:
      return "int64";
    case FeatureType::float32:
      return "float32";
    case FeatureType::bytes:
      return "bytes";
  }
  return "unknown";
}

// The kind a tf.train.Feature holds; nullopt for an empty Feature (no list set).
std::optional<FeatureType> kind_of(const tfp::Feature& f) {
  switch (f.kind_case()) {
    case tfp::Feature::kInt64List:
      return FeatureType::int64;
    case tfp::Feature::kFloatList:
      return FeatureType::float32;
    case tfp::Feature::kBytesList:
      return FeatureType::bytes;
    case tfp::Feature::KIND_NOT_SET:
      break;
  }
  return std::nullopt;
}

int64_t count_of(const tfp::Feature& f) {
  switch (f.kind_case()) {
    case tfp::Feature::kInt64List:
      return f.int64_list().value_size();
    case tfp::Feature::kFloatList:
      return f.float_list().value_size();
    case tfp::Feature::kBytesList:
      return f.bytes_list().value_size();
    case tfp::Feature::KIND_NOT_SET:
      break;
  }
  return 0;
}

int64_t num_elements(const std::vector<int64_t>& shape, const std::string& prefix,
                     const std::string& name) {
  int64_t n = 1;
  for (int64_t d : shape) {
    LOCKSTEP_CHECK(d >= 0 && (d == 0 || n <= (int64_t{1} << 40) / d), prefix,
                   "parse_example: FixedLenFeature '", name,
                   "' needs a fully known, non-negative shape of at most 2^40 elements.");
    n *= d;
  }
  return n;
}

// One example's values of one feature, gathered before the batch is assembled.
struct Gathered {
  std::vector<int64_t> i64;
  std::vector<float> f32;
  std::vector<std::string> bytes;
  int64_t size() const { return static_cast<int64_t>(i64.size() + f32.size() + bytes.size()); }
};

void append(Gathered& g, const tfp::Feature& f) {
  switch (f.kind_case()) {
    case tfp::Feature::kInt64List:
      g.i64.insert(g.i64.end(), f.int64_list().value().begin(), f.int64_list().value().end());
      break;
    case tfp::Feature::kFloatList:
      g.f32.insert(g.f32.end(), f.float_list().value().begin(), f.float_list().value().end());
      break;
    case tfp::Feature::kBytesList:
      g.bytes.insert(g.bytes.end(), f.bytes_list().value().begin(), f.bytes_list().value().end());
      break;
    case tfp::Feature::KIND_NOT_SET:
      break;
  }
}

void append_default(Gathered& g, const FeatureValues& v) {
  if (auto* p = std::get_if<std::vector<int64_t>>(&v))
    g.i64.insert(g.i64.end(), p->begin(), p->end());
  if (auto* p = std::get_if<std::vector<float>>(&v))
    g.f32.insert(g.f32.end(), p->begin(), p->end());
  if (auto* p = std::get_if<std::vector<std::string>>(&v)) {
    g.bytes.insert(g.bytes.end(), p->begin(), p->end());
  }
}

bool default_matches(const FeatureValues& v, FeatureType t) {
  return (t == FeatureType::int64 && std::holds_alternative<std::vector<int64_t>>(v)) ||
         (t == FeatureType::float32 && std::holds_alternative<std::vector<float>>(v)) ||
         (t == FeatureType::bytes && std::holds_alternative<std::vector<std::string>>(v));
}

void fill_values(ParsedFeature& out, const Gathered& all, std::vector<int64_t> shape) {
  if (out.dtype == FeatureType::bytes) {
    out.bytes = RaggedBytes::from_strings(all.bytes);
  } else if (out.dtype == FeatureType::int64) {
    out.values = Tensor::from_vector(all.i64, Shape(shape));
  } else {
    out.values = Tensor::from_vector(all.f32, Shape(shape));
  }
}

ParsedFeatures parse_batch(const std::vector<std::span<const uint8_t>>& records,
                           const FeatureSpecs& specs, bool batched, const std::string& where) {
  std::string prefix = where.empty() ? "" : where + ": ";
  std::vector<tfp::Example> examples(records.size());
  for (size_t b = 0; b < records.size(); ++b) {
    LOCKSTEP_CHECK_AS(
        DataLoss,
        records[b].size() <= (size_t{1} << 31) &&
            examples[b].ParseFromArray(records[b].data(), static_cast<int>(records[b].size())),
        prefix, "parse_example: record", (batched ? " " + std::to_string(b) : ""), " (",
        records[b].size(), " bytes) is not a serialized tf.train.Example.");
  }
  ParsedFeatures result;
  for (const auto& [name, spec] : specs) {
    FeatureType dtype = std::visit([](const auto& s) { return s.dtype; }, spec);
    const auto* fixed = std::get_if<FixedLenFeature>(&spec);
    Gathered all;
    std::vector<int64_t> var_counts;
    int64_t expect = fixed ? num_elements(fixed->shape, prefix, name) : -1;
    if (fixed && fixed->default_value) {
      LOCKSTEP_CHECK(default_matches(*fixed->default_value, dtype) &&
                         std::visit([](const auto& v) { return static_cast<int64_t>(v.size()); },
                                    *fixed->default_value) == expect,
                     prefix, "parse_example: the default_value of FixedLenFeature '", name,
                     "' must hold ", expect, " ", type_name(dtype), " values.");
    }
    for (size_t b = 0; b < examples.size(); ++b) {
      std::string ex = batched ? " in example " + std::to_string(b) : "";
      const auto& map = examples[b].features().feature();
      auto it = map.find(name);
      const tfp::Feature* f = it == map.end() ? nullptr : &it->second;
      std::optional<FeatureType> kind = f ? kind_of(*f) : std::nullopt;
      LOCKSTEP_CHECK(!kind || *kind == dtype, prefix, "parse_example: feature '", name, "'", ex,
                     " holds ", type_name(*kind), " values; the spec expects ", type_name(dtype),
                     ".");
      int64_t n = f ? count_of(*f) : 0;
      if (fixed) {
        if (n == 0 && fixed->default_value && expect != 0) {
          append_default(all, *fixed->default_value);
          continue;
        }
        LOCKSTEP_CHECK(f != nullptr || expect == 0, prefix, "parse_example: feature '", name, "'",
                       ex, " (", type_name(dtype),
                       ") is required but could not be found (no default_value given).");
        LOCKSTEP_CHECK(n == expect, prefix, "parse_example: feature '", name, "'", ex, " expected ",
                       expect, " values (FixedLenFeature), received ", n, ".");
      }
      if (f) append(all, *f);
      var_counts.push_back(n);
    }
    ParsedFeature out;
    out.dtype = dtype;
    if (fixed) {
      std::vector<int64_t> shape = fixed->shape;
      if (batched) shape.insert(shape.begin(), static_cast<int64_t>(examples.size()));
      fill_values(out, all, shape);
    } else {
      int64_t total = all.size();
      int64_t longest = 0;
      for (int64_t c : var_counts) longest = std::max(longest, c);
      int rank = batched ? 2 : 1;
      out.indices = Tensor({total, rank}, DType::int64);
      int64_t* idx = out.indices.data<int64_t>();
      for (size_t b = 0, k = 0; b < var_counts.size(); ++b) {
        for (int64_t j = 0; j < var_counts[b]; ++j, ++k) {
          if (batched) {
            idx[2 * k] = static_cast<int64_t>(b);
            idx[2 * k + 1] = j;
          } else {
            idx[k] = j;
          }
        }
      }
      out.dense_shape = batched ? Tensor::from_vector<int64_t>(
                                      {static_cast<int64_t>(examples.size()), longest}, Shape({2}))
                                : Tensor::from_vector<int64_t>({total}, Shape({1}));
      fill_values(out, all, {total});
    }
    result.emplace(name, std::move(out));
  }
  return result;
}

}  // namespace

ParsedFeatures parse_single_example(std::span<const uint8_t> serialized, const FeatureSpecs& specs,
                                    const std::string& where) {
  return parse_batch({serialized}, specs, false, where);
}

ParsedFeatures parse_single_example(const Tensor& serialized, const FeatureSpecs& specs,
                                    const std::string& where) {
  std::string_view v = bytes_view(serialized, "parse_single_example");
  return parse_single_example({reinterpret_cast<const uint8_t*>(v.data()), v.size()}, specs, where);
}

ParsedFeatures parse_example(const std::vector<Tensor>& serialized, const FeatureSpecs& specs) {
  std::vector<std::span<const uint8_t>> records;
  for (const Tensor& t : serialized) {
    std::string_view v = bytes_view(t, "parse_example");
    records.emplace_back(reinterpret_cast<const uint8_t*>(v.data()), v.size());
  }
  return parse_batch(records, specs, true, "");
}

std::string serialize_example(const std::map<std::string, FeatureValues>& features) {
  tfp::Example ex;
  auto& map = *ex.mutable_features()->mutable_feature();
  for (const auto& [name, values] : features) {
    tfp::Feature& f = map[name];
    if (auto* p = std::get_if<std::vector<int64_t>>(&values)) {
      for (int64_t v : *p) f.mutable_int64_list()->add_value(v);
      if (p->empty()) f.mutable_int64_list();
    } else if (auto* p = std::get_if<std::vector<float>>(&values)) {
      for (float v : *p) f.mutable_float_list()->add_value(v);
      if (p->empty()) f.mutable_float_list();
    } else {
      auto& s = std::get<std::vector<std::string>>(values);
      for (const std::string& v : s) f.mutable_bytes_list()->add_value(v);
      if (s.empty()) f.mutable_bytes_list();
    }
  }
  return ex.SerializeAsString();
}

}  // namespace lockstep
