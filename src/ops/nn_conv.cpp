#include "lockstep/ops/nn_conv.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu_dispatch.h"
#include "internal.h"
#include "kernel_util.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/ops/activations.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

struct ConvDims {
  int64_t n, h, w, c, kh, kw, o, oh, ow, sh, sw, pt, pb, pl, pr;
};

ConvDims conv_dims(const Shape& input, const Shape& kernel, const Conv2DOptions& options,
                   const std::string& input_desc, const std::string& kernel_desc) {
  auto received = [&] {
    return " Received: input=" + input_desc + ", kernel=" + kernel_desc + ".";
  };
  LOCKSTEP_CHECK(input.rank() == 4 && kernel.rank() == 4,
                 "conv2d: expected input of rank 4 [batch, height, width, in_channels] and kernel "
                 "of rank 4 [kernel_height, kernel_width, in_channels, out_channels].",
                 received());
  LOCKSTEP_CHECK(input[3] == kernel[2], "conv2d: input channels (", input[3],
                 ") must equal the kernel's in_channels (dimension 2, ", kernel[2], ").",
                 received());
  LOCKSTEP_CHECK(options.strides[0] > 0 && options.strides[1] > 0,
                 "conv2d: strides must be positive. Received: strides=[", options.strides[0], ", ",
                 options.strides[1], "].");
  WindowGeometry gh, gw;
  try {
    gh = window_geometry("conv2d", input[1], kernel[0], options.strides[0], options.padding);
    gw = window_geometry("conv2d", input[2], kernel[1], options.strides[1], options.padding);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(e.what() + received());
  }
  return {input[0],           input[1],      input[2],     input[3],      kernel[0],
          kernel[1],          kernel[3],     gh.out,       gw.out,        options.strides[0],
          options.strides[1], gh.pad_before, gh.pad_after, gw.pad_before, gw.pad_after};
}

void check_dtypes(const char* op, std::initializer_list<const Tensor*> tensors) {
  DType d = (*tensors.begin())->dtype();
  std::string all;
  bool mismatch = false;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!all.empty()) all += ", ";
    all += t->describe();
    mismatch = mismatch || t->dtype() != d;
  }
  LOCKSTEP_CHECK(
      !mismatch && is_floating(d), op,
      ": expected operands of one floating dtype (float32, bfloat16 or float64). Received: ", all,
      ".");
}

// ---- float64 loops: the reference path used by gradient checks -------------------------------

void conv_forward_loops(const ConvDims& d, const double* x, const double* k, const double* b,
                        double* y) {
  for (int64_t n = 0; n < d.n; ++n) {
    for (int64_t oh = 0; oh < d.oh; ++oh) {
      for (int64_t ow = 0; ow < d.ow; ++ow) {
        double* out = y + ((n * d.oh + oh) * d.ow + ow) * d.o;
        for (int64_t o = 0; o < d.o; ++o) out[o] = b ? b[o] : 0.0;
        for (int64_t i = 0; i < d.kh; ++i) {
          int64_t ih = oh * d.sh + i - d.pt;
          if (ih < 0 || ih >= d.h) continue;
          for (int64_t j = 0; j < d.kw; ++j) {
            int64_t iw = ow * d.sw + j - d.pl;
            if (iw < 0 || iw >= d.w) continue;
            const double* in = x + ((n * d.h + ih) * d.w + iw) * d.c;
            const double* kk = k + (i * d.kw + j) * d.c * d.o;
            for (int64_t c = 0; c < d.c; ++c) {
              for (int64_t o = 0; o < d.o; ++o) out[o] += in[c] * kk[c * d.o + o];
            }
          }
        }
      }
    }
  }
}

// Visits every (input position, output position, kernel tap) triple once; the two backward
// passes differ only in what they accumulate.
template <typename F>
void for_each_tap(const ConvDims& d, F&& f) {
  for (int64_t n = 0; n < d.n; ++n) {
    for (int64_t oh = 0; oh < d.oh; ++oh) {
      for (int64_t ow = 0; ow < d.ow; ++ow) {
        int64_t out = ((n * d.oh + oh) * d.ow + ow) * d.o;
        for (int64_t i = 0; i < d.kh; ++i) {
          int64_t ih = oh * d.sh + i - d.pt;
          if (ih < 0 || ih >= d.h) continue;
          for (int64_t j = 0; j < d.kw; ++j) {
            int64_t iw = ow * d.sw + j - d.pl;
            if (iw < 0 || iw >= d.w) continue;
            f(((n * d.h + ih) * d.w + iw) * d.c, out, (i * d.kw + j) * d.c * d.o);
          }
        }
      }
    }
  }
}

