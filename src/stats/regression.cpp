#include "stats/regression.h"

namespace kiln::stats {

RegressionDecision decide_regression(const std::vector<double>& previous, const std::vector<double>& now,
                                     const RegressionSettings& s, size_t rounds_previous, size_t rounds_now) {
  RegressionDecision d;
  d.n_previous = static_cast<int>(previous.size());
  d.n_now = static_cast<int>(now.size());
  const double before = median(previous), after = median(now);
  d.ratio = before > 0 ? after / before : 1;
  d.ratio_ci = bootstrap_ratio_ci_unpaired_rounds(now, rounds_now, previous, rounds_previous);
  d.p = mann_whitney_u(now, previous).p;
  if (d.p < s.alpha && d.ratio > 1 + s.min_effect) d.verdict = "regressed";
  else if (d.p < s.alpha && d.ratio < 1 / (1 + s.min_effect)) d.verdict = "improved";
  else d.verdict = "unchanged";
  return d;
}

}  // namespace kiln::stats
