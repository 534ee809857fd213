#include "lockstep/ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/shared_blocks.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/ops/shape_ops.h"

#include "internal.h"
#include "kernel_util.h"
#include "onednn.h"
#include "paired_kernel.h"

namespace lockstep::ops {
namespace {

struct MatmulDims {
  int64_t m, k, n;
};

void gemm_bf16_via_f32(const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
                       FusedActivation act, const Tensor& out);
void gemm_onednn(const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
                 FusedActivation act, const Tensor& out);

std::string flags(bool ta, bool tb) {
  return std::string(" (transpose_a=") + (ta ? "true" : "false") +
         ", transpose_b=" + (tb ? "true" : "false") + ")";
}

MatmulDims check_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, const char* op) {
  detail::check_floating(a, op, "a");
  detail::check_floating(b, op, "b");
  detail::check_same_dtype(a, b, op);
  LOCKSTEP_CHECK(a.rank() == 2 && b.rank() == 2, op,
                 ": expected rank-2 operands. Received: ", a.describe(), " and ", b.describe(),
                 ".");
  MatmulDims d{ta ? a.dim(1) : a.dim(0), ta ? a.dim(0) : a.dim(1), tb ? b.dim(0) : b.dim(1)};
  int64_t kb = tb ? b.dim(1) : b.dim(0);
  LOCKSTEP_CHECK(d.k == kb, op, ": shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied",
                 flags(ta, tb), ": op(a) has ", d.k, " columns, op(b) has ", kb, " rows.");
  return d;
}

void check_out(const Tensor& out, const Tensor& a, int64_t m, int64_t n, const char* op) {
  detail::check_defined(out, op, "out");
  bool dtype_ok =
      out.dtype() == a.dtype() || (a.dtype() == DType::bfloat16 && out.dtype() == DType::float32);
  const Shape expected{m, n};
  LOCKSTEP_CHECK(out.shape() == expected && dtype_ok, op, ": expected out of shape ", expected,
                 " and dtype ", a.dtype(), ". Received: ", out.describe(), ".");
}

double apply_activation(FusedActivation act, double z) {
  switch (act) {
    case FusedActivation::relu:
      return z > 0 ? z : 0.0;
    case FusedActivation::sigmoid:
      return 1.0 / (1.0 + std::exp(-z));
    case FusedActivation::tanh:
      return std::tanh(z);
    case FusedActivation::gelu:
      return 0.5 * z * (1.0 + std::erf(z * M_SQRT1_2));
    case FusedActivation::none:
      break;
  }
  return z;
}

void gemm_f64(const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
              FusedActivation act, const Tensor& out) {
  const int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  const double* A = a.data<double>();
  const double* B = b.data<double>();
  double* Y = out.data<double>();
  const int64_t lda = a.dim(1), ldb = b.dim(1);
  for (int64_t i = 0; i < m; ++i) {
    double* yrow = Y + i * n;
    for (int64_t j = 0; j < n; ++j) yrow[j] = 0.0;
    for (int64_t p = 0; p < k; ++p) {
      double av = ta ? A[p * lda + i] : A[i * lda + p];
      if (!tb) {
        const double* brow = B + p * ldb;
        for (int64_t j = 0; j < n; ++j) yrow[j] += av * brow[j];
      } else {
        for (int64_t j = 0; j < n; ++j) yrow[j] += av * B[j * ldb + p];
      }
    }
    if (bias.defined()) {
      const double* bv = bias.data<double>();
      for (int64_t j = 0; j < n; ++j) yrow[j] += bv[j];
    }
    if (act != FusedActivation::none) {
      for (int64_t j = 0; j < n; ++j) yrow[j] = apply_activation(act, yrow[j]);
    }
  }
}

// A float32 view of a bfloat16 operand (widened), or the float32 operand itself.
Tensor as_f32(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::float32) return t;
  if (t.dtype() != DType::bfloat16) return ops::cast_forward(t, DType::float32);
  // Exact (the top 16 bits); a vectorised loop, without a oneDNN reorder's dispatch per call.
  Tensor w(t.shape(), DType::float32);
  bfloat16_to_float(t.data<bfloat16>(), w.data<float>(), static_cast<size_t>(t.num_elements()));
  return w;
}

}  // namespace

