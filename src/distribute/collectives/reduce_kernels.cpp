#include "reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute::detail {
namespace {

// Accumulator per element type and op: bfloat16 accumulates in float32 (rounded once at the end);
// integer sums (SUM, MEAN) accumulate in the unsigned type so that overflow wraps instead of being
// undefined. One rule instead of a specialisation per integer type and op.
template <typename T, ReduceOp Op>
struct Acc {
  static constexpr bool kWrappingSum = std::is_integral_v<T> && Op != ReduceOp::MAX;
  // make_unsigned is only instantiated (via ::type) when T is an integer.
  using type =
      typename std::conditional_t<kWrappingSum, std::make_unsigned<T>, std::type_identity<T>>::type;
};
template <ReduceOp Op>
struct Acc<bfloat16, Op> {
  using type = float;
};

template <typename A, typename T>
inline A load(T x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return static_cast<float>(x);
  } else {
    return static_cast<A>(x);
  }
}

template <typename T, typename A>
inline T finish(A a, ReduceOp op, int divisor) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (op == ReduceOp::MEAN) a = a / static_cast<float>(divisor);
    return bfloat16(a);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::MEAN) a = a / static_cast<T>(divisor);
    return a;
  } else {
    T v = static_cast<T>(a);
    if (op == ReduceOp::MEAN) v = static_cast<T>(v / static_cast<T>(divisor));
    return v;
  }
}

template <typename T, ReduceOp Op>
void fold(const void* const* srcs_raw, int n_src, void* const* dsts_raw, int n_dst, size_t count,
          int divisor) {
  using A = typename Acc<T, Op>::type;
  // A chunk that stays in L1 while every source is folded into it.
  constexpr size_t kChunk = 2048 / sizeof(A) * 4;
  alignas(64) A acc[kChunk];
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t m = std::min(kChunk, count - base);
    const T* s0 = static_cast<const T*>(srcs_raw[0]) + base;
    for (size_t j = 0; j < m; ++j) acc[j] = load<A>(s0[j]);
    for (int k = 1; k < n_src; ++k) {
      const T* s = static_cast<const T*>(srcs_raw[k]) + base;
      if constexpr (Op == ReduceOp::MAX) {
        for (size_t j = 0; j < m; ++j) {
          const A x = load<A>(s[j]);
          acc[j] = acc[j] < x ? x : acc[j];
        }
      } else {
        for (size_t j = 0; j < m; ++j) acc[j] += load<A>(s[j]);
      }
    }
    for (int d = 0; d < n_dst; ++d) {
      T* out = static_cast<T*>(dsts_raw[d]) + base;
      if constexpr (Op == ReduceOp::SUM && std::is_same_v<A, T>) {
        for (size_t j = 0; j < m; ++j) out[j] = acc[j];
      } else {
        for (size_t j = 0; j < m; ++j) out[j] = finish<T>(acc[j], Op, divisor);
      }
    }
  }
}

template <typename T>
void fold_op(ReduceOp op, const void* const* srcs, int n_src, void* const* dsts, int n_dst,
             size_t count, int divisor) {
  switch (op) {
    case ReduceOp::SUM:
      return fold<T, ReduceOp::SUM>(srcs, n_src, dsts, n_dst, count, divisor);
    case ReduceOp::MEAN:
      return fold<T, ReduceOp::MEAN>(srcs, n_src, dsts, n_dst, count, divisor);
    case ReduceOp::MAX:
      return fold<T, ReduceOp::MAX>(srcs, n_src, dsts, n_dst, count, divisor);
  }
}

template <typename T>
void divide(void* buf, size_t count, int divisor) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, bfloat16>) {
      p[i] = bfloat16(static_cast<float>(p[i]) / static_cast<float>(divisor));
    } else {
      p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
    }
  }
}

// Calls f(std::type_identity<T>{}) for dtype's element type; both entry points below switch on
// the same dtypes, so the list lives in one place.
template <typename F>
void with_element_type(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::float32:
      return f(std::type_identity<float>{});
    case DType::bfloat16:
      return f(std::type_identity<bfloat16>{});
    case DType::float64:
      return f(std::type_identity<double>{});
    case DType::int32:
      return f(std::type_identity<int32_t>{});
    case DType::int64:
      return f(std::type_identity<int64_t>{});
    case DType::uint8:
      return f(std::type_identity<uint8_t>{});
  }
  throw Internal(std::string(what) + ": unhandled dtype");
}

}  // namespace

void reduce_fold(DType dtype, ReduceOp op, const void* const* srcs, int n_src, void* const* dsts,
                 int n_dst, size_t count, int mean_divisor) {
  with_element_type(dtype, "reduce_fold", [&](auto type) {
    fold_op<typename decltype(type)::type>(op, srcs, n_src, dsts, n_dst, count, mean_divisor);
  });
}

void divide_in_place(void* buf, size_t count, DType dtype, int divisor) {
  with_element_type(dtype, "divide_in_place",
                    [&](auto type) { divide<typename decltype(type)::type>(buf, count, divisor); });
}

}  // namespace lockstep::distribute::detail
