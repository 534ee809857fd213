#pragma once
// Window geometry shared by conv2d and max_pool2d, with TensorFlow's padding rules.
//
// Along one spatial axis of size `in`, a window of size `k` moved by `stride`:
//   valid: out = floor((in - k) / stride) + 1, no padding (needs in >= k);
//   same:  out = ceil(in / stride),
//          pad_total = max((out - 1) * stride + k - in, 0),
//          pad_before = floor(pad_total / 2), pad_after = pad_total - pad_before
// (the extra element of an odd total goes after, as in TensorFlow and Keras).
#include <cstdint>
#include <string_view>

namespace lockstep::ops {

enum class Padding { valid, same };

// Parses Keras' names "valid" and "same" (case-sensitive, as Keras); throws InvalidArgument.
Padding padding_from_name(std::string_view name);

struct WindowGeometry {
  int64_t out = 0;
  int64_t pad_before = 0;
  int64_t pad_after = 0;
};

// Throws InvalidArgument (naming `op`) when `k` or `stride` is not positive or a valid window
// does not fit.
WindowGeometry window_geometry(std::string_view op, int64_t in, int64_t k, int64_t stride,
                               Padding padding);

}  // namespace lockstep::ops