void conv_backward_input_loops(const ConvDims& d, const double* dy, const double* k, double* dx) {
  std::memset(dx, 0, sizeof(double) * static_cast<size_t>(d.n * d.h * d.w * d.c));
  for_each_tap(d, [&](int64_t in, int64_t out, int64_t tap) {
    for (int64_t c = 0; c < d.c; ++c) {
      double s = 0;
      for (int64_t o = 0; o < d.o; ++o) s += dy[out + o] * k[tap + c * d.o + o];
      dx[in + c] += s;
    }
  });
}

void conv_backward_kernel_loops(const ConvDims& d, const double* dy, const double* x, double* dk) {
  std::memset(dk, 0, sizeof(double) * static_cast<size_t>(d.kh * d.kw * d.c * d.o));
  for_each_tap(d, [&](int64_t in, int64_t out, int64_t tap) {
    for (int64_t c = 0; c < d.c; ++c) {
      for (int64_t o = 0; o < d.o; ++o) dk[tap + c * d.o + o] += x[in + c] * dy[out + o];
    }
  });
}

// ---- oneDNN ------------------------------------------------------------------------------------

using tag = dnnl::memory::format_tag;

enum class Pass { forward, backward_data, backward_weights };

// Memory descriptors in the caller's layouts. oneDNN's logical dims are always N, C, H, W for
// data and O, I, H, W for weights; the format tag says how they sit in memory.
struct ConvMds {
  dnnl::memory::desc src, weights, bias, dst, weights_any;
  dnnl::memory::dims strides, pad_l, pad_r;
};

ConvMds conv_mds(const ConvDims& d, DType dtype) {
  auto t = onednn::data_type(dtype);
  return {dnnl::memory::desc({d.n, d.c, d.h, d.w}, t, tag::nhwc),
          dnnl::memory::desc({d.o, d.c, d.kh, d.kw}, t, tag::hwio),
          dnnl::memory::desc({d.o}, t, tag::x),
          dnnl::memory::desc({d.n, d.o, d.oh, d.ow}, t, tag::nhwc),
          dnnl::memory::desc({d.o, d.c, d.kh, d.kw}, t, tag::any),
          {d.sh, d.sw},
          {d.pt, d.pl},
          {d.pb, d.pr}};
}

// `relu`: relu as a post-op (oneDNN's, which maps NaN to 0: conv2d_relu_forward decides).
dnnl::convolution_forward::primitive_desc forward_pd(const ConvMds& m, bool bias,
                                                     bool relu = false) {
  auto d = bias ? dnnl::convolution_forward::desc(
                      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, m.src,
                      m.weights_any, m.bias, m.dst, m.strides, m.pad_l, m.pad_r)
                : dnnl::convolution_forward::desc(
                      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, m.src,
                      m.weights_any, m.dst, m.strides, m.pad_l, m.pad_r);
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return {d, attr, onednn::engine()};
}

// The weights argument is left to oneDNN (format any) because its fast kernels want blocked
// weights; when the chosen layout differs from Keras' [KH, KW, I, O], a reorder runs before
// (forward, backward data) or after (backward weights, which produces them) the convolution,
// through a buffer allocated once with the entry.
struct ConvEntry : onednn::CacheEntry {
  std::optional<onednn::Primitive> conv;
  std::optional<onednn::Primitive> reorder;  // absent when oneDNN takes the caller's layout
  int weights_arg = DNNL_ARG_WEIGHTS;
};

