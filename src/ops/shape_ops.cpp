#include "lockstep/ops/shape_ops.h"
#include "lockstep/core/check.h"

#include <cstring>
#include <string>

#include "kernel_util.h"
#include "onednn.h"

namespace lockstep::ops {
namespace {

std::string perm_string(const std::vector<int>& perm) {
  std::string s = "[";
  for (size_t i = 0; i < perm.size(); ++i) s += (i ? ", " : "") + std::to_string(perm[i]);
  return s + "]";
}

std::vector<int> full_perm(const Tensor& x, const std::vector<int>& perm, const char* op) {
  std::vector<int> p = perm;
  if (p.empty()) {
    for (int d = x.rank() - 1; d >= 0; --d) p.push_back(d);
    return p;
  }
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  bool ok = static_cast<int>(p.size()) == x.rank();
  for (int& a : p) {
    if (!ok) break;
    if (a < 0) a += x.rank();
    ok = a >= 0 && a < x.rank() && !seen[static_cast<size_t>(a)];
    if (ok) seen[static_cast<size_t>(a)] = true;
  }
  LOCKSTEP_CHECK(ok, op, ": perm ", perm_string(perm),
                 " is not a permutation of the dimensions of ", x.describe(), ".");
  return p;
}

template <typename E>
void permute(const E* src, E* dst, const Shape& in, const std::vector<int>& perm) {
  const int r = in.rank();
  std::array<int64_t, Shape::kMaxRank> in_strides{}, out_dims{}, src_strides{}, idx{};
  int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    in_strides[static_cast<size_t>(d)] = s;
    s *= in[d];
  }
  for (int d = 0; d < r; ++d) {
    out_dims[static_cast<size_t>(d)] = in[perm[static_cast<size_t>(d)]];
    src_strides[static_cast<size_t>(d)] =
        in_strides[static_cast<size_t>(perm[static_cast<size_t>(d)])];
  }
  const int64_t total = in.num_elements();
  int64_t off = 0;
  for (int64_t o = 0; o < total; ++o) {
    dst[o] = src[off];
    for (int d = r - 1; d >= 0; --d) {
      size_t ud = static_cast<size_t>(d);
      ++idx[ud];
      off += src_strides[ud];
      if (idx[ud] < out_dims[ud]) break;
      off -= src_strides[ud] * out_dims[ud];
      idx[ud] = 0;
    }
  }
}

// Calls f(E{}) with E an unsigned integer of the element size (moves don't care about the type).
template <typename F>
void dispatch_size(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

}  // namespace

Tensor reshape_forward(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "reshape", "x");
  return x.reshape(shape);
}

Tensor flatten_forward(const Tensor& x) {
  detail::check_defined(x, "flatten", "x");
  LOCKSTEP_CHECK(x.rank() != 0, "flatten: expected a tensor of rank >= 1. Received: ", x.describe(),
                 ".");
  int64_t rest = 1;
  for (int d = 1; d < x.rank(); ++d) rest *= x.dim(d);
  return x.reshape(Shape{x.dim(0), rest});
}

Tensor transpose_forward(const Tensor& x, const std::vector<int>& perm) {
  detail::check_defined(x, "transpose", "x");
  std::vector<int> p = full_perm(x, perm, "transpose");
  Shape out;
  for (int a : p) out.push_back(x.dim(a));
  Tensor y(out, x.dtype());
  dispatch_size(x.dtype(), [&](auto tag) {
    using E = decltype(tag);
    permute(static_cast<const E*>(x.raw_data()), static_cast<E*>(y.raw_data()), x.shape(), p);
  });
  return y;
}

Tensor transpose_backward(const Tensor& dy, const std::vector<int>& perm) {
  detail::check_defined(dy, "transpose_backward", "dy");
  std::vector<int> p = full_perm(dy, perm, "transpose_backward");
  std::vector<int> inverse(p.size());
  for (size_t i = 0; i < p.size(); ++i) inverse[static_cast<size_t>(p[i])] = static_cast<int>(i);
  return transpose_forward(dy, inverse);
}

