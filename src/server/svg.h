// Charts as inline SVG, drawn in C++: what the dashboard (`kiln serve` /) and
// the static report (`kiln report`) show. No script, no external resource.
//
// Each chart is one <svg class="chart" data-chart="ID" data-series="N">, and
// each of its N series one <g class="series" data-name="NAME"> holding its
// marks (a line series: a <path>; a point series: <circle>s, a bar series:
// <rect>s, each with a <title> tooltip; error bars: <line>s). Tests count them.
// Pure functions; safe from any thread.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace kiln::server {

struct Point {
  double x = 0, y = 0;
  std::optional<double> lo, hi;  // an interval on y, drawn as an error bar
  std::string tip;               // the tooltip (<title>)
};

enum class Mark { kPoints, kLine, kStep, kBars };  // bars: from the axis' bottom to y, at category x

struct Series {
  std::string name;
  Mark mark = Mark::kPoints;
  std::vector<Point> points;
  std::string color;             // "" picks one from the palette by position
  bool dashed = false;
};

struct Axis {
  std::string label;
  bool log = false;
  std::optional<double> min, max;  // default: the data's range (padded)
  // Category labels at x = 0, 1, ... (instead of numbers); empty: numeric ticks.
  std::vector<std::string> categories;
};

struct Chart {
  std::string id;                // data-chart
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 640, height = 300;
};

// The chart's SVG. Points that cannot be drawn (non-finite, <= 0 on a log
// axis) are left out; a chart with no drawable point still has its axes and
// its (empty) series groups.
std::string render_svg(const Chart& chart);

// Text escaped for HTML/SVG content and attribute values.
std::string escape_xml(const std::string& text);

// A number in a short form: 3 significant digits, SI-free ("0.0123", "1.5e+06").
std::string short_number(double v);

}  // namespace kiln::server