namespace detail {
dnnl::algorithm onednn_eltwise(FusedActivation act) {
  switch (act) {
    case FusedActivation::relu:
      return dnnl::algorithm::eltwise_relu;
    case FusedActivation::sigmoid:
      return dnnl::algorithm::eltwise_logistic;
    case FusedActivation::tanh:
      return dnnl::algorithm::eltwise_tanh;
    case FusedActivation::gelu:
      return dnnl::algorithm::eltwise_gelu_erf;
    case FusedActivation::none:
      break;
  }
  return dnnl::algorithm::undef;
}

Tensor widen_to_f32(const Tensor& t) {
  return as_f32(t);
}
Tensor narrow_to_bf16(const Tensor& t) {
  Tensor y(t.shape(), DType::bfloat16);
  float_to_bfloat16(t.data<float>(), y.data<bfloat16>(), static_cast<size_t>(t.num_elements()));
  return y;
}
bool emulates_bf16(DType dtype) {
  return dtype == DType::bfloat16 && !onednn::has_bf16();
}
}  // namespace detail

namespace {
Bf16MatmulMode mode_from_environment() {
  const char* env = std::getenv("LOCKSTEP_BF16_MATMUL");
  const std::string v = env ? env : "";
  if (v == "bf16") return Bf16MatmulMode::bfloat16_kernels;
  if (v == "f32") return Bf16MatmulMode::float32_compute;
  return Bf16MatmulMode::measured;
}
std::atomic<Bf16MatmulMode>& mode_flag() {
  static std::atomic<Bf16MatmulMode> mode{mode_from_environment()};
  return mode;
}

// The best times of two ways of computing a product, `run(true)` and `run(false)`, in seconds. The
// two alternate, so that a stretch of time when the VM gives this thread less of its core (a
// millisecond or more) slows runs of both rather than every run of one: timed one after the
// other, such a stretch can make the faster lose for the whole process. The first two rounds
// create and warm the kernels; the best of the nine after them is kept.
template <typename Run>
std::pair<double, double> best_alternated_seconds(Run run) {
  auto seconds = [&](bool which) {
    const auto t0 = std::chrono::steady_clock::now();
    run(which);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  double when_true = 1e30, when_false = 1e30;
  for (int rep = 0; rep < 11; ++rep) {
    const bool true_first = rep % 2 == 0;
    const double first = seconds(true_first), second = seconds(!true_first);
    if (rep < 2) continue;
    when_true = std::min(when_true, true_first ? first : second);
    when_false = std::min(when_false, true_first ? second : first);
  }
  return {when_true, when_false};
}

}  // namespace

void set_bf16_matmul_mode(Bf16MatmulMode mode) {
  mode_flag().store(mode);
}
Bf16MatmulMode bf16_matmul_mode() {
  return mode_flag().load();
}

bool bf16_matmul_computes_in_f32(int64_t m, int64_t k, int64_t n, bool ta, bool tb) {
  if (!onednn::has_bf16()) return true;  // no bfloat16 kernel to choose, whatever the mode
  switch (bf16_matmul_mode()) {
    case Bf16MatmulMode::float32_compute:
      return true;
    case Bf16MatmulMode::bfloat16_kernels:
      return false;
    case Bf16MatmulMode::measured:
      break;
  }
  // One measurement per shape for the whole process, under a lock: replicas that reach a new
  // shape together wait for the first one's answer, so all of them use the same kernel.
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, bool> chosen;
  std::lock_guard lock(mu);
  auto [it, fresh] = chosen.try_emplace({m, k, n, ta, tb}, true);
  if (!fresh) return it->second;
  // Zero operands (no denormals, no NaN); the kernels' speed does not depend on the values.
  Tensor a = Tensor::zeros(ta ? Shape{k, m} : Shape{m, k}, DType::bfloat16);
  Tensor b = Tensor::zeros(tb ? Shape{n, k} : Shape{k, n}, DType::bfloat16);
  Tensor out = Tensor::zeros({m, n}, DType::bfloat16);
  const auto [f32, bf16] = best_alternated_seconds([&](bool via_f32) {
    if (via_f32) {
      gemm_bf16_via_f32(a, b, Tensor(), ta, tb, FusedActivation::none, out);
    } else {
      gemm_onednn(a, b, Tensor(), ta, tb, FusedActivation::none, out);
    }
  });
  it->second = !(bf16 < 0.9 * f32);
  return it->second;
}

namespace {

// mixed_bfloat16_computes_in_f32's measurement: the two kernels alone on a product large enough
// that both run at their compute rate, the float32 kernel on float32 operands against the
// bfloat16 kernel on bfloat16 ones (best_alternated_seconds). The bfloat16 form only where its
// kernel is clearly faster — AMX runs it in a third of the float32 time or less, Zen 4 and 5 in
// about half, an Intel core without AMX in more than the float32 time (and, on the one measured,
// sometimes close to it: a narrower margin would let the form flip from run to run).
bool bfloat16_kernel_not_clearly_faster() {
  constexpr int64_t kSide = 256;
  const Tensor a32 = Tensor::zeros({kSide, kSide}), b32 = Tensor::zeros({kSide, kSide});
  const Tensor out32 = Tensor::zeros({kSide, kSide});
  const Tensor a16 = Tensor::zeros({kSide, kSide}, DType::bfloat16);
  const Tensor b16 = Tensor::zeros({kSide, kSide}, DType::bfloat16);
  const Tensor out16 = Tensor::zeros({kSide, kSide}, DType::bfloat16);
  const auto [f32, bf16] = best_alternated_seconds([&](bool in_f32) {
    if (in_f32) {
      gemm_onednn(a32, b32, Tensor(), false, false, FusedActivation::none, out32);
    } else {
      gemm_onednn(a16, b16, Tensor(), false, false, FusedActivation::none, out16);
    }
  });
  return !(bf16 < 0.75 * f32);
}

}  // namespace

bool mixed_bfloat16_computes_in_f32() {
  if (!onednn::has_bf16()) return true;
  if (bf16_matmul_mode() != Bf16MatmulMode::measured) return false;
  // Measured once per process, by the first caller (the others wait for it).
  static const bool in_f32 = bfloat16_kernel_not_clearly_faster();
  return in_f32;
}

const char* activation_name(FusedActivation act) {
  switch (act) {
    case FusedActivation::none:
      return "none";
    case FusedActivation::relu:
      return "relu";
    case FusedActivation::sigmoid:
      return "sigmoid";
    case FusedActivation::tanh:
      return "tanh";
    case FusedActivation::gelu:
      return "gelu";
  }
  return "?";
}

namespace detail {

void gemm_into(const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
               FusedActivation act, const Tensor& out) {
  if (a.dtype() == DType::float64) {
    gemm_f64(a, b, bias, ta, tb, act, out);
    return;
  }
  const int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  // bfloat16 operands computed in float32; a float32 operand next to a bfloat16 one (a kernel
  // already rounded to bfloat16 values, see round_to_bfloat16) is used as it is, whatever the
  // machine: oneDNN has no matmul mixing the two.
  const bool any_bf16 = a.dtype() == DType::bfloat16 || b.dtype() == DType::bfloat16 ||
                        out.dtype() == DType::bfloat16;
  const bool mixed =
      a.dtype() != b.dtype() || (a.dtype() == DType::float32 && out.dtype() == DType::bfloat16);
  if (any_bf16 && (mixed || bf16_matmul_computes_in_f32(m, k, n, ta, tb))) {
    gemm_bf16_via_f32(a, b, bias, ta, tb, act, out);
    return;
  }
  gemm_onednn(a, b, bias, ta, tb, act, out);
}

}  // namespace detail

namespace {
// "Store bfloat16, compute float32": widened operands, the float32 kernel, the result rounded.
void gemm_bf16_via_f32(const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
                       FusedActivation act, const Tensor& out) {
  Tensor a32 = as_f32(a), b32 = as_f32(b), bias32 = as_f32(bias);
  if (out.dtype() == DType::float32) {
    gemm_onednn(a32, b32, bias32, ta, tb, act, out);
    return;
  }
  Tensor out32(out.shape(), DType::float32);
  gemm_onednn(a32, b32, bias32, ta, tb, act, out32);
  float_to_bfloat16(out32.data<float>(), out.data<bfloat16>(),
                    static_cast<size_t>(out.num_elements()));
}

// aᵀ·b into out ([m, n]; a is [k, m], b [k, n], all float32 and dense) with oneDNN's sgemm, in
// blocks of out's rows (weight_gradient_blocks). While a replica's weight gradient runs, the
// thread of a replica that finished first has nothing to do: the blocks are its to take
// (for_each_block) where share_weight_gradient_blocks(). Returns false when sgemm refused the
// shape (nothing written that counts).
bool weight_gradient_by_blocks(int64_t m, int64_t n, int64_t k, const float* a, const float* b,
                               float* out) {
  const RowBlocks split = weight_gradient_blocks(m, n, k);
  std::atomic<bool> ok{true};
  auto block = [&](int blk) {
    const int64_t r0 = blk * split.rows, rows = std::min(split.rows, m - r0);
    if (dnnl_sgemm('T', 'N', rows, n, k, 1.0f, a + r0, m, b, n, 0.0f, out + r0 * n, n) !=
        dnnl_success)
      ok.store(false, std::memory_order_relaxed);
  };
  if (share_weight_gradient_blocks()) {
    for_each_block(split.blocks, block);
  } else {
    for (int blk = 0; blk < split.blocks; ++blk) block(blk);
  }
  return ok.load(std::memory_order_relaxed);
}

// -1: not set (the CPU's vendor decides).
std::atomic<int> g_share_blocks{-1};
std::atomic<int64_t> g_block_macs{WeightGradientBlocking{}.macs_per_block};
std::atomic<int64_t> g_block_min_rows{WeightGradientBlocking{}.min_rows};

// oneDNN's matmul on the operands' own dtypes (float32 or bfloat16 kernels).
void gemm_onednn(const Tensor& a, const Tensor& b, const Tensor& bias, bool ta, bool tb,
                 FusedActivation act, const Tensor& out) {
  const int64_t m = out.dim(0), n = out.dim(1), k = ta ? a.dim(0) : a.dim(1);
  // A float32 product with a transposed left operand and nothing fused — a dense layer's weight
  // gradient, xᵀ·dz — goes to oneDNN's sgemm, which packs the transposed operand as it reads it:
  // the matmul primitive first copies it transposed, which costs more than the product saves
  // (docs/performance.md, "Measured design choices"). Deterministic like the primitive: one kernel
  // per shape and thread count.
  if (ta && !tb && !bias.defined() && act == FusedActivation::none && a.dtype() == DType::float32 &&
      b.dtype() == DType::float32 && out.dtype() == DType::float32) {
    onednn::apply_isa_cap();
    if (weight_gradient_by_blocks(m, n, k, a.data<float>(), b.data<float>(), out.data<float>()))
      return;
  }
  onednn::Key key("matmul");
  key.add(m)
      .add(k)
      .add(n)
      .add(ta)
      .add(tb)
      .add(a.dtype())
      .add(out.dtype())
      .add(static_cast<int>(act));
  key.add(bias.defined() ? static_cast<int64_t>(bias.dtype()) : int64_t{-1});
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    using dims = dnnl::memory::dims;
    auto dt = onednn::data_type(a.dtype());
    // Transposed operands are read in place through strides (no reorder).
    dnnl::memory::desc a_md(dims{m, k}, dt, ta ? dims{1, m} : dims{k, 1});
    dnnl::memory::desc b_md(dims{k, n}, dt, tb ? dims{1, k} : dims{n, 1});
    dnnl::memory::desc y_md = onednn::plain_desc(dims{m, n}, out.dtype());
    dnnl::primitive_attr attr;
    if (act != FusedActivation::none) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, detail::onednn_eltwise(act), 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    if (bias.defined()) {
      dnnl::memory::desc bias_md = onednn::plain_desc(dims{1, n}, bias.dtype());
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, bias_md, y_md), attr,
                                      onednn::engine());
      return onednn::Primitive(dnnl::matmul(pd), {{DNNL_ARG_SRC, a_md},
                                                  {DNNL_ARG_WEIGHTS, b_md},
                                                  {DNNL_ARG_BIAS, bias_md},
                                                  {DNNL_ARG_DST, y_md}});
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), attr, onednn::engine());
    return onednn::Primitive(
        dnnl::matmul(pd), {{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_md}, {DNNL_ARG_DST, y_md}});
  });
  if (bias.defined()) {
    prim.execute({{DNNL_ARG_SRC, a.raw_data()},
                  {DNNL_ARG_WEIGHTS, b.raw_data()},
                  {DNNL_ARG_BIAS, bias.raw_data()},
                  {DNNL_ARG_DST, out.raw_data()}});
  } else {
    prim.execute({{DNNL_ARG_SRC, a.raw_data()},
                  {DNNL_ARG_WEIGHTS, b.raw_data()},
                  {DNNL_ARG_DST, out.raw_data()}});
  }
}
}  // namespace