Tensor concat_forward(const std::vector<Tensor>& xs, int axis) {
  LOCKSTEP_CHECK(!xs.empty(), "concat: expected at least one tensor. Received: none.");
  const Tensor& first = xs[0];
  detail::check_defined(first, "concat", "xs[0]");
  LOCKSTEP_CHECK(first.rank() != 0,
                 "concat: cannot concatenate scalars. Received: ", first.describe(), ".");
  const int ax = first.shape().normalize_axis(axis);
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    detail::check_defined(t, "concat", "xs[i]");
    bool ok = t.dtype() == first.dtype() && t.rank() == first.rank();
    for (int d = 0; ok && d < t.rank(); ++d) ok = d == ax || t.dim(d) == first.dim(d);
    LOCKSTEP_CHECK(ok, "concat: along axis ", ax, ", tensor ", i, " ", t.describe(),
                   " does not match tensor 0 ", first.describe(),
                   " (same dtype and all other dimensions required).");
    total += t.dim(ax);
  }
  Tensor y(first.shape().with_dim(ax, total), first.dtype());
  detail::AxisSplit out = detail::split_at_axis(y.shape(), ax);
  const size_t esize = dtype_size(first.dtype());
  char* py = static_cast<char*>(y.raw_data());
  int64_t at = 0;
  for (const Tensor& t : xs) {
    const int64_t chunk = t.dim(ax) * out.inner;  // contiguous elements per outer index
    const char* pt = static_cast<const char*>(t.raw_data());
    for (int64_t o = 0; o < out.outer; ++o) {
      std::memcpy(py + static_cast<size_t>(o * out.n * out.inner + at * out.inner) * esize,
                  pt + static_cast<size_t>(o * chunk) * esize, static_cast<size_t>(chunk) * esize);
    }
    at += t.dim(ax);
  }
  return y;
}

std::vector<Tensor> concat_backward(const Tensor& dy, const std::vector<int64_t>& sizes, int axis) {
  detail::check_defined(dy, "concat_backward", "dy");
  const int ax = dy.shape().normalize_axis(axis);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  LOCKSTEP_CHECK(total == dy.dim(ax), "concat_backward: sizes add up to ", total, " but dy ",
                 dy.describe(), " has ", dy.dim(ax), " along axis ", ax, ".");
  detail::AxisSplit in = detail::split_at_axis(dy.shape(), ax);
  const size_t esize = dtype_size(dy.dtype());
  const char* pd = static_cast<const char*>(dy.raw_data());
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Tensor g(dy.shape().with_dim(ax, s), dy.dtype());
    const int64_t chunk = s * in.inner;
    char* pg = static_cast<char*>(g.raw_data());
    for (int64_t o = 0; o < in.outer; ++o) {
      std::memcpy(pg + static_cast<size_t>(o * chunk) * esize,
                  pd + static_cast<size_t>(o * in.n * in.inner + at * in.inner) * esize,
                  static_cast<size_t>(chunk) * esize);
    }
    out.push_back(g);
    at += s;
  }
  return out;
}

