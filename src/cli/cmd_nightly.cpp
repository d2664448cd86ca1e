// kiln nightly MANIFEST: regeneration of a kernel set, for cron or Slurm
// (scripts/slurm/nightly.sbatch). docs/cluster.md, section "Nightly".
//
//   1. submit MANIFEST (idempotent: keys already in the catalog add nothing);
//   2. run the manifest's jobs that are not done: a job key covers the manifest
//      entry, the template's sha256, the Triton version and the target document,
//      so exactly the jobs whose inputs changed are new keys and run, the rest
//      are done already and cost nothing;
//   3. report every job's best against the previous best of "the same job": the
//      most recent older done job (created before it) with a best and the same
//      (op, shape, dtype, params, target) but another key. Measured and
//      estimated values are never compared ("not comparable");
//   4. package the targets whose kernels changed and did not regress
//      (--package-dir DIR: DIR/<target>, via package_target).
// Exit 4 when a job run now regressed (or failed where it had a kernel before),
// so cron and Slurm notice. Regressed: where both bests have raw samples from
// a confirmation round, Mann-Whitney U p < 0.01 and the median more than
// --min-effect slower (stats/regression.h); otherwise the median more than
// --threshold slower.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "catalog/job_key.h"
#include "catalog/job_lookup.h"
#include "cli/cli_util.h"
#include "cli/plan.h"
#include "evaluate/worker_process.h"
#include "explore/explorer.h"
#include "cli/package_cli.h"
#include "package/package.h"
#include "metrics/flags.h"
#include "metrics/nightly_metrics.h"
#include "stats/regression.h"

