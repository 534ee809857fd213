#pragma once
// Errors are exceptions carrying a status code, in the spirit of absl::Status / TensorFlow's
// errors: the code says what kind of failure it is (so callers can branch on it), the message says
// what was expected, what was received, and what to do.
#include <stdexcept>
#include <string>
#include <string_view>

namespace lockstep {

enum class StatusCode {
  kInvalidArgument,     // the caller passed something wrong (shape, dtype, value, flag)
  kNotFound,            // a file, device or name does not exist
  kFailedPrecondition,  // the system is not in a state to do this (e.g. not built yet)
  kUnavailable,         // a peer or service cannot be reached (dead worker)
  kDeadlineExceeded,    // a collective or wait timed out
  kDataLoss,            // a file is truncated or corrupt
  kOutOfRange,          // iteration ran past the end
  kInternal,            // a bug in Lockstep or a library it calls
};

std::string_view status_code_name(StatusCode code);

class Error : public std::runtime_error {
 public:
  Error(StatusCode code, const std::string& message);
  StatusCode code() const noexcept { return code_; }

 private:
  StatusCode code_;
};

#define LOCKSTEP_DEFINE_ERROR(Name)                                                    \
  class Name : public Error {                                                          \
   public:                                                                             \
    explicit Name(const std::string& message) : Error(StatusCode::k##Name, message) {} \
  };

LOCKSTEP_DEFINE_ERROR(InvalidArgument)
LOCKSTEP_DEFINE_ERROR(NotFound)
LOCKSTEP_DEFINE_ERROR(FailedPrecondition)
LOCKSTEP_DEFINE_ERROR(Unavailable)
LOCKSTEP_DEFINE_ERROR(DeadlineExceeded)
LOCKSTEP_DEFINE_ERROR(DataLoss)
LOCKSTEP_DEFINE_ERROR(OutOfRange)
LOCKSTEP_DEFINE_ERROR(Internal)
#undef LOCKSTEP_DEFINE_ERROR

}  // namespace lockstep