Tensor cast_forward(const Tensor& x, DType dtype) {
  detail::check_defined(x, "cast", "x");
  if (x.dtype() == dtype) return x;
  const int64_t n = x.num_elements();
  // float32 <-> bfloat16 through Lockstep's own conversion loops: the same bits on every CPU (one
  // rounding, round to nearest even), and no oneDNN bfloat16 support needed.
  if (x.dtype() == DType::float32 && dtype == DType::bfloat16) {
    Tensor y(x.shape(), dtype);
    float_to_bfloat16(x.data<float>(), y.data<bfloat16>(), static_cast<size_t>(n));
    return y;
  }
  if (x.dtype() == DType::bfloat16 && dtype == DType::float32) {
    Tensor y(x.shape(), dtype);
    bfloat16_to_float(x.data<bfloat16>(), y.data<float>(), static_cast<size_t>(n));
    return y;
  }
  const bool reorder = onednn::has_data_type(x.dtype()) && onednn::has_data_type(dtype) &&
                       (x.dtype() == DType::bfloat16 || dtype == DType::bfloat16) &&
                       onednn::has_bf16();
  if (!reorder || n == 0) return x.to(dtype);
  Tensor y(x.shape(), dtype);
  onednn::Key key("cast");
  key.add(n).add(x.dtype()).add(dtype);
  auto& prim = onednn::cached<onednn::Primitive>(key, [&] {
    auto src = onednn::plain_desc(dnnl::memory::dims{n}, x.dtype());
    auto dst = onednn::plain_desc(dnnl::memory::dims{n}, dtype);
    dnnl::reorder::primitive_desc pd(onednn::engine(), src, onednn::engine(), dst);
    return onednn::Primitive(dnnl::reorder(pd), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
  });
  prim.execute({{DNNL_ARG_FROM, x.raw_data()}, {DNNL_ARG_TO, y.raw_data()}});
  return y;
}

Tensor cast_backward(const Tensor& dy, DType x_dtype) {
  return cast_forward(dy, x_dtype);
}

Tensor round_to_bfloat16_forward(const Tensor& x) {
  detail::check_defined(x, "round_to_bfloat16", "x");
  LOCKSTEP_CHECK(x.dtype() == DType::float32,
                 "round_to_bfloat16: expected a float32 tensor. Received: ", x.describe(), ".");
  Tensor y(x.shape(), DType::float32);
  round_to_bfloat16_values(x.data<float>(), y.data<float>(), static_cast<size_t>(x.num_elements()));
  return y;
}

Tensor argmax(const Tensor& x, int axis) {
  detail::check_floating(x, "argmax", "x");
  LOCKSTEP_CHECK(x.rank() != 0, "argmax: expected a tensor of rank >= 1. Received: ", x.describe(),
                 ".");
  const int ax = x.shape().normalize_axis(axis);
  detail::AxisSplit s = detail::split_at_axis(x.shape(), ax);
  LOCKSTEP_CHECK(s.n != 0, "argmax: axis ", ax, " of ", x.describe(), " is empty.");
  Tensor y(x.shape().without(ax), DType::int64);
  int64_t* py = y.data<int64_t>();
  detail::dispatch_floating(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t in = 0; in < s.inner; ++in) {
        const int64_t base = o * s.n * s.inner + in;
        int64_t best = 0;
        auto best_v = detail::load(px[base]);
        for (int64_t i = 1; i < s.n; ++i) {
          auto v = detail::load(px[base + i * s.inner]);
          if (v > best_v) best_v = v, best = i;
        }
        py[o * s.inner + in] = best;
      }
    }
  });
  return y;
}

Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype) {
  detail::check_defined(indices, "one_hot", "indices");
  LOCKSTEP_CHECK(depth >= 0, "one_hot: expected depth >= 0. Received: ", depth, ".");
  Shape out = indices.shape();
  out.push_back(depth);
  Tensor y = Tensor::zeros(out, dtype);
  const int64_t n = indices.num_elements();
  auto index = [&](int64_t i) -> int64_t {
    switch (indices.dtype()) {
      case DType::int32:
        return indices.data<int32_t>()[i];
      case DType::int64:
        return indices.data<int64_t>()[i];
      case DType::uint8:
        return indices.data<uint8_t>()[i];
      default:
        throw InvalidArgument(
            "one_hot: expected integer indices (int32, int64, uint8). Received: " +
            indices.describe() + ".");
    }
  };
  if (!(indices.dtype() == DType::int32 || indices.dtype() == DType::int64 ||
        indices.dtype() == DType::uint8)) {
    index(0);  // throws, naming the dtype
  }
  Tensor ones = Tensor::ones({1}, dtype);
  const size_t esize = dtype_size(dtype);
  char* py = static_cast<char*>(y.raw_data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = index(i);
    // tf.one_hot writes a row of zeros here; as a label that silently trains on a wrong loss.
    LOCKSTEP_CHECK(k >= 0 && k < depth, "one_hot: index ", k, " (element ", i, " of indices ",
                   indices.describe(), ") is outside [0, ", depth, ") for depth ", depth, ".");
    std::memcpy(py + static_cast<size_t>(i * depth + k) * esize, ones.raw_data(), esize);
  }
  return y;
}

}  // namespace lockstep::ops
