// TFRecordDataset: the records of TFRecord files as byte-string elements.
#include <cstring>

#include "file_records.h"
#include "lockstep/core/check.h"
#include "lockstep/data/tfrecord.h"

namespace lockstep {

namespace {

class TFRecordFileReader : public data_internal::RecordReader {
 public:
  TFRecordFileReader(const std::string& path, const TFRecordOptions& options)
      : reader_(path, options) {}
  bool next(Element& out) override {
    if (!reader_.read(buffer_)) return false;
    Tensor t({static_cast<int64_t>(buffer_.size())}, DType::uint8);
    if (!buffer_.empty()) std::memcpy(t.raw_data(), buffer_.data(), buffer_.size());
    out.assign(1, std::move(t));
    return true;
  }

 private:
  TFRecordReader reader_;
  std::vector<uint8_t> buffer_;
};

}  // namespace

TFRecordDataset::TFRecordDataset(std::vector<std::string> filenames, const TFRecordOptions& options)
    : Dataset(data_internal::make_file_records(
          std::move(filenames),
          [options](const std::string& path) {
            return std::make_unique<TFRecordFileReader>(path, options);
          },
          {TensorSpec{{TensorSpec::kUnknownDim}, DType::uint8}}, "TFRecord")) {
  LOCKSTEP_CHECK(options.compression.empty() || options.compression == "GZIP",
                 "TFRecordDataset: expected compression \"\" or \"GZIP\". Received: "
                 "compression=\"",
                 options.compression, "\".");
  LOCKSTEP_CHECK(options.buffer_size >= 0, "TFRecordDataset: expected buffer_size >= 0. Received ",
                 options.buffer_size, ".");
}

TFRecordDataset::TFRecordDataset(std::vector<std::string> filenames, const std::string& compression,
                                 int64_t buffer_size)
    : TFRecordDataset(std::move(filenames),
                      TFRecordOptions{.compression = compression, .buffer_size = buffer_size}) {}

}  // namespace lockstep
