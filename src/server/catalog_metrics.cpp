#include "server/catalog_metrics.h"

#include <map>
#include <set>

#include "common/shape_text.h"
#include "catalog/job_key.h"
#include "catalog/service_reads.h"
#include "metrics/registry.h"

namespace kiln::server {

std::string render_catalog_metrics(reports::Reader& reader, Facts& facts) {
  using metrics::Type;
  metrics::Registry r;
  r.define("kiln_catalog_jobs", Type::kGauge, "Jobs in the catalog by state.", {"state"});
  r.define("kiln_catalog_kernels", Type::kGauge, "Kernels (op, shape, dtype, target) with a best.");
  r.define("kiln_catalog_kernel_latency_seconds", Type::kGauge,
           "The kernel's best latency: measured median on a device of the target's kind, or the static model's estimate.",
           {"op", "shape", "dtype", "target", "basis"});
  r.define("kiln_catalog_kernel_confirmed_latency_seconds", Type::kGauge,
           "The confirmation round's median of the kernel (timed again with the finalists and baselines).",
           {"op", "shape", "dtype", "target", "device", "bound"});
  r.define("kiln_catalog_kernel_speedup_ratio", Type::kGauge,
           "Baseline median over the kernel's median in its confirmation round.",
           {"op", "shape", "dtype", "target", "baseline", "bound"});
  r.define("kiln_catalog_kernel_regressed", Type::kGauge,
           "1 when the kernel's newest run regressed against its previous one (kiln nightly's decision), else 0.",
           {"op", "shape", "dtype", "target", "status"});
  r.define("kiln_catalog_kernel_runs", Type::kGauge, "Runs of the kernel in the catalog (its nightly history).",
           {"op", "shape", "dtype", "target"});

  for (const char* s : {"queued", "running", "done", "failed"}) r.set("kiln_catalog_jobs", {s}, 0);
  for (const auto& [state, n] : reader.catalog().job_state_counts()) r.set("kiln_catalog_jobs", {state}, static_cast<double>(n));

  // every kernel's runs in one read (not one per kernel)
  const auto histories = reports::kernel_histories(reader);
  const std::vector<reports::BestKernel> no_runs;
  std::set<std::vector<std::string>> seen;
  int kernels = 0;
  for (const auto& k : reports::best_kernels(reader, {})) {  // newest first: the first of a kernel wins
    const std::vector<std::string> id{k.job.op, shape_text(k.job.shape), k.job.dtype, k.job.target};
    if (!seen.insert(id).second) continue;
    ++kernels;
    const auto& [op, shape, dtype, target] = std::tie(id[0], id[1], id[2], id[3]);
    r.set("kiln_catalog_kernel_latency_seconds", {op, shape, dtype, target, k.best.basis}, k.best.value_ms / 1000);
    const auto c = facts.confirmed(reader.catalog(), k.best);
    if (c) {
      r.set("kiln_catalog_kernel_confirmed_latency_seconds", {op, shape, dtype, target, c->device, "median"}, c->median_ms / 1000);
      r.set("kiln_catalog_kernel_confirmed_latency_seconds", {op, shape, dtype, target, c->device, "ci95_lo"}, c->ci.lo / 1000);
      r.set("kiln_catalog_kernel_confirmed_latency_seconds", {op, shape, dtype, target, c->device, "ci95_hi"}, c->ci.hi / 1000);
      for (const auto& b : c->baselines) {
        r.set("kiln_catalog_kernel_speedup_ratio", {op, shape, dtype, target, b.name, "median"}, b.speedup);
        r.set("kiln_catalog_kernel_speedup_ratio", {op, shape, dtype, target, b.name, "ci95_lo"}, b.speedup_ci.lo);
        r.set("kiln_catalog_kernel_speedup_ratio", {op, shape, dtype, target, b.name, "ci95_hi"}, b.speedup_ci.hi);
      }
    }
    const auto found = histories.find(
        {k.job.op, canonical_json(k.job.shape), k.job.dtype, canonical_json(k.job.params), k.job.target});
    const auto& hist = found == histories.end() ? no_runs : found->second;
    const reports::BestKernel* prev = nullptr;
    for (size_t i = 1; i < hist.size(); ++i)
      if (hist[i].job.id == k.job.id) prev = &hist[i - 1];
    const Regression reg = facts.regression(reader.catalog(), prev, k);
    r.set("kiln_catalog_kernel_regressed", {op, shape, dtype, target, reg.status}, reg.regressed ? 1 : 0);
    r.set("kiln_catalog_kernel_runs", {op, shape, dtype, target}, static_cast<double>(hist.size()));
  }
  r.set("kiln_catalog_kernels", {}, kernels);
  return r.render();
}

}  // namespace kiln::server
