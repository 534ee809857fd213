#include "lockstep/ops/nn_conv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "lockstep/core/error.h"

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
  if (input.rank() != 4 || kernel.rank() != 4) {
    throw InvalidArgument(
        "conv2d: expected input of rank 4 [batch, height, width, in_channels] and kernel of rank 4 "
        "[kernel_height, kernel_width, in_channels, out_channels]." +
        received());
  }
  if (input[3] != kernel[2]) {
    throw InvalidArgument("conv2d: input channels (" + std::to_string(input[3]) +
                          ") must equal the kernel's in_channels (dimension 2, " +
                          std::to_string(kernel[2]) + ")." + received());
  }
  if (options.strides[0] <= 0 || options.strides[1] <= 0) {
    throw InvalidArgument("conv2d: strides must be positive. Received: strides=[" +
                          std::to_string(options.strides[0]) + ", " +
                          std::to_string(options.strides[1]) + "].");
  }
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
  if (mismatch || !is_floating(d)) {
    throw InvalidArgument(std::string(op) +
                          ": expected operands of one floating dtype (float32, bfloat16 or "
                          "float64). Received: " +
                          all + ".");
  }
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

// TODO(nn): switch to the shared engine/stream/cache of src/ops/onednn.h once it lands.
dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dt dnnl_type(DType d) {
  return d == DType::bfloat16 ? dt::bf16 : dt::f32;
}

enum class Pass : int64_t { forward, backward_data, backward_weights };

using ConvKey = std::array<int64_t, 18>;

ConvKey make_key(Pass pass, const ConvDims& d, DType dtype, bool bias) {
  return {static_cast<int64_t>(pass),
          static_cast<int64_t>(dtype),
          bias ? 1 : 0,
          d.n,
          d.h,
          d.w,
          d.c,
          d.kh,
          d.kw,
          d.o,
          d.sh,
          d.sw,
          d.pt,
          d.pb,
          d.pl,
          d.pr,
          0,
          0};
}

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    size_t h = 0;
    for (int64_t v : k) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

// Memory descriptors in the caller's layouts. oneDNN's logical dims are always N, C, H, W for
// data and O, I, H, W for weights; the format tag says how they sit in memory.
struct ConvMds {
  dnnl::memory::desc src, weights, bias, dst, weights_any;
  dnnl::memory::dims strides, pad_l, pad_r;
};

ConvMds conv_mds(const ConvDims& d, DType dtype) {
  dt t = dnnl_type(dtype);
  return {dnnl::memory::desc({d.n, d.c, d.h, d.w}, t, tag::nhwc),
          dnnl::memory::desc({d.o, d.c, d.kh, d.kw}, t, tag::hwio),
          dnnl::memory::desc({d.o}, t, tag::x),
          dnnl::memory::desc({d.n, d.o, d.oh, d.ow}, t, tag::nhwc),
          dnnl::memory::desc({d.o, d.c, d.kh, d.kw}, t, tag::any),
          {d.sh, d.sw},
          {d.pt, d.pl},
          {d.pb, d.pr}};
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvMds& m, bool bias) {
  auto d = bias ? dnnl::convolution_forward::desc(
                      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, m.src,
                      m.weights_any, m.bias, m.dst, m.strides, m.pad_l, m.pad_r)
                : dnnl::convolution_forward::desc(
                      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, m.src,
                      m.weights_any, m.dst, m.strides, m.pad_l, m.pad_r);
  return {d, cpu_engine()};
}

// One cached primitive with its argument map. The map holds memory handles whose data pointers
// are swapped per call, so a steady-state call allocates nothing.
struct ConvPrimitive {
  dnnl::primitive main;
  std::unordered_map<int, dnnl::memory> args;
  dnnl::memory user_weights;  // the caller's [KH, KW, I, O] buffer
  dnnl::memory weights;       // the layout the primitive wants (== user_weights when equal)
  std::optional<dnnl::reorder> weights_reorder;  // user -> primitive, or primitive -> user
  std::unordered_map<int, dnnl::memory> reorder_args;
};

ConvPrimitive& cached_primitive(Pass pass, const ConvDims& d, DType dtype, bool bias) {
  thread_local std::unordered_map<ConvKey, std::unique_ptr<ConvPrimitive>, ConvKeyHash> cache;
  auto& slot = cache[make_key(pass, d, dtype, bias)];
  if (slot) return *slot;

  auto p = std::make_unique<ConvPrimitive>();
  ConvMds m = conv_mds(d, dtype);
  dnnl::engine& eng = cpu_engine();
  auto fwd = forward_pd(m, bias);
  dnnl::memory::desc wanted_weights;
  auto empty = [&](const dnnl::memory::desc& md) { return dnnl::memory(md, eng, nullptr); };
  if (pass == Pass::forward) {
    p->main = dnnl::convolution_forward(fwd);
    wanted_weights = fwd.weights_desc();
    p->args = {{DNNL_ARG_SRC, empty(m.src)}, {DNNL_ARG_DST, empty(m.dst)}};
    if (bias) p->args[DNNL_ARG_BIAS] = empty(m.bias);
  } else if (pass == Pass::backward_data) {
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, m.src,
                                             m.weights_any, m.dst, m.strides, m.pad_l, m.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(bd, eng, fwd);
    p->main = dnnl::convolution_backward_data(pd);
    wanted_weights = pd.weights_desc();
    p->args = {{DNNL_ARG_DIFF_SRC, empty(m.src)}, {DNNL_ARG_DIFF_DST, empty(m.dst)}};
  } else {
    dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, m.src,
                                                m.weights_any, m.dst, m.strides, m.pad_l, m.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(bd, eng, fwd);
    p->main = dnnl::convolution_backward_weights(pd);
    wanted_weights = pd.diff_weights_desc();
    p->args = {{DNNL_ARG_SRC, empty(m.src)}, {DNNL_ARG_DIFF_DST, empty(m.dst)}};
  }
  p->user_weights = empty(m.weights);
  if (wanted_weights == m.weights) {
    p->weights = p->user_weights;
  } else {
    // Allocated once here and owned by the memory object: the blocked copy of the weights.
    p->weights = dnnl::memory(wanted_weights, eng);
    if (pass == Pass::backward_weights) {
      p->weights_reorder.emplace(p->weights, p->user_weights);
      p->reorder_args = {{DNNL_ARG_FROM, p->weights}, {DNNL_ARG_TO, p->user_weights}};
    } else {
      p->weights_reorder.emplace(p->user_weights, p->weights);
      p->reorder_args = {{DNNL_ARG_FROM, p->user_weights}, {DNNL_ARG_TO, p->weights}};
    }
  }
  p->args[pass == Pass::backward_weights ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS] = p->weights;
  slot = std::move(p);
  return *slot;
}

