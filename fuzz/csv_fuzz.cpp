// libFuzzer target for the CSV reader. The first byte picks the delimiter and whether quotes are
// special; the rest is the file. Every input must give records or DataLoss (a bad quote, an
// over-long record); anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lockstep/data/text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  lockstep::CsvFormat format{.field_delim = (data[0] & 1) ? ';' : ',',
                             .use_quote_delim = (data[0] & 2) == 0,
                             .max_record_bytes = 1 << 16};
  try {
    lockstep::parse_csv(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), format,
                        "fuzz");
  } catch (const lockstep::DataLoss&) {
  }
  return 0;
}
