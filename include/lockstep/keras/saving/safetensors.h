#pragma once
// Weights files in the safetensors format (https://github.com/huggingface/safetensors), so that
// PyTorch and Hugging Face tools read them as is:
//
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    a UTF-8 JSON object, padded with spaces so 8 + N is a multiple of 8:
//                         {"__metadata__": {"key": "value", ...},
//                          "dense/kernel": {"dtype": "F32", "shape": [784, 128],
//                                           "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, end)  the tensors' raw little-endian data; offsets are relative to 8 + N, the
//                       tensors tile the buffer exactly (no gaps, no overlap)
//
// dtypes: F32, BF16, F64, I32, I64, U8 (Lockstep's float32, bfloat16, float64, int32, int64,
// uint8). Tensor names are the Keras weight paths ("dense/kernel"). Tensors are written in the
// order given and loaded in file order.
//
// Lockstep adds to __metadata__ (all strings, so other readers ignore them):
//   "lockstep.format": "1"
//   "lockstep.crc32": CRC-32 (zlib) of the whole data buffer, 8 hex digits
//   "lockstep.tensor_crc32": the CRC-32 of each tensor's bytes in file order, comma-separated
//   "lockstep.header_crc32": CRC-32 of bytes [0, 8 + N) with this value's 8 digits read as
//                            "00000000"
// so that any bit flip in the file is detected on load. Files without them (written by other
// tools) load with structural validation only.
//
// Writes are atomic: the file is written to a temporary file in the same directory
// ("<path>.tmp.<pid>.<n>"), fsync'ed, renamed over `path`, and the directory is fsync'ed. A
// crash at any point leaves either the old file or the new one at `path`.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::keras::saving {

// Throws InvalidArgument for an empty, duplicate or reserved ("__metadata__") tensor name, an
// undefined tensor, or a metadata key Lockstep reserves ("lockstep.format", "lockstep.crc32",
// "lockstep.tensor_crc32", "lockstep.header_crc32"); NotFound when the directory does not exist;
// Unavailable for other I/O errors.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file (data offset) order
  // User metadata; Lockstep's own "lockstep.*" entries are verified and removed.
  std::map<std::string, std::string> metadata;
};

// Throws NotFound for a missing file; DataLoss (naming the file and the byte offset) for a
// truncated, corrupt or malformed file or a checksum mismatch; InvalidArgument for a well-formed
// file holding a dtype Lockstep does not support (e.g. F16) or a rank above Shape::kMaxRank.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace lockstep::keras::saving