namespace kiln {

using namespace kiln::cli;

namespace {

constexpr int kExitRegression = 4;

struct BestInfo {
  long long job_id = 0;
  std::string key, basis, device;
  double ms = 0;
  long long candidate_id = 0;
  std::vector<double> samples;           // the best's raw samples from its confirmation round ({} if none)
  std::string samples_basis;             // device | cpu
  json to_json() const {
    return {{"job_id", job_id}, {"key", key},
            {"basis", basis},   {"ms", ms},
            {"device", device.empty() ? json(nullptr) : json(device)},
            {"candidate_id", candidate_id},
            {"confirmed_samples", samples.size()}};
  }
};

struct JobReport {
  long long id = 0;
  std::string key, op, dtype, target, state, message;
  json shape, params;
  bool ran_now = false;                  // not done before this nightly, done or failed after it
  std::optional<BestInfo> now, previous;
  std::optional<double> ratio;           // now / previous, same basis only
  json decision;                         // the test on raw samples (decided_by, p, ratio_ci95, ...)
  std::string status;                    // new | improved | same | regression | not comparable |
                                         // unchanged | failed | pending | missing
  bool counts_as_regression = false;
};

std::string fmt_ms(double v) {
  std::ostringstream os;
  os << std::setprecision(4) << v;
  return os.str();
}

std::string best_text(const std::optional<BestInfo>& b) {
  if (!b) return "-";
  return fmt_ms(b->ms) + " ms " + (b->basis == "measured" ? "measured on " + b->device : "estimated");
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

std::optional<BestInfo> read_best(const Catalog& catalog, long long job_id, const std::string& key) {
  const std::optional<BestRow> row = catalog.best(job_id);
  if (!row) return std::nullopt;
  BestInfo b;
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
      }
  return b;
}

// Every manifest job's current state and best, and its previous result.
std::vector<JobReport> build_report(const Catalog& catalog, const std::vector<NewJob>& jobs,
                                    const std::map<std::string, std::string>& state_before,
                                    bool report_only, double threshold, double min_effect) {
  std::set<std::string> current_keys;
  for (const NewJob& nj : jobs) current_keys.insert(nj.key);
  std::vector<JobReport> out;
  for (const NewJob& nj : jobs) {
    JobReport r;
    r.key = nj.key;
    r.op = nj.op;
    r.dtype = nj.dtype;
    r.target = nj.target;
    r.shape = nj.shape;
    r.params = nj.params.is_null() ? json::object() : nj.params;
    const std::optional<JobRow> row = job_by_key(catalog, nj.key);
    if (!row) {
      r.status = "missing";  // report-only on a manifest that was never submitted here
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
    r.ran_now = report_only || (!was_done && (r.state == "done" || r.state == "failed"));
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
      r.status = "failed";
      r.counts_as_regression = r.ran_now && r.previous.has_value();
    } else if (r.state != "done") {
      r.status = "pending";  // the run was interrupted before this job finished
    } else if (!r.ran_now) {
      r.status = "unchanged";
    } else if (!r.previous) {
      r.status = "new";
    } else if (!r.now || r.now->basis != r.previous->basis) {
      r.status = "not comparable";
    } else if (!r.now->samples.empty() && !r.previous->samples.empty() &&
               r.now->samples_basis == r.previous->samples_basis) {
      // Both bests have raw samples from a confirmation round: decided by the
      // Mann-Whitney test plus the minimum effect (stats/regression.h).
      const stats::RegressionDecision d =
          stats::decide_regression(r.previous->samples, r.now->samples, {0.01, min_effect});
      r.ratio = d.ratio;
      r.decision = {{"decided_by", "mann-whitney"}, {"p", d.p}, {"alpha", 0.01}, {"min_effect", min_effect},
                    {"median_ratio", d.ratio}, {"ratio_ci95", json::array({d.ratio_ci.lo, d.ratio_ci.hi})},
                    {"n_previous", d.n_previous}, {"n_now", d.n_now}, {"verdict", d.verdict}};
      r.status = d.verdict == "regressed" ? "regression" : d.verdict == "improved" ? "improved" : "same";
      r.counts_as_regression = d.verdict == "regressed";
    } else if (*r.ratio > 1 + threshold) {
      r.status = "regression";
      r.counts_as_regression = true;
    } else if (*r.ratio < 1 - threshold) {
      r.status = "improved";
    } else {
      r.status = "same";
    }
    if (r.decision.is_null() && r.ratio && r.status != "not comparable")
      r.decision = {{"decided_by", "ratio"}, {"threshold", threshold},
                    {"note", "no raw samples on both sides (unconfirmed best): the ratio of medians alone"}};
    out.push_back(std::move(r));
  }
  return out;
}

json job_json(const JobReport& r) {
  json j = {{"op", r.op},           {"shape", r.shape},
            {"dtype", r.dtype},     {"params", r.params},
            {"target", r.target},   {"key", r.key},
            {"job_id", r.id ? json(r.id) : json(nullptr)},
            {"state", r.state.empty() ? json(nullptr) : json(r.state)},
            {"ran_now", r.ran_now}, {"status", r.status},
            {"regression", r.counts_as_regression},
            {"new", r.now ? r.now->to_json() : json(nullptr)},
            {"previous", r.previous ? r.previous->to_json() : json(nullptr)},
            {"ratio", r.ratio ? json(*r.ratio) : json(nullptr)},
            {"decision", r.decision}};
  if (r.now && r.previous && r.now->basis != r.previous->basis)
    j["note"] = "not comparable: " + r.now->basis + " now, " + r.previous->basis +
                " before (a measurement and the static model's estimate are never compared)";
  if (r.state == "failed") j["message"] = r.message;
  return j;
}

std::string decision_text(const json& d) {
  if (d.is_null()) return "-";
  if (d["decided_by"] == "ratio") return "ratio (no samples)";
  std::ostringstream os;
  os << "p=" << std::setprecision(2) << d["p"].get<double>() << ", ratio 95% CI [" << std::setprecision(4)
     << d["ratio_ci95"][0].get<double>() << ", " << d["ratio_ci95"][1].get<double>() << "]";
  return os.str();
}

std::string markdown(const json& rep, const std::vector<JobReport>& jobs) {
  std::ostringstream md;
  md << "# Kiln nightly report: " << rep["name"].get<std::string>() << "\n\n";
  md << "- when: " << rep["when"].get<std::string>() << "\n";
  md << "- manifest: `" << rep["manifest"].get<std::string>() << "`\n";
  md << "- catalog: `" << rep["catalog"].get<std::string>() << "`\n";
  if (!rep["batch"].is_null()) md << "- batch: `" << rep["batch"].get<std::string>() << "`\n";
  md << "- Triton " << rep["triton"].get<std::string>();
  if (!rep["run"].is_null()) md << " · device: " << rep["run"]["device"].get<std::string>();
  md << "\n";
  md << "- jobs: " << jobs.size() << " · run now: " << rep["summary"]["ran_now"].get<int>()
     << " · candidates evaluated now: " << rep["evaluated"].get<int>() << "\n";
  md << "- regression: where both bests have raw samples from a confirmation round, Mann-Whitney U "
        "p < 0.01 and a median more than "
     << fmt_ms(rep["min_effect"].get<double>() * 100)
     << "% slower; otherwise (no samples) a median more than " << fmt_ms(rep["threshold"].get<double>() * 100)
     << "% slower than the previous best\n\n";
  const int regressions = rep["summary"]["regressions"].get<int>();
  if (regressions > 0) {
    md << "**" << regressions << " regression(s):**\n\n";
    for (const auto& r : jobs)
      if (r.counts_as_regression)
        md << "- " << r.op << " " << shape_text(r.shape) << " " << r.dtype << " " << r.target << ": "
           << (r.status == "failed" ? "failed (" + r.message + "), previous best " + best_text(r.previous)
                                    : best_text(r.now) + " vs " + best_text(r.previous) + " (x" +
                                          fmt_ms(*r.ratio) + ")")
           << "\n";
    md << "\n";
  } else {
    md << "No regressions.\n\n";
  }
  md << "| op | shape | dtype | target | status | run now | best | previous best | ratio | decided by |\n";
  md << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& r : jobs) {
    md << "| " << r.op << " | " << shape_text(r.shape) << " | " << r.dtype << " | " << r.target << " | "
       << (r.counts_as_regression ? "**" + r.status + "**" : r.status) << " | " << (r.ran_now ? "yes" : "no")
       << " | " << best_text(r.now) << " | " << best_text(r.previous) << " | "
       << (r.ratio ? fmt_ms(*r.ratio) : (r.now && r.previous ? "not comparable" : "-")) << " | "
       << decision_text(r.decision) << " |\n";
  }
  md << "\nmeasured: median latency on a device of the target's kind; estimated: the static model\n"
        "(docs/estimate.md). A measured and an estimated value are not comparable and never compared.\n";
  if (!rep["packages"].empty()) {
    md << "\n## Packages\n\n";
    for (const auto& p : rep["packages"]) {
      md << "- " << p["target"].get<std::string>() << ": ";
      if (p.contains("dir")) md << p["kernels"].get<int>() << " kernel(s) in `" << p["dir"].get<std::string>() << "`";
      else md << "not packaged: " << p["skipped"].get<std::string>();
      md << "\n";
    }
  }
  return md.str();
}

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

}  // namespace

