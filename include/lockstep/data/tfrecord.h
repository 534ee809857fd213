#pragma once
// TFRecord files, as tf.data.TFRecordDataset and tf.io.TFRecordWriter read and write them.
//
// A file is a sequence of records, each framed as (little-endian):
//   uint64  length
//   uint32  masked CRC-32C of the 8 length bytes
//   byte    data[length]
//   uint32  masked CRC-32C of the data
// (masking: lockstep/data/crc32c.h). With compression "GZIP" the whole file is one gzip stream
// (or several concatenated members) of that sequence; offsets in errors are then uncompressed.
//
// Every record is checked: both CRCs, a length above `max_record_bytes` (a corrupt or hostile
// length of 2^64 is an error, never an allocation), a file that ends inside a record. Each is a
// DataLoss naming the file, the record number (from 0) and the byte offset of its header.
//
//   TFRecordDataset ds({"train-0.tfrecord", "train-1.tfrecord"}, "GZIP");
//   for (Element& e : ds) { std::string_view record = bytes_view(e[0]); ... }
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep {

namespace data_internal {
class ByteStream;
}

struct TFRecordOptions {
  std::string compression;                        // "" or "GZIP"
  int64_t buffer_size = int64_t{256} << 10;       // read buffer, bytes
  uint64_t max_record_bytes = uint64_t{1} << 30;  // larger lengths are DataLoss
};

// Reads the records of one file (or of bytes in memory) in order.
class TFRecordReader {
 public:
  explicit TFRecordReader(const std::string& path, const TFRecordOptions& options = {});
  // Reads records from `bytes` (uncompressed, or gzip when options.compression is "GZIP"); `name`
  // stands for the file in errors. `bytes` must outlive the reader.
  static TFRecordReader from_memory(std::span<const uint8_t> bytes, const std::string& name,
                                    const TFRecordOptions& options = {});
  TFRecordReader(TFRecordReader&&) noexcept;
  ~TFRecordReader();

  // The next record's data into `record`; false at the end of the file (a clean end between
  // records). DataLoss for a corrupt or truncated record.
  bool read(std::vector<uint8_t>& record);
  // Records read so far and the (uncompressed) byte offset of the next record.
  int64_t records_read() const { return records_; }
  uint64_t offset() const { return offset_; }

 private:
  TFRecordReader(std::unique_ptr<data_internal::ByteStream> in, std::string name,
                 const TFRecordOptions& options);
  std::unique_ptr<data_internal::ByteStream> in_;
  std::string name_;
  TFRecordOptions options_;
  int64_t records_ = 0;
  uint64_t offset_ = 0;
};

// Writes records with the framing above (uncompressed, or gzip with compression "GZIP"). The file
// is complete after close() (or the destructor, which swallows nothing: call close() to see
// errors).
class TFRecordWriter {
 public:
  explicit TFRecordWriter(const std::string& path, const std::string& compression = "");
  TFRecordWriter(TFRecordWriter&&) noexcept;
  ~TFRecordWriter();
  void write(std::span<const uint8_t> record);
  void write(std::string_view record) {
    write({reinterpret_cast<const uint8_t*>(record.data()), record.size()});
  }
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The framed bytes of one record (for tests and in-memory writers).
std::vector<uint8_t> encode_tfrecord(std::span<const uint8_t> record);

// Elements are (uint8[n]): one record's bytes (see data/bytes.h). Files are read in order.
class TFRecordDataset : public Dataset {
 public:
  TFRecordDataset(std::vector<std::string> filenames, const std::string& compression = "",
                  int64_t buffer_size = int64_t{256} << 10);
  explicit TFRecordDataset(std::vector<std::string> filenames, const TFRecordOptions& options);
};

}  // namespace lockstep
