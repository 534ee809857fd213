#include "lockstep/ops/linear.h"
#include "core/cpu_dispatch.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/random.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/ops/matmul.h"
#include "lockstep/ops/shape_ops.h"

#include "gelu_kernels.h"
#include "internal.h"
#include "kernel_util.h"
#include "onednn.h"
#include "paired_kernel.h"

namespace lockstep::ops {
namespace {

void check_linear(const Tensor& x, const Tensor& kernel, const Tensor& bias, const char* op) {
  detail::check_floating(x, op, "x");
  detail::check_floating(kernel, op, "kernel");
  // A bfloat16 x may meet a float32 kernel holding bfloat16 values (round_to_bfloat16): the
  // mixed_bfloat16 path of machines whose bfloat16 matmuls compute in float32.
  if (!(x.dtype() == DType::bfloat16 && kernel.dtype() == DType::float32)) {
    detail::check_same_dtype(x, kernel, op);
  }
  LOCKSTEP_CHECK(x.rank() == 2 && kernel.rank() == 2 && x.dim(1) == kernel.dim(0), op,
                 ": expected x [batch, in] and kernel [in, out]. Received: x ", x.describe(),
                 " and kernel ", kernel.describe(), ".");
  if (bias.defined()) {
    bool dtype_ok = bias.dtype() == kernel.dtype() ||
                    (kernel.dtype() == DType::bfloat16 && bias.dtype() == DType::float32) ||
                    (x.dtype() == DType::bfloat16 && bias.dtype() == DType::float32);
    const Shape bias_shape{kernel.dim(1)};
    LOCKSTEP_CHECK(bias.shape() == bias_shape && dtype_ok, op, ": expected bias of shape ",
                   bias_shape, " for kernel ", kernel.describe(), ". Received: bias ",
                   bias.describe(), ".");
  }
}

// The float32 form's operands: float32 x and kernel (and bias).
void check_float32_linear(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                          const char* op) {
  detail::check_float32(x, op, "x");
  detail::check_float32(kernel, op, "kernel");
  check_linear(x, kernel, bias, op);
}

void check_buffer(const Tensor& t, const Shape& shape, DType dtype, const char* op,
                  const char* name) {
  bool dtype_ok = t.dtype() == dtype || (dtype == DType::bfloat16 && t.dtype() == DType::float32);
  LOCKSTEP_CHECK(t.shape() == shape && dtype_ok, op, ": expected ", name, " of shape ", shape,
                 " and dtype ", dtype, ". Received: ", t.describe(), ".");
}

// oneDNN's relu (fused as a post-op or not) computes max(x, 0), which turns NaN into 0: a NaN
// input would then vanish from the forward pass while poisoning the weights through the gradient,
// and training would die silently (TerminateOnNaN never fires). TensorFlow, PyTorch and JAX keep
// NaN, so relu is applied here, after the matmul + bias, by a loop that keeps it; it is one pass
// over the [batch, units] output, small next to the matmul.
template <typename T>
void relu_keeping_nan(T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = static_cast<float>(y[i]);
    if (v < 0.0f) y[i] = T(0.0f);
  }
}

// float32: a branch-free select the compiler vectorises (a conditional store mispredicts on half
// the elements); same results (NaN < 0 and -0 < 0 are false).
template <>
void relu_keeping_nan<float>(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

// bfloat16: the same on the bits, branch-free so it vectorises: a value is < 0 when its sign bit
// is set and it is neither -0 (magnitude 0) nor NaN (magnitude above infinity's 0x7f80).
template <>
void relu_keeping_nan<bfloat16>(bfloat16* y, int64_t n) {
  uint16_t* b = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t v = b[i], mag = v & 0x7fffu;
    const bool negative = (v & 0x8000u) != 0 && mag != 0 && mag <= 0x7f80u;
    b[i] = negative ? uint16_t{0} : v;
  }
}

// float32 -> bfloat16 rounding (bfloat16::round_from_float, branch-free) and relu_keeping_nan on
// the rounded bits, in one pass: the bfloat16 output of a relu layer whose matmul computed in
// float32. Bit for bit float_to_bfloat16 followed by relu_keeping_nan<bfloat16>.
LOCKSTEP_DISPATCHED(void, round_relu_into, (const float* src, uint16_t* dst, int64_t n),
                    (src, dst, n)) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    const uint16_t v = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
    const uint16_t mag = v & 0x7fffu;
    const bool negative = (v & 0x8000u) != 0 && mag != 0 && mag <= 0x7f80u;
    dst[i] = negative ? uint16_t{0} : v;
  }
}