int cmd_nightly(const Args& args) {
  return guarded("nightly", [&] {
    po::options_description d("kiln nightly options");
    add_common(d, true);
    d.add_options()("manifest", po::value<std::string>()->required(), "the YAML manifest")(
        "package-dir", po::value<std::string>(),
        "package the targets whose kernels changed (and did not regress) into DIR/<target>")(
        "threshold", po::value<double>()->default_value(0.05),
        "without raw samples on both sides: the relative slowdown that counts as a regression (0.05 = 5%)")(
        "min-effect", po::value<double>()->default_value(0.03, "0.03"),
        "with raw samples: the smallest slowdown of the medians that counts, besides Mann-Whitney p < 0.01 "
        "(0.03 = 3%)")(
        "report", po::value<std::string>(),
        "write the report to FILE (Markdown) and beside it FILE's stem + .json")(
        "workers", po::value<int>()->default_value(1), "evaluator processes in parallel")(
        "device", po::value<std::string>()->default_value("auto"),
        "auto | cpu | gpu: where candidates run (cpu = Triton interpreter)")(
        "scratch", po::value<std::string>(), "node-local scratch dir (default: $TMPDIR/kiln)")(
        "verbose,v", "copy the workers' stderr to ours");
    add_scheduling_flags(d);
    metrics::add_metrics_flags(d);
    po::options_description hidden;
    hidden.add_options()("report-only", "no submit, no run: report on the catalog as it is");
    po::options_description all;
    all.add(d).add(hidden);
    po::positional_options_description pos;
    pos.add("manifest", 1);
    const std::string usage =
        "usage: kiln nightly MANIFEST [--package-dir DIR] [--threshold 0.05] [--report FILE]\n"
        "                    [--catalog PATH] [--workers N] [--device auto|cpu|gpu] [--json]\n"
        "Regenerates a kernel set: submits MANIFEST (idempotent), runs only the jobs whose\n"
        "key is new (a changed manifest entry, template, Triton version or target), compares\n"
        "every job's best with the previous best of the same (op, shape, dtype, params,\n"
        "target), writes a Markdown + JSON report and packages the targets that changed.\n"
        "Exit codes: 0 no regression · 4 a job run now is slower than its previous best by\n"
        "more than --threshold, or failed where it had a kernel · 1, 2, 3, 130 as kiln run.";
    std::optional<po::variables_map> vm;
    {
      // --help shows the documented options only; --report-only stays hidden.
      po::variables_map v;
      try {
        po::store(po::command_line_parser(args).options(all).positional(pos).run(), v);
        if (v.count("help")) {
          std::cout << usage << "\n\n" << d << "\n";
          return 0;
        }
        po::notify(v);
      } catch (const po::error& e) {
        std::ostringstream os;
        os << d;
        throw UsageError(std::string(e.what()) + "\n\n" + usage + "\n\n" + os.str());
      }
      vm = std::move(v);
    }
    const bool report_only = vm->count("report-only") > 0;
    const double threshold = (*vm)["threshold"].as<double>();
    if (!(threshold >= 0)) throw UsageError("--threshold must be >= 0");
    const double min_effect = (*vm)["min-effect"].as<double>();
    if (!(min_effect >= 0)) throw UsageError("--min-effect must be >= 0");
    RunOptions o;
    o.workers = (*vm)["workers"].as<int>();
    o.device = (*vm)["device"].as<std::string>();
    set_scheduling_flags(o, *vm);
    if (o.workers < 1) throw UsageError("--workers must be at least 1");
    if (o.device != "auto" && o.device != "cpu" && o.device != "gpu")
      throw UsageError("--device must be auto, cpu or gpu");
    if (vm->count("scratch")) o.scratch_dir = (*vm)["scratch"].as<std::string>();
    o.echo_worker_stderr = vm->count("verbose") > 0;
    metrics::MetricsFlags metrics_flags;
    try {
      metrics_flags = metrics::read_metrics_flags(*vm);
      if (metrics_flags.textfile) metrics::check_textfile_path(*metrics_flags.textfile);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }

    const Knowledge knowledge = load_knowledge();
    Manifest m = load_manifest((*vm)["manifest"].as<std::string>(), knowledge);
    json hello;
    try {
      hello = plan_manifest(m, knowledge).hello;  // reference entries served by templates where they match
    } catch (const ManifestError&) {
      throw;
    } catch (const std::exception& e) {
      std::cerr << "kiln nightly: cannot start the Python evaluator: " << e.what() << "\n";
      return 3;
    }
    const std::string catalog_path = (*vm)["catalog"].as<std::string>();
    if (report_only && !std::filesystem::exists(catalog_path))
      throw std::runtime_error("no catalog at " + catalog_path);
    Catalog catalog = Catalog::open(catalog_path, report_only);
    const std::vector<NewJob> jobs = expand_jobs(m, knowledge, hello, catalog.compile_seconds());

    // States before this nightly: what was done already is "unchanged".
    std::map<std::string, std::string> before;
    for (const auto& j : jobs)
      if (const auto row = job_by_key(catalog, j.key)) before[j.key] = row->state;

    // The run's metrics, then (--metrics-file) the comparison's (metrics/nightly_metrics.h).
    metrics::MetricsSetup metrics_setup = metrics::start_metrics(metrics_flags, std::cerr, "kiln nightly");
    json run = nullptr;
    json batch = nullptr;
    int evaluated = 0;
    bool interrupted = false;
    if (!report_only) {
      const SubmitResult sub =
          catalog.submit(m.name, std::filesystem::absolute(m.path).string(), m.text, jobs);
      batch = sub.batch_id;
      std::cerr << "kiln nightly: batch " << sub.batch_id << " (" << m.name << "): " << sub.total_jobs
                << " jobs, " << sub.new_jobs << " new\n";
      const auto counts = catalog.job_state_counts(sub.batch_id);
      const long long runnable = (counts.count("queued") ? counts.at("queued") : 0) +
                                 (counts.count("running") ? counts.at("running") : 0);
      if (runnable > 0) {
        o.batch = sub.batch_id;
        o.metrics = metrics_setup.run.get();
        const RunSummary s = run_explorer(catalog, knowledge, o);
        evaluated = s.candidates;
        interrupted = s.interrupted;
        run = {{"jobs_done", s.jobs_done}, {"jobs_failed", s.jobs_failed}, {"candidates", s.candidates},
               {"candidate_failures", s.candidate_failures}, {"interrupted", s.interrupted},
               {"wall_s", s.wall_s}, {"device", s.device}};
      } else {
        std::cerr << "kiln nightly: every job of the manifest is done already; nothing to run\n";
      }
    }

    const std::vector<JobReport> reports = build_report(catalog, jobs, before, report_only, threshold, min_effect);
    json summary = {{"jobs", reports.size()}, {"ran_now", 0}, {"regressions", 0}};
    for (const char* s : {"new", "improved", "same", "regression", "not comparable", "unchanged", "failed",
                          "pending", "missing"})
      summary[s] = 0;
    std::vector<std::string> regressions;
    for (const auto& r : reports) {
      summary[r.status] = summary[r.status].get<int>() + 1;
      if (r.ran_now) summary["ran_now"] = summary["ran_now"].get<int>() + 1;
      if (r.counts_as_regression) {
        summary["regressions"] = summary["regressions"].get<int>() + 1;
        regressions.push_back(r.op + " " + shape_text(r.shape) + " " + r.dtype + " " + r.target);
      }
    }

    // Packages: targets with a kernel that changed now (new, improved, same, or
    // not comparable) and no regression. Only this manifest's jobs are
    // packaged, so a superseded key of the same kernel is not packaged beside
    // its replacement.
    json packages = json::array();
    if (vm->count("package-dir") && !interrupted && !report_only) {
      std::map<std::string, bool> changed, regressed;
      for (const auto& r : reports) {
        if (r.counts_as_regression) regressed[r.target] = true;
        if (r.ran_now && r.state == "done" && r.now) changed[r.target] = true;
      }
      std::vector<long long> manifest_jobs;
      for (const auto& r : reports)
        if (r.id) manifest_jobs.push_back(r.id);
      for (const auto& [target_name, yes] : changed) {
        if (regressed.count(target_name)) {
          packages.push_back({{"target", target_name}, {"skipped", "regressions"}});
          continue;
        }
        const Target* t = knowledge.targets.find(target_name);
        const auto out = std::filesystem::path((*vm)["package-dir"].as<std::string>()) / target_name;
        try {
          PackageOptions popts;
          popts.out = out;
          popts.force = true;
          popts.protected_dirs = {std::filesystem::absolute(catalog_path).parent_path()};
          popts.only_jobs = manifest_jobs;
          const PackageResult pr = package_with_worker(catalog, {t}, popts, KILN_VERSION);
          packages.push_back({{"target", target_name}, {"dir", pr.dir.string()}, {"kernels", pr.kernels}});
        } catch (const std::exception& e) {
          packages.push_back({{"target", target_name}, {"skipped", e.what()}});
        }
      }
    }

    json rep = {{"name", m.name},
                {"when", now_iso()},
                {"manifest", std::filesystem::absolute(m.path).string()},
                {"catalog", catalog_path},
                {"batch", batch},
                {"triton", hello.value("triton", "")},
                {"threshold", threshold},
                {"min_effect", min_effect},
                {"report_only", report_only},
                {"run", run},
                {"evaluated", evaluated},
                {"interrupted", interrupted},
                {"summary", summary},
                {"regressions", regressions},
                {"packages", packages},
                {"jobs", json::array()}};
    for (const auto& r : reports) rep["jobs"].push_back(job_json(r));
    const std::string md = markdown(rep, reports);
    if (vm->count("report")) {
      std::filesystem::path mdp = (*vm)["report"].as<std::string>();
      std::filesystem::path jsp = mdp;
      if (mdp.extension() == ".md") jsp.replace_extension(".json");
      else if (mdp.extension() == ".json") mdp.replace_extension(".md");
      else jsp += ".json";
      if (mdp.has_parent_path()) std::filesystem::create_directories(mdp.parent_path());
      write_text(mdp, md);
      write_text(jsp, rep.dump(2) + "\n");
      std::cerr << "kiln nightly: report in " << mdp.string() << " and " << jsp.string() << "\n";
    }
    if (metrics_setup.registry) {
      std::vector<metrics::NightlyKernel> kernels;
      for (const auto& r : reports) {
        metrics::NightlyKernel k{r.op, shape_text(r.shape), r.dtype, r.target, r.status, r.counts_as_regression, {}, ""};
        if (r.now) {
          k.latency_s = r.now->ms / 1000;
          k.basis = r.now->basis;
        }
        kernels.push_back(std::move(k));
      }
      metrics::publish_nightly(*metrics_setup.registry, kernels,
                               std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
      metrics_setup.finish();
    }
    if (vm->count("json")) std::cout << rep.dump(2) << "\n";
    else std::cout << md;
    if (interrupted) return 130;
    return regressions.empty() ? 0 : kExitRegression;
  });
}

// kiln decide: {"pairs": [{"previous": [ms...], "now": [ms...]}, ...]} on stdin
// -> {"decisions": [{verdict, p, median_ratio, ratio_ci95, n_previous, n_now}, ...]}:
// kiln nightly's decision (stats/regression.h) for tools that time outside a
// catalog (bench/trust/aa_nightly.py's A/A and injected-slowdown counts).
int cmd_decide(const Args& args) {
  return guarded("decide", [&] {
    po::options_description d("kiln decide options");
    d.add_options()("help,h", "show this help")("min-effect", po::value<double>()->default_value(0.03, "0.03"),
                                                 "the smallest slowdown of the medians that counts")(
        "alpha", po::value<double>()->default_value(0.01), "Mann-Whitney two-sided p below this");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(d).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: kiln decide [--min-effect 0.03] [--alpha 0.01] < pairs.json\n"
                   "kiln nightly's regression decision on raw samples: stdin {\"pairs\": [{\"previous\":\n"
                   "[ms, ...], \"now\": [ms, ...]}, ...]}, stdout {\"decisions\": [...]}.\n"
                << d;
      return 0;
    }
    po::notify(vm);
    json in;
    try {
      in = json::parse(std::cin);
    } catch (const std::exception& e) {
      throw UsageError(std::string("kiln decide: stdin is not JSON: ") + e.what());
    }
    if (!in.is_object() || !in.contains("pairs") || !in["pairs"].is_array())
      throw UsageError("kiln decide: stdin must be {\"pairs\": [{\"previous\": [...], \"now\": [...]}, ...]}");
    const stats::RegressionSettings rs{vm["alpha"].as<double>(), vm["min-effect"].as<double>()};
    json out = json::array();
    for (const auto& p : in["pairs"]) {
      std::vector<double> a, b;
      try {
        a = p.at("previous").get<std::vector<double>>();
        b = p.at("now").get<std::vector<double>>();
      } catch (const std::exception&) {
        throw UsageError("kiln decide: each pair needs number lists 'previous' and 'now'");
      }
      if (a.empty() || b.empty()) throw UsageError("kiln decide: a pair with an empty sample");
      const auto dd = stats::decide_regression(a, b, rs);
      out.push_back({{"verdict", dd.verdict}, {"p", dd.p}, {"median_ratio", dd.ratio},
                     {"ratio_ci95", json::array({dd.ratio_ci.lo, dd.ratio_ci.hi})},
                     {"n_previous", dd.n_previous}, {"n_now", dd.n_now}});
    }
    std::cout << json{{"decisions", out}, {"alpha", rs.alpha}, {"min_effect", rs.min_effect}}.dump() << "\n";
    return 0;
  });
}

}  // namespace kiln
