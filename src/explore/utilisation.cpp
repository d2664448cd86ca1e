#include "explore/utilisation.h"

#include <algorithm>


namespace kiln {

void DriverUtilisation::take(size_t gpu, CheckedAnswer& answer) {
  auto& samples = answer.typed.result.timings.util_samples;
  if (gpu < samples_.size())
    for (const auto& [t, pct] : samples)
      if (pct >= 0 && pct <= 100) samples_[gpu][t] = pct;
  samples.clear();
  drop_util_samples(answer.typed.result.raw);
  drop_util_samples(answer.outcome.reply);
}

void drop_util_samples(nlohmann::json& answer) {
  nlohmann::json* r = &answer;
  if (r->is_object() && r->contains("result") && (*r)["result"].is_object()) r = &(*r)["result"];
  if (r->is_object() && r->contains("timings") && (*r)["timings"].is_object()) (*r)["timings"].erase("util_samples");
}

std::optional<DriverUtilisation::Figure> DriverUtilisation::figure(size_t gpu, double from, double to) const {
  if (gpu >= samples_.size() || !(to > from)) return std::nullopt;
  const auto& m = samples_[gpu];
  double sum = 0, first = 0, last = 0;
  size_t n = 0;
  for (auto it = m.lower_bound(from); it != m.end() && it->first <= to; ++it) {
    if (n == 0) first = it->first;
    last = it->first;
    sum += it->second;
    ++n;
  }
  if (n == 0) return std::nullopt;
  Figure f;
  f.fraction = sum / static_cast<double>(n) / 100.0;
  f.samples = n;
  f.coverage = std::clamp((last - first) / (to - from), 0.0, 1.0);
  return f;
}

std::optional<DriverUtilisation::Figure> DriverUtilisation::overall(double from, double to) const {
  Figure all;
  size_t gpus = 0;
  double sum = 0;
  all.coverage = 1;
  for (size_t g = 0; g < samples_.size(); ++g)
    if (auto f = figure(g, from, to)) {
      ++gpus;
      sum += f->fraction;
      all.samples += f->samples;
      all.coverage = std::min(all.coverage, f->coverage);
    }
  if (gpus == 0) return std::nullopt;
  all.fraction = sum / static_cast<double>(gpus);
  return all;
}

}  // namespace kiln