// dz = float32(dy) * (float32(y) > 0 ? 1 : 0) from bfloat16 dy and y, written as float32: relu's
// gradient widened in the same pass (exact: dy * 1, a signed zero, or NaN, as the bfloat16 loop
// gives before widening).
LOCKSTEP_DISPATCHED(void, relu_grad_widen,
                    (const uint16_t* dy, const uint16_t* y, float* dz, int64_t n), (dy, y, dz, n)) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t du = static_cast<uint32_t>(dy[i]) << 16, yu = static_cast<uint32_t>(y[i]) << 16;
    float d, v;
    std::memcpy(&d, &du, sizeof d);
    std::memcpy(&v, &yu, sizeof v);
    dz[i] = d * detail::positive_mask(v);
  }
}

// A run that wants more safe points (a backup run, task_wants_fine_checks: the run it backs up
// usually commits long before a whole forward matmul, one oneDNN call with no safe point in it,
// ends; see docs/performance.md, "Measured design choices") computes a long float32 forward matmul
// in row blocks, checking for cancellation between them — only for a shape whose row blocks give
// the bits of the whole call, so that a backup that wins commits what the first run would have.
// Each shape is checked once, on random operands: oneDNN may pick its kernel by the row count. The
// first check comes before the first block: the twin may have committed while this run got here.
constexpr int kFineBlocks = 8;
// Below this a call ends about as soon as a check would stop it (docs/performance.md, "Measured
// design choices").
constexpr int64_t kFineMinMacs = int64_t{1} << 21;

int64_t fine_block_begin(int64_t rows, int block) {
  if (block == kFineBlocks) return rows;
  return (rows * block / kFineBlocks) & ~int64_t{15};
}

// f(r0, r1) over row ranges: `block` rows each, or (block 0) the kFineBlocks ranges above.
template <typename F>
void for_row_blocks(int64_t rows, int64_t block, F f) {
  if (block > 0) {
    for (int64_t r0 = 0; r0 < rows; r0 += block) f(r0, std::min(rows, r0 + block));
    return;
  }
  for (int b = 0; b < kFineBlocks; ++b) {
    const int64_t r0 = fine_block_begin(rows, b), r1 = fine_block_begin(rows, b + 1);
    if (r1 > r0) f(r0, r1);
  }
}

// x · kernel + bias into y, one oneDNN call per block of rows.
void gemm_in_row_blocks(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t block,
                        const Tensor& y) {
  for_row_blocks(x.dim(0), block, [&](int64_t r0, int64_t r1) {
    detail::gemm_into(x.slice(r0, r1), kernel, bias, false, false, FusedActivation::none,
                      y.slice(r0, r1));
  });
}

// The answers of row_blocks_give_the_same_bits, by shape and block.
using RowBlockKey = std::tuple<int64_t, int64_t, int64_t, bool, int64_t>;
std::mutex row_blocks_mu;
std::map<RowBlockKey, bool> row_blocks_known;

// Whether a float32 x [m, k] · kernel [k, n] (+ bias) computed in row blocks gives the bits of the
// whole call. Each shape is checked once, on random operands: oneDNN may pick its kernel by the
// row count (with a transposed kernel, as dx = dz · kernelᵀ takes it, the AVX2 kernels' blocks
// did not give the whole call's bits at any block size tried).
bool row_blocks_give_the_same_bits(int64_t m, int64_t k, int64_t n, bool with_bias, int64_t block) {
  const auto key = std::make_tuple(m, k, n, with_bias, block);
  {
    std::lock_guard lock(row_blocks_mu);
    if (auto it = row_blocks_known.find(key); it != row_blocks_known.end()) return it->second;
  }
  Generator g(/*seed=*/1);
  const Tensor x = g.uniform({m, k}, -1.0, 1.0), w = g.uniform({k, n}, -1.0, 1.0);
  const Tensor bias = with_bias ? g.uniform({n}, -1.0, 1.0) : Tensor();
  Tensor whole({m, n}, DType::float32), blocks({m, n}, DType::float32);
  detail::gemm_into(x, w, bias, false, false, FusedActivation::none, whole);
  gemm_in_row_blocks(x, w, bias, block, blocks);
  const bool same = std::memcmp(whole.data<float>(), blocks.data<float>(),
                                static_cast<size_t>(m * n) * sizeof(float)) == 0;
  std::lock_guard lock(row_blocks_mu);
  row_blocks_known.emplace(key, same);
  return same;
}

