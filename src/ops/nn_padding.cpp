#include "lockstep/ops/nn_padding.h"

#include <algorithm>
#include <string>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::ops {

Padding padding_from_name(std::string_view name) {
  if (name == "valid") return Padding::valid;
  if (name == "same") return Padding::same;
  throw InvalidArgument("padding: expected \"valid\" or \"same\". Received: padding=\"" +
                        std::string(name) + "\".");
}

WindowGeometry window_geometry(std::string_view op, int64_t in, int64_t k, int64_t stride,
                               Padding padding) {
  LOCKSTEP_CHECK(k > 0 && stride > 0, op,
                 ": window size and stride must be positive. Received: window=", k,
                 ", stride=", stride, ".");
  WindowGeometry g;
  if (padding == Padding::valid) {
    LOCKSTEP_CHECK(in >= k, op, ": with padding \"valid\" the window (", k,
                   ") must fit in the input (", in, "); use padding \"same\" or a smaller window.");
    g.out = (in - k) / stride + 1;
    return g;
  }
  g.out = (in + stride - 1) / stride;
  int64_t total = std::max<int64_t>((g.out - 1) * stride + k - in, 0);
  g.pad_before = total / 2;
  g.pad_after = total - g.pad_before;
  return g;
}

}  // namespace lockstep::ops
