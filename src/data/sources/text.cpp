// TextLineDataset, CsvDataset, parse_csv, make_csv_dataset.
#include "lockstep/data/text.h"

#include <charconv>
#include <cstring>
#include <unordered_map>

#include "file_records.h"
#include "lockstep/core/check.h"
#include "lockstep/data/bytes.h"
#include "text_reader.h"

namespace lockstep {

using data_internal::CsvRecordReader;
using data_internal::LineReader;

namespace {

class TextLineFileReader : public data_internal::RecordReader {
 public:
  TextLineFileReader(const std::string& path, const std::string& compression, int64_t buffer_size,
                     int64_t max_line_bytes)
      : lines_(data_internal::open_stream(path, compression, static_cast<size_t>(buffer_size),
                                          "TextLineDataset"),
               path, max_line_bytes) {}
  bool next(Element& out) override {
    if (!lines_.next(line_)) return false;
    out.assign(1, bytes_tensor(line_));
    return true;
  }

 private:
  LineReader lines_;
  std::string line_;
};

const char* csv_type_name(CsvType t) {
  switch (t) {
    case CsvType::int32:
      return "int32";
    case CsvType::int64:
      return "int64";
    case CsvType::float32:
      return "float32";
    case CsvType::float64:
      return "float64";
    case CsvType::string:
      return "string";
  }
  return "unknown";
}

template <typename T>
bool parse_number(std::string_view s, T& v) {
  if (s.empty()) return false;
  if (s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// The field's value as a tensor of the column's type; nullopt when it is not one.
std::optional<Tensor> field_tensor(std::string_view s, CsvType type) {
  auto scalar = [](auto v) {
    using T = decltype(v);
    Tensor t({}, dtype_v<T>);
    *t.data<T>() = v;
    return t;
  };
  switch (type) {
    case CsvType::int32: {
      int32_t v;
      if (parse_number(s, v)) return scalar(v);
      return std::nullopt;
    }
    case CsvType::int64: {
      int64_t v;
      if (parse_number(s, v)) return scalar(v);
      return std::nullopt;
    }
    case CsvType::float32: {
      float v;
      if (parse_number(s, v)) return scalar(v);
      return std::nullopt;
    }
    case CsvType::float64: {
      double v;
      if (parse_number(s, v)) return scalar(v);
      return std::nullopt;
    }
    case CsvType::string:
      return bytes_tensor(s);
  }
  return std::nullopt;
}

TensorSpec csv_spec(CsvType type) {
  switch (type) {
    case CsvType::int32:
      return {{}, DType::int32};
    case CsvType::int64:
      return {{}, DType::int64};
    case CsvType::float32:
      return {{}, DType::float32};
    case CsvType::float64:
      return {{}, DType::float64};
    case CsvType::string:
      return {{TensorSpec::kUnknownDim}, DType::uint8};
  }
  return {};
}

struct CsvColumns {
  std::vector<RecordDefault> defaults;
  std::vector<Tensor> default_tensors;  // undefined: required
  CsvOptions options;
};

class CsvFileReader : public data_internal::RecordReader {
 public:
  CsvFileReader(const std::string& path, const CsvColumns* cols)
      : records_(data_internal::open_stream(path, cols->options.compression,
                                            static_cast<size_t>(cols->options.buffer_size),
                                            "CsvDataset"),
                 path, cols->options.format),
        cols_(cols) {}
  bool next(Element& out) override {
    if (!records_.next(fields_)) return false;
    if (!header_done_) {
      header_done_ = true;
      if (cols_->options.header && !records_.next(fields_)) return false;
    }
    const auto& sel = cols_->options.select_cols;
    size_t ncols = cols_->defaults.size();
    auto where = [&] {
      return "CSV file '" + records_.name() + "', line " + std::to_string(records_.record_line()) +
             ": ";
    };
    if (sel.empty()) {
      LOCKSTEP_CHECK_AS(DataLoss, fields_.size() == ncols, where(), "expected ", ncols,
                        " fields (one per record default), received ", fields_.size(), ".");
    } else {
      LOCKSTEP_CHECK_AS(DataLoss, static_cast<int64_t>(fields_.size()) > sel.back(), where(),
                        "expected at least ", sel.back() + 1, " fields (select_cols up to ",
                        sel.back(), "), received ", fields_.size(), ".");
    }
    out.resize(ncols);
    for (size_t k = 0; k < ncols; ++k) {
      size_t col = sel.empty() ? k : static_cast<size_t>(sel[k]);
      const std::string& f = fields_[col];
      const RecordDefault& d = cols_->defaults[k];
      bool missing = f.empty() || (!cols_->options.format.na_value.empty() &&
                                   f == cols_->options.format.na_value);
      if (missing) {
        LOCKSTEP_CHECK_AS(DataLoss, cols_->default_tensors[k].defined(), where(), "field ", col,
                          " is empty and its column (", csv_type_name(d.type), ") has no default.");
        out[k] = cols_->default_tensors[k];
        continue;
      }
      std::optional<Tensor> t = field_tensor(f, d.type);
      if (!t) {
        throw DataLoss(where() + "field " + std::to_string(col) + " \"" + f.substr(0, 40) +
                       "\" is not a " + csv_type_name(d.type) + ".");
      }
      out[k] = std::move(*t);
    }
    return true;
  }

 private:
  CsvRecordReader records_;
  const CsvColumns* cols_;
  std::vector<std::string> fields_;
  bool header_done_ = false;
};

}  // namespace

TextLineDataset::TextLineDataset(std::vector<std::string> filenames, const std::string& compression,
                                 int64_t buffer_size, int64_t max_line_bytes)
    : Dataset(data_internal::make_file_records(
          std::move(filenames),
          [=](const std::string& path) {
            return std::make_unique<TextLineFileReader>(path, compression, buffer_size,
                                                        max_line_bytes);
          },
          {TensorSpec{{TensorSpec::kUnknownDim}, DType::uint8}}, "TextLine")) {
  LOCKSTEP_CHECK(compression.empty() || compression == "GZIP",
                 "TextLineDataset: expected compression \"\" or \"GZIP\". Received: \"",
                 compression, "\".");
  LOCKSTEP_CHECK(buffer_size >= 0 && max_line_bytes > 0,
                 "TextLineDataset: expected buffer_size >= 0 and max_line_bytes > 0.");
}

CsvDataset::CsvDataset(std::vector<std::string> filenames,
                       std::vector<RecordDefault> record_defaults, CsvOptions options)
    : Dataset(nullptr) {
  LOCKSTEP_CHECK(!record_defaults.empty(), "CsvDataset: expected at least one record default.");
  LOCKSTEP_CHECK(
      options.select_cols.empty() || options.select_cols.size() == record_defaults.size(),
      "CsvDataset: expected one record default per selected column. Received ",
      record_defaults.size(), " defaults and ", options.select_cols.size(), " select_cols.");
  for (size_t i = 0; i < options.select_cols.size(); ++i) {
    LOCKSTEP_CHECK(options.select_cols[i] >= 0 &&
                       (i == 0 || options.select_cols[i] > options.select_cols[i - 1]),
                   "CsvDataset: select_cols must be ascending non-negative column indices.");
  }
  LOCKSTEP_CHECK(options.compression.empty() || options.compression == "GZIP",
                 "CsvDataset: expected compression \"\" or \"GZIP\". Received: \"",
                 options.compression, "\".");
  auto cols = std::make_shared<CsvColumns>();
  ElementSpec spec;
  for (size_t k = 0; k < record_defaults.size(); ++k) {
    const RecordDefault& d = record_defaults[k];
    Tensor t;
    if (d.value) {
      std::optional<Tensor> v = field_tensor(*d.value, d.type);
      LOCKSTEP_CHECK(v.has_value(), "CsvDataset: record default ", k, " \"", *d.value,
                     "\" is not a ", csv_type_name(d.type), ".");
      t = *v;
    }
    cols->default_tensors.push_back(t);
    spec.push_back(csv_spec(d.type));
  }
  cols->defaults = std::move(record_defaults);
  cols->options = std::move(options);
  static_cast<Dataset&>(*this) = Dataset(data_internal::make_file_records(
      std::move(filenames),
      [cols](const std::string& path) { return std::make_unique<CsvFileReader>(path, cols.get()); },
      std::move(spec), "Csv"));
}

CsvDatasetInfo make_csv_dataset(const std::string& file_pattern, const MakeCsvOptions& o) {
  LOCKSTEP_CHECK(o.batch_size > 0, "make_csv_dataset: expected batch_size > 0. Received ",
                 o.batch_size, ".");
  LOCKSTEP_CHECK(o.label_type != CsvType::string,
                 "make_csv_dataset: the label must be a number column (label_type int32, int64, "
                 "float32 or float64), so that labels can be batched.");
  Dataset names = Dataset::list_files(file_pattern, /*shuffle=*/false);
  std::vector<std::string> files;
  for (Element& e : names) files.push_back(bytes_string(e[0]));
  std::vector<std::string> columns = o.column_names;
  if (columns.empty()) {
    LOCKSTEP_CHECK(o.header, "make_csv_dataset: without a header, column_names are required.");
    auto in = data_internal::open_stream(files[0], o.compression, 0, "make_csv_dataset");
    CsvRecordReader r(std::move(in), files[0], o.format);
    LOCKSTEP_CHECK_AS(DataLoss, r.next(columns), "make_csv_dataset: '", files[0],
                      "' is empty: expected a header line.");
  }
  std::unordered_map<std::string, int64_t> index;
  for (size_t i = 0; i < columns.size(); ++i) index[columns[i]] = static_cast<int64_t>(i);
  auto find = [&](const std::string& name) {
    auto it = index.find(name);
    LOCKSTEP_CHECK(it != index.end(), "make_csv_dataset: no column named '", name, "' in ",
                   files[0], " (", columns.size(), " columns).");
    return it->second;
  };
  int64_t label = o.label_name.empty() ? -1 : find(o.label_name);
  std::vector<std::string> features = o.select_columns;
  if (features.empty()) {
    for (const std::string& c : columns) {
      if (c != o.label_name) features.push_back(c);
    }
  }
  // CsvDataset selects columns in file order; `order` maps each selected column to its slot.
  std::vector<std::pair<int64_t, int64_t>> cols;  // (file column, feature slot or -1 = label)
  for (size_t s = 0; s < features.size(); ++s) {
    int64_t c = find(features[s]);
    LOCKSTEP_CHECK(c != label, "make_csv_dataset: the label column '", o.label_name,
                   "' is also selected as a feature.");
    cols.emplace_back(c, static_cast<int64_t>(s));
  }
  if (label >= 0) cols.emplace_back(label, -1);
  std::sort(cols.begin(), cols.end());
  CsvOptions copts{.compression = o.compression, .header = o.header, .format = o.format};
  std::vector<RecordDefault> defaults;
  for (auto [c, slot] : cols) {
    copts.select_cols.push_back(c);
    defaults.push_back(slot < 0
                           ? RecordDefault{o.label_type, std::nullopt}
                           : RecordDefault{CsvType::float32, std::to_string(o.feature_default)});
  }
  auto n_features = static_cast<int64_t>(features.size());
  std::vector<int64_t> slots;
  for (auto [c, slot] : cols) slots.push_back(slot);
  Dataset ds =
      CsvDataset(files, defaults, copts)
          .map(
              [slots, n_features](const Element& e) {
                Tensor x({n_features}, DType::float32);
                float* px = x.data<float>();
                Element out{x};
                for (size_t k = 0; k < slots.size(); ++k) {
                  if (slots[k] < 0) {
                    out.push_back(e[k]);
                  } else {
                    px[slots[k]] = *e[k].data<float>();
                  }
                }
                return out;
              },
              MapOptions{.output_spec =
                             label >= 0 ? ElementSpec{TensorSpec{{n_features}, DType::float32},
                                                      csv_spec(o.label_type)}
                                        : ElementSpec{TensorSpec{{n_features}, DType::float32}}});
  if (o.shuffle) ds = ds.shuffle(o.shuffle_buffer_size, o.shuffle_seed);
  if (o.num_epochs != 1) ds = ds.repeat(o.num_epochs);
  return {ds.batch(o.batch_size, o.drop_remainder), features};
}

}  // namespace lockstep
