#include "byte_stream.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "lockstep/core/check.h"

namespace lockstep::data_internal {
namespace {

class FileStream : public ByteStream {
 public:
  FileStream(const std::string& path, size_t buffer_size) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    LOCKSTEP_CHECK_AS(NotFound, f_ != nullptr, "Cannot open '", path, "': ", std::strerror(errno),
                      ".");
    if (buffer_size > 0) std::setvbuf(f_, nullptr, _IOFBF, buffer_size);
  }
  ~FileStream() override { std::fclose(f_); }
  size_t read(uint8_t* dst, size_t n) override {
    size_t got = std::fread(dst, 1, n, f_);
    LOCKSTEP_CHECK_AS(DataLoss, got == n || !std::ferror(f_), "Error reading '", path_,
                      "': ", std::strerror(errno), ".");
    return got;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

class MemoryStream : public ByteStream {
 public:
  explicit MemoryStream(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t read(uint8_t* dst, size_t n) override {
    size_t k = std::min(n, bytes_.size() - pos_);
    if (k) std::memcpy(dst, bytes_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

class GzipStream : public ByteStream {
 public:
  GzipStream(std::unique_ptr<ByteStream> input, std::string name)
      : input_(std::move(input)), name_(std::move(name)), in_(64 << 10) {
    std::memset(&z_, 0, sizeof(z_));
    // 15 + 16: a gzip header and trailer around the deflate stream.
    LOCKSTEP_CHECK_AS(Internal, inflateInit2(&z_, 15 + 16) == Z_OK,
                      "zlib inflateInit2 failed for '", name_, "'.");
  }
  ~GzipStream() override { inflateEnd(&z_); }
  size_t read(uint8_t* dst, size_t n) override {
    z_.next_out = dst;
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    while (z_.avail_out > 0 && !done_) {
      if (z_.avail_in == 0) {
        size_t got = input_->read(in_.data(), in_.size());
        if (got == 0) {
          // The end of the file: fine between members, a truncation inside one.
          LOCKSTEP_CHECK_AS(DataLoss, !in_member_, "Truncated gzip stream in '", name_,
                            "' at compressed byte offset ", consumed_, ".");
          done_ = true;
          break;
        }
        z_.next_in = in_.data();
        z_.avail_in = static_cast<uInt>(got);
      }
      uInt before = z_.avail_in;
      in_member_ = true;
      int rc = inflate(&z_, Z_NO_FLUSH);
      consumed_ += before - z_.avail_in;
      if (rc == Z_STREAM_END) {
        in_member_ = false;
        inflateReset(&z_);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw DataLoss("Corrupt gzip stream in '" + name_ + "' at compressed byte offset " +
                       std::to_string(consumed_) + ": " + (z_.msg ? z_.msg : "zlib error") + ".");
      } else if (rc == Z_BUF_ERROR && z_.avail_in != 0) {
        throw DataLoss("Corrupt gzip stream in '" + name_ + "' at compressed byte offset " +
                       std::to_string(consumed_) + ".");
      }
    }
    return static_cast<size_t>(z_.next_out - dst);
  }

 private:
  std::unique_ptr<ByteStream> input_;
  std::string name_;
  std::vector<uint8_t> in_;
  z_stream z_;
  uint64_t consumed_ = 0;
  bool in_member_ = false;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<ByteStream> open_file_stream(const std::string& path, size_t buffer_size) {
  return std::make_unique<FileStream>(path, buffer_size);
}
std::unique_ptr<ByteStream> memory_stream(std::span<const uint8_t> bytes) {
  return std::make_unique<MemoryStream>(bytes);
}
std::unique_ptr<ByteStream> gzip_stream(std::unique_ptr<ByteStream> input, std::string name) {
  return std::make_unique<GzipStream>(std::move(input), std::move(name));
}

std::unique_ptr<ByteStream> open_stream(const std::string& path, const std::string& compression,
                                        size_t buffer_size, const char* op) {
  LOCKSTEP_CHECK(compression.empty() || compression == "GZIP", op,
                 ": expected compression \"\" or \"GZIP\". Received: compression=\"", compression,
                 "\".");
  auto file = open_file_stream(path, buffer_size);
  if (compression.empty()) return file;
  return gzip_stream(std::move(file), path);
}

size_t read_full(ByteStream& in, uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t k = in.read(dst + got, n - got);
    if (k == 0) break;
    got += k;
  }
  return got;
}

}  // namespace lockstep::data_internal
