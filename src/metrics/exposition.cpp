#include "metrics/exposition.h"

#include <charconv>
#include <cmath>

namespace kiln::metrics {

namespace {
bool alpha_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

// The exposition format's escapes: backslash and newline, and in label values
// the double quote.
std::string escaped(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (quote && c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}
}  // namespace

bool valid_metric_name(std::string_view name) {
  if (name.empty() || !(alpha_(name[0]) || name[0] == ':')) return false;
  for (char c : name)
    if (!(alpha_(c) || digit(c) || c == ':')) return false;
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || !alpha_(name[0]) || name.substr(0, 2) == "__") return false;
  for (char c : name)
    if (!(alpha_(c) || digit(c))) return false;
  return true;
}

std::string escape_label_value(std::string_view value) { return escaped(value, true); }

std::string escape_help(std::string_view help) { return escaped(help, false); }

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(value));
    return std::string(buf, r.ptr);
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, value);  // shortest round trip
  return std::string(buf, r.ptr);
}

}  // namespace kiln::metrics
