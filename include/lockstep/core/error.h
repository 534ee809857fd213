#pragma once
// Errors are exceptions carrying a status code, in the spirit of absl::Status / TensorFlow's
// errors: the code says what kind of failure it is (so callers can branch on it), the message says
// what was expected, what was received, and what to do.
#include <stdexcept>
#include <string>
#include <string_view>

namespace lockstep {

enum class StatusCode {
  invalid_argument,     // the caller passed something wrong (shape, dtype, value, flag)
  not_found,            // a file, device or name does not exist
  failed_precondition,  // the system is not in a state to do this (e.g. not built yet)
  unavailable,          // a peer or service cannot be reached (dead worker)
  deadline_exceeded,    // a collective or wait timed out
  data_loss,            // a file is truncated or corrupt
  out_of_range,         // iteration ran past the end
  internal,             // a bug in Lockstep or a library it calls
};

std::string_view status_code_name(StatusCode code);

class Error : public std::runtime_error {
 public:
  Error(StatusCode code, const std::string& message);
  StatusCode code() const noexcept { return code_; }

 private:
  StatusCode code_;
};

// One class per status code, so that callers catch exactly the errors they can handle.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message)
      : Error(StatusCode::invalid_argument, message) {}
};
class NotFound : public Error {
 public:
  explicit NotFound(const std::string& message) : Error(StatusCode::not_found, message) {}
};
class FailedPrecondition : public Error {
 public:
  explicit FailedPrecondition(const std::string& message)
      : Error(StatusCode::failed_precondition, message) {}
};
class Unavailable : public Error {
 public:
  explicit Unavailable(const std::string& message) : Error(StatusCode::unavailable, message) {}
};
class DeadlineExceeded : public Error {
 public:
  explicit DeadlineExceeded(const std::string& message)
      : Error(StatusCode::deadline_exceeded, message) {}
};
class DataLoss : public Error {
 public:
  explicit DataLoss(const std::string& message) : Error(StatusCode::data_loss, message) {}
};
class OutOfRange : public Error {
 public:
  explicit OutOfRange(const std::string& message) : Error(StatusCode::out_of_range, message) {}
};
class Internal : public Error {
 public:
  explicit Internal(const std::string& message) : Error(StatusCode::internal, message) {}
};

}  // namespace lockstep
