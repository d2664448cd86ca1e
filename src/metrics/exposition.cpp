#include "metrics/exposition.h"

#include <charconv>
#include <cmath>

namespace kiln::metrics {

namespace {
bool alpha_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
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

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

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
