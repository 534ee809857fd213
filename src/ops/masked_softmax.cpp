#include "lockstep/ops/masked_softmax.h"

#include <string>

#include "lockstep/ops/softmax.h"

#include "broadcast_mask.h"
#include "kernel_util.h"

namespace lockstep::ops {
namespace {

// Calls f(element offset, keep) for every element of `shape`, with keep from the broadcast mask.
template <typename F>
void for_each_kept(const detail::BroadcastMask& m, const Shape& shape, F&& f) {
  const int r = shape.rank();
  const int64_t total = shape.num_elements();
  if (total == 0) return;
  std::array<int64_t, Shape::kMaxRank> idx{};
  int64_t moff = 0;
  const uint8_t* keep = m.data();
  for (int64_t i = 0; i < total; ++i) {
    f(i, keep[moff] != 0);
    for (int d = r - 1; d >= 0; --d) {
      const size_t ud = static_cast<size_t>(d);
      ++idx[ud];
      moff += m.strides[ud];
      if (idx[ud] < shape[d]) break;
      moff -= m.strides[ud] * shape[d];
      idx[ud] = 0;
    }
  }
}

}  // namespace

Tensor masked_softmax_forward(const Tensor& x, const Tensor& mask) {
  const char* op = "masked_softmax";
  detail::check_floating(x, op, "x");
  if (x.rank() == 0) {
    throw InvalidArgument(std::string(op) +
                          ": expected a tensor of rank >= 1. Received: " + x.describe() + ".");
  }
  if (!mask.defined()) return softmax_forward(x, -1);
  const detail::BroadcastMask m = detail::broadcast_mask(mask, x.shape(), op);
  Tensor z(x.shape(), x.dtype());
  detail::dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* pz = z.data<T>();
    const T dropped = static_cast<T>(static_cast<float>(kMaskedScore));
    for_each_kept(m, x.shape(), [&](int64_t i, bool keep) { pz[i] = keep ? px[i] : dropped; });
  });
  return softmax_forward(z, -1);
}

Tensor masked_softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& mask) {
  Tensor dx = softmax_backward(dy, y, -1);
  if (!mask.defined()) return dx;
  const detail::BroadcastMask m =
      detail::broadcast_mask(mask, y.shape(), "masked_softmax_backward");
  detail::dispatch_floating(dx.dtype(), "masked_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    T* p = dx.data<T>();
    for_each_kept(m, dx.shape(), [&](int64_t i, bool keep) {
      if (!keep) p[i] = T(0);
    });
  });
  return dx;
}

}  // namespace lockstep::ops
