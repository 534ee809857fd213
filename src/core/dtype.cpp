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

DType dtype_from_name(std::string_view name) {
  for (DType d : {DType::float32, DType::bfloat16, DType::float64, DType::int32, DType::int64,
                  DType::uint8}) {
    if (dtype_name(d) == name) return d;
  }
  throw InvalidArgument("Unknown dtype '" + std::string(name) +
                        "'. Expected one of float32, bfloat16, float64, int32, int64, uint8.");
}

}  // namespace lockstep
