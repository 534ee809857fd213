#include "lockstep/ops/nn_pool.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/cpu_dispatch.h"

#include "kernel_util.h"

namespace lockstep::ops {
namespace {

// Channels are innermost (NHWC) and contiguous: for each output position the window is scanned
// in row-major order and every channel's running maximum is updated with a select, so the channel
// loop vectorises and there is no data-dependent branch. The running maxima live in the output
// (they are input values, exact in T) and their positions in `idx`. Ties keep the first position;
// a NaN wins over numbers and the first NaN is kept (as before: `v > best || (v is NaN and best
// is not)`).
// One window position's channels against the running maxima. The float32 version is built for
// AVX-512 too (the float and int64 selects vectorise with masks there, not with SSE2).
template <typename T>
void update_maxima(const T* __restrict xr, T* __restrict best, int64_t* __restrict at, int64_t base,
                   int64_t c) {
  using C = detail::compute_t<T>;
  for (int64_t ch = 0; ch < c; ++ch) {
    const C v = detail::load(xr[ch]);
    const C b = detail::load(best[ch]);
    const bool take = (v > b) | ((v != v) & (b == b));
    best[ch] = take ? xr[ch] : best[ch];
    at[ch] = take ? base + ch : at[ch];
  }
}

LOCKSTEP_DISPATCHED(void, update_maxima_f32,
                    (const float* __restrict xr, float* __restrict best, int64_t* __restrict at,
                     int64_t base, int64_t c),
                    (xr, best, at, base, c)) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const float v = xr[ch], b = best[ch];
    const bool take = (v > b) | ((v != v) & (b == b));
    best[ch] = take ? v : b;
    at[ch] = take ? base + ch : at[ch];
  }
}

template <typename T>
void max_pool_loops(const T* __restrict x, T* __restrict y, int64_t* __restrict idx, int64_t n,
                    int64_t h, int64_t w, int64_t c, const WindowGeometry& gh,
                    const WindowGeometry& gw, int64_t ph, int64_t pw, int64_t sh, int64_t sw) {
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oh = 0; oh < gh.out; ++oh) {
      int64_t h0 = oh * sh - gh.pad_before;
      int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + ph, h);
      for (int64_t ow = 0; ow < gw.out; ++ow) {
        int64_t w0 = ow * sw - gw.pad_before;
        int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + pw, w);
        const int64_t out = ((b * gh.out + oh) * gw.out + ow) * c;
        T* yo = y + out;
        int64_t* io = idx + out;
        const int64_t first = ((b * h + h_begin) * w + w_begin) * c;
        for (int64_t ch = 0; ch < c; ++ch) {
          yo[ch] = x[first + ch];
          io[ch] = first + ch;
        }
        for (int64_t i = h_begin; i < h_end; ++i) {
          for (int64_t j = w_begin; j < w_end; ++j) {
            const int64_t base = ((b * h + i) * w + j) * c;
            if (base == first) continue;
            if constexpr (std::is_same_v<T, float>) {
              update_maxima_f32(x + base, yo, io, base, c);
            } else {
              update_maxima(x + base, yo, io, base, c);
            }
          }
        }
      }
    }
  }
}

}  // namespace

MaxPool2DResult max_pool2d_forward(const Tensor& input, const Pool2DOptions& options) {
  LOCKSTEP_CHECK(
      input.rank() == 4,
      "max_pool2d: expected input of rank 4 [batch, height, width, channels]. Received: input=",
      input.describe(), ".");
  int64_t ph = options.pool_size[0], pw = options.pool_size[1];
  int64_t sh = options.strides[0] == 0 ? ph : options.strides[0];
  int64_t sw = options.strides[1] == 0 ? pw : options.strides[1];
  WindowGeometry gh, gw;
  try {
    gh = window_geometry("max_pool2d", input.dim(1), ph, sh, options.padding);
    gw = window_geometry("max_pool2d", input.dim(2), pw, sw, options.padding);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(e.what()) + " Received: input=" + input.describe() +
                          ", pool_size=[" + std::to_string(ph) + ", " + std::to_string(pw) + "].");
  }
  Shape out_shape{input.dim(0), gh.out, gw.out, input.dim(3)};
  MaxPool2DResult r{Tensor(out_shape, input.dtype()), Tensor(out_shape, DType::int64)};
  detail::dispatch_floating(input.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool_loops(input.data<T>(), r.output.data<T>(), r.argmax.data<int64_t>(), input.dim(0),
                   input.dim(1), input.dim(2), input.dim(3), gh, gw, ph, pw, sh, sw);
  });
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& argmax,
                           const Shape& input_shape) {
  LOCKSTEP_CHECK(argmax.dtype() == DType::int64 && argmax.shape() == grad_output.shape(),
                 "max_pool2d_backward: expected argmax of dtype int64 with grad_output's shape. "
                 "Received: grad_output=",
                 grad_output.describe(), ", argmax=", argmax.describe(), ".");
  // bfloat16 gradients are summed in float32 (windows overlap when strides < pool_size) and
  // rounded once at the end.
  bool bf16 = grad_output.dtype() == DType::bfloat16;
  Tensor acc = Tensor::zeros(input_shape, bf16 ? DType::float32 : grad_output.dtype());
  const int64_t limit = input_shape.num_elements();
  const int64_t* idx = argmax.data<int64_t>();
  detail::dispatch_floating(grad_output.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* dy = grad_output.data<T>();
    C* out = acc.data<C>();
    for (int64_t e = 0; e < grad_output.num_elements(); ++e) {
      LOCKSTEP_CHECK(idx[e] >= 0 && idx[e] < limit, "max_pool2d_backward: argmax ", idx[e],
                     " is outside input_shape ", input_shape, ".");
      out[idx[e]] += detail::load(dy[e]);
    }
  });
  if (!bf16) return acc;
  Tensor dx(input_shape, DType::bfloat16);
  float_to_bfloat16(acc.data<float>(), dx.data<bfloat16>(), static_cast<size_t>(limit));
  return dx;
}

}  // namespace lockstep::ops