// Rows per block of a matmul whose blocks are finished while they are in the core's L2: about
// `outputs` float32 outputs of n columns.
int64_t block_rows(int64_t outputs, int64_t n) {
  return std::max<int64_t>(16, (outputs / std::max<int64_t>(1, n)) & ~int64_t{15});
}

// x · kernel + bias into y a block of `block` rows at a time, each followed by finish(r0, r1)
// while it is in the core's L2 — where the blocks give the bits of the whole call; else the whole
// call and finish(0, m).
template <typename F>
void gemm_finishing_blocks(const Tensor& x, const Tensor& kernel, const Tensor& bias, int64_t block,
                           const Tensor& y, F finish) {
  const int64_t m = x.dim(0);
  if (block < m &&
      row_blocks_give_the_same_bits(m, x.dim(1), kernel.dim(1), bias.defined(), block)) {
    for_row_blocks(m, block, [&](int64_t r0, int64_t r1) {
      detail::gemm_into(x.slice(r0, r1), kernel, bias, false, false, FusedActivation::none,
                        y.slice(r0, r1));
      finish(r0, r1);
    });
    return;
  }
  detail::gemm_into(x, kernel, bias, false, false, FusedActivation::none, y);
  finish(0, m);
}

}  // namespace

bool detail::row_blocks_give_the_same_bits(int64_t m, int64_t k, int64_t n, bool with_bias) {
  return ::lockstep::ops::row_blocks_give_the_same_bits(m, k, n, with_bias, 0);
}

bool detail::row_blocks_checked(int64_t m, int64_t k, int64_t n, bool with_bias) {
  std::lock_guard lock(row_blocks_mu);
  return row_blocks_known.count(std::make_tuple(m, k, n, with_bias, int64_t{0})) != 0;
}

