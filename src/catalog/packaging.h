// What `kiln package` reads from the catalog and what `kiln
// import-measurements` writes to it (db/migrations/0006_imported_measurements.sql).
// Free functions over a Catalog (catalog.h): the catalog alone speaks SQL.
// Same threading rule as Catalog: one Catalog per thread.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln {

// One candidate's code object for a job's target, with what ranked it.
struct PackageCandidate {
  long long candidate_id = 0;
  nlohmann::json config;
  std::string kind, sha256, kernel_name;   // artifact
  nlohmann::json metadata;                 // artifacts.metadata (what evaluate returned)
  std::string bytes;                       // the code object (checked against sha256)
  std::optional<double> estimate_ms;       // static model
};

// A finished job with a selected kernel for the target.
struct PackageJob {
  long long job_id = 0;
  std::string key, op, dtype, target, arch;
  nlohmann::json shape, params, spec;
  std::string basis;                       // measured | estimated
  double value_ms = 0;
  std::string device;                      // measuring device ("" when estimated)
  nlohmann::json measured_on;              // {"device","driver","uuid"} or null
  nlohmann::json confirmed;                // confirmed_summary() of the best's confirmation, or null
  // [0] the selected candidate; for an estimated job then up to
  // shortlist_max - 1 more correct candidates with an artifact, by estimate
  // (however far from the selected one's: the caller picks the shortlist).
  std::vector<PackageCandidate> candidates;
};

// The done jobs of `target` with a best row, ordered by op, id: every such
// job, or only those of `only_jobs` (ids; kiln nightly packages its manifest's
// jobs, not a superseded key of the same kernel). Throws CatalogError on
// SQLite errors, and when a stored code object does not match its checksum.
std::vector<PackageJob> package_jobs(const Catalog& catalog, const std::string& target, int shortlist_max = 8,
                                     const std::optional<std::vector<long long>>& only_jobs = std::nullopt);

// The manifest's `confirmed` for a best whose confirmation round timed it on a
// device (table confirmations, the confirmation round's migration): the round's
// median, the 95% interval of the median from the raw samples (float32
// little-endian; the percentile bootstrap `kiln best` shows, src/stats; null
// with fewer than 6 samples) and the sample count as runs. package_jobs adds
// `flush_bytes` (confirmed_flush_bytes), `sm_clock_mhz`
// (confirmed_sm_clock_mhz) and `power_limited` (confirmed_power_limited)
// where the round recorded them.
// `rounds`: the rounds the samples were taken in (confirmation_rounds), what
// the interval resamples (stats::bootstrap_median_ci_rounds).
nlohmann::json confirmed_summary(double median_ms, const std::string& samples_f32le, size_t rounds = 1);

// The L2 flush the confirmation round wrote before each timed call (its
// conditions' `l2_flush_bytes`), or nullopt where the conditions do not say
// (a CPU round, an older catalog; unparsable text, parsed without exceptions
// into a discarded value, says nothing either): a deployment's
// timing flushes as much, so that a kernel at the GPU's power limit rests as
// long between calls as it did when its number was taken.
std::optional<long long> confirmed_flush_bytes(const nlohmann::json& conditions);

// The SM clock the confirmation ran at: the median of its rounds' NVML
// readings at the start and the end of each round (conditions
// `rounds[].start.sm_clock_mhz`, `rounds[].end.sm_clock_mhz`; numbers above
// 0 only), or nullopt where no round has one (a CPU round, no NVML, an older
// catalog, unparsable text). kiln-rt bench prints it beside its own reading,
// so that a deployment sees the clock a ratio was taken at.
std::optional<double> confirmed_sm_clock_mhz(const nlohmann::json& conditions);

// Whether the confirmation found the kernel at the GPU's power limit
// (conditions `sustained.power_limited`), or nullopt where it does not say.
std::optional<bool> confirmed_power_limited(const nlohmann::json& conditions);

// One kernel timed on a deployment node (`kiln-rt tune`).
struct ImportedKernel {
  std::string job_key;                     // a job of the kernel instance timed
  std::vector<std::string> targets;        // the target names the file's target may mean (empty: any)
  std::string target_text;                 // that target as the file wrote it (messages)
  long long candidate_id = 0;
  double median_ms = 0;
  std::vector<double> samples;
};
struct MeasurementsIn {
  std::string source;                      // the file, for the record
  std::string device, driver, uuid;
  nlohmann::json versions = nlohmann::json::object();
  std::vector<ImportedKernel> kernels;
};
struct ImportStats {
  int measurements = 0;                    // rows written
  int jobs = 0;                            // distinct jobs touched
  int best_changed = 0;                    // jobs whose best changed
};

// Records every kernel (replacing an earlier import of the same candidate on
// the same device) and re-selects the best of each job touched: the fastest
// of the job's imported measurements (each candidate and device at its latest
// value) and a measured best of the engine's own; an estimated best is always
// replaced. One transaction: on any error
// nothing is written. The candidate decides the job (a package's kernel names
// one job key for all its targets). Throws CatalogError naming the kernel
// (index, job key) when the job key or the candidate is unknown, the
// candidate is another kernel instance's, its job's target is not one of
// `targets`, or it has no correct evaluation.
ImportStats import_measurements(Catalog& catalog, const MeasurementsIn& in);

}  // namespace kiln
