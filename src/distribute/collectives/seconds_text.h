#pragma once
// How the collectives write a duration in their error messages: the shortest form of the number
// ("30", "0.5", "1e-06"), as the user wrote the timeout (internal header).
#include <cstdio>
#include <string>

namespace lockstep::distribute::detail {

inline std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  return buf;
}

}  // namespace lockstep::distribute::detail