namespace {

// Whether a backup run would compute this forward matmul in row blocks (task_wants_fine_checks).
bool row_blocks_suit(const Tensor& x, const Tensor& kernel, FusedActivation activation,
                     const Tensor& y) {
  return x.dtype() == DType::float32 && kernel.dtype() == DType::float32 &&
         y.dtype() == DType::float32 &&
         (activation == FusedActivation::none || activation == FusedActivation::relu) &&
         x.dim(0) >= 64 && x.dim(0) * x.dim(1) * kernel.dim(1) >= kFineMinMacs;
}

bool wants_row_blocks(const Tensor& x, const Tensor& kernel, bool with_bias,
                      FusedActivation activation, const Tensor& y) {
  if (!row_blocks_suit(x, kernel, activation, y)) return false;
  if (task_wants_fine_checks()) return true;
  // The check of a shape's row blocks (oneDNN primitives for the blocks and the whole call, made
  // on first use, then both run) takes milliseconds: the task's first run settles it, so that a
  // backup run — there to end a step sooner — does not pay it while the step waits on it.
  if (in_cancellable_task()) {
    // Shapes this thread has seen settled, so that the steps after the first skip the shared map.
    thread_local std::vector<std::tuple<int64_t, int64_t, int64_t, bool>> settled;
    const auto key = std::make_tuple(x.dim(0), x.dim(1), kernel.dim(1), with_bias);
    if (std::find(settled.begin(), settled.end(), key) == settled.end()) {
      detail::row_blocks_give_the_same_bits(x.dim(0), x.dim(1), kernel.dim(1), with_bias);
      settled.push_back(key);
    }
  }
  return false;
}

void gemm_with_activation(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                          FusedActivation activation, const Tensor& y) {
  if (wants_row_blocks(x, kernel, bias.defined(), activation, y) &&
      detail::row_blocks_give_the_same_bits(x.dim(0), x.dim(1), kernel.dim(1), bias.defined())) {
    for_row_blocks(x.dim(0), 0, [&](int64_t r0, int64_t r1) {
      check_task_cancelled();
      detail::gemm_into(x.slice(r0, r1), kernel, bias, false, false, FusedActivation::none,
                        y.slice(r0, r1));
    });
    if (activation == FusedActivation::relu) relu_keeping_nan(y.data<float>(), y.num_elements());
    return;
  }
  if (activation == FusedActivation::relu && y.dtype() == DType::bfloat16 &&
      (kernel.dtype() == DType::float32 ||
       bf16_matmul_computes_in_f32(x.dim(0), x.dim(1), kernel.dim(1)))) {
    Tensor y32(y.shape(), DType::float32);
    detail::gemm_into(x, kernel, bias, false, false, FusedActivation::none, y32);
    round_relu_into(y32.data<float>(), reinterpret_cast<uint16_t*>(y.data<bfloat16>()),
                    y.num_elements());
    return;
  }
  if (activation != FusedActivation::relu || y.dtype() == DType::float64) {
    detail::gemm_into(x, kernel, bias, false, false, activation, y);
    return;
  }
  detail::gemm_into(x, kernel, bias, false, false, FusedActivation::none, y);
  if (y.dtype() == DType::float32) {
    relu_keeping_nan(y.data<float>(), y.num_elements());
  } else {
    relu_keeping_nan(y.data<bfloat16>(), y.num_elements());
  }
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                      FusedActivation activation) {
  check_linear(x, kernel, bias, "linear");
  Tensor y({x.dim(0), kernel.dim(1)}, x.dtype());
  gemm_with_activation(x, kernel, bias, activation, y);
  return y;
}

void linear_into(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                 FusedActivation activation, const Tensor& y) {
  check_linear(x, kernel, bias, "linear_into");
  detail::check_defined(y, "linear_into", "y");
  check_buffer(y, {x.dim(0), kernel.dim(1)}, x.dtype(), "linear_into", "y");
  gemm_with_activation(x, kernel, bias, activation, y);
}

void linear_paired_into(const Tensor& x, const Tensor& kernel, const PairedRowsLayout& layout,
                        const Tensor& bias, FusedActivation activation, const Tensor& y) {
  const char* op = "linear_paired_into";
  LOCKSTEP_CHECK(x.dtype() == DType::bfloat16 && x.rank() == 2 && x.dim(1) == layout.rows &&
                     kernel.dtype() == DType::bfloat16 && kernel.shape() == Shape{layout.size},
                 op, ": expected a bfloat16 x [batch, ", layout.rows, "] and a bfloat16 kernel of ",
                 layout.size, " elements in its paired layout. Received: x ", x.describe(),
                 " and kernel ", kernel.describe(), ".");
  LOCKSTEP_CHECK(
      !bias.defined() || (bias.shape() == Shape{layout.cols} &&
                          (bias.dtype() == DType::bfloat16 || bias.dtype() == DType::float32)),
      op, ": expected bias of shape [", layout.cols, "]. Received: ", bias.describe(), ".");
  LOCKSTEP_CHECK(activation != FusedActivation::gelu, op,
                 ": gelu is not fused here (its gradient needs the pre-activation).");
  detail::check_defined(y, op, "y");
  check_buffer(y, {x.dim(0), layout.cols}, DType::bfloat16, op, "y");
  LOCKSTEP_CHECK(y.dtype() == DType::bfloat16, op,
                 ": expected a bfloat16 y. Received: ", y.describe(), ".");
  const int64_t m = x.dim(0), k = layout.rows, n = layout.cols;
  // relu keeps NaN (relu_keeping_nan), as gemm_with_activation applies it.
  const FusedActivation fused =
      activation == FusedActivation::relu ? FusedActivation::none : activation;
  onednn::Key key("matmul_paired");
  key.add(m).add(k).add(n).add(static_cast<int>(fused));
  key.add(bias.defined() ? static_cast<int64_t>(bias.dtype()) : int64_t{-1});
  key.add(static_cast<int64_t>(reinterpret_cast<uintptr_t>(&layout)));
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc x_md = onednn::plain_desc(dims{m, k}, DType::bfloat16);
    const dnnl::memory::desc& w_md = detail::paired_kernel_desc(layout);
    const dnnl::memory::desc y_md = onednn::plain_desc(dims{m, n}, DType::bfloat16);
    dnnl::primitive_attr attr;
    if (fused != FusedActivation::none) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, detail::onednn_eltwise(fused), 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    if (bias.defined()) {
      const dnnl::memory::desc b_md = onednn::plain_desc(dims{1, n}, bias.dtype());
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_md, w_md, b_md, y_md), attr,
                                      onednn::engine());
      return onednn::Primitive(dnnl::matmul(pd), {{DNNL_ARG_SRC, x_md},
                                                  {DNNL_ARG_WEIGHTS, w_md},
                                                  {DNNL_ARG_BIAS, b_md},
                                                  {DNNL_ARG_DST, y_md}});
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_md, w_md, y_md), attr, onednn::engine());
    return onednn::Primitive(
        dnnl::matmul(pd), {{DNNL_ARG_SRC, x_md}, {DNNL_ARG_WEIGHTS, w_md}, {DNNL_ARG_DST, y_md}});
  });
  if (bias.defined()) {
    prim.execute({{DNNL_ARG_SRC, x.raw_data()},
                  {DNNL_ARG_WEIGHTS, kernel.raw_data()},
                  {DNNL_ARG_BIAS, bias.raw_data()},
                  {DNNL_ARG_DST, y.raw_data()}});
  } else {
    prim.execute({{DNNL_ARG_SRC, x.raw_data()},
                  {DNNL_ARG_WEIGHTS, kernel.raw_data()},
                  {DNNL_ARG_DST, y.raw_data()}});
  }
  if (activation == FusedActivation::relu) relu_keeping_nan(y.data<bfloat16>(), y.num_elements());
}

