#pragma once
// Closed forms for collective tests, shared by the shared-memory (threads) and MPI (processes)
// suites so both implementations are checked against the same oracle. Rank r contributes
// v(r, i) = (r + 1) + (i % 7): small integers, exact in every dtype, so
//   SUM = n (n + 1) / 2 + n (i % 7),   MAX = n + (i % 7),   MEAN = SUM / n.
#include <cstddef>
#include <type_traits>

#include "lockstep/core/bfloat16.h"

namespace lockstep::testing {

inline double contribution(int r, size_t i) {
  return (r + 1) + static_cast<double>(i % 7);
}
inline double closed_sum(int n, size_t i) {
  return n * (n + 1) / 2.0 + n * static_cast<double>(i % 7);
}
inline double closed_max(int n, size_t i) {
  return n + static_cast<double>(i % 7);
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return static_cast<float>(v);
  } else {
    return static_cast<double>(v);
  }
}

}  // namespace lockstep::testing
