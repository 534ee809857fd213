#include "batched_gemm.h"

#include <cstring>

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
