// The read models behind `kiln status` and `kiln best`: typed rows, so the
// CLI formats and prints and never speaks SQL. Same threading rule as Catalog:
// one Catalog per thread; every SQLite failure throws CatalogError (a damaged
// catalog is an error, never an empty report).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

// ---- kiln status ----------------------------------------------------------------

struct BatchStatus {
  std::string id, name;
  double created_at = 0;
  long long jobs = 0, queued = 0, running = 0, done = 0, failed = 0;
};

struct FailedJob {
  long long id = 0;
  std::string op, dtype, target;
  nlohmann::json shape;
  std::optional<std::string> message;
};

struct StatusReport {
  std::vector<BatchStatus> batches;                  // by creation time
  std::map<std::string, long long> evaluations;      // evaluations per status
  std::vector<FailedJob> failed_jobs;                // by id
};

// The whole catalog, or one batch (its batch row, and only its jobs'
// evaluations and failures; batches is empty when there is no such batch).
StatusReport status_report(const Catalog& catalog, const std::optional<std::string>& batch = std::nullopt);

// ---- kiln best --------------------------------------------------------------------

struct BestReportRow {
  long long job_id = 0;
  std::string op, dtype, target, arch, state;
  nlohmann::json shape;
  std::optional<std::string> message;

  struct CodeObject {
    std::string kind, sha256, kernel_name;
    std::string bytes;                              // the code object
  };
  struct Best {
    long long candidate_id = 0;
    std::string basis;                              // measured | estimated
    double value_ms = 0;
    std::optional<std::string> device;              // unset when estimated
    std::optional<std::string> confirmed_run;
    nlohmann::json config;
    // The best candidate's evaluation (unset where it has none or lacks the field).
    std::optional<double> max_rel_err, p99_ms, mean_ms, occupancy;
    std::optional<std::string> exec_device;
    std::optional<long long> seeds, registers, spills, shared_bytes;
    std::optional<CodeObject> code_object;          // the artifact for the job's target
  };
  std::optional<Best> best;                         // unset: no best selected (yet)
};

struct BestFilter {
  std::optional<std::string> op, target, batch;
};

// Every job (matching the filter), ordered by op, target, dtype, id.
std::vector<BestReportRow> best_report(const Catalog& catalog, const BestFilter& filter = {});

}  // namespace kiln
