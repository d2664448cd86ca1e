#include "server/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kiln::server {

namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double a = 0, b = 1;  // pixel range
  double operator()(double v) const {
    const double t = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
    return a + t * (b - a);
  }
};

Scale make_scale(const Axis& axis, std::vector<double> values, double a, double b) {
  Scale s;
  s.log = axis.log;
  s.a = a;
  s.b = b;
  values.erase(std::remove_if(values.begin(), values.end(), [&](double v) { return !drawable(v, axis.log); }),
               values.end());
  double lo = values.empty() ? (axis.log ? 1 : 0) : *std::min_element(values.begin(), values.end());
  double hi = values.empty() ? (axis.log ? 10 : 1) : *std::max_element(values.begin(), values.end());
  if (axis.log) {
    if (hi <= lo) {
      lo /= 2;
      hi *= 2;
    } else {
      const double pad = std::pow(hi / lo, 0.05);
      lo /= pad;
      hi *= pad;
    }
  } else {
    if (hi <= lo) {
      lo -= 0.5;
      hi += 0.5;
    } else {
      const double pad = (hi - lo) * 0.05;
      lo -= pad;
      hi += pad;
    }
  }
  if (axis.min && drawable(*axis.min, axis.log)) lo = *axis.min;
  if (axis.max && drawable(*axis.max, axis.log)) hi = *axis.max;
  if (hi <= lo) hi = axis.log ? lo * 10 : lo + 1;
  s.lo = lo;
  s.hi = hi;
  return s;
}

