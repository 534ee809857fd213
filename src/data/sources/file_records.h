#pragma once
// A source stage over files read one after the other, each through a RecordReader that yields its
// elements (TFRecordDataset, TextLineDataset, CsvDataset). Private to src/data.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../internal.h"

namespace lockstep::data_internal {

class RecordReader {
 public:
  virtual ~RecordReader() = default;
  // The next element of the file into `out`; false at its end.
  virtual bool next(Element& out) = 0;
};

using RecordReaderFactory = std::function<std::unique_ptr<RecordReader>(const std::string& path)>;

// Files are opened lazily, in order, when the previous one is exhausted. `name` is the stage name
// in to_string ("TFRecord"). Cardinality unknown; skipping reads and discards.
std::shared_ptr<const Node> make_file_records(std::vector<std::string> files,
                                              RecordReaderFactory factory, ElementSpec spec,
                                              std::string name);

}  // namespace lockstep::data_internal