Tensor linear_to_bfloat16_values_forward(const Tensor& x, const Tensor& kernel,
                                         const Tensor& bias) {
  check_float32_linear(x, kernel, bias, "linear_to_bfloat16_values");
  const int64_t n = kernel.dim(1);
  Tensor y({x.dim(0), n}, DType::float32);
  float* out = y.data<float>();
  gemm_finishing_blocks(x, kernel, bias, block_rows(64 * 1024, n), y, [&](int64_t r0, int64_t r1) {
    round_to_bfloat16_values(out + r0 * n, out + r0 * n, static_cast<size_t>((r1 - r0) * n));
  });
  y.mark_bfloat16_values();
  return y;
}

LinearGeluResult linear_gelu_to_bfloat16_values_forward(const Tensor& x, const Tensor& kernel,
                                                        const Tensor& bias) {
  check_float32_linear(x, kernel, bias, "linear_gelu_to_bfloat16_values");
  const int64_t m = x.dim(0), n = kernel.dim(1);
  LinearGeluResult r{Tensor({m, n}, DType::float32), Tensor({m, n}, DType::float32)};
  const float* z = r.z.data<float>();
  float* y = r.y.data<float>();
  // Smaller blocks: a block of z and of y together stay within even a small L2.
  gemm_finishing_blocks(
      x, kernel, bias, block_rows(32 * 1024, n), r.z, [&](int64_t r0, int64_t r1) {
        detail::gelu_to_bfloat16_values_into(z + r0 * n, y + r0 * n, (r1 - r0) * n);
      });
  r.y.mark_bfloat16_values();
  return r;
}

