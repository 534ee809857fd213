#pragma once
// Byte strings in elements: how records, text lines, file names and encoded images travel through a
// Dataset (docs/data.md, "Records in elements").
//
// A byte string is a rank-1 uint8 tensor holding its bytes: a 12-byte TFRecord is uint8[12], the
// file name "a.png" is uint8[5]. There is no string dtype: a Tensor's storage is plain bytes that
// batch, cache, shuffle and the collectives copy with memcpy, which a dtype of variable-length
// objects would break. Several byte strings at once (a bytes feature with k values) are held in
// the ragged form of RaggedBytes below.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep {

// uint8[s.size()] holding the bytes of `s`.
Tensor bytes_tensor(std::string_view s);
// The bytes of a uint8 tensor of rank 1 (InvalidArgument naming `what` for anything else). The
// view refers to the tensor's storage: keep the tensor alive while it is used.
std::string_view bytes_view(const Tensor& t, const char* what = "bytes_view");
inline std::string bytes_string(const Tensor& t) {
  return std::string(bytes_view(t, "bytes_string"));
}

// k byte strings in two tensors: `values` uint8[total bytes] (the strings one after the other)
// and `row_splits` int64[k + 1], string j = values[row_splits[j] : row_splits[j + 1]] (the form of
// tf.RaggedTensor's row_splits).
struct RaggedBytes {
  Tensor values;
  Tensor row_splits;

  static RaggedBytes from_strings(const std::vector<std::string>& strings);
  int64_t size() const { return row_splits.defined() ? row_splits.dim(0) - 1 : 0; }
  std::string_view at(int64_t j) const;
  std::vector<std::string> to_strings() const;
};

}  // namespace lockstep
