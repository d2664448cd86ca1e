#include "batch/nightly.h"

#include <chrono>
#include <ctime>
#include <map>
#include <ostream>
#include <set>
#include <stdexcept>

#include "batch/expand.h"
#include "batch/package.h"
#include "batch/plan.h"
#include "catalog/catalog.h"
#include "catalog/job_lookup.h"
#include "common/shape_text.h"
#include "metrics/nightly_metrics.h"

namespace kiln::batch {

using nlohmann::json;

const char* to_string(NightlyStatus s) {
  switch (s) {
    case NightlyStatus::New: return "new";
    case NightlyStatus::Improved: return "improved";
    case NightlyStatus::Same: return "same";
    case NightlyStatus::Regression: return "regression";
    case NightlyStatus::NotComparable: return "not comparable";
    case NightlyStatus::Unchanged: return "unchanged";
    case NightlyStatus::Failed: return "failed";
    case NightlyStatus::Pending: return "pending";
    case NightlyStatus::Missing: return "missing";
  }
  return "?";
}

namespace {

std::string now_local() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

std::optional<NightlyBest> read_best(const Catalog& catalog, long long job_id, const std::string& key) {
  const std::optional<BestRow> row = catalog.best(job_id);
  if (!row) return std::nullopt;
  NightlyBest b;
  b.job_id = job_id;
  b.key = key;
  b.basis = row->basis;
  b.ms = row->value_ms;
  b.device = row->device;
  b.candidate_id = row->candidate_id;
  if (row->confirmed_run)  // the raw samples of the round that chose it
    for (const auto& c : catalog.confirmations(job_id, *row->confirmed_run))
      if (c.candidate_id && *c.candidate_id == row->candidate_id) {
        b.samples = c.samples_ms;
        b.samples_basis = c.basis;
        b.samples_rounds = c.rounds();
      }
  return b;
}

// The verdict of a job that ran now and is done, against its previous best.
void decide(NightlyJob& r, double threshold, double min_effect) {
  if (!r.previous) {
    r.status = NightlyStatus::New;
  } else if (!r.now || r.now->basis != r.previous->basis) {
    r.status = NightlyStatus::NotComparable;
  } else if (!r.now->samples.empty() && !r.previous->samples.empty() &&
             r.now->samples_basis == r.previous->samples_basis) {
    // Both bests have raw samples from a confirmation round: decided by the
    // Mann-Whitney test plus the minimum effect (stats/regression.h).
    r.test = stats::decide_regression(r.previous->samples, r.now->samples, {0.01, min_effect},
                                      r.previous->samples_rounds, r.now->samples_rounds);
    r.ratio = r.test->ratio;
    r.status = r.test->verdict == "regressed"  ? NightlyStatus::Regression
               : r.test->verdict == "improved" ? NightlyStatus::Improved
                                               : NightlyStatus::Same;
    r.regression = r.test->verdict == "regressed";
  } else if (*r.ratio > 1 + threshold) {
    r.status = NightlyStatus::Regression;
    r.regression = true;
  } else if (*r.ratio < 1 - threshold) {
    r.status = NightlyStatus::Improved;
  } else {
    r.status = NightlyStatus::Same;
  }
}

// Every manifest job's current state and best, and its previous result.
std::vector<NightlyJob> compare(const Catalog& catalog, const std::vector<NewJob>& jobs,
                                const std::map<std::string, std::string>& state_before, const NightlyOptions& o) {
  std::set<std::string> current_keys;
  for (const NewJob& nj : jobs) current_keys.insert(nj.key);
  std::vector<NightlyJob> out;
  for (const NewJob& nj : jobs) {
    NightlyJob r;
    r.key = nj.key;
    r.op = nj.op;
    r.dtype = nj.dtype;
    r.target = nj.target;
    r.shape = nj.shape;
    r.params = nj.params.is_null() ? json::object() : nj.params;
    const std::optional<JobRow> row = job_by_key(catalog, nj.key);
    if (!row) {
      r.status = NightlyStatus::Missing;
      out.push_back(std::move(r));
      continue;
    }
    r.id = row->id;
    r.state = row->state;
    r.message = row->message;
    r.shape = row->shape;
    r.params = row->params;
    auto before = state_before.find(nj.key);
    const bool was_done = before != state_before.end() && before->second == "done";
    r.ran_now = o.report_only || (!was_done && (r.state == "done" || r.state == "failed"));
    r.now = read_best(catalog, r.id, r.key);
    // The same job, older: (op, shape, dtype, params, target) equal, another
    // key (not one of this manifest's: two entries may differ only in their
    // search settings), done with a best, created before this one.
    for (const auto& [id, key] : earlier_jobs_of_kernel(catalog, r.id)) {
      if (current_keys.count(key)) continue;
      r.previous = read_best(catalog, id, key);
      break;
    }
    if (r.now && r.previous && r.now->basis == r.previous->basis && r.previous->ms > 0)
      r.ratio = r.now->ms / r.previous->ms;
    if (r.state == "failed") {
      r.status = NightlyStatus::Failed;
      r.regression = r.ran_now && r.previous.has_value();
    } else if (r.state != "done") {
      r.status = NightlyStatus::Pending;
    } else if (!r.ran_now) {
      r.status = NightlyStatus::Unchanged;
    } else {
      decide(r, o.threshold, o.min_effect);
    }
    r.by_ratio = !r.test && r.ratio && r.status != NightlyStatus::NotComparable;
    out.push_back(std::move(r));
  }
  return out;
}

// Targets with a kernel that changed now (new, improved, same, or not
// comparable) and no regression. Only this manifest's jobs are packaged, so a
// superseded key of the same kernel is not packaged beside its replacement.
std::vector<NightlyPackage> package_changed(const Catalog& catalog, const Knowledge& knowledge,
                                            const std::vector<NightlyJob>& jobs, const NightlyOptions& o) {
  std::map<std::string, bool> changed, regressed;
  std::vector<long long> manifest_jobs;
  for (const auto& r : jobs) {
    if (r.regression) regressed[r.target] = true;
    if (r.ran_now && r.state == "done" && r.now) changed[r.target] = true;
    if (r.id) manifest_jobs.push_back(r.id);
  }
  std::vector<NightlyPackage> out;
  for (const auto& [target_name, yes] : changed) {
    NightlyPackage p;
    p.target = target_name;
    if (regressed.count(target_name)) {
      p.skipped = "regressions";
      out.push_back(std::move(p));
      continue;
    }
    try {
      PackageOptions popts;
      popts.out = *o.package_dir / target_name;
      popts.force = true;
      popts.protected_dirs = {std::filesystem::absolute(o.catalog).parent_path()};
      popts.only_jobs = manifest_jobs;
      const PackageResult pr = package(catalog, {knowledge.targets.find(target_name)}, popts);
      p.dir = pr.dir;
      p.kernels = pr.kernels;
    } catch (const std::exception& e) {
      p.skipped = e.what();
    }
    out.push_back(std::move(p));
  }
  return out;
}

void publish(metrics::Registry& registry, const std::vector<NightlyJob>& jobs) {
  std::vector<metrics::NightlyKernel> kernels;
  for (const auto& r : jobs) {
    metrics::NightlyKernel k{r.op, shape_text(r.shape), r.dtype, r.target, to_string(r.status), r.regression, {}, ""};
    if (r.now) {
      k.latency_s = r.now->ms / 1000;
      k.basis = r.now->basis;
    }
    kernels.push_back(std::move(k));
  }
  metrics::publish_nightly(registry, kernels,
                           std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace

int NightlyReport::count(NightlyStatus s) const {
  int n = 0;
  for (const auto& j : jobs) n += j.status == s;
  return n;
}

int NightlyReport::ran_now() const {
  int n = 0;
  for (const auto& j : jobs) n += j.ran_now;
  return n;
}

std::vector<std::string> NightlyReport::regressions() const {
  std::vector<std::string> out;
  for (const auto& r : jobs)
    if (r.regression) out.push_back(r.op + " " + shape_text(r.shape) + " " + r.dtype + " " + r.target);
  return out;
}

NightlyReport nightly(Manifest& m, const Knowledge& knowledge, const NightlyOptions& o,
                      metrics::MetricsSetup& metrics, std::ostream& log) {
  const json hello = plan_manifest(m, knowledge).hello;  // reference entries served by templates where they match
  if (o.report_only && !std::filesystem::exists(o.catalog))
    throw std::runtime_error("no catalog at " + o.catalog.string());
  Catalog catalog = Catalog::open(o.catalog.string(), o.report_only);
  const std::vector<NewJob> jobs = expand_jobs(m, knowledge, hello, catalog.compile_seconds());

  // States before this nightly: what was done already is "unchanged".
  std::map<std::string, std::string> before;
  for (const auto& j : jobs)
    if (const auto row = job_by_key(catalog, j.key)) before[j.key] = row->state;

  NightlyReport rep;
  rep.name = m.name;
  rep.manifest = std::filesystem::absolute(m.path).string();
  rep.catalog = o.catalog.string();
  rep.triton = hello.value("triton", "");
  rep.threshold = o.threshold;
  rep.min_effect = o.min_effect;
  rep.report_only = o.report_only;
  metrics = metrics::start_metrics(o.metrics, log, "kiln nightly");
  if (!o.report_only) {
    const SubmitResult sub = catalog.submit(m.name, rep.manifest, m.text, jobs);
    rep.batch = sub.batch_id;
    log << "kiln nightly: batch " << sub.batch_id << " (" << m.name << "): " << sub.total_jobs << " jobs, "
        << sub.new_jobs << " new\n";
    const auto counts = catalog.job_state_counts(sub.batch_id);
    const long long runnable = (counts.count("queued") ? counts.at("queued") : 0) +
                               (counts.count("running") ? counts.at("running") : 0);
    if (runnable > 0) {
      RunOptions ro = o.run;
      ro.batch = sub.batch_id;
      ro.metrics = metrics.run.get();
      rep.run = run_explorer(catalog, knowledge, ro);
      rep.evaluated = rep.run->candidates;
      rep.interrupted = rep.run->interrupted;
    } else {
      log << "kiln nightly: every job of the manifest is done already; nothing to run\n";
    }
  }
  rep.jobs = compare(catalog, jobs, before, o);
  if (o.package_dir && !rep.interrupted && !o.report_only) rep.packages = package_changed(catalog, knowledge, rep.jobs, o);
  rep.when = now_local();
  if (metrics.registry) publish(*metrics.registry, rep.jobs);
  return rep;
}

}  // namespace kiln::batch