void set_weight_gradient_blocking(WeightGradientBlocking blocking) {
  LOCKSTEP_CHECK(blocking.macs_per_block >= 1 && blocking.min_rows >= 1,
                 "set_weight_gradient_blocking: macs_per_block and min_rows must be at least 1. "
                 "Received: ",
                 blocking.macs_per_block, " and ", blocking.min_rows, ".");
  g_block_macs.store(blocking.macs_per_block, std::memory_order_relaxed);
  g_block_min_rows.store(blocking.min_rows, std::memory_order_relaxed);
}

WeightGradientBlocking weight_gradient_blocking() {
  return {g_block_macs.load(std::memory_order_relaxed),
          g_block_min_rows.load(std::memory_order_relaxed)};
}

void set_share_weight_gradient_blocks(bool on) {
  g_share_blocks.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool share_weight_gradient_blocks() {
  const int on = g_share_blocks.load(std::memory_order_relaxed);
  return on < 0 ? cpu_vendor() != CpuVendor::amd : on != 0;
}

RowBlocks weight_gradient_blocks(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMaxBlocks = 8, kRowAlign = 16;
  const WeightGradientBlocking b = weight_gradient_blocking();
  if (m <= 0) return {1, m};
  const int64_t macs = m * n * k;
  const int64_t wanted = std::clamp<int64_t>(macs / b.macs_per_block, 1, kMaxBlocks);
  int64_t rows = std::max(b.min_rows, (m + wanted - 1) / wanted);
  if (rows >= kRowAlign) rows = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;
  rows = std::min(rows, m);
  return {static_cast<int>((m + rows - 1) / rows), rows};
}

Tensor matmul_forward(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  MatmulDims d = check_matmul(a, b, transpose_a, transpose_b, "matmul");
  Tensor y({d.m, d.n}, a.dtype());
  detail::gemm_into(a, b, Tensor(), transpose_a, transpose_b, FusedActivation::none, y);
  return y;
}

void matmul_into(const Tensor& a, const Tensor& b, const Tensor& out, bool transpose_a,
                 bool transpose_b) {
  MatmulDims d = check_matmul(a, b, transpose_a, transpose_b, "matmul_into");
  check_out(out, a, d.m, d.n, "matmul_into");
  detail::gemm_into(a, b, Tensor(), transpose_a, transpose_b, FusedActivation::none, out);
}

MatmulGrads matmul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, bool ta, bool tb,
                            bool need_da, bool need_db) {
  MatmulDims d = check_matmul(a, b, ta, tb, "matmul_backward");
  detail::check_defined(dy, "matmul_backward", "dy");
  const Shape dy_shape{d.m, d.n};
  LOCKSTEP_CHECK(dy.shape() == dy_shape && dy.dtype() == a.dtype(),
                 "matmul_backward: expected dy of shape ", dy_shape, " and dtype ", a.dtype(),
                 " for a ", a.describe(), " and b ", b.describe(), ". Received: ", dy.describe(),
                 ".");
  MatmulGrads g;
  if (need_da) {
    g.da = Tensor(a.shape(), a.dtype());
    if (!ta) {
      detail::gemm_into(dy, b, Tensor(), false, !tb, FusedActivation::none, g.da);  // dy·op(b)ᵀ
    } else {
      detail::gemm_into(b, dy, Tensor(), tb, true, FusedActivation::none, g.da);  // op(b)·dyᵀ
    }
  }
  if (need_db) {
    g.db = Tensor(b.shape(), b.dtype());
    if (!tb) {
      detail::gemm_into(a, dy, Tensor(), !ta, false, FusedActivation::none, g.db);  // op(a)ᵀ·dy
    } else {
      detail::gemm_into(dy, a, Tensor(), true, ta, FusedActivation::none, g.db);  // dyᵀ·op(a)
    }
  }
  return g;
}

}  // namespace lockstep::ops
