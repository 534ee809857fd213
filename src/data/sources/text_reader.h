#pragma once
// Line and CSV record splitting over a ByteStream (TextLineDataset, CsvDataset, parse_csv).
// Private to src/data.
#include <memory>
#include <string>
#include <vector>

#include "byte_stream.h"
#include "lockstep/data/text.h"

namespace lockstep::data_internal {

class BufferedBytes {
 public:
  explicit BufferedBytes(std::unique_ptr<ByteStream> in) : in_(std::move(in)), buf_(64 << 10) {}
  // The next byte, or -1 at the end.
  int get() {
    if (pos_ == end_) {
      end_ = in_->read(buf_.data(), buf_.size());
      pos_ = 0;
      if (end_ == 0) return -1;
    }
    return buf_[pos_++];
  }
  int peek() {
    int c = get();
    if (c >= 0) --pos_;
    return c;
  }

 private:
  std::unique_ptr<ByteStream> in_;
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, end_ = 0;
};

class LineReader {
 public:
  LineReader(std::unique_ptr<ByteStream> in, std::string name, int64_t max_line_bytes)
      : in_(std::move(in)), name_(std::move(name)), max_(max_line_bytes) {}
  // The next line without "\n" / "\r\n"; false at the end. A last line without "\n" counts.
  bool next(std::string& line);
  int64_t line_number() const { return line_; }  // of the line last returned, from 1

 private:
  BufferedBytes in_;
  std::string name_;
  int64_t max_;
  int64_t line_ = 0;
};

class CsvRecordReader {
 public:
  CsvRecordReader(std::unique_ptr<ByteStream> in, std::string name, CsvFormat format)
      : in_(std::move(in)), name_(std::move(name)), format_(std::move(format)) {}
  // The next record's fields; false at the end. Blank lines are skipped.
  bool next(std::vector<std::string>& fields);
  int64_t record_line() const { return record_line_; }  // first line of the last record, from 1
  const std::string& name() const { return name_; }

 private:
  BufferedBytes in_;
  std::string name_;
  CsvFormat format_;
  int64_t line_ = 1;  // the line the reader is on
  int64_t record_line_ = 0;
};

}  // namespace lockstep::data_internal
