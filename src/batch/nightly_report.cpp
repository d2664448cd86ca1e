#include "batch/nightly_report.h"

#include <iomanip>
#include <sstream>

#include "common/shape_text.h"

namespace kiln::batch {

using nlohmann::json;

namespace {

constexpr NightlyStatus kStatuses[] = {
    NightlyStatus::New,       NightlyStatus::Improved, NightlyStatus::Same,    NightlyStatus::Regression,
    NightlyStatus::NotComparable, NightlyStatus::Unchanged, NightlyStatus::Failed, NightlyStatus::Pending,
    NightlyStatus::Missing};

std::string fmt_ms(double v) {
  std::ostringstream os;
  os << std::setprecision(4) << v;
  return os.str();
}

std::string best_text(const std::optional<NightlyBest>& b) {
  if (!b) return "-";
  return fmt_ms(b->ms) + " ms " + (b->basis == "measured" ? "measured on " + b->device : "estimated");
}

json best_json(const std::optional<NightlyBest>& b) {
  if (!b) return nullptr;
  return {{"job_id", b->job_id}, {"key", b->key}, {"basis", b->basis}, {"ms", b->ms},
          {"device", b->device.empty() ? json(nullptr) : json(b->device)},
          {"candidate_id", b->candidate_id}, {"confirmed_samples", b->samples.size()},
          {"confirmed_rounds", b->samples_rounds}};
}

json decision_json(const NightlyJob& r, const NightlyReport& rep) {
  if (r.test) {
    const stats::RegressionDecision& d = *r.test;
    return {{"decided_by", "mann-whitney"}, {"p", d.p}, {"alpha", 0.01}, {"min_effect", rep.min_effect},
            {"median_ratio", d.ratio}, {"ratio_ci95", json::array({d.ratio_ci.lo, d.ratio_ci.hi})},
            {"n_previous", d.n_previous}, {"n_now", d.n_now}, {"verdict", d.verdict}};
  }
  if (r.by_ratio)
    return {{"decided_by", "ratio"}, {"threshold", rep.threshold},
            {"note", "no raw samples on both sides (unconfirmed best): the ratio of medians alone"}};
  return nullptr;
}

json job_json(const NightlyJob& r, const NightlyReport& rep) {
  json j = {{"op", r.op},           {"shape", r.shape},
            {"dtype", r.dtype},     {"params", r.params},
            {"target", r.target},   {"key", r.key},
            {"job_id", r.id ? json(r.id) : json(nullptr)},
            {"state", r.state.empty() ? json(nullptr) : json(r.state)},
            {"ran_now", r.ran_now}, {"status", to_string(r.status)},
            {"regression", r.regression},
            {"new", best_json(r.now)},
            {"previous", best_json(r.previous)},
            {"ratio", r.ratio ? json(*r.ratio) : json(nullptr)},
            {"decision", decision_json(r, rep)}};
  if (r.now && r.previous && r.now->basis != r.previous->basis)
    j["note"] = "not comparable: " + r.now->basis + " now, " + r.previous->basis +
                " before (a measurement and the static model's estimate are never compared)";
  if (r.state == "failed") j["message"] = r.message;
  return j;
}

std::string decision_text(const NightlyJob& r) {
  if (r.test) {
    std::ostringstream os;
    os << "p=" << std::setprecision(2) << r.test->p << ", ratio 95% CI [" << std::setprecision(4)
       << r.test->ratio_ci.lo << ", " << r.test->ratio_ci.hi << "]";
    return os.str();
  }
  return r.by_ratio ? "ratio (no samples)" : "-";
}

}  // namespace

json to_json(const NightlyReport& rep) {
  json summary = {{"jobs", rep.jobs.size()}, {"ran_now", rep.ran_now()}, {"regressions", rep.regressions().size()}};
  for (NightlyStatus s : kStatuses) summary[to_string(s)] = rep.count(s);
  json run = nullptr;
  if (rep.run) {
    const RunSummary& s = *rep.run;
    run = {{"jobs_done", s.jobs_done}, {"jobs_failed", s.jobs_failed}, {"candidates", s.candidates},
           {"candidate_failures", s.candidate_failures}, {"interrupted", s.interrupted},
           {"wall_s", s.wall_s}, {"device", s.device}};
  }
  json packages = json::array();
  for (const NightlyPackage& p : rep.packages) {
    if (p.dir) packages.push_back({{"target", p.target}, {"dir", p.dir->string()}, {"kernels", p.kernels}});
    else packages.push_back({{"target", p.target}, {"skipped", p.skipped}});
  }
  json jobs = json::array();
  for (const NightlyJob& r : rep.jobs) jobs.push_back(job_json(r, rep));
  return {{"name", rep.name},
          {"when", rep.when},
          {"manifest", rep.manifest},
          {"catalog", rep.catalog},
          {"batch", rep.batch ? json(*rep.batch) : json(nullptr)},
          {"triton", rep.triton},
          {"threshold", rep.threshold},
          {"min_effect", rep.min_effect},
          {"report_only", rep.report_only},
          {"run", run},
          {"evaluated", rep.evaluated},
          {"interrupted", rep.interrupted},
          {"summary", summary},
          {"regressions", rep.regressions()},
          {"packages", packages},
          {"jobs", jobs}};
}

std::string markdown(const NightlyReport& rep) {
  std::ostringstream md;
  md << "# Kiln nightly report: " << rep.name << "\n\n";
  md << "- when: " << rep.when << "\n";
  md << "- manifest: `" << rep.manifest << "`\n";
  md << "- catalog: `" << rep.catalog << "`\n";
  if (rep.batch) md << "- batch: `" << *rep.batch << "`\n";
  md << "- Triton " << rep.triton;
  if (rep.run) md << " · device: " << rep.run->device;
  md << "\n";
  md << "- jobs: " << rep.jobs.size() << " · run now: " << rep.ran_now()
     << " · candidates evaluated now: " << rep.evaluated << "\n";
  md << "- regression: where both bests have raw samples from a confirmation round, Mann-Whitney U "
        "p < 0.01 and a median more than "
     << fmt_ms(rep.min_effect * 100) << "% slower; otherwise (no samples) a median more than "
     << fmt_ms(rep.threshold * 100) << "% slower than the previous best\n\n";
  const size_t regressions = rep.regressions().size();
  if (regressions > 0) {
    md << "**" << regressions << " regression(s):**\n\n";
    for (const auto& r : rep.jobs)
      if (r.regression)
        md << "- " << r.op << " " << shape_text(r.shape) << " " << r.dtype << " " << r.target << ": "
           << (r.status == NightlyStatus::Failed
                   ? "failed (" + r.message + "), previous best " + best_text(r.previous)
                   : best_text(r.now) + " vs " + best_text(r.previous) + " (x" + fmt_ms(*r.ratio) + ")")
           << "\n";
    md << "\n";
  } else {
    md << "No regressions.\n\n";
  }
  md << "| op | shape | dtype | target | status | run now | best | previous best | ratio | decided by |\n";
  md << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const auto& r : rep.jobs) {
    const std::string status = to_string(r.status);
    md << "| " << r.op << " | " << shape_text(r.shape) << " | " << r.dtype << " | " << r.target << " | "
       << (r.regression ? "**" + status + "**" : status) << " | " << (r.ran_now ? "yes" : "no") << " | "
       << best_text(r.now) << " | " << best_text(r.previous) << " | "
       << (r.ratio ? fmt_ms(*r.ratio) : (r.now && r.previous ? "not comparable" : "-")) << " | "
       << decision_text(r) << " |\n";
  }
  md << "\nmeasured: median latency on a device of the target's kind; estimated: the static model\n"
        "(docs/estimate.md). A measured and an estimated value are not comparable and never compared.\n";
  if (!rep.packages.empty()) {
    md << "\n## Packages\n\n";
    for (const auto& p : rep.packages) {
      md << "- " << p.target << ": ";
      if (p.dir) md << p.kernels << " kernel(s) in `" << p.dir->string() << "`";
      else md << "not packaged: " << p.skipped;
      md << "\n";
    }
  }
  return md.str();
}

}  // namespace kiln::batch
