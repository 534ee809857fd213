#pragma once
// LOCKSTEP_CHECK: the argument check of the library, in the style of PyTorch's TORCH_CHECK.
//
//   LOCKSTEP_CHECK(units > 0, "Dense: expected units > 0. Received: units=", units, ".");
//
// When the condition is false it throws InvalidArgument with the message parts joined; the
// message is built only then, so a check costs one branch when it passes. Without message parts
// the message names the condition itself ("Expected units > 0 to hold."). Parts are strings,
// numbers (as std::to_string writes them), Shapes and DTypes (their names), and anything else
// that can be written to a std::ostream. LOCKSTEP_CHECK_AS(ErrorClass, cond, parts...) throws
// another error class of core/error.h (FailedPrecondition, OutOfRange, ...).
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"

namespace lockstep::detail {

inline void append_part(std::string& out, std::string_view s) {
  out += s;
}
inline void append_part(std::string& out, const char* s) {
  out += s;
}
inline void append_part(std::string& out, const std::string& s) {
  out += s;
}
inline void append_part(std::string& out, char c) {
  out += c;
}
inline void append_part(std::string& out, const Shape& s) {
  out += s.to_string();
}
inline void append_part(std::string& out, DType d) {
  out += dtype_name(d);
}
template <typename T>
void append_part(std::string& out, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_arithmetic_v<T>) {
    out += std::to_string(v);
  } else {
    std::ostringstream os;
    os << v;
    out += os.str();
  }
}

template <typename Error, typename... Parts>
[[noreturn]] void throw_check_failure(const char* condition, const Parts&... parts) {
  std::string message;
  if constexpr (sizeof...(Parts) == 0) {
    message = std::string("Expected ") + condition + " to hold.";
  } else {
    (append_part(message, parts), ...);
  }
  throw Error(message);
}

}  // namespace lockstep::detail

#define LOCKSTEP_CHECK_AS(ErrorClass, condition, ...)                                             \
  do {                                                                                            \
    if (!(condition)) [[unlikely]] {                                                              \
      ::lockstep::detail::throw_check_failure<ErrorClass>(#condition __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                                             \
  } while (false)

#define LOCKSTEP_CHECK(condition, ...) \
  LOCKSTEP_CHECK_AS(::lockstep::InvalidArgument, condition __VA_OPT__(, ) __VA_ARGS__)
