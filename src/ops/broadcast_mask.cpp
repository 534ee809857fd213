#include "broadcast_mask.h"
#include "lockstep/core/check.h"

#include <string>

#include "kernel_util.h"

namespace lockstep::ops::detail {

BroadcastMask broadcast_mask(const Tensor& mask, const Shape& shape, const char* op) {
  check_defined(mask, op, "mask");
  const Shape& m = mask.shape();
  bool ok = m.rank() <= shape.rank();
  for (int d = 0; ok && d < m.rank(); ++d) {
    const int64_t md = m[d], sd = shape[shape.rank() - m.rank() + d];
    ok = md == sd || md == 1;
  }
  LOCKSTEP_CHECK(
      ok, op, ": expected a mask that broadcasts to ", shape,
      " (dimensions aligned from the right, each equal or 1). Received: ", mask.describe(), ".");
  BroadcastMask out;
  out.keep = Tensor(m, DType::uint8);
  uint8_t* keep = out.keep.data<uint8_t>();
  const int64_t n = mask.num_elements();
  switch (mask.dtype()) {
    case DType::uint8: {
      const uint8_t* p = mask.data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) keep[i] = p[i] != 0;
      break;
    }
    case DType::int32: {
      const int32_t* p = mask.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) keep[i] = p[i] != 0;
      break;
    }
    case DType::int64: {
      const int64_t* p = mask.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) keep[i] = p[i] != 0;
      break;
    }
    default: {
      // Floating masks: Keras casts them to bool (nonzero keeps).
      dispatch_floating(mask.dtype(), op, [&](auto tag) {
        using T = decltype(tag);
        const T* p = mask.data<T>();
        for (int64_t i = 0; i < n; ++i) keep[i] = detail::load(p[i]) != 0;
      });
    }
  }
  int64_t stride = 1;
  for (int d = m.rank() - 1; d >= 0; --d) {
    const size_t target = static_cast<size_t>(shape.rank() - m.rank() + d);
    out.strides[target] = m[d] == 1 ? 0 : stride;
    stride *= m[d];
  }
  return out;
}

}  // namespace lockstep::ops::detail
