#include "lockstep/ops/nn_pool.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

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

// One input row of a max pooling's gradient where windows do not overlap: each of its w positions
// belongs to window column win_col[j] (or none: -1), whose output gradient and argmax start at
// dy_row and idx_row (c channels per output). Element (j, ch) gets 0 + dy where the window's
// argmax is its flat index `first + j * c + ch`, else 0. Returns how many elements matched.
LOCKSTEP_DISPATCHED(int64_t, unpool_row_f32,
                    (const float* __restrict dy_row, const int64_t* __restrict idx_row,
                     const int64_t* __restrict win_col, float* __restrict out, int64_t first,
                     int64_t w, int64_t c),
                    (dy_row, idx_row, win_col, out, first, w, c)) {
  int64_t matched = 0;
  for (int64_t j = 0; j < w; ++j) {
    float* o = out + j * c;
    const int64_t col = win_col[j];
    if (col < 0) {
      for (int64_t ch = 0; ch < c; ++ch) o[ch] = 0.0f;
      continue;
    }
    const float* d = dy_row + col * c;
    const int64_t* at = idx_row + col * c;
    const int64_t base = first + j * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      const bool hit = at[ch] == base + ch;
      o[ch] = hit ? 0.0f + d[ch] : 0.0f;
      matched += hit ? 1 : 0;
    }
  }
  return matched;
}

// Window index of each position along one axis for non-overlapping windows, -1 where none covers
// it (a stride larger than the window, or a remainder a valid window does not reach).
std::vector<int64_t> window_of(int64_t in, const WindowGeometry& g, int64_t pool, int64_t stride) {
  std::vector<int64_t> at(static_cast<size_t>(in), -1);
  for (int64_t o = 0; o < g.out; ++o) {
    for (int64_t k = 0; k < pool; ++k) {
      const int64_t i = o * stride - g.pad_before + k;
      if (i >= 0 && i < in) at[static_cast<size_t>(i)] = o;
    }
  }
  return at;
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
  const int64_t count = grad_output.num_elements();
  // The indices are checked first, in a loop of their own that vectorises, so that the scatter
  // below has no test in it.
  int64_t lowest = 0, highest = 0;
  for (int64_t e = 0; e < count; ++e) {
    lowest = std::min(lowest, idx[e]);
    highest = std::max(highest, idx[e]);
  }
  if (count > 0 && (lowest < 0 || highest >= limit)) {
    const int64_t* bad =
        std::find_if(idx, idx + count, [&](int64_t i) { return i < 0 || i >= limit; });
    throw InvalidArgument("max_pool2d_backward: argmax " + std::to_string(*bad) + " (element " +
                          std::to_string(bad - idx) + ") is outside input_shape " +
                          input_shape.to_string() + ".");
  }
  detail::dispatch_floating(grad_output.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = detail::compute_t<T>;
    const T* dy = grad_output.data<T>();
    C* out = acc.data<C>();
    for (int64_t e = 0; e < count; ++e) out[idx[e]] += detail::load(dy[e]);
  });
  if (!bf16) return acc;
  Tensor dx(input_shape, DType::bfloat16);
  float_to_bfloat16(acc.data<float>(), dx.data<bfloat16>(), static_cast<size_t>(limit));
  return dx;
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& argmax,
                           const Shape& input_shape, const Pool2DOptions& options) {
  const int64_t ph = options.pool_size[0], pw = options.pool_size[1];
  const int64_t sh = options.strides[0] == 0 ? ph : options.strides[0];
  const int64_t sw = options.strides[1] == 0 ? pw : options.strides[1];
  if (grad_output.dtype() != DType::float32 || input_shape.rank() != 4 || sh < ph || sw < pw ||
      grad_output.rank() != 4 || argmax.dtype() != DType::int64 ||
      !(argmax.shape() == grad_output.shape())) {
    return max_pool2d_backward(grad_output, argmax, input_shape);
  }
  const int64_t n = input_shape[0], h = input_shape[1], w = input_shape[2], c = input_shape[3];
  const WindowGeometry gh = window_geometry("max_pool2d_backward", h, ph, sh, options.padding);
  const WindowGeometry gw = window_geometry("max_pool2d_backward", w, pw, sw, options.padding);
  const Shape expected{n, gh.out, gw.out, c};
  LOCKSTEP_CHECK(grad_output.shape() == expected, "max_pool2d_backward: expected grad_output of ",
                 "shape ", expected, " (max_pool2d of input_shape ", input_shape,
                 "). Received: grad_output=", grad_output.describe(), ".");
  const std::vector<int64_t> row_window = window_of(h, gh, ph, sh);
  const std::vector<int64_t> col_window = window_of(w, gw, pw, sw);
  Tensor dx(input_shape, DType::float32);
  const float* dy = grad_output.data<float>();
  const int64_t* idx = argmax.data<int64_t>();
  float* out = dx.data<float>();
  int64_t matched = 0;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < h; ++i) {
      const int64_t first = (b * h + i) * w * c;
      const int64_t oh = row_window[static_cast<size_t>(i)];
      if (oh < 0) {
        std::fill(out + first, out + first + w * c, 0.0f);
        continue;
      }
      const int64_t row = (b * gh.out + oh) * gw.out * c;
      matched += unpool_row_f32(dy + row, idx + row, col_window.data(), out + first, first, w, c);
    }
  }
  LOCKSTEP_CHECK(matched == grad_output.num_elements(),
                 "max_pool2d_backward: ", grad_output.num_elements() - matched,
                 " argmax indices are not in their own windows (argmax=", argmax.describe(),
                 ", input_shape ", input_shape,
                 "): not the argmax of max_pool2d_forward with "
                 "these options.");
  return dx;
}

}  // namespace lockstep::ops
