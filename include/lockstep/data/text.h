#pragma once
// Text sources, as tf.data.TextLineDataset, tf.data.experimental.CsvDataset and
// tf.data.experimental.make_csv_dataset.
//
// TextLineDataset: one element per line, uint8[n] without its "\n" (or "\r\n"). Files raw or
// GZIP. A line longer than max_line_bytes is DataLoss naming the file and line.
//
// CSV (RFC 4180 as tf.data reads it): fields separated by `field_delim`; with use_quote_delim a
// field may be quoted ("a, b"), a quote inside doubled (""), and a quoted field may span lines. A
// field that is empty or equal to `na_value` takes its column's default; a column without a
// default is required. Every error is a DataLoss naming the file and the line of the record
// (from 1): a wrong number of fields, a missing required field, a field that is not a number of
// the column's type, an unterminated quote.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep {

class TextLineDataset : public Dataset {
 public:
  explicit TextLineDataset(std::vector<std::string> filenames, const std::string& compression = "",
                           int64_t buffer_size = int64_t{256} << 10,
                           int64_t max_line_bytes = int64_t{64} << 20);
};

// The types of a CSV column: numbers become scalars of that dtype, `string` a byte string uint8[n].
enum class CsvType { int32, int64, float32, float64, string };

// One column's record_defaults entry: its type, and the value of an empty field (nullopt: the
// field is required). The value is text, parsed as a field would be.
struct RecordDefault {
  CsvType type = CsvType::float32;
  std::optional<std::string> value;
};

struct CsvFormat {
  char field_delim = ',';
  bool use_quote_delim = true;
  std::string na_value;  // a field equal to it counts as empty ("" : only empty fields)
  int64_t max_record_bytes = int64_t{64} << 20;
};

// The records of CSV text held in memory, each a list of fields (unquoted). `name` stands for the
// file in errors. (The fuzzing entry point of the CSV reader.)
std::vector<std::vector<std::string>> parse_csv(std::string_view text, const CsvFormat& format = {},
                                                const std::string& name = "<memory>");

struct CsvOptions {
  std::string compression;  // "" or "GZIP"
  int64_t buffer_size = int64_t{256} << 10;
  bool header = false;               // skip the first record of each file
  std::vector<int64_t> select_cols;  // ascending column indices; empty: all columns
  CsvFormat format;
};

// Elements: one tensor per selected column, typed by `record_defaults` (one entry per selected
// column): int32/int64/float32/float64 scalars, or uint8[n] for string columns.
class CsvDataset : public Dataset {
 public:
  CsvDataset(std::vector<std::string> filenames, std::vector<RecordDefault> record_defaults,
             CsvOptions options = {});
};

struct MakeCsvOptions {
  int64_t batch_size = 32;
  // Empty: taken from the first file's header (which must then exist).
  std::vector<std::string> column_names;
  // The label column; empty: no label (elements are (features) only).
  std::string label_name;
  // Feature columns to keep; empty: every column but the label.
  std::vector<std::string> select_columns;
  CsvType label_type = CsvType::int64;
  float feature_default = 0.0f;  // for empty feature fields
  bool header = true;
  CsvFormat format;
  std::string compression;
  int64_t num_epochs = -1;  // -1: repeat forever (tf.data's None)
  bool shuffle = true;
  int64_t shuffle_buffer_size = 10000;
  std::optional<uint64_t> shuffle_seed;
  bool drop_remainder = false;
};

// make_csv_dataset: the files matching `file_pattern`, every feature column parsed as float32 and
// stacked: elements (float32[batch, num_features], label[batch]) (label typed by label_type), or
// (float32[batch, num_features]) without a label, batched after an optional shuffle and repeat.
// tf.data returns a dictionary of columns; here the feature columns are in the order of
// `select_columns` (or of the file), and feature_names() gives it.
struct CsvDatasetInfo {
  Dataset dataset;
  std::vector<std::string> feature_names;
};
CsvDatasetInfo make_csv_dataset(const std::string& file_pattern, const MakeCsvOptions& options);

}  // namespace lockstep
