#include "lockstep/data/tfrecord.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "byte_stream.h"
#include "lockstep/core/check.h"
#include "lockstep/data/crc32c.h"

namespace lockstep {

using data_internal::ByteStream;

namespace {

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
void store_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

TFRecordReader::TFRecordReader(std::unique_ptr<ByteStream> in, std::string name,
                               const TFRecordOptions& options)
    : in_(std::move(in)), name_(std::move(name)), options_(options) {}

TFRecordReader::TFRecordReader(const std::string& path, const TFRecordOptions& options)
    : TFRecordReader(
          data_internal::open_stream(path, options.compression,
                                     static_cast<size_t>(options.buffer_size), "TFRecordDataset"),
          path, options) {}

TFRecordReader TFRecordReader::from_memory(std::span<const uint8_t> bytes, const std::string& name,
                                           const TFRecordOptions& options) {
  LOCKSTEP_CHECK(options.compression.empty() || options.compression == "GZIP",
                 "TFRecordReader: expected compression \"\" or \"GZIP\". Received: \"",
                 options.compression, "\".");
  auto in = data_internal::memory_stream(bytes);
  if (options.compression == "GZIP") in = data_internal::gzip_stream(std::move(in), name);
  return TFRecordReader(std::move(in), name, options);
}

TFRecordReader::TFRecordReader(TFRecordReader&&) noexcept = default;
TFRecordReader::~TFRecordReader() = default;

bool TFRecordReader::read(std::vector<uint8_t>& record) {
  auto where = [&] {
    return "TFRecord file '" + name_ + "', record " + std::to_string(records_) +
           " at byte offset " + std::to_string(offset_);
  };
  uint8_t header[12];
  size_t got = data_internal::read_full(*in_, header, sizeof header);
  if (got == 0) return false;
  LOCKSTEP_CHECK_AS(DataLoss, got == sizeof header, where(),
                    ": truncated record header (12 bytes expected, ", got, " present).");
  uint64_t length = load_le64(header);
  uint32_t stored = crc32c_unmask(load_le32(header + 8));
  uint32_t computed = crc32c({header, 8});
  LOCKSTEP_CHECK_AS(DataLoss, stored == computed, where(),
                    ": corrupt length (CRC-32C mismatch: stored ", hex32(stored), ", computed ",
                    hex32(computed), ").");
  LOCKSTEP_CHECK_AS(DataLoss, length <= options_.max_record_bytes, where(), ": a length of ",
                    length, " bytes is above the limit of ", options_.max_record_bytes,
                    " (TFRecordOptions::max_record_bytes).");
  // Grown as the bytes arrive, so that a length the file does not hold allocates no more than the
  // file has.
  record.clear();
  constexpr size_t kChunk = size_t{4} << 20;
  while (record.size() < length) {
    size_t want = std::min<size_t>(kChunk, static_cast<size_t>(length) - record.size());
    size_t at = record.size();
    record.resize(at + want);
    size_t k = data_internal::read_full(*in_, record.data() + at, want);
    LOCKSTEP_CHECK_AS(DataLoss, k == want, where(), ": truncated record (", length,
                      " data bytes expected, ", at + k, " present).");
  }
  uint8_t footer[4];
  LOCKSTEP_CHECK_AS(DataLoss, data_internal::read_full(*in_, footer, 4) == 4, where(),
                    ": truncated record (the data CRC is missing).");
  stored = crc32c_unmask(load_le32(footer));
  computed = crc32c(record);
  LOCKSTEP_CHECK_AS(DataLoss, stored == computed, where(),
                    ": corrupt data (CRC-32C mismatch: stored ", hex32(stored), ", computed ",
                    hex32(computed), ").");
  ++records_;
  offset_ += 16 + length;
  return true;
}

std::vector<uint8_t> encode_tfrecord(std::span<const uint8_t> record) {
  std::vector<uint8_t> out(16 + record.size());
  store_le(out.data(), record.size(), 8);
  store_le(out.data() + 8, crc32c_mask(crc32c({out.data(), 8})), 4);
  if (!record.empty()) std::memcpy(out.data() + 12, record.data(), record.size());
  store_le(out.data() + 12 + record.size(), crc32c_mask(crc32c(record)), 4);
  return out;
}

struct TFRecordWriter::Impl {
  std::string path;
  std::FILE* file = nullptr;
  gzFile gz = nullptr;
};

TFRecordWriter::TFRecordWriter(const std::string& path, const std::string& compression)
    : impl_(std::make_unique<Impl>()) {
  LOCKSTEP_CHECK(compression.empty() || compression == "GZIP",
                 "TFRecordWriter: expected compression \"\" or \"GZIP\". Received: \"", compression,
                 "\".");
  impl_->path = path;
  if (compression == "GZIP") {
    impl_->gz = gzopen(path.c_str(), "wb");
    LOCKSTEP_CHECK_AS(NotFound, impl_->gz != nullptr, "TFRecordWriter: cannot create '", path,
                      "'.");
  } else {
    impl_->file = std::fopen(path.c_str(), "wb");
    LOCKSTEP_CHECK_AS(NotFound, impl_->file != nullptr, "TFRecordWriter: cannot create '", path,
                      "': ", std::strerror(errno), ".");
  }
}
TFRecordWriter::TFRecordWriter(TFRecordWriter&&) noexcept = default;
TFRecordWriter::~TFRecordWriter() {
  try {
    if (impl_) close();
  } catch (const Error&) {  // a destructor cannot throw; close() reports the error
  }
}

void TFRecordWriter::write(std::span<const uint8_t> record) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, impl_->file || impl_->gz,
                    "TFRecordWriter: write after close.");
  std::vector<uint8_t> framed = encode_tfrecord(record);
  bool ok = impl_->gz ? gzwrite(impl_->gz, framed.data(), static_cast<unsigned>(framed.size())) ==
                            static_cast<int>(framed.size())
                      : std::fwrite(framed.data(), 1, framed.size(), impl_->file) == framed.size();
  LOCKSTEP_CHECK_AS(DataLoss, ok, "TFRecordWriter: cannot write '", impl_->path, "'.");
}

void TFRecordWriter::close() {
  bool ok = true;
  if (impl_->gz) ok = gzclose(impl_->gz) == Z_OK;
  if (impl_->file) ok = std::fclose(impl_->file) == 0;
  impl_->gz = nullptr;
  impl_->file = nullptr;
  LOCKSTEP_CHECK_AS(DataLoss, ok, "TFRecordWriter: cannot finish '", impl_->path, "'.");
}

}  // namespace lockstep
