// What `kiln nightly --metrics-file` adds to the run's metrics: per kernel it
// compared, whether it regressed against the previous best, and its latency
// now. configs/prometheus/alerts.yml alerts on kiln_nightly_kernel_regressed.
// Threading: as Registry.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "metrics/registry.h"

namespace kiln::metrics {

struct NightlyKernel {
  std::string op, shape, dtype, target;
  std::string status;                 // the report's: new | improved | same | regression | ...
  bool regressed = false;             // counts as a regression (kiln nightly's exit 4)
  std::optional<double> latency_s;    // its best now
  std::string basis;                  // measured | estimated (with latency_s)
};

// Defines the kiln_nightly_* families in `registry` and sets them: one series
// per kernel (by op, shape, dtype, target), the number of regressions, and
// `unix_s` as the nightly's time.
void publish_nightly(Registry& registry, const std::vector<NightlyKernel>& kernels, double unix_s);

}  // namespace kiln::metrics
