#include "metrics/nightly_metrics.h"

namespace kiln::metrics {

void publish_nightly(Registry& r, const std::vector<NightlyKernel>& kernels, double unix_s) {
  const auto G = Type::kGauge;
  r.define("kiln_nightly_time_seconds", G, "When the nightly finished, in unix seconds.");
  r.define("kiln_nightly_regressions", G, "Kernels the nightly found regressed against their previous best.");
  r.define("kiln_nightly_kernel_regressed", G,
           "1 when the kernel regressed against its previous best in the nightly (its exit 4), else 0.",
           {"op", "shape", "dtype", "target", "status"});
  r.define("kiln_nightly_kernel_latency_seconds", G, "The kernel's best latency after the nightly.",
           {"op", "shape", "dtype", "target", "basis"});
  int regressions = 0;
  for (const auto& k : kernels) {
    r.set("kiln_nightly_kernel_regressed", {k.op, k.shape, k.dtype, k.target, k.status}, k.regressed ? 1 : 0);
    if (k.latency_s) r.set("kiln_nightly_kernel_latency_seconds", {k.op, k.shape, k.dtype, k.target, k.basis}, *k.latency_s);
    regressions += k.regressed ? 1 : 0;
  }
  r.set("kiln_nightly_regressions", {}, regressions);
  r.set("kiln_nightly_time_seconds", {}, unix_s);
}

}  // namespace kiln::metrics
