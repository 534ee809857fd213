#include "file_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "lockstep/core/check.h"

namespace lockstep::apps {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LOCKSTEP_CHECK_AS(NotFound, f.good(), "--data: cannot open '", path, "'.");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::span<const uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Resizes `img` to `shape` (bilinear, rounded back to uint8) when its size differs.
Tensor fit_to(const Tensor& img, const std::vector<int64_t>& shape, const std::string& name) {
  LOCKSTEP_CHECK_AS(DataLoss, img.dim(2) == shape[2], "--data: '", name, "' has ", img.dim(2),
                    " channels; the first image has ", shape[2], ".");
  if (img.dim(0) == shape[0] && img.dim(1) == shape[1]) return img;
  Tensor r = resize(img, shape[0], shape[1]);
  Tensor out(Shape(shape), DType::uint8);
  const float* s = r.data<float>();
  uint8_t* d = out.data<uint8_t>();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    d[i] = static_cast<uint8_t>(std::clamp(std::lround(s[i]), 0L, 255L));
  }
  return out;
}

Tensor label_tensor(int64_t v) {
  Tensor t({}, DType::int64);
  *t.data<int64_t>() = v;
  return t;
}

FileInput image_folders(const std::string& dir) {
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  }
  std::sort(classes.begin(), classes.end());
  LOCKSTEP_CHECK_AS(NotFound, !classes.empty(), "--data: '", dir,
                    "' has no class folders (expected DIR/<class>/<image>.png|jpg).");
  std::map<std::string, int64_t> index;
  std::vector<std::string> patterns;
  for (size_t k = 0; k < classes.size(); ++k) {
    index[classes[k]] = static_cast<int64_t>(k);
    for (const char* ext : {"png", "PNG", "jpg", "JPG", "jpeg", "JPEG"}) {
      patterns.push_back((fs::path(dir) / classes[k] / (std::string("*.") + ext)).string());
    }
  }
  std::vector<std::string> existing;
  for (const std::string& p : patterns) {
    try {
      Dataset::list_files(p, false);
      existing.push_back(p);
    } catch (const NotFound&) {
    }
  }
  LOCKSTEP_CHECK_AS(NotFound, !existing.empty(), "--data: no .png/.jpg/.jpeg images under '", dir,
                    "'/<class>/.");
  Dataset files = Dataset::list_files(existing, /*shuffle=*/false);
  auto label_of = [index](const std::string& path) {
    return index.at(fs::path(path).parent_path().filename().string());
  };
  Element first;
  files.make_iterator().next(first);
  std::string first_path = bytes_string(first[0]);
  Tensor img = decode_image(span_of(read_file(first_path)), 0, first_path);
  std::vector<int64_t> shape = {img.dim(0), img.dim(1), img.dim(2)};
  FileInput in{"images", Dataset(nullptr), Dataset(nullptr),
               shape,    DType::uint8,     static_cast<int64_t>(classes.size())};
  in.examples = files.map(
      [shape, label_of](const Element& e) {
        std::string path = bytes_string(e[0]);
        Tensor x = fit_to(decode_image(span_of(read_file(path)), static_cast<int>(shape[2]), path),
                          shape, path);
        return Element{x, label_tensor(label_of(path))};
      },
      MapOptions{.num_parallel_calls = Dataset::AUTOTUNE,
                 .output_spec =
                     ElementSpec{TensorSpec{shape, DType::uint8}, TensorSpec{{}, DType::int64}}});
  in.labels = files.map(
      [label_of](const Element& e) { return Element{label_tensor(label_of(bytes_string(e[0])))}; },
      MapOptions{.output_spec = ElementSpec{TensorSpec{{}, DType::int64}}});
  return in;
}

FileInput csv_files(const std::string& pattern, const DataSpecOptions& o) {
  Dataset files = Dataset::list_files(pattern, /*shuffle=*/false);
  Element first;
  files.make_iterator().next(first);
  std::string first_path = bytes_string(first[0]);
  std::vector<std::string> header;
  {
    Iterator it = TextLineDataset({first_path}).make_iterator();
    Element line;
    LOCKSTEP_CHECK_AS(DataLoss, it.next(line), "--data: '", first_path, "' is empty.");
    auto rows = parse_csv(bytes_string(line[0]), {}, first_path);
    if (!rows.empty()) header = rows[0];
  }
  auto label_at = std::find(header.begin(), header.end(), o.label_column);
  LOCKSTEP_CHECK(label_at != header.end(), "--data: '", first_path, "' has no column '",
                 o.label_column, "' (--label-column).");
  const auto label = static_cast<int64_t>(label_at - header.begin());
  const auto features = static_cast<int64_t>(header.size()) - 1;
  std::vector<RecordDefault> defaults;
  for (int64_t c = 0; c < static_cast<int64_t>(header.size()); ++c) {
    defaults.push_back(c == label ? RecordDefault{CsvType::int64, std::nullopt}
                                  : RecordDefault{CsvType::float32, "0"});
  }
  FileInput in{"csv", Dataset(nullptr), Dataset(nullptr), {features}, DType::float32, 0};
  in.examples =
      files
          .interleave(
              [defaults](const Element& f) {
                return CsvDataset({bytes_string(f[0])}, defaults, CsvOptions{.header = true});
              },
              1)
          .map(
              [label, features](const Element& e) {
                Tensor x({features}, DType::float32);
                float* px = x.data<float>();
                for (int64_t c = 0, k = 0; c < static_cast<int64_t>(e.size()); ++c) {
                  if (c != label) px[k++] = *e[static_cast<size_t>(c)].data<float>();
                }
                return Element{x, e[static_cast<size_t>(label)]};
              },
              MapOptions{.output_spec = ElementSpec{TensorSpec{{features}, DType::float32},
                                                    TensorSpec{{}, DType::int64}}});
  in.labels = files.interleave(
      [label](const Element& f) {
        return CsvDataset({bytes_string(f[0])}, {RecordDefault{CsvType::int64, std::nullopt}},
                          CsvOptions{.header = true, .select_cols = {label}});
      },
      1);
  return in;
}

