#pragma once
// Numeric flags whose range errors read as a sentence a user can act on:
//
//   --batch-size must be ≥ 1, got 0
//   --verbose must be between 0 and 2, got 5
//   --epochs must be ≤ 2147483647, got 99999999999
//   --timeout must be a number ≥ 0, got 'soon'
//
// CLI11's own Range validators print the limits of a double ("0.000000 to 1797693134862315708...")
// after the option name. These validators throw FlagError instead, which CLI11 does not rewrap, so
// main prints the message as it is.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace lockstep::apps {

class FlagError : public CLI::ParseError {
 public:
  explicit FlagError(const std::string& message)
      : CLI::ParseError(message, CLI::ExitCodes::ValidationError) {}
};

// Accepts a decimal integer in [min, max]; `flag` names the option in the message. With
// `max_is_type_limit`, max is only the limit of the variable's type: a value below min reads
// "must be ≥ min", one above max "must be ≤ max"; otherwise both read "must be between min and
// max".
CLI::Validator integer_in_range(const std::string& flag, int64_t min, int64_t max,
                                bool max_is_type_limit);
// Accepts a decimal integer in [0, 2^64 - 1] (seeds).
CLI::Validator unsigned_integer(const std::string& flag);
// Accepts a finite number ≥ min.
CLI::Validator number_at_least(const std::string& flag, double min);

// Adds integer option `flag` bound to `value`, accepting [min, max] (no max: up to the largest T).
template <typename T>
CLI::Option* add_integer_option(CLI::App& cmd, const std::string& flag, T& value,
                                const std::string& description, int64_t min,
                                std::optional<int64_t> max = std::nullopt) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>);
  const int64_t limit = static_cast<int64_t>(std::numeric_limits<T>::max());
  return cmd.add_option(flag, value, description)
      ->check(integer_in_range(flag, min, max.value_or(limit), !max.has_value()));
}

}  // namespace lockstep::apps
