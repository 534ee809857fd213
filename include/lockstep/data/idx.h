#pragma once
// IDX: the file format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/).
//
//   bytes 0-1   0x00 0x00
//   byte  2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
//               0x0E float64
//   byte  3     rank r (1..8)
//   4 * r       dimensions, big-endian uint32
//   data        row-major, big-endian, exactly prod(dims) elements
//
// int8 and int16 have no Lockstep dtype and are widened to int32. Anything else - a bad magic
// number, an unknown type, a rank of 0 or above 8, dimensions whose size disagrees with the file
// length, trailing bytes - throws DataLoss naming the file and the byte offset. Files are read
// raw or gzip-compressed (detected by the gzip magic number, not by the name).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep {

// Parses an uncompressed IDX image held in memory. `name` is used in error messages.
Tensor parse_idx(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

// True when `bytes` starts with the gzip magic number (1f 8b).
bool is_gzip(std::span<const uint8_t> bytes);

// Decompresses gzip data (concatenated members allowed). Throws DataLoss for a corrupt or
// truncated stream (with the compressed byte offset) and when the output would exceed
// `max_bytes`.
std::vector<uint8_t> gunzip(std::span<const uint8_t> bytes, const std::string& name = "<memory>",
                            size_t max_bytes = size_t{1} << 32);

// parse_idx(gunzip if compressed(bytes)).
Tensor parse_idx_maybe_gzip(std::span<const uint8_t> bytes, const std::string& name = "<memory>",
                            size_t max_bytes = size_t{1} << 32);

// Reads an IDX file (raw or gzip). NotFound if it cannot be opened, DataLoss if corrupt.
Tensor read_idx(const std::string& path);

// Writes `t` as an uncompressed IDX file (uint8, int32, float32 or float64), or gzip-compressed
// when `gzip` is true. For tests and for exporting data.
void write_idx(const std::string& path, const Tensor& t, bool gzip = false);
// The IDX bytes of `t`, uncompressed.
std::vector<uint8_t> encode_idx(const Tensor& t);

}  // namespace lockstep
