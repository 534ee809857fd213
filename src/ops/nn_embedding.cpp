#include "lockstep/ops/nn_embedding.h"
#include "lockstep/core/check.h"

#include <cstring>
#include <string>

#include "kernel_util.h"

namespace lockstep::ops {
namespace {

// Calls f(const I* ids) with I the id type; checks every id before any row is touched.
template <typename F>
void with_checked_ids(const Tensor& ids, int64_t vocab, const char* op, const std::string& context,
                      F&& f) {
  auto run = [&](const auto* p) {
    for (int64_t i = 0; i < ids.num_elements(); ++i) {
      LOCKSTEP_CHECK(p[i] >= 0 && p[i] < vocab, op, ": id ", p[i], " at position ", i,
                     " is out of range for a vocabulary of size ", vocab, "; expected 0 <= id < ",
                     vocab, ". Received: ", context, ".");
    }
    f(p);
  };
  if (ids.dtype() == DType::int32) {
    run(ids.data<int32_t>());
  } else if (ids.dtype() == DType::int64) {
    run(ids.data<int64_t>());
  } else {
    throw InvalidArgument(std::string(op) +
                          ": expected ids of dtype int32 or int64. Received: " + context + ".");
  }
}

}  // namespace

Tensor embedding_lookup_forward(const Tensor& table, const Tensor& ids) {
  std::string context = "table=" + table.describe() + ", ids=" + ids.describe();
  LOCKSTEP_CHECK(table.rank() == 2 && is_floating(table.dtype()),
                 "embedding_lookup: expected a floating table of rank 2 [vocab, dim]. Received: ",
                 context, ".");
  LOCKSTEP_CHECK(ids.rank() + 1 <= Shape::kMaxRank, "embedding_lookup: ids of rank ", ids.rank(),
                 " would give an output above the maximum rank. Received: ", context, ".");
  const int64_t vocab = table.dim(0), dim = table.dim(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  Tensor out(out_shape, table.dtype());
  const size_t row_bytes = static_cast<size_t>(dim) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  with_checked_ids(ids, vocab, "embedding_lookup", context, [&](const auto* p) {
    for (int64_t i = 0; i < ids.num_elements(); ++i) {
      std::memcpy(dst + static_cast<size_t>(i) * row_bytes,
                  src + static_cast<size_t>(p[i]) * row_bytes, row_bytes);
    }
  });
  return out;
}

Tensor embedding_lookup_backward(const Tensor& grad_output, const Tensor& ids, int64_t vocab_size) {
  std::string context = "grad_output=" + grad_output.describe() + ", ids=" + ids.describe();
  LOCKSTEP_CHECK(
      grad_output.rank() == ids.rank() + 1 &&
          grad_output.shape().without(grad_output.rank() - 1) == ids.shape(),
      "embedding_lookup_backward: expected grad_output of shape ids.shape + [dim]. Received: ",
      context, ".");
  const int64_t dim = grad_output.dim(-1);
  bool bf16 = grad_output.dtype() == DType::bfloat16;
  Tensor acc = Tensor::zeros({vocab_size, dim}, bf16 ? DType::float32 : grad_output.dtype());
  with_checked_ids(ids, vocab_size, "embedding_lookup_backward", context, [&](const auto* p) {
    detail::dispatch_floating(grad_output.dtype(), "embedding_lookup_backward", [&](auto tag) {
      using T = decltype(tag);
      using C = detail::compute_t<T>;
      const T* g = grad_output.data<T>();
      C* a = acc.data<C>();
      for (int64_t i = 0; i < ids.num_elements(); ++i) {
        C* row = a + p[i] * dim;
        const T* gi = g + i * dim;
        for (int64_t j = 0; j < dim; ++j) row[j] += detail::load(gi[j]);
      }
    });
  });
  if (!bf16) return acc;
  Tensor out({vocab_size, dim}, DType::bfloat16);
  float_to_bfloat16(acc.data<float>(), out.data<bfloat16>(),
                    static_cast<size_t>(acc.num_elements()));
  return out;
}

}  // namespace lockstep::ops
