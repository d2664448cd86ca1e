// `kiln serve`'s /metrics: catalog-level gauges in the Prometheus text format
// (src/metrics' registry). Per kernel -- the newest done job of each (op,
// shape, dtype, target) with a best -- its latency, its confirmed median,
// its speedup over each baseline, and its regression status against its
// previous run (the decision kiln nightly makes, recomputed from the
// catalog); and the jobs by state. docs/operations.md lists the families.
//
// Threading: as render_dashboard (reads with the caller's Catalog).
#pragma once
#include <string>

#include "catalog/catalog.h"
#include "catalog/service_reads.h"
#include "server/facts.h"

namespace kiln::server {

std::string render_catalog_metrics(reports::Reader& reader, Facts& facts);

}  // namespace kiln::server
