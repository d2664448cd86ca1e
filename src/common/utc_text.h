// A unix time as UTC text in a strftime format: utc_text(t, "%Y-%m-%dT%H:%M:%SZ")
// -> "2026-12-03T14:05:09Z". Pure; thread-safe (gmtime_r, no shared state).
#pragma once
#include <time.h>

#include <ctime>
#include <string>

namespace kiln {

// `unix_s` (seconds, fractions dropped) in UTC, formatted by std::strftime;
// "" when the text would exceed 63 characters.
inline std::string utc_text(double unix_s, const char* format) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof buf, format, &tm));
}

}  // namespace kiln
