#pragma once
// Sequential byte sources under the file readers (TFRecord, text lines, CSV): a file, a gzip
// stream over another source, or memory (the fuzzing entry points). Private to src/data.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lockstep::data_internal {

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to n bytes into dst; returns how many (0 only at the end). Throws DataLoss on a
  // corrupt or unreadable source.
  virtual size_t read(uint8_t* dst, size_t n) = 0;
};

// Reads `path` through a buffer of `buffer_size` bytes (0: the C library's default). NotFound when
// it cannot be opened.
std::unique_ptr<ByteStream> open_file_stream(const std::string& path, size_t buffer_size);
std::unique_ptr<ByteStream> memory_stream(std::span<const uint8_t> bytes);
// Decompresses gzip (concatenated members allowed) read from `input`; `name` is for errors.
std::unique_ptr<ByteStream> gzip_stream(std::unique_ptr<ByteStream> input, std::string name);

// Opens `path` with the compression "" or "GZIP" (as tf.data spells it); InvalidArgument for
// another value.
std::unique_ptr<ByteStream> open_stream(const std::string& path, const std::string& compression,
                                        size_t buffer_size, const char* op);

// Reads exactly n bytes unless the stream ends first; returns how many were read.
size_t read_full(ByteStream& in, uint8_t* dst, size_t n);

}  // namespace lockstep::data_internal
