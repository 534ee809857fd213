#include "text_reader.h"

#include "lockstep/core/check.h"

namespace lockstep::data_internal {

bool LineReader::next(std::string& line) {
  line.clear();
  int c = in_.get();
  if (c < 0) return false;
  ++line_;
  while (c >= 0 && c != '\n') {
    LOCKSTEP_CHECK_AS(DataLoss, static_cast<int64_t>(line.size()) < max_, "Text file '", name_,
                      "', line ", line_, ": longer than the limit of ", max_, " bytes.");
    line += static_cast<char>(c);
    c = in_.get();
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

bool CsvRecordReader::next(std::vector<std::string>& fields) {
  fields.clear();
  int c = in_.get();
  while (c == '\n' || c == '\r') {  // blank lines
    if (c == '\n') ++line_;
    c = in_.get();
  }
  if (c < 0) return false;
  record_line_ = line_;
  int64_t bytes = 0;
  auto fail = [&](const std::string& what) {
    throw DataLoss("CSV file '" + name_ + "', line " + std::to_string(record_line_) + ": " + what);
  };
  std::string field;
  bool quoted_field = false;
  while (true) {
    if (++bytes > format_.max_record_bytes) {
      fail("the record is longer than the limit of " + std::to_string(format_.max_record_bytes) +
           " bytes.");
    }
    if (c < 0 || c == '\n' || (c == '\r' && (in_.peek() == '\n' || in_.peek() < 0))) {
      fields.push_back(std::move(field));
      if (c == '\r') in_.get();
      if (c >= 0) ++line_;
      return true;
    }
    if (c == format_.field_delim) {
      fields.push_back(std::move(field));
      field.clear();
      quoted_field = false;
      c = in_.get();
      continue;
    }
    if (c == '"' && format_.use_quote_delim && field.empty() && !quoted_field) {
      quoted_field = true;
      while (true) {
        c = in_.get();
        if (c < 0) fail("a quoted field is not closed before the end of the file.");
        if (++bytes > format_.max_record_bytes) {
          fail("the record is longer than the limit of " +
               std::to_string(format_.max_record_bytes) + " bytes.");
        }
        if (c == '"') {
          if (in_.peek() == '"') {
            in_.get();
            field += '"';
            continue;
          }
          break;
        }
        if (c == '\n') ++line_;
        field += static_cast<char>(c);
      }
      c = in_.get();
      if (c >= 0 && c != format_.field_delim && c != '\n' && c != '\r') {
        fail("a quoted field must be followed by '" + std::string(1, format_.field_delim) +
             "' or the end of the line (field " + std::to_string(fields.size()) + ").");
      }
      continue;
    }
    if (c == '"' && format_.use_quote_delim) {
      fail("a quote inside an unquoted field (field " + std::to_string(fields.size()) +
           "); quote the field and double the quote.");
    }
    field += static_cast<char>(c);
    c = in_.get();
  }
}

}  // namespace lockstep::data_internal

namespace lockstep {

std::vector<std::vector<std::string>> parse_csv(std::string_view text, const CsvFormat& format,
                                                const std::string& name) {
  data_internal::CsvRecordReader r(
      data_internal::memory_stream({reinterpret_cast<const uint8_t*>(text.data()), text.size()}),
      name, format);
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> fields;
  while (r.next(fields)) out.push_back(fields);
  return out;
}

}  // namespace lockstep