void linear_backward_into(const Tensor& dy, const Tensor& x, const Tensor& kernel, const Tensor& y,
                          FusedActivation activation, const Tensor& dx, const Tensor& dkernel,
                          const Tensor& dbias, const Tensor& pre_activation) {
  const char* op = "linear_backward";
  check_linear(x, kernel, Tensor(), op);
  Shape out_shape{x.dim(0), kernel.dim(1)};
  detail::check_defined(dy, op, "dy");
  // dy is float32 for a bfloat16 x multiplied by a float32 kernel into a float32 y (a float32
  // layer fed bfloat16 activations).
  const bool f32_out_of_bf16 = x.dtype() == DType::bfloat16 && kernel.dtype() == DType::float32 &&
                               dy.dtype() == DType::float32;
  LOCKSTEP_CHECK(dy.shape() == out_shape && (dy.dtype() == x.dtype() || f32_out_of_bf16), op,
                 ": expected dy of shape ", out_shape, " and dtype ", x.dtype(), " for x ",
                 x.describe(), " and kernel ", kernel.describe(), ". Received: ", dy.describe(),
                 ".");
  const Tensor& saved = activation == FusedActivation::gelu ? pre_activation : y;
  if (activation != FusedActivation::none) {
    LOCKSTEP_CHECK(saved.defined(), op, ": activation ", activation_name(activation), " needs ",
                   activation == FusedActivation::gelu ? "pre_activation" : "y",
                   ". Received: an undefined Tensor.");
    LOCKSTEP_CHECK(saved.shape() == out_shape && saved.dtype() == dy.dtype(), op,
                   ": expected the saved activation of shape ", out_shape, ", like dy ",
                   dy.describe(), ". Received: ", saved.describe(), ".");
  }
  if (dx.defined()) check_buffer(dx, x.shape(), x.dtype(), op, "dx");
  // A float32 kernel's gradient may be asked for rounded to bfloat16 (a kernel multiplied as
  // bfloat16 values: autodiff's linear).
  if (dkernel.defined() &&
      !(kernel.dtype() == DType::float32 && dkernel.dtype() == DType::bfloat16 &&
        dkernel.shape() == kernel.shape())) {
    check_buffer(dkernel, kernel.shape(), kernel.dtype(), op, "dkernel");
  }
  if (dbias.defined()) check_buffer(dbias, Shape{kernel.dim(1)}, kernel.dtype(), op, "dbias");

  Tensor dz = dy;
  // The forward's choice for this layer's shape (bf16_matmul_computes_in_f32).
  const bool bf16_in_f32 = dy.dtype() == DType::bfloat16 &&
                           (kernel.dtype() == DType::float32 ||
                            bf16_matmul_computes_in_f32(x.dim(0), x.dim(1), kernel.dim(1)));
  bool dbias_done = false;
  if (activation == FusedActivation::relu && dbias.defined() && dy.dtype() != DType::float64) {
    // relu's gradient and the bias gradient in one pass over dz (same bits as the two passes).
    dz = Tensor(dy.shape(), bf16_in_f32 ? DType::float32 : dy.dtype());
    dbias_done = detail::relu_bias_grad_into(dy, saved, dz, dbias);
    if (!dbias_done) dz = dy;
  }
  if (!dbias_done && activation == FusedActivation::relu && bf16_in_f32) {
    dz = Tensor(dy.shape(), DType::float32);
    relu_grad_widen(reinterpret_cast<const uint16_t*>(dy.data<bfloat16>()),
                    reinterpret_cast<const uint16_t*>(saved.data<bfloat16>()), dz.data<float>(),
                    dy.num_elements());
  } else if (!dbias_done && activation != FusedActivation::none) {
    dz = Tensor(dy.shape(), dy.dtype());
    detail::activation_grad_into(activation, dy, saved, dz);
  }
  // bfloat16 dz computed in float32 (no AMX, or a float32 kernel of bfloat16 values): widen it
  // once for both matmuls instead of once in each (same values).
  if (dz.dtype() == DType::bfloat16 && dkernel.defined() && dx.defined() && bf16_in_f32) {
    dz = detail::widen_to_f32(dz);
  }
  if (dkernel.defined()) {
    // A dense transpose of x written beside it (a Rescaling's output, Tensor::transposed_copy)
    // spares oneDNN's bfloat16 kernels their copy of the strided xᵀ; the same bits.
    const Tensor xt = !bf16_in_f32 && x.dtype() == DType::bfloat16 ? x.transposed_copy() : Tensor();
    if (xt.defined()) {
      detail::gemm_into(xt, dz, Tensor(), false, false, FusedActivation::none, dkernel);
    } else {
      detail::gemm_into(x, dz, Tensor(), true, false, FusedActivation::none, dkernel);  // xᵀ·dz
    }
  }
  if (dbias.defined() && !dbias_done) detail::column_sums_into(dz, dbias);
  if (dx.defined()) {
    detail::gemm_into(dz, kernel, Tensor(), false, true, FusedActivation::none, dx);  // dz·kernelᵀ
  }
}

LinearGrads linear_backward(const Tensor& dy, const Tensor& x, const Tensor& kernel,
                            const Tensor& y, FusedActivation activation, bool need_dx,
                            bool need_dkernel, bool need_dbias, const Tensor& pre_activation) {
  LinearGrads g;
  if (x.defined() && kernel.defined() && x.rank() == 2 && kernel.rank() == 2) {
    if (need_dx) g.dx = Tensor(x.shape(), x.dtype());
    if (need_dkernel) g.dkernel = Tensor(kernel.shape(), kernel.dtype());
    if (need_dbias) g.dbias = Tensor(Shape{kernel.dim(1)}, kernel.dtype());
  }
  linear_backward_into(dy, x, kernel, y, activation, g.dx, g.dkernel, g.dbias, pre_activation);
  return g;
}

}  // namespace lockstep::ops