std::unique_ptr<ConvEntry> make_entry(Pass pass, const ConvDims& d, DType dtype, bool bias,
                                      bool relu) {
  auto e = std::make_unique<ConvEntry>();
  ConvMds m = conv_mds(d, dtype);
  const dnnl::engine& eng = onednn::engine();
  auto fwd = forward_pd(m, bias, relu);
  dnnl::memory::desc wanted;
  if (pass == Pass::forward) {
    wanted = fwd.weights_desc();
    if (bias) {
      e->conv.emplace(
          dnnl::convolution_forward(fwd),
          std::initializer_list<std::pair<int, dnnl::memory::desc>>{{DNNL_ARG_SRC, m.src},
                                                                    {DNNL_ARG_WEIGHTS, wanted},
                                                                    {DNNL_ARG_BIAS, m.bias},
                                                                    {DNNL_ARG_DST, m.dst}});
    } else {
      e->conv.emplace(
          dnnl::convolution_forward(fwd),
          std::initializer_list<std::pair<int, dnnl::memory::desc>>{
              {DNNL_ARG_SRC, m.src}, {DNNL_ARG_WEIGHTS, wanted}, {DNNL_ARG_DST, m.dst}});
    }
  } else if (pass == Pass::backward_data) {
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, m.src,
                                             m.weights_any, m.dst, m.strides, m.pad_l, m.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(bd, eng, fwd);
    wanted = pd.weights_desc();
    e->conv.emplace(
        dnnl::convolution_backward_data(pd),
        std::initializer_list<std::pair<int, dnnl::memory::desc>>{
            {DNNL_ARG_DIFF_SRC, m.src}, {DNNL_ARG_WEIGHTS, wanted}, {DNNL_ARG_DIFF_DST, m.dst}});
  } else {
    dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, m.src,
                                                m.weights_any, m.dst, m.strides, m.pad_l, m.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(bd, eng, fwd);
    wanted = pd.diff_weights_desc();
    e->weights_arg = DNNL_ARG_DIFF_WEIGHTS;
    e->conv.emplace(
        dnnl::convolution_backward_weights(pd),
        std::initializer_list<std::pair<int, dnnl::memory::desc>>{
            {DNNL_ARG_SRC, m.src}, {DNNL_ARG_DIFF_WEIGHTS, wanted}, {DNNL_ARG_DIFF_DST, m.dst}});
  }
  if (wanted != m.weights) {
    dnnl::memory blocked(wanted, eng);
    e->conv->arguments()[e->weights_arg] = blocked;
    bool to_user = pass == Pass::backward_weights;
    const auto& from = to_user ? wanted : m.weights;
    const auto& to = to_user ? m.weights : wanted;
    e->reorder.emplace(dnnl::reorder(dnnl::reorder::primitive_desc(eng, from, eng, to)),
                       std::initializer_list<std::pair<int, dnnl::memory::desc>>{
                           {DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    e->reorder->arguments()[to_user ? DNNL_ARG_FROM : DNNL_ARG_TO] = blocked;
  }
  return e;
}

// Pointers by oneDNN role: forward reads src/weights/bias and writes dst; backward_data reads
// dst (diff_dst) and weights and writes src (diff_src); backward_weights reads src and dst
// (diff_dst) and writes weights (diff_weights).
struct ConvBuffers {
  const void* src = nullptr;
  const void* weights = nullptr;
  const void* bias = nullptr;
  const void* dst = nullptr;
};

void run_onednn(Pass pass, const ConvDims& d, DType dtype, const ConvBuffers& b, bool relu = false);

// bfloat16 buffers where oneDNN has no bfloat16 convolution: the float32 convolution of the
// widened inputs (exact), its output rounded to bfloat16 (ops/cpu_kernels.h).
void run_widened(Pass pass, const ConvDims& d, const ConvBuffers& b) {
  const size_t src_n = static_cast<size_t>(d.n * d.h * d.w * d.c);
  const size_t weights_n = static_cast<size_t>(d.kh * d.kw * d.c * d.o);
  const size_t dst_n = static_cast<size_t>(d.n * d.oh * d.ow * d.o);
  std::vector<float> src(src_n), weights(weights_n), bias(b.bias ? static_cast<size_t>(d.o) : 0),
      dst(dst_n);
  auto widen = [](const void* from, std::vector<float>& to) {
    bfloat16_to_float(static_cast<const bfloat16*>(from), to.data(), to.size());
  };
  auto narrow = [](const std::vector<float>& from, const void* to) {
    float_to_bfloat16(from.data(), static_cast<bfloat16*>(const_cast<void*>(to)), from.size());
  };
  if (pass != Pass::backward_data) widen(b.src, src);
  if (pass != Pass::backward_weights) widen(b.weights, weights);
  if (b.bias) widen(b.bias, bias);
  if (pass != Pass::forward) widen(b.dst, dst);
  run_onednn(pass, d, DType::float32,
             {src.data(), weights.data(), b.bias ? bias.data() : nullptr, dst.data()});
  switch (pass) {
    case Pass::forward:
      narrow(dst, b.dst);
      break;
    case Pass::backward_data:
      narrow(src, b.src);
      break;
    case Pass::backward_weights:
      narrow(weights, b.weights);
      break;
  }
}

void run_onednn(Pass pass, const ConvDims& d, DType dtype, const ConvBuffers& b, bool relu) {
  if (detail::emulates_bf16(dtype)) {
    LOCKSTEP_CHECK_AS(Internal, !relu, "conv2d: no fused relu for emulated bfloat16.");
    run_widened(pass, d, b);
    return;
  }
  bool bias = b.bias != nullptr;
  onednn::Key key("nn_conv2d");
  key.add(static_cast<int>(pass)).add(dtype).add(bias).add(relu);
  for (int64_t v : {d.n, d.h, d.w, d.c, d.kh, d.kw, d.o, d.sh, d.sw, d.pt, d.pb, d.pl, d.pr})
    key.add(v);
  auto& e = onednn::cached<ConvEntry>(key, [&] { return make_entry(pass, d, dtype, bias, relu); });
  int src_arg = pass == Pass::backward_data ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC;
  int dst_arg = pass == Pass::forward ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST;
  if (!e.reorder) {
    if (bias) {
      e.conv->execute({{src_arg, b.src},
                       {e.weights_arg, b.weights},
                       {DNNL_ARG_BIAS, b.bias},
                       {dst_arg, b.dst}});
    } else {
      e.conv->execute({{src_arg, b.src}, {e.weights_arg, b.weights}, {dst_arg, b.dst}});
    }
    return;
  }
  if (pass != Pass::backward_weights) e.reorder->execute({{DNNL_ARG_FROM, b.weights}});
  if (bias) {
    e.conv->execute({{src_arg, b.src}, {DNNL_ARG_BIAS, b.bias}, {dst_arg, b.dst}});
  } else {
    e.conv->execute({{src_arg, b.src}, {dst_arg, b.dst}});
  }
  if (pass == Pass::backward_weights) e.reorder->execute({{DNNL_ARG_TO, b.weights}});
}

template <typename T>
void sum_rows(const T* p, int64_t rows, int64_t cols, std::vector<double>& sum) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      sum[static_cast<size_t>(c)] += static_cast<double>(static_cast<float>(p[r * cols + c]));
    }
  }
}

