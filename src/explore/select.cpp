#include "explore/select.h"

#include <map>

#include "catalog/evaluations.h"

namespace kiln {

Selection select_best(const Catalog& catalog, long long job_id, const Target& target) {
  Selection sel;
  std::optional<BestRow> measured, estimated;
  std::map<std::string, int> failures;
  for (const JobEvaluation& e : evaluations(catalog, job_id)) {
    ++sel.evaluated;
    const long long cid = e.candidate.id;
    if (e.status != "ok") {
      ++failures[e.status];
      continue;
    }
    ++sel.correct;
    if (e.bench_device && e.median_ms) {
      const std::string& device = *e.bench_device;
      const double median = *e.median_ms;
      if (TargetRegistry::matches_device(target, device) && (!measured || median < measured->value_ms))
        measured = BestRow{job_id, cid, "measured", median, device};
    }
    if (e.estimate_ms) {
      const double est = *e.estimate_ms;
      if (!estimated || est < estimated->value_ms) estimated = BestRow{job_id, cid, "estimated", est, ""};
    }
  }
  sel.best = measured ? measured : estimated;
  for (const auto& [status, n] : failures) {
    if (!sel.failure_summary.empty()) sel.failure_summary += ", ";
    sel.failure_summary += std::to_string(n) + " " + status;
  }
  return sel;
}

}  // namespace kiln
