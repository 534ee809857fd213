#include "lockstep/core/dtype.h"

#include "lockstep/core/error.h"

namespace lockstep {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return 4;
    case DType::bfloat16:
      return 2;
    case DType::float64:
      return 8;
    case DType::int32:
      return 4;
    case DType::int64:
      return 8;
    case DType::uint8:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float64:
      return "float64";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
    case DType::uint8:
      return "uint8";
  }
  return "unknown";
}

}  // namespace lockstep