// float32: each lane one channel, the rows added in order, so every build gives the same bits; the
// wider builds take the million-element gradients of a convolution at memory speed.
LOCKSTEP_DISPATCHED(void, sum_rows_f32,
                    (const float* __restrict p, int64_t rows, int64_t cols, double* __restrict sum),
                    (p, rows, cols, sum)) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = p + r * cols;
    for (int64_t c = 0; c < cols; ++c) sum[c] += static_cast<double>(row[c]);
  }
}

template <>
void sum_rows<float>(const float* p, int64_t rows, int64_t cols, std::vector<double>& sum) {
  sum_rows_f32(p, rows, cols, sum.data());
}

// relu's gradient and the float64 channel sums of conv2d_backward_bias in one pass: the bits of
// relu_backward (dy · (y > 0 ? 1 : 0)) and of sum_rows_f32 over its result.
LOCKSTEP_DISPATCHED(void, relu_grad_sum_rows_f32,
                    (const float* __restrict dy, const float* __restrict y, float* __restrict dz,
                     int64_t rows, int64_t cols, double* __restrict sum),
                    (dy, y, dz, rows, cols, sum)) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = dy[base + c] * detail::positive_mask(y[base + c]);
      dz[base + c] = v;
      sum[c] += static_cast<double>(v);
    }
  }
}

LOCKSTEP_DISPATCHED(void, relu_grad_f32_into,
                    (const float* __restrict dy, const float* __restrict y, float* __restrict dz,
                     int64_t n),
                    (dy, y, dz, n)) {
  for (int64_t i = 0; i < n; ++i) dz[i] = dy[i] * detail::positive_mask(y[i]);
}

// relu keeping NaN (NaN < 0 is false), in place.
LOCKSTEP_DISPATCHED(void, rectify_in_place_f32, (float* y, int64_t n), (y, n)) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

// The largest magnitude in p as float bits (magnitudes order as unsigned integers), any NaN above
// infinity's 0x7f800000: an integer maximum, which vectorises in every build.
LOCKSTEP_DISPATCHED(uint32_t, max_magnitude_bits_f32, (const float* __restrict p, int64_t n),
                    (p, n)) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, sizeof u);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return m;
}

