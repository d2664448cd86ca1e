// The Prometheus text exposition format, version 0.0.4: the pieces of a line.
// https://prometheus.io/docs/instrumenting/exposition_formats/
// Pure functions, no state; safe from any thread.
#pragma once
#include <string>
#include <string_view>

namespace kiln::metrics {

// The Content-Type of a scrape's answer.
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// A metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
bool valid_metric_name(std::string_view name);
// A label name: [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved).
bool valid_label_name(std::string_view name);

// A label value inside double quotes: \ -> \\, " -> \", newline -> \n.
std::string escape_label_value(std::string_view value);
// HELP text: \ -> \\, newline -> \n (quotes stay).
std::string escape_help(std::string_view help);
// A sample value: integers without a fraction ("3"), others the shortest
// text that reads back as the same double, NaN, +Inf, -Inf.
std::string format_value(double value);

}  // namespace kiln::metrics
