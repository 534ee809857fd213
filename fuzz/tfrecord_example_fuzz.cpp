// libFuzzer target for the TFRecord framing and the tf.train.Example parser. The first byte picks
// plain or GZIP framing; every record read is parsed with a spec holding every feature kind. Each
// input must give records (and parsed features) or DataLoss / InvalidArgument (a record that is a
// valid Example whose features do not fit the spec); anything else (a crash, a sanitizer report,
// another exception, a huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "lockstep/data/example.h"
#include "lockstep/data/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace lockstep;
  static const FeatureSpecs spec = {
      {"label",
       FixedLenFeature{
           .shape = {}, .dtype = FeatureType::int64, .default_value = std::vector<int64_t>{0}}},
      {"image", FixedLenFeature{.shape = {},
                                .dtype = FeatureType::bytes,
                                .default_value = std::vector<std::string>{""}}},
      {"f",
       FixedLenFeature{
           .shape = {2}, .dtype = FeatureType::float32, .default_value = std::vector<float>{0, 0}}},
      {"ids", VarLenFeature{FeatureType::int64}},
      {"w", VarLenFeature{FeatureType::float32}},
      {"s", VarLenFeature{FeatureType::bytes}}};
  TFRecordOptions options{.compression = (data[0] & 1) ? "GZIP" : "",
                          .max_record_bytes = uint64_t{16} << 20};
  try {
    TFRecordReader reader =
        TFRecordReader::from_memory(std::span<const uint8_t>(data + 1, size - 1), "fuzz", options);
    std::vector<uint8_t> record;
    while (reader.read(record)) {
      try {
        parse_single_example(record, spec);
      } catch (const InvalidArgument&) {
      }
    }
  } catch (const DataLoss&) {
  }
  // The record's own bytes parsed directly too, so the parser is reached without a valid frame.
  try {
    parse_single_example(std::span<const uint8_t>(data + 1, size - 1), spec);
  } catch (const DataLoss&) {
  } catch (const InvalidArgument&) {
  }
  return 0;
}