// Pointers by oneDNN role: forward reads src/weights/bias and writes dst; backward_data reads
// dst (diff_dst) and weights and writes src (diff_src); backward_weights reads src and dst
// (diff_dst) and writes weights (diff_weights).
struct ConvBuffers {
  void* src = nullptr;
  void* weights = nullptr;
  void* bias = nullptr;
  void* dst = nullptr;
};

void run_onednn(Pass pass, const ConvDims& d, DType dtype, const ConvBuffers& b) {
  ConvPrimitive& p = cached_primitive(pass, d, dtype, b.bias != nullptr);
  dnnl::stream& s = thread_stream();
  bool backward = pass != Pass::forward;
  p.user_weights.set_data_handle(b.weights);
  p.args[pass == Pass::backward_data ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC].set_data_handle(b.src);
  p.args[backward ? DNNL_ARG_DIFF_DST : DNNL_ARG_DST].set_data_handle(b.dst);
  if (b.bias) p.args[DNNL_ARG_BIAS].set_data_handle(b.bias);
  bool weights_out = pass == Pass::backward_weights;
  if (p.weights_reorder && !weights_out) p.weights_reorder->execute(s, p.reorder_args);
  p.main.execute(s, p.args);
  if (p.weights_reorder && weights_out) p.weights_reorder->execute(s, p.reorder_args);
  s.wait();
}

template <typename T>
void sum_rows(const T* p, int64_t rows, int64_t cols, std::vector<double>& sum) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      sum[static_cast<size_t>(c)] += static_cast<double>(static_cast<float>(p[r * cols + c]));
    }
  }
}

template <>
void sum_rows<double>(const double* p, int64_t rows, int64_t cols, std::vector<double>& sum) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) sum[static_cast<size_t>(c)] += p[r * cols + c];
  }
}

}  // namespace

Shape conv2d_output_shape(const Shape& input, const Shape& kernel, const Conv2DOptions& options) {
  ConvDims d = conv_dims(input, kernel, options, input.to_string(), kernel.to_string());
  return {d.n, d.oh, d.ow, d.o};
}

Tensor conv2d(const Tensor& input, const Tensor& kernel, const Tensor& bias,
              const Conv2DOptions& options) {
  ConvDims d =
      conv_dims(input.shape(), kernel.shape(), options, input.describe(), kernel.describe());
  check_dtypes("conv2d", {&input, &kernel, &bias});
  if (bias.defined() && !(bias.rank() == 1 && bias.dim(0) == d.o)) {
    throw InvalidArgument("conv2d: expected bias of shape [" + std::to_string(d.o) +
                          "] (the kernel's out_channels). Received: bias=" + bias.describe() +
                          ", kernel=" + kernel.describe() + ".");
  }
  Tensor out({d.n, d.oh, d.ow, d.o}, input.dtype());
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

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& kernel,
                             const Shape& input_shape, const Conv2DOptions& options) {
  ConvDims d =
      conv_dims(input_shape, kernel.shape(), options, input_shape.to_string(), kernel.describe());
  check_dtypes("conv2d_backward_input", {&grad_output, &kernel});
  Shape expected{d.n, d.oh, d.ow, d.o};
  if (!(grad_output.shape() == expected)) {
    throw InvalidArgument("conv2d_backward_input: expected grad_output of shape " +
                          expected.to_string() + " (the conv2d output for input " +
                          input_shape.to_string() + "). Received: grad_output=" +
                          grad_output.describe() + ", kernel=" + kernel.describe() + ".");
  }
  Tensor dx(input_shape, grad_output.dtype());
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
  if (!(grad_output.shape() == expected)) {
    throw InvalidArgument("conv2d_backward_kernel: expected grad_output of shape " +
                          expected.to_string() + " (the conv2d output for input " +
                          input.shape().to_string() + " and kernel " + kernel_shape.to_string() +
                          "). Received: grad_output=" + grad_output.describe() + ".");
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
  if (grad_output.rank() != 4) {
    throw InvalidArgument(
        "conv2d_backward_bias: expected grad_output of rank 4 [batch, height, width, channels]. "
        "Received: grad_output=" +
        grad_output.describe() + ".");
  }
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

}  // namespace lockstep::ops