// The largest magnitude of a float32 tensor, or infinity when it holds an infinity or a NaN.
double max_magnitude(const Tensor& t) {
  if (!t.defined()) return 0.0;
  const uint32_t bits = max_magnitude_bits_f32(t.data<float>(), t.num_elements());
  if (bits >= 0x7f800000u) return std::numeric_limits<double>::infinity();
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <>
void sum_rows<double>(const double* p, int64_t rows, int64_t cols, std::vector<double>& sum) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) sum[static_cast<size_t>(c)] += p[r * cols + c];
  }
}

}  // namespace

namespace {

ConvDims forward_dims(const Tensor& input, const Tensor& kernel, const Tensor& bias,
                      const Conv2DOptions& options) {
  ConvDims d =
      conv_dims(input.shape(), kernel.shape(), options, input.describe(), kernel.describe());
  check_dtypes("conv2d", {&input, &kernel, &bias});
  LOCKSTEP_CHECK(!bias.defined() || (bias.rank() == 1 && bias.dim(0) == d.o),
                 "conv2d: expected bias of shape [", d.o,
                 "] (the kernel's out_channels). Received: bias=", bias.describe(),
                 ", kernel=", kernel.describe(), ".");
  return d;
}

// oneDNN's relu post-op computes max(v, 0), which turns a NaN output into 0. No output is NaN or
// infinite when every operand is finite and no sum can overflow: |output| <= |bias| + (terms
// per output) · max|input| · max|kernel|, and float32 accumulation stays within a factor
// (1 + eps)^terms of that bound, so a bound far below float32's largest value (3.4e38) suffices.
bool relu_post_op_keeps_values(const ConvDims& d, const Tensor& input, const Tensor& kernel,
                               const Tensor& bias) {
  constexpr double kLimit = 1e36;
  const double terms = static_cast<double>(d.kh * d.kw * d.c);
  const double bound = max_magnitude(bias) + terms * max_magnitude(input) * max_magnitude(kernel);
  return bound < kLimit;  // false for an infinite (or NaN) operand
}

}  // namespace

Tensor conv2d_forward(const Tensor& input, const Tensor& kernel, const Tensor& bias,
                      const Conv2DOptions& options) {
  ConvDims d = forward_dims(input, kernel, bias, options);
  Tensor out({d.n, d.oh, d.ow, d.o}, input.dtype());
  // oneDNN rejects zero-sized dimensions; an empty batch has nothing to compute.
  if (out.num_elements() == 0) return out;
  if (input.dtype() == DType::float64) {
    conv_forward_loops(d, input.data<double>(), kernel.data<double>(),
                       bias.defined() ? bias.data<double>() : nullptr, out.data<double>());
  } else {
    run_onednn(Pass::forward, d, input.dtype(),
               {input.raw_data(), kernel.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
                out.raw_data()});
  }
  return out;
}

Tensor conv2d_relu_forward(const Tensor& input, const Tensor& kernel, const Tensor& bias,
                           const Conv2DOptions& options) {
  if (input.dtype() != DType::float32) {
    return relu_forward(conv2d_forward(input, kernel, bias, options));
  }
  ConvDims d = forward_dims(input, kernel, bias, options);
  Tensor out({d.n, d.oh, d.ow, d.o}, DType::float32);
  if (out.num_elements() == 0) return out;
  const bool fused = relu_post_op_keeps_values(d, input, kernel, bias);
  run_onednn(Pass::forward, d, DType::float32,
             {input.raw_data(), kernel.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
              out.raw_data()},
             fused);
  if (!fused) rectify_in_place_f32(out.data<float>(), out.num_elements());
  return out;
}

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& kernel,
                             const Shape& input_shape, const Conv2DOptions& options) {
  ConvDims d =
      conv_dims(input_shape, kernel.shape(), options, input_shape.to_string(), kernel.describe());
  check_dtypes("conv2d_backward_input", {&grad_output, &kernel});
  Shape expected{d.n, d.oh, d.ow, d.o};
  LOCKSTEP_CHECK(
      grad_output.shape() == expected, "conv2d_backward_input: expected grad_output of shape ",
      expected.to_string(), " (the conv2d output for input ", input_shape,
      "). Received: grad_output=", grad_output.describe(), ", kernel=", kernel.describe(), ".");
  Tensor dx(input_shape, grad_output.dtype());
  if (dx.num_elements() == 0) return dx;
  if (grad_output.dtype() == DType::float64) {
    conv_backward_input_loops(d, grad_output.data<double>(), kernel.data<double>(),
                              dx.data<double>());
  } else {
    run_onednn(Pass::backward_data, d, grad_output.dtype(),
               {dx.raw_data(), kernel.raw_data(), nullptr, grad_output.raw_data()});
  }
  return dx;
}

