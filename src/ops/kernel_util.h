#pragma once
// Internal to the ops layer: dtype dispatch, argument checks and the broadcasting index walk shared
// by the loop kernels.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"

namespace lockstep::ops::detail {

// The default NaN of float arithmetic (inf * 0, 0 / 0) in bfloat16 bits, for the loops that work on
// bits and must give what the float arithmetic they replace gives: x86's SSE/AVX make a negative
// quiet NaN, aarch64 a positive one.
#if defined(__x86_64__) || defined(__i386__)
inline constexpr uint16_t kDefaultNanBfloat16 = 0xffc0u;
#else
inline constexpr uint16_t kDefaultNanBfloat16 = 0x7fc0u;
#endif

// 1.0f where v > 0, else +0.0f (NaN included): relu's derivative, branch-free. Written on the bits
// because GCC (trapping math) will not if-convert `v > 0 ? 1.0f : 0.0f` below AVX-512, and the
// branchy loop mispredicts on every other element.
[[gnu::always_inline]] inline float positive_mask(float v) {
  const uint32_t bits = 0x3f800000u & -static_cast<uint32_t>(v > 0.0f);
  float mask;
  std::memcpy(&mask, &bits, sizeof mask);
  return mask;
}

// Loop kernels compute in double for float64 and in float for float32 / bfloat16.
template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline compute_t<T> load(T v) {
  return static_cast<compute_t<T>>(v);
}
template <typename T>
inline T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16(v);
  } else {
    return v;
  }
}

// Calls f(T{}) with T the C++ type of a floating dtype; throws InvalidArgument otherwise.
template <typename F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::float32:
      return f(float{});
    case DType::float64:
      return f(double{});
    case DType::bfloat16:
      return f(bfloat16{});
    default:
      throw InvalidArgument(std::string(op) +
                            ": expected a floating dtype (float32, bfloat16, "
                            "float64). Received: " +
                            std::string(dtype_name(dtype)) + ".");
  }
}

void check_defined(const Tensor& t, const char* op, const char* name);
void check_floating(const Tensor& t, const char* op, const char* name);
// A defined float32 tensor (the float32 form's bfloat16 values, ops/bfloat16_values.h).
void check_float32(const Tensor& t, const char* op, const char* name);
// Same dtype for both, else InvalidArgument naming both tensors.
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
// NumPy broadcast of two shapes; InvalidArgument naming both when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Walks the elements of `out` (row-major) and yields, for each run of the innermost dimension, the
// offsets into operands that broadcast to `out` (strides 0 along broadcast dimensions).
template <int N>
struct BroadcastWalk {
  Shape out;
  std::array<std::array<int64_t, Shape::kMaxRank>, N> strides{};

  BroadcastWalk(const Shape& out_shape, const std::array<Shape, N>& inputs) : out(out_shape) {
    for (int k = 0; k < N; ++k) {
      const Shape& in = inputs[static_cast<size_t>(k)];
      int64_t stride = 1;
      for (int d = out.rank() - 1; d >= 0; --d) {
        int id = d - (out.rank() - in.rank());
        int64_t size = id >= 0 ? in[id] : 1;
        strides[static_cast<size_t>(k)][static_cast<size_t>(d)] = size == 1 ? 0 : stride;
        stride *= size;
      }
    }
  }

  // f(offsets (std::array<int64_t, N>), inner_strides (std::array<int64_t, N>), out_offset,
  // inner_length) once per innermost run.
  template <typename F>
  void for_each_run(F&& f) const {
    const int r = out.rank();
    const int64_t total = out.num_elements();
    if (total == 0) return;
    if (r == 0) {
      f(std::array<int64_t, N>{}, std::array<int64_t, N>{}, int64_t{0}, int64_t{1});
      return;
    }
    const int64_t inner = out[r - 1];
    std::array<int64_t, N> inner_strides{};
    for (int k = 0; k < N; ++k)
      inner_strides[static_cast<size_t>(k)] =
          strides[static_cast<size_t>(k)][static_cast<size_t>(r - 1)];
    std::array<int64_t, Shape::kMaxRank> idx{};
    std::array<int64_t, N> off{};
    for (int64_t o = 0; o < total; o += inner) {
      f(off, inner_strides, o, inner);
      for (int d = r - 2; d >= 0; --d) {
        size_t ud = static_cast<size_t>(d);
        ++idx[ud];
        for (int k = 0; k < N; ++k)
          off[static_cast<size_t>(k)] += strides[static_cast<size_t>(k)][ud];
        if (idx[ud] < out[d]) break;
        for (int k = 0; k < N; ++k)
          off[static_cast<size_t>(k)] -= strides[static_cast<size_t>(k)][ud] * out[d];
        idx[ud] = 0;
      }
    }
  }
};

// Views `shape` around `axis` as [outer, n, inner].
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at_axis(const Shape& shape, int axis);

}  // namespace lockstep::ops::detail
