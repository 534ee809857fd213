#include "lockstep/core/error.h"

namespace lockstep {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::invalid_argument:
      return "InvalidArgument";
    case StatusCode::not_found:
      return "NotFound";
    case StatusCode::failed_precondition:
      return "FailedPrecondition";
    case StatusCode::unavailable:
      return "Unavailable";
    case StatusCode::deadline_exceeded:
      return "DeadlineExceeded";
    case StatusCode::data_loss:
      return "DataLoss";
    case StatusCode::out_of_range:
      return "OutOfRange";
    case StatusCode::internal:
      return "Internal";
  }
  return "Unknown";
}

Error::Error(StatusCode code, const std::string& message)
    : std::runtime_error(std::string(status_code_name(code)) + ": " + message), code_(code) {}

}  // namespace lockstep
