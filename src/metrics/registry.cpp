#include "metrics/registry.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "metrics/exposition.h"

namespace kiln::metrics {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

void Registry::define(const std::string& name, Type type, const std::string& help,
                      std::vector<std::string> label_names) {
  if (!valid_metric_name(name)) throw std::logic_error("invalid metric name '" + name + "'");
  if ((type == Type::kCounter) != ends_with(name, "_total"))
    throw std::logic_error("metric '" + name + "': counters, and only counters, end in _total");
  for (size_t i = 0; i < label_names.size(); ++i) {
    if (!valid_label_name(label_names[i]))
      throw std::logic_error("metric '" + name + "': invalid label name '" + label_names[i] + "'");
    if (std::find(label_names.begin(), label_names.begin() + static_cast<long>(i), label_names[i]) !=
        label_names.begin() + static_cast<long>(i))
      throw std::logic_error("metric '" + name + "': label '" + label_names[i] + "' twice");
  }
  std::lock_guard lock(mu_);
  if (families_.count(name)) throw std::logic_error("metric '" + name + "' defined twice");
  families_.emplace(name, Family{type, help, std::move(label_names), {}});
}

Registry::Family& Registry::family(const std::string& name, const LabelValues& labels) {
  auto it = families_.find(name);
  if (it == families_.end()) throw std::logic_error("metric '" + name + "' is not defined");
  if (labels.size() != it->second.label_names.size())
    throw std::logic_error("metric '" + name + "': " + std::to_string(labels.size()) + " label values for " +
                           std::to_string(it->second.label_names.size()) + " labels");
  return it->second;
}

void Registry::add(const std::string& name, const LabelValues& labels, double delta) {
  std::lock_guard lock(mu_);
  Family& f = family(name, labels);
  if (f.type == Type::kCounter && !(delta >= 0))
    throw std::logic_error("counter '" + name + "' cannot decrease");
  f.series[labels] += delta;
}

void Registry::set(const std::string& name, const LabelValues& labels, double value) {
  std::lock_guard lock(mu_);
  Family& f = family(name, labels);
  if (f.type != Type::kGauge) throw std::logic_error("set() on counter '" + name + "'");
  f.series[labels] = value;
}

void Registry::raise_to(const std::string& name, const LabelValues& labels, double total) {
  std::lock_guard lock(mu_);
  Family& f = family(name, labels);
  if (f.type != Type::kCounter) throw std::logic_error("raise_to() on gauge '" + name + "'");
  double& v = f.series[labels];
  if (total > v) v = total;
}

void Registry::remove(const std::string& name, const LabelValues& labels) {
  std::lock_guard lock(mu_);
  family(name, labels).series.erase(labels);
}

std::optional<double> Registry::value(const std::string& name, const LabelValues& labels) const {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return std::nullopt;
  auto s = it->second.series.find(labels);
  if (s == it->second.series.end()) return std::nullopt;
  return s->second;
}

std::string Registry::render() const {
  std::ostringstream out;
  std::lock_guard lock(mu_);
  for (const auto& [name, f] : families_) {
    out << "# HELP " << name << " " << escape_help(f.help) << "\n";
    out << "# TYPE " << name << " " << (f.type == Type::kCounter ? "counter" : "gauge") << "\n";
    for (const auto& [labels, v] : f.series) {
      out << name;
      if (!labels.empty()) {
        out << "{";
        for (size_t i = 0; i < labels.size(); ++i)
          out << (i ? "," : "") << f.label_names[i] << "=\"" << escape_label_value(labels[i]) << "\"";
        out << "}";
      }
      out << " " << format_value(v) << "\n";
    }
  }
  return out.str();
}

}  // namespace kiln::metrics
