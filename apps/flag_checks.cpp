#include "flag_checks.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace lockstep::apps {
namespace {

// The value as the user typed it, quoted when it is not a number.
std::string in_quotes(const std::string& input) {
  return "'" + input + "'";
}

// Integers are compared as written, digit by digit, so that a value beyond int64 (a typo with
// extra digits) is reported as too large rather than as not a number.
bool is_decimal_integer(const std::string& input) {
  size_t i = input.starts_with('-') || input.starts_with('+') ? 1 : 0;
  if (i == input.size()) return false;
  for (; i < input.size(); ++i) {
    if (input[i] < '0' || input[i] > '9') return false;
  }
  return true;
}

}  // namespace

CLI::Validator integer_in_range(const std::string& flag, int64_t min, int64_t max,
                                bool max_is_type_limit) {
  const std::string between = "between " + std::to_string(min) + " and " + std::to_string(max);
  const std::string below = max_is_type_limit ? "≥ " + std::to_string(min) : between;
  const std::string above = max_is_type_limit ? "≤ " + std::to_string(max) : between;
  return CLI::Validator(
      [flag, min, max, below, above](std::string& input) -> std::string {
        if (!is_decimal_integer(input)) {
          throw FlagError(flag + " must be an integer " + below + ", got " + in_quotes(input));
        }
        const bool negative = input.starts_with('-');
        int64_t value = 0;
        const char* begin = input.data() + (input.starts_with('+') ? 1 : 0);
        auto [ptr, error] = std::from_chars(begin, input.data() + input.size(), value);
        // Out of int64's range: too small when negative, too large otherwise.
        if (error != std::errc() ? negative : value < min) {
          throw FlagError(flag + " must be " + below + ", got " + input);
        }
        if (error != std::errc() || value > max) {
          throw FlagError(flag + " must be " + above + ", got " + input);
        }
        return {};
      },
      below, flag);
}

CLI::Validator unsigned_integer(const std::string& flag) {
  return CLI::Validator(
      [flag](std::string& input) -> std::string {
        if (!is_decimal_integer(input)) {
          throw FlagError(flag + " must be an integer ≥ 0, got " + in_quotes(input));
        }
        if (input.starts_with('-')) {
          throw FlagError(flag + " must be ≥ 0, got " + input);
        }
        uint64_t value = 0;
        const char* begin = input.data() + (input.starts_with('+') ? 1 : 0);
        auto [ptr, error] = std::from_chars(begin, input.data() + input.size(), value);
        if (error != std::errc()) {
          throw FlagError(flag + " must be ≤ " +
                          std::to_string(std::numeric_limits<uint64_t>::max()) + ", got " + input);
        }
        return {};
      },
      "≥ 0", flag);
}

CLI::Validator number_at_least(const std::string& flag, double min) {
  std::ostringstream limit;
  limit << min;
  const std::string words = "≥ " + limit.str();
  return CLI::Validator(
      [flag, min, words](std::string& input) -> std::string {
        double value = 0;
        const char* end = input.data() + input.size();
        auto [ptr, error] = std::from_chars(input.data(), end, value);
        if (input.empty() || error != std::errc() || ptr != end || !std::isfinite(value)) {
          throw FlagError(flag + " must be a number " + words + ", got " + in_quotes(input));
        }
        if (value < min) throw FlagError(flag + " must be " + words + ", got " + input);
        return {};
      },
      words, flag);
}

}  // namespace lockstep::apps
