// The dashboard: one self-contained HTML page (inline CSS and SVG, no script,
// nothing fetched) over a catalog. `kiln serve` answers it at / and `kiln
// report --out FILE` writes the same page to a file.
//
// Sections: a summary and the best kernels; speedup over the baselines with
// 95% intervals; a roofline chart per target (each best kernel against the
// device's bandwidth and compute ceilings from configs/targets); failures by
// status with their messages; each kernel's history across nightly runs; per
// job, the latency of every candidate against its config and the best so far
// against evaluations. docs/operations.md lists the charts (data-chart ids).
//
// Threading: render_dashboard only reads; call it with the calling thread's
// Catalog. Failure: CatalogError from the reads.
#pragma once
#include <optional>
#include <string>

#include "catalog/catalog.h"
#include "catalog/service_reads.h"
#include "knowledge/targets.h"
#include "server/facts.h"

namespace kiln::server {

struct DashboardOptions {
  std::optional<std::string> batch_id;  // only this batch's jobs
  std::string source;                   // shown in the header (the catalog's path)
  std::string generated_at;             // shown in the header
  bool served = false;                  // links to the service's /api (false: a static file)
  int max_job_sections = 300;           // per-job charts for at most this many jobs (the newest)
};

// The time now as DashboardOptions::generated_at shows it: "YYYY-MM-DD HH:MM:SS UTC".
std::string utc_now_text();

std::string render_dashboard(reports::Reader& reader, const TargetRegistry& targets, Facts& facts,
                             const DashboardOptions& options);

}  // namespace kiln::server
