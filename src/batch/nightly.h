// kiln nightly's workflow: regeneration of a kernel set, for cron or Slurm
// (scripts/slurm/nightly.sbatch; docs/cluster.md, "Nightly").
//
//   1. submit the manifest (idempotent: keys already in the catalog add nothing);
//   2. run the manifest's jobs that are not done: a job key covers the manifest
//      entry, the template's sha256, the Triton version and the target document,
//      so exactly the jobs whose inputs changed are new keys and run, the rest
//      are done already and cost nothing;
//   3. compare every job's best with the previous best of "the same job": the
//      most recent older done job (created before it) with a best and the same
//      (op, shape, dtype, params, target) but another key. Measured and
//      estimated values are never compared ("not comparable"). Regressed: where
//      both bests have raw samples from a confirmation round, Mann-Whitney U
//      p < 0.01 and the median more than min_effect slower
//      (stats/regression.h); otherwise the median more than threshold slower;
//   4. package the targets whose kernels changed and did not regress
//      (package_dir/<target>, only this manifest's jobs).
//
// Threading: the calling thread, plus the run's (explore/explorer.h).
// Ownership: everything in the report is a value.
// Failure: EvaluatorUnavailable (batch/errors.h) when the planning evaluator
// cannot start, ManifestError for a reference entry no template serves,
// std::runtime_error for a catalog that cannot be opened (report_only: one
// that does not exist) or a run that cannot start. A target that cannot be
// packaged is not a failure: its NightlyPackage says why.
#pragma once
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "explore/explorer.h"
#include "knowledge/knowledge.h"
#include "manifest/manifest.h"
#include "metrics/flags.h"
#include "stats/regression.h"

namespace kiln::batch {

// A job's verdict in the report.
enum class NightlyStatus {
  New,            // run now, no previous best of the same kernel
  Improved,       // faster than the previous best
  Same,           // neither faster nor slower beyond the settings
  Regression,     // slower than the previous best
  NotComparable,  // one best measured, the other estimated
  Unchanged,      // done before this nightly: not run now
  Failed,         // the job failed
  Pending,        // not finished (the run was interrupted)
  Missing,        // not in the catalog (report_only on a manifest never submitted there)
};
const char* to_string(NightlyStatus s);  // "new", "improved", ..., "not comparable", ...

struct NightlyBest {
  long long job_id = 0;
  std::string key, basis, device;        // basis: measured | estimated; device "" when estimated
  double ms = 0;
  long long candidate_id = 0;
  std::vector<double> samples;           // the best's raw samples from its confirmation round ({} if none)
  std::string samples_basis;             // device | cpu
  size_t samples_rounds = 0;             // the rounds they were taken in (ConfirmationRow::rounds; 0: unknown)
};

struct NightlyJob {
  long long id = 0;                      // 0 when missing
  std::string key, op, dtype, target, state, message;
  nlohmann::json shape, params;
  bool ran_now = false;                  // not done before this nightly, done or failed after it
  std::optional<NightlyBest> now, previous;
  std::optional<double> ratio;           // now / previous, same basis only
  // How the verdict was reached where there was something to compare: the
  // test on both sides' raw samples, else the ratio of medians alone.
  std::optional<stats::RegressionDecision> test;
  bool by_ratio = false;
  NightlyStatus status = NightlyStatus::Missing;
  bool regression = false;               // counts as one: exit 4 (also a failure where a kernel was before)
};

struct NightlyPackage {
  std::string target;
  std::optional<std::filesystem::path> dir;  // packaged there, or
  int kernels = 0;
  std::string skipped;                       // why not ("regressions", an error's message)
};

struct NightlyOptions {
  std::filesystem::path catalog;
  double threshold = 0.05;               // without samples on both sides: the slowdown that counts
  double min_effect = 0.03;              // with samples: the smallest slowdown of the medians that counts
  bool report_only = false;              // no submit, no run, no package: the catalog as it is
  std::optional<std::filesystem::path> package_dir;
  RunOptions run;                        // batch and metrics are set here
  metrics::MetricsFlags metrics;         // the run's metrics, then the comparison's (see nightly())
};

struct NightlyReport {
  std::string name;                      // the manifest's
  std::string when;                      // local time the report was made
  std::string manifest;                  // absolute path
  std::string catalog;                   // as given
  std::optional<std::string> batch;      // the submitted batch (none when report_only)
  std::string triton;
  double threshold = 0, min_effect = 0;
  bool report_only = false;
  std::optional<RunSummary> run;         // when something was run
  int evaluated = 0;                     // candidates evaluated now
  bool interrupted = false;              // the run was interrupted (exit 130)
  std::vector<NightlyJob> jobs;          // the manifest's, in its order
  std::vector<NightlyPackage> packages;

  int count(NightlyStatus s) const;
  int ran_now() const;
  // "op shape dtype target" of each job that counts as a regression.
  std::vector<std::string> regressions() const;
};

// Progress lines ("kiln nightly: batch ...") go to log. m is planned in place.
// metrics: started here from options.metrics before the run; the report's
// kernels are published into its registry (metrics/nightly_metrics.h); the
// caller calls metrics.finish() when it has written what it writes (the
// textfile's last values, the endpoint's linger).
NightlyReport nightly(Manifest& m, const Knowledge& knowledge, const NightlyOptions& options,
                      metrics::MetricsSetup& metrics, std::ostream& log);

}  // namespace kiln::batch