std::vector<double> ticks(const Scale& s) {
  std::vector<double> out;
  if (s.log) {
    for (double p = std::floor(std::log10(s.lo)); p <= std::ceil(std::log10(s.hi)); p += 1) {
      const double v = std::pow(10, p);
      if (v >= s.lo && v <= s.hi) out.push_back(v);
    }
    if (out.size() < 3) {  // under three decades: 1, 2 and 5 of each
      out.clear();
      for (double p = std::floor(std::log10(s.lo)); p <= std::ceil(std::log10(s.hi)); p += 1)
        for (double m : {1.0, 2.0, 5.0}) {
          const double v = m * std::pow(10, p);
          if (v >= s.lo && v <= s.hi) out.push_back(v);
        }
    }
    if (out.size() >= 3) return out;
    out.clear();  // a narrow range: evenly spaced values, placed on the log scale
  }
  const double span = s.hi - s.lo;
  const double raw = span / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(s.lo / step) * step; v <= s.hi + step * 1e-9; v += step) out.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string render_svg(const Chart& c) {
  // right: the legend, and room for the last slanted category label
  const double left = 64, right = (c.x.categories.empty() ? 16 : 110) + (c.series.size() > 1 ? 150 : 0), top = 28;
  const double bottom = c.x.categories.empty() ? 48 : 96;  // room for the slanted category labels
  const double w = c.width, h = c.height;
  std::vector<double> xs, ys;
  for (const auto& s : c.series)
    for (const auto& p : s.points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
      if (p.lo) ys.push_back(*p.lo);
      if (p.hi) ys.push_back(*p.hi);
    }
  Axis xaxis = c.x;
  if (!xaxis.categories.empty()) {
    xaxis.log = false;
    if (!xaxis.min) xaxis.min = -0.5;
    if (!xaxis.max) xaxis.max = static_cast<double>(xaxis.categories.size()) - 0.5;
  }
  const Scale sx = make_scale(xaxis, xs, left, w - right);
  const Scale sy = make_scale(c.y, ys, h - bottom, top);
  auto in_x = [&](double v) { return drawable(v, sx.log) && v >= sx.lo - 1e-12 * std::abs(sx.lo) && v <= sx.hi * (1 + 1e-12) + 1e-12; };
  auto in_y = [&](double v) { return drawable(v, sy.log); };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-chart=\"" << escape_xml(c.id)
    << "\" data-series=\"" << c.series.size() << "\" width=\"" << c.width << "\" height=\"" << c.height
    << "\" viewBox=\"0 0 " << c.width << " " << c.height << "\" role=\"img\" aria-label=\"" << escape_xml(c.title)
    << "\">\n";
  o << "<title>" << escape_xml(c.title) << "</title>\n";
  o << "<rect x=\"0\" y=\"0\" width=\"" << c.width << "\" height=\"" << c.height << "\" fill=\"#fff\"/>\n";
  o << "<text x=\"" << fmt(left) << "\" y=\"16\" font-size=\"13\" font-weight=\"bold\">" << escape_xml(c.title)
    << "</text>\n";
  // axes and grid
  o << "<g class=\"axes\" font-size=\"10\" fill=\"#444\" stroke=\"none\">\n";
  for (double t : ticks(sy)) {
    const double y = sy(t);
    o << "<line x1=\"" << fmt(left) << "\" x2=\"" << fmt(w - right) << "\" y1=\"" << fmt(y) << "\" y2=\"" << fmt(y)
      << "\" stroke=\"#e4e4e4\"/><text x=\"" << fmt(left - 4) << "\" y=\"" << fmt(y + 3)
      << "\" text-anchor=\"end\">" << short_number(t) << "</text>\n";
  }
  if (!xaxis.categories.empty()) {
    const size_t n = xaxis.categories.size();
    const size_t every = std::max<size_t>(1, n / 24 + (n % 24 ? 1 : 0));
    for (size_t i = 0; i < n; i += every) {
      const double x = sx(static_cast<double>(i));
      o << "<text transform=\"translate(" << fmt(x) << "," << fmt(h - bottom + 10)
        << ") rotate(30)\" font-size=\"9\">" << escape_xml(xaxis.categories[i].substr(0, 24)) << "</text>\n";
    }
  } else {
    for (double t : ticks(sx)) {
      const double x = sx(t);
      o << "<line x1=\"" << fmt(x) << "\" x2=\"" << fmt(x) << "\" y1=\"" << fmt(top) << "\" y2=\"" << fmt(h - bottom)
        << "\" stroke=\"#f0f0f0\"/><text x=\"" << fmt(x) << "\" y=\"" << fmt(h - bottom + 14)
        << "\" text-anchor=\"middle\">" << short_number(t) << "</text>\n";
    }
  }
  o << "<line x1=\"" << fmt(left) << "\" x2=\"" << fmt(w - right) << "\" y1=\"" << fmt(h - bottom) << "\" y2=\""
    << fmt(h - bottom) << "\" stroke=\"#444\"/>\n";
  o << "<line x1=\"" << fmt(left) << "\" x2=\"" << fmt(left) << "\" y1=\"" << fmt(top) << "\" y2=\"" << fmt(h - bottom)
    << "\" stroke=\"#444\"/>\n";
  o << "<text x=\"" << fmt((left + w - right) / 2) << "\" y=\"" << fmt(h - 6) << "\" text-anchor=\"middle\">"
    << escape_xml(c.x.label) << "</text>\n";
  o << "<text transform=\"translate(12," << fmt((top + h - bottom) / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
    << escape_xml(c.y.label) << "</text>\n";
  o << "</g>\n";
  // series
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    const std::string color = s.color.empty() ? kPalette[i % (sizeof kPalette / sizeof *kPalette)] : s.color;
    o << "<g class=\"series\" data-name=\"" << escape_xml(s.name) << "\" data-points=\"" << s.points.size()
      << "\" stroke=\"" << color << "\" fill=\"" << color << "\">\n";
    if (s.mark == Mark::kBars) {
      const double n = static_cast<double>(std::max<size_t>(1, c.series.size()));
      const double slot = std::abs(sx(1) - sx(0)) * 0.8;
      const double bw = std::max(2.0, slot / n);
      for (const auto& p : s.points) {
        if (!in_x(p.x) || !in_y(p.y)) continue;
        const double x = sx(p.x) - slot / 2 + bw * static_cast<double>(i), y = sy(p.y);
        const double base = h - bottom;
        o << "<rect x=\"" << fmt(x) << "\" y=\"" << fmt(std::min(y, base)) << "\" width=\"" << fmt(bw)
          << "\" height=\"" << fmt(std::abs(base - y)) << "\" stroke=\"none\">";
        if (!p.tip.empty()) o << "<title>" << escape_xml(p.tip) << "</title>";
        o << "</rect>\n";
      }
    } else if (s.mark == Mark::kPoints) {
      for (const auto& p : s.points) {
        if (!in_x(p.x) || !in_y(p.y)) continue;
        const double x = sx(p.x), y = sy(p.y);
        if (p.lo && p.hi && in_y(*p.lo) && in_y(*p.hi))
          o << "<line x1=\"" << fmt(x) << "\" x2=\"" << fmt(x) << "\" y1=\"" << fmt(sy(*p.lo)) << "\" y2=\""
            << fmt(sy(*p.hi)) << "\" stroke-width=\"1.5\"/>";
        o << "<circle cx=\"" << fmt(x) << "\" cy=\"" << fmt(y) << "\" r=\"3.5\" fill-opacity=\"0.75\" stroke=\"none\">";
        if (!p.tip.empty()) o << "<title>" << escape_xml(p.tip) << "</title>";
        o << "</circle>\n";
      }
    } else {
      std::string d;
      bool first = true;
      double prev_y = 0;
      for (const auto& p : s.points) {
        if (!in_x(p.x) || !in_y(p.y)) continue;
        const double x = sx(p.x), y = sy(p.y);
        if (first) {
          d += "M" + fmt(x) + " " + fmt(y);
        } else {
          if (s.mark == Mark::kStep) d += " L" + fmt(x) + " " + fmt(prev_y);
          d += " L" + fmt(x) + " " + fmt(y);
        }
        prev_y = y;
        first = false;
      }
      if (!d.empty())
        o << "<path d=\"" << d << "\" fill=\"none\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6 4\"" : "")
          << "/>\n";
      for (const auto& p : s.points) {  // hover targets for the labelled vertices
        if (p.tip.empty() || !in_x(p.x) || !in_y(p.y)) continue;
        o << "<circle cx=\"" << fmt(sx(p.x)) << "\" cy=\"" << fmt(sy(p.y)) << "\" r=\"2.5\" stroke=\"none\"><title>"
          << escape_xml(p.tip) << "</title></circle>\n";
      }
    }
    o << "</g>\n";
  }
  // legend
  if (c.series.size() > 1) {
    o << "<g class=\"legend\" font-size=\"10\">\n";
    for (size_t i = 0; i < c.series.size(); ++i) {
      const Series& s = c.series[i];
      const std::string color = s.color.empty() ? kPalette[i % (sizeof kPalette / sizeof *kPalette)] : s.color;
      const double y = top + 4 + 14 * static_cast<double>(i);
      o << "<rect x=\"" << fmt(w - right + 8) << "\" y=\"" << fmt(y) << "\" width=\"10\" height=\"10\" fill=\"" << color
        << "\"/><text x=\"" << fmt(w - right + 22) << "\" y=\"" << fmt(y + 9) << "\">" << escape_xml(s.name.substr(0, 26))
        << "</text>\n";
    }
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace kiln::server