Tensor conv2d_backward_kernel(const Tensor& grad_output, const Tensor& input,
                              const Shape& kernel_shape, const Conv2DOptions& options) {
  ConvDims d =
      conv_dims(input.shape(), kernel_shape, options, input.describe(), kernel_shape.to_string());
  check_dtypes("conv2d_backward_kernel", {&grad_output, &input});
  Shape expected{d.n, d.oh, d.ow, d.o};
  LOCKSTEP_CHECK(grad_output.shape() == expected,
                 "conv2d_backward_kernel: expected grad_output of shape ", expected.to_string(),
                 " (the conv2d output for input ", input.shape(), " and kernel ", kernel_shape,
                 "). Received: grad_output=", grad_output.describe(), ".");
  if (d.n == 0 || kernel_shape.num_elements() == 0) {
    return Tensor::zeros(kernel_shape, input.dtype());
  }
  Tensor dk(kernel_shape, input.dtype());
  if (input.dtype() == DType::float64) {
    conv_backward_kernel_loops(d, grad_output.data<double>(), input.data<double>(),
                               dk.data<double>());
  } else {
    run_onednn(Pass::backward_weights, d, input.dtype(),
               {input.raw_data(), dk.raw_data(), nullptr, grad_output.raw_data()});
  }
  return dk;
}

Tensor conv2d_backward_bias(const Tensor& grad_output) {
  LOCKSTEP_CHECK(grad_output.rank() == 4,
                 "conv2d_backward_bias: expected grad_output of rank 4 [batch, height, width, "
                 "channels]. Received: grad_output=",
                 grad_output.describe(), ".");
  check_dtypes("conv2d_backward_bias", {&grad_output});
  int64_t channels = grad_output.dim(3);
  int64_t rows = grad_output.num_elements() / std::max<int64_t>(channels, 1);
  thread_local std::vector<double> sum;
  sum.assign(static_cast<size_t>(channels), 0.0);
  Tensor db({channels}, grad_output.dtype());
  switch (grad_output.dtype()) {
    case DType::float64:
      sum_rows(grad_output.data<double>(), rows, channels, sum);
      std::copy(sum.begin(), sum.end(), db.data<double>());
      break;
    case DType::float32:
      sum_rows(grad_output.data<float>(), rows, channels, sum);
      for (int64_t c = 0; c < channels; ++c) db.data<float>()[c] = static_cast<float>(sum[c]);
      break;
    default:
      sum_rows(grad_output.data<bfloat16>(), rows, channels, sum);
      for (int64_t c = 0; c < channels; ++c)
        db.data<bfloat16>()[c] = bfloat16(static_cast<float>(sum[c]));
      break;
  }
  return db;
}

ConvReluGrad conv2d_relu_backward_bias(const Tensor& dy, const Tensor& y, bool with_bias) {
  if (dy.dtype() != DType::float32 || y.dtype() != DType::float32 || dy.rank() != 4 ||
      !(dy.shape() == y.shape())) {
    Tensor dz = relu_backward(dy, y);
    return {dz, with_bias ? conv2d_backward_bias(dz) : Tensor()};
  }
  ConvReluGrad g{Tensor(dy.shape(), DType::float32), Tensor()};
  if (!with_bias) {
    relu_grad_f32_into(dy.data<float>(), y.data<float>(), g.dz.data<float>(), dy.num_elements());
    return g;
  }
  const int64_t channels = dy.dim(3);
  const int64_t rows = dy.num_elements() / std::max<int64_t>(channels, 1);
  std::vector<double> sum(static_cast<size_t>(channels), 0.0);
  relu_grad_sum_rows_f32(dy.data<float>(), y.data<float>(), g.dz.data<float>(), rows, channels,
                         sum.data());
  g.dbias = Tensor({channels}, DType::float32);
  for (int64_t c = 0; c < channels; ++c) g.dbias.data<float>()[c] = static_cast<float>(sum[c]);
  return g;
}

}  // namespace lockstep::ops
