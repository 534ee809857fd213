#pragma once
// DType: the element types of a Tensor (as tf.dtypes), their sizes and names, and dtype_v<T>, the
// dtype of a C++ element type.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lockstep/core/bfloat16.h"

namespace lockstep {

// Element types. float64 is not a training dtype: it exists so that gradient checks and
// reference computations can run the same ops in double precision (see docs/architecture.md).
enum class DType : uint8_t { float32, bfloat16, float64, int32, int64, uint8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
inline bool is_floating(DType d) {
  return d == DType::float32 || d == DType::bfloat16 || d == DType::float64;
}

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct dtype_of<bfloat16> {
  static constexpr DType value = DType::bfloat16;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::float64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::int32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::int64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::uint8;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace lockstep
