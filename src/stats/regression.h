// The nightly regression decision: is the kernel timed now slower than the
// one timed before, judged on their raw samples (not on one ratio of medians,
// which two runs of the same kernel move by several percent).
//
// Pure function; deterministic (stats.h's seeded bootstrap).
#pragma once
#include <string>
#include <vector>

#include "stats/stats.h"

namespace kiln::stats {

struct RegressionSettings {
  double alpha = 0.01;       // Mann-Whitney two-sided p below this: the samples differ
  double min_effect = 0.03;  // and the medians differ by more than this share
};

struct RegressionDecision {
  std::string verdict;       // regressed | improved | unchanged
  double ratio = 0;          // median(now) / median(previous)
  Interval ratio_ci;         // bootstrap 95% interval of that ratio (over the rounds where known)
  double p = 1;              // Mann-Whitney U, two-sided
  int n_previous = 0, n_now = 0;
};

// "regressed" when p < alpha AND ratio > 1 + min_effect; "improved" when
// p < alpha AND ratio < 1 / (1 + min_effect); else "unchanged". Both samples
// must be non-empty (std::invalid_argument otherwise).
// rounds_previous / rounds_now: the confirmation rounds each sample was taken
// in (0: not known). They shape ratio_ci only (bootstrap_ratio_ci_unpaired_rounds:
// a round's samples move together, so the calls alone claim a precision two
// runs do not have); the test, and so the verdict, is on the calls.
RegressionDecision decide_regression(const std::vector<double>& previous, const std::vector<double>& now,
                                     const RegressionSettings& settings = {}, size_t rounds_previous = 0,
                                     size_t rounds_now = 0);

}  // namespace kiln::stats
