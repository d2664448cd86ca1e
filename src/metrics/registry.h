// A small metrics registry: named families of counters and gauges, each with
// a fixed list of label names, rendered in the Prometheus text format 0.0.4.
//
// Threading: every method may be called from any thread; one mutex guards
// the families (the explorer publishes from its io thread while the HTTP
// server renders from its own). Values are doubles.
//
// Failure: misuse is a programming error and throws std::logic_error (an
// invalid or twice-defined name, an unknown family, the wrong number of label
// values, a counter decreased, set() on a counter). Nothing is changed then.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiln::metrics {

enum class Type { kCounter, kGauge };

using LabelValues = std::vector<std::string>;  // in the family's label-name order

class Registry {
 public:
  // Declares a family. Counters' names must end in "_total" (the convention
  // promtool checks); gauges' must not.
  void define(const std::string& name, Type type, const std::string& help,
              std::vector<std::string> label_names = {});

  // Counter or gauge += delta (a counter's delta must be >= 0). Creates the
  // series at 0 first.
  void add(const std::string& name, const LabelValues& labels, double delta);
  // Gauge = value.
  void set(const std::string& name, const LabelValues& labels, double value);
  // Counter = max(counter, total): for totals recomputed from their source
  // (e.g. the union of GPU spans so far), which never go back.
  void raise_to(const std::string& name, const LabelValues& labels, double total);
  // Drops one series (e.g. a job that is no longer running); no-op if absent.
  void remove(const std::string& name, const LabelValues& labels);

  // The series' value, if it exists.
  std::optional<double> value(const std::string& name, const LabelValues& labels = {}) const;

  // Everything in the text format: families by name, each with its HELP and
  // TYPE lines (also when it has no series yet), series by label values.
  std::string render() const;

 private:
  struct Family {
    Type type;
    std::string help;
    std::vector<std::string> label_names;
    std::map<LabelValues, double> series;
  };
  Family& family(const std::string& name, const LabelValues& labels);  // mutex held

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace kiln::metrics
