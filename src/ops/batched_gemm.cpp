#include "batched_gemm.h"

#include <cstring>
#include <vector>

#include "lockstep/core/bfloat16.h"

#include "internal.h"
#include "onednn.h"

namespace lockstep::ops::detail {
namespace {

void batched_gemm_f64(const StridedBatch& a, const StridedBatch& b, const StridedBatch& y,
                      double alpha) {
  const double* A = static_cast<const double*>(a.data);
  const double* B = static_cast<const double*>(b.data);
  double* Y = static_cast<double*>(const_cast<void*>(y.data));
  for (int64_t i = 0; i < y.b0; ++i) {
    for (int64_t j = 0; j < y.b1; ++j) {
      const double* am = A + i * a.s0 + j * a.s1;
      const double* bm = B + i * b.s0 + j * b.s1;
      double* ym = Y + i * y.s0 + j * y.s1;
      for (int64_t r = 0; r < y.rows; ++r) {
        for (int64_t c = 0; c < y.cols; ++c) {
          double sum = 0;
          for (int64_t p = 0; p < a.cols; ++p)
            sum += am[r * a.rs + p * a.cs] * bm[p * b.rs + c * b.cs];
          ym[r * y.rs + c * y.cs] = alpha * sum;
        }
      }
    }
  }
}

// Elements from the first of a view's matrices to one past its last (strides are non-negative).
int64_t span_of(const StridedBatch& m) {
  return (m.b0 - 1) * m.s0 + (m.b1 - 1) * m.s1 + (m.rows - 1) * m.rs + (m.cols - 1) * m.cs + 1;
}

// A float32 view of a bfloat16 operand: its whole span widened (exact), with the same strides.
StridedBatch widened(const StridedBatch& m, std::vector<float>& storage) {
  if (m.dtype != DType::bfloat16) return m;
  storage.resize(static_cast<size_t>(span_of(m)));
  bfloat16_to_float(static_cast<const bfloat16*>(m.data), storage.data(), storage.size());
  StridedBatch v = m;
  v.data = storage.data();
  v.dtype = DType::float32;
  return v;
}

dnnl::memory::desc desc_of(const StridedBatch& m) {
  using dims = dnnl::memory::dims;
  return dnnl::memory::desc(dims{m.b0, m.b1, m.rows, m.cols}, onednn::data_type(m.dtype),
                            dims{m.s0, m.s1, m.rs, m.cs});
}

}  // namespace

void batched_gemm(const StridedBatch& a, const StridedBatch& b, const StridedBatch& y,
                  double alpha) {
  if (y.b0 * y.b1 * y.rows * y.cols == 0) return;
  if (a.cols == 0) {  // empty sums
    const size_t size = dtype_size(y.dtype);
    char* base = static_cast<char*>(const_cast<void*>(y.data));
    for (int64_t i = 0; i < y.b0; ++i)
      for (int64_t j = 0; j < y.b1; ++j)
        for (int64_t r = 0; r < y.rows; ++r)
          for (int64_t c = 0; c < y.cols; ++c)
            std::memset(
                base + static_cast<size_t>(i * y.s0 + j * y.s1 + r * y.rs + c * y.cs) * size, 0,
                size);
    return;
  }
  if (a.dtype == DType::float64) {
    batched_gemm_f64(a, b, y, alpha);
    return;
  }
  if (detail::emulates_bf16(a.dtype)) {
    // float32 kernels on the widened operands; a bfloat16 y gets the float32 products rounded,
    // written back through its own strides (its span may hold other data between its matrices).
    std::vector<float> a32, b32;
    const StridedBatch a_f = widened(a, a32), b_f = widened(b, b32);
    if (y.dtype == DType::float32) {
      batched_gemm(a_f, b_f, y, alpha);
      return;
    }
    std::vector<float> y32(static_cast<size_t>(y.b0 * y.b1 * y.rows * y.cols));
    StridedBatch y_f = y;
    y_f.data = y32.data();
    y_f.dtype = DType::float32;
    y_f.cs = 1;
    y_f.rs = y.cols;
    y_f.s1 = y.rows * y.cols;
    y_f.s0 = y.b1 * y_f.s1;
    batched_gemm(a_f, b_f, y_f, alpha);
    uint16_t* out = static_cast<uint16_t*>(const_cast<void*>(y.data));
    const float* src = y32.data();
    for (int64_t i = 0; i < y.b0; ++i)
      for (int64_t j = 0; j < y.b1; ++j)
        for (int64_t r = 0; r < y.rows; ++r)
          for (int64_t c = 0; c < y.cols; ++c)
            out[i * y.s0 + j * y.s1 + r * y.rs + c * y.cs] = bfloat16::round_from_float(*src++);
    return;
  }
  onednn::Key key("batched_gemm");
  for (const StridedBatch* m : {&a, &b, &y}) {
    key.add(m->dtype).add(m->b0).add(m->b1).add(m->rows).add(m->cols);
    key.add(m->s0).add(m->s1).add(m->rs).add(m->cs);
  }
  key.add(static_cast<float>(alpha));
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    dnnl::memory::desc a_md = desc_of(a), b_md = desc_of(b), y_md = desc_of(y);
    dnnl::primitive_attr attr;
    if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), attr, onednn::engine());
    return onednn::Primitive(
        dnnl::matmul(pd), {{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_md}, {DNNL_ARG_DST, y_md}});
  });
  prim.execute({{DNNL_ARG_SRC, a.data}, {DNNL_ARG_WEIGHTS, b.data}, {DNNL_ARG_DST, y.data}});
}

}  // namespace lockstep::ops::detail