FileInput tfrecords(const std::string& pattern, const DataSpecOptions& o) {
  Dataset files = Dataset::list_files(pattern, /*shuffle=*/false);
  Dataset records = files.interleave(
      [](const Element& f) { return TFRecordDataset({bytes_string(f[0])}); }, 4, 1, 4);
  FeatureSpecs spec = {{o.image_feature, FixedLenFeature{.shape = {}, .dtype = FeatureType::bytes}},
                       {o.label_feature, FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}},
                       {"height", VarLenFeature{FeatureType::int64}},
                       {"width", VarLenFeature{FeatureType::int64}},
                       {"channels", VarLenFeature{FeatureType::int64}}};
  std::string image_feature = o.image_feature, label_feature = o.label_feature;
  std::vector<int64_t> raw_shape = o.image_shape;
  // Decodes one record's image: PNG/JPEG, or raw uint8 with a known shape.
  auto decode = [=](const ParsedFeatures& f, int channels) {
    std::string_view bytes = f.at(image_feature).bytes_at(0);
    std::span<const uint8_t> s(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (is_png(s) || is_jpeg(s)) return decode_image(s, channels, "TFRecord image");
    std::vector<int64_t> shape = raw_shape;
    if (shape.empty() && f.at("height").values.num_elements() == 1 &&
        f.at("width").values.num_elements() == 1 && f.at("channels").values.num_elements() == 1) {
      shape = {f.at("height").values.to_vector<int64_t>()[0],
               f.at("width").values.to_vector<int64_t>()[0],
               f.at("channels").values.to_vector<int64_t>()[0]};
    }
    LOCKSTEP_CHECK_AS(DataLoss, shape.size() == 3, "--data: a TFRecord '", image_feature,
                      "' feature is neither PNG nor JPEG; raw uint8 images need --image-shape "
                      "HxWxC or height/width/channels features.");
    LOCKSTEP_CHECK_AS(DataLoss, static_cast<int64_t>(s.size()) == shape[0] * shape[1] * shape[2],
                      "--data: a raw TFRecord image of ", s.size(), " bytes does not fill ",
                      shape[0], "x", shape[1], "x", shape[2], ".");
    return Tensor::from_span<uint8_t>(s, Shape(shape));
  };
  Element first;
  LOCKSTEP_CHECK_AS(DataLoss, records.make_iterator().next(first), "--data: the TFRecord files '",
                    pattern, "' hold no records.");
  Tensor img = decode(parse_single_example(first[0], spec), 0);
  std::vector<int64_t> shape = {img.dim(0), img.dim(1), img.dim(2)};
  FileInput in{"tfrecord", Dataset(nullptr), Dataset(nullptr), shape, DType::uint8, 0};
  in.examples = records.map(
      [=](const Element& e) {
        ParsedFeatures f = parse_single_example(e[0], spec);
        Tensor x = fit_to(decode(f, static_cast<int>(shape[2])), shape, "TFRecord image");
        return Element{x, label_tensor(static_cast<int64_t>(f.at(label_feature).values.item()))};
      },
      MapOptions{.num_parallel_calls = Dataset::AUTOTUNE,
                 .output_spec =
                     ElementSpec{TensorSpec{shape, DType::uint8}, TensorSpec{{}, DType::int64}}});
  FeatureSpecs label_only = {
      {label_feature, FixedLenFeature{.shape = {}, .dtype = FeatureType::int64}}};
  in.labels = records.map(
      [label_only, label_feature](const Element& e) {
        return Element{parse_single_example(e[0], label_only).at(label_feature).values};
      },
      MapOptions{.output_spec = ElementSpec{TensorSpec{{}, DType::int64}}});
  return in;
}

}  // namespace

FileInput open_file_input(const std::string& spec, const DataSpecOptions& options) {
  if (fs::is_directory(spec)) return image_folders(spec);
  if (spec.size() >= 4 && spec.substr(spec.size() - 4) == ".csv") return csv_files(spec, options);
  return tfrecords(spec, options);
}

}  // namespace lockstep::apps
