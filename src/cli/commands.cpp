#include "cli/commands.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "batch/plan.h"
#include "batch/submit.h"
#include "batch/workers.h"
#include "catalog/catalog.h"
#include "catalog/reports.h"
#include "cli/cli_util.h"
#include "cli/plan_text.h"
#include "metrics/flags.h"
#include "cli/table.h"
#include "common/home.h"
#include "common/output_path.h"
#include "evaluate/worker_process.h"
#include "explore/explorer.h"
#include "manifest/manifest.h"
#include "manifest/misses.h"
#include "package/code_object.h"
#include "package/package.h"
#include "stats/stats.h"

namespace kiln {

namespace po = boost::program_options;
using nlohmann::json;
using namespace kiln::cli;

// --- submit --------------------------------------------------------------------

int cmd_submit(const Args& args) {
  return catalog_command("submit", true, [&](po::options_description& d) {
    d.add_options()("manifest", po::value<std::string>(), "the YAML manifest")(
        "misses", po::value<std::string>(),
        "a runtime miss log (JSON lines {op, shape, dtype, target} from $KILN_MISS_LOG) instead of a manifest")(
        "dry-run", "print which generator serves each job (reference modules matched against the template "
                   "families, nothing run at full size) and store nothing");
    auto vm = parse(args, d,
                    "usage: kiln submit MANIFEST [--catalog PATH] [--json] [--dry-run]\n"
                    "       kiln submit --misses FILE [--catalog PATH] [--json]\n"
                    "Validates MANIFEST, expands it into jobs (operator x shape x dtype x target) and\n"
                    "stores them. Submitting the same manifest again adds no jobs. --misses turns each\n"
                    "distinct miss a deployed runtime logged into a job, the same way. A reference entry\n"
                    "(a PyTorch module) is served by the template whose graph pattern it matches, else by\n"
                    "the LLM; --dry-run prints that plan and stores nothing.",
                    {{"manifest"}});
    if (!vm) return 0;
    if (vm->count("manifest") == vm->count("misses"))
      throw UsageError("give either a MANIFEST or --misses FILE");
    const Knowledge knowledge = load_knowledge();
    // Validate completely before the catalog is opened: a bad manifest leaves it untouched.
    std::optional<MissManifest> misses;
    if (vm->count("misses")) misses = load_misses((*vm)["misses"].as<std::string>(), knowledge);
    Manifest m = misses ? misses->manifest : load_manifest((*vm)["manifest"].as<std::string>(), knowledge);
    // A catalog path that open() would refuse is refused before the plan
    // starts an evaluator (seconds), not after.
    if (!vm->count("dry-run")) Catalog::check_path((*vm)["catalog"].as<std::string>(), false);
    const batch::SubmitPlan plan = batch::plan_manifest(m, knowledge);
    if (vm->count("dry-run")) {
      if (vm->count("json")) std::cout << plan_json(m, plan).dump() << "\n";
      else print_plan(std::cout, m, plan);
      return 0;
    }
    Catalog catalog = open_catalog(*vm, false);
    const batch::SubmitReport r = batch::submit_manifest(catalog, m, knowledge, plan);
    if (vm->count("json")) {
      json out = {{"batch", r.batch_id}, {"name", m.name}, {"jobs", r.total_jobs},
                  {"new_jobs", r.new_jobs}, {"triton", r.triton}};
      if (misses) {
        out["misses"] = misses->lines;
        out["distinct_misses"] = misses->distinct;
      }
      std::cout << out.dump() << "\n";
    } else {
      if (misses)
        std::cout << misses->lines << " miss(es), " << misses->distinct << " distinct: ";
      std::cout << "batch " << r.batch_id << " (" << r.name << "): " << r.total_jobs << " jobs, "
                << r.new_jobs << " new\n";
    }
    return 0;
  });
}

// --- run -----------------------------------------------------------------------

namespace {

// "I/N" with 0 <= I < N.
std::pair<int, int> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  try {
    if (slash != std::string::npos) {
      size_t a = 0, b = 0;
      const int i = std::stoi(text.substr(0, slash), &a);
      const int n = std::stoi(text.substr(slash + 1), &b);
      if (a == slash && b == text.size() - slash - 1 && n >= 1 && i >= 0 && i < n) return {i, n};
    }
  } catch (const std::exception&) {
  }
  throw UsageError("--shard must be I/N with 0 <= I < N (e.g. 0/4), not '" + text + "'");
}

}  // namespace

int cmd_run(const Args& args) {
  return catalog_command("run", true, [&](po::options_description& d) {
    d.add_options()("batch", po::value<std::string>(), "only this batch's jobs")(
        "workers", po::value<int>(),
        "evaluator processes in parallel (default on GPUs: cores - 1, at most 12 per GPU; on the CPU: 1)")(
        "gpus", po::value<std::string>()->default_value("all"),
        "all | N | ID,ID...: the GPUs the workers are spread over (worker i on GPU i mod G)")(
        "device", po::value<std::string>()->default_value("auto"),
        "auto | cpu | gpu: where candidates run (cpu = Triton interpreter)")(
        "scratch", po::value<std::string>(), "node-local scratch dir (default: $TMPDIR/kiln)")(
        "shard", po::value<std::string>(),
        "I/N: only jobs whose id % N == I (0 <= I < N), e.g. one Slurm array task each")(
        "time-limit", po::value<double>(),
        "SECONDS: claim the cheapest jobs first and stop after SECONDS (unfinished jobs back to the "
        "queue; exit 5)")(
        "verbose,v", "copy the workers' stderr to ours");
    add_scheduling_flags(d);
    metrics::add_metrics_flags(d);
    auto vm = parse(args, d,
                    "usage: kiln run [--batch ID] [--workers N] [--device auto|cpu|gpu] [--shard I/N]\n"
                    "                [--time-limit SECONDS] [--metrics HOST:PORT] [--metrics-file PATH]\n"
                    "Processes queued jobs until none remain (or --time-limit passes). Progress goes to stderr.\n"
                    "Exit: 0 done, 1 error, 2 usage, 3 no evaluator, 4 jobs need an LLM, 5 time limit\n"
                    "reached with jobs left, 130 stopped by a signal.");
    if (!vm) return 0;
    RunOptions o;
    o.device = (*vm)["device"].as<std::string>();
    if (o.device != "auto" && o.device != "cpu" && o.device != "gpu")
      throw UsageError("--device must be auto, cpu or gpu");
    if (o.device != "cpu") {
      try {
        o.gpus = select_gpus(detect_node_gpus(), (*vm)["gpus"].as<std::string>());
      } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
      }
    }
    o.workers = vm->count("workers") ? (*vm)["workers"].as<int>() : batch::default_workers(o);
    set_scheduling_flags(o, *vm);
    if (o.workers < 1 || o.workers > batch::kMaxWorkers)
      throw UsageError("--workers must be 1.." + std::to_string(batch::kMaxWorkers));
    if (vm->count("batch")) o.batch = (*vm)["batch"].as<std::string>();
    if (vm->count("scratch")) o.scratch_dir = (*vm)["scratch"].as<std::string>();
    if (vm->count("shard")) o.shard = parse_shard((*vm)["shard"].as<std::string>());
    if (vm->count("time-limit")) {
      o.time_limit_s = (*vm)["time-limit"].as<double>();
      if (!(o.time_limit_s > 0 && o.time_limit_s <= 30 * 86400))
        throw UsageError("--time-limit must be in (0, 2592000] seconds");
    }
    o.echo_worker_stderr = vm->count("verbose") > 0;
    const Knowledge knowledge = load_knowledge();
    Catalog catalog = open_catalog(*vm, false);
    metrics::MetricsSetup m;
    try {
      metrics::MetricsFlags mf = metrics::read_metrics_flags(*vm);
      mf.protected_files = catalog_files((*vm)["catalog"].as<std::string>());
      m = metrics::start_metrics(mf, std::cerr, "kiln run");
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    o.metrics = m.run.get();
    RunSummary s = run_explorer(catalog, knowledge, o);
    m.finish();  // the final values into --metrics-file
    if (vm->count("json"))
      std::cout << json{{"jobs_done", s.jobs_done}, {"jobs_failed", s.jobs_failed},
                        {"candidates", s.candidates}, {"candidate_failures", s.candidate_failures},
                        {"interrupted", s.interrupted}, {"time_limited", s.time_limited}, {"wall_s", s.wall_s}, {"workers_ready_s", s.workers_ready_s}, {"device", s.device},
                        {"gpu_busy_s", s.gpu_busy_s}, {"gpu_bench_s", s.gpu_bench_s},
                        {"gpu_busy_fraction", s.gpu_busy_fraction ? json(*s.gpu_busy_fraction) : json(nullptr)},
                        {"gpus", s.gpu_ids}, {"gpu_busy_each_s", s.gpu_busy_each_s},
                        // the lock-held figures above; the device's own account (event-timed kernels):
                        {"gpu_kernel_s", s.gpu_kernel_s},
                        {"gpu_kernel_fraction", s.gpu_kernel_fraction ? json(*s.gpu_kernel_fraction) : json(nullptr)},
                        {"gpu_driver_fraction", s.gpu_driver_fraction ? json(*s.gpu_driver_fraction) : json(nullptr)},
                        {"gpu_driver_samples", s.gpu_driver_samples}, {"gpu_driver_coverage", s.gpu_driver_coverage},
                        {"jobs_confirmed", s.jobs_confirmed}, {"confirm_failures", s.confirm_failures},
                        {"jobs_need_llm", s.jobs_need_llm}}.dump()
                << "\n";
    if (s.interrupted) return 130;
    if (s.time_limited) {
      std::cerr << "kiln run: time limit reached (" << o.time_limit_s
                << " s); unfinished jobs are back in the queue: `kiln run` again goes on\n";
      return 5;
    }
    if (s.jobs_need_llm > 0) {  // the others ran; these need an endpoint
      std::cerr << "kiln run: " << s.jobs_need_llm << " job(s) failed because they need an LLM (no template "
                << "serves them): set KILN_LLM_BASE_URL and KILN_LLM_MODEL to a reachable OpenAI-compatible "
                   "endpoint; `kiln status` lists them\n";
      return 4;
    }
    return 0;
  });
}

// --- status --------------------------------------------------------------------

int cmd_status(const Args& args) {
  return catalog_command("status", true, [&](po::options_description& d) {
    d.add_options()("batch", po::value<std::string>(), "only this batch");
    auto vm = parse(args, d, "usage: kiln status [--batch ID] [--json]");
    if (!vm) return 0;
    Catalog catalog = open_catalog(*vm, true);
    const bool one = vm->count("batch") > 0;
    const std::string batch = one ? (*vm)["batch"].as<std::string>() : "";
    const StatusReport report = status_report(catalog, one ? std::optional<std::string>(batch) : std::nullopt);

    json out = {{"catalog", (*vm)["catalog"].as<std::string>()}};
    json batches = json::array();
    for (const BatchStatus& b : report.batches)
      batches.push_back({{"id", b.id}, {"name", b.name}, {"created_at", b.created_at},
                         {"queued", b.queued}, {"running", b.running}, {"done", b.done},
                         {"failed", b.failed}, {"jobs", b.jobs}});
    if (one && batches.empty()) throw std::runtime_error("no batch " + batch + " in the catalog");
    out["batches"] = batches;
    json evals = json::object();
    for (const auto& [status, n] : report.evaluations) evals[status] = n;
    out["evaluations"] = evals;
    json failed = json::array();
    for (const FailedJob& f : report.failed_jobs)
      failed.push_back({{"op", f.op}, {"shape", f.shape}, {"dtype", f.dtype}, {"target", f.target},
                        {"message", or_null(f.message)}});
    out["failed_jobs"] = failed;
    if (vm->count("json")) {
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    Table t{{"batch", "name", "jobs", "queued", "running", "done", "failed"}, {}};
    for (const auto& b : batches)
      t.rows.push_back({b["id"], b["name"], b["jobs"], b["queued"], b["running"], b["done"], b["failed"]});
    t.print_text(std::cout);
    std::cout << "\ncandidates evaluated:";
    int total = 0;
    for (const auto& [k, v] : evals.items()) total += v.get<int>();
    std::cout << " " << total;
    for (const auto& [k, v] : evals.items()) std::cout << " · " << k << " " << v.get<int>();
    std::cout << "\n";
    if (!failed.empty()) {
      std::cout << "\nfailed jobs:\n";
      for (const auto& f : failed)
        std::cout << "  "
                  << terminal_safe(f["op"].get<std::string>() + " " + shape_text(f["shape"]) + " " +
                                   f["dtype"].get<std::string>() + " " +
                                   f["target"].get<std::string>() + ": " + cell_text(f["message"]))
                  << "\n";
    }
    return 0;
  });
}

// --- best ----------------------------------------------------------------------

namespace {

json interval_json(const stats::Interval& i) { return json::array({i.lo, i.hi}); }

// The confirmation of a job's best from the catalog's raw samples (run_id: the
// round that chose it, else the job's latest round): the best's median and 95%
// interval, the runner-up and the margin to it (tie when the intervals
// overlap), each baseline's median and the speedup against it with its
// interval, and the conditions. null when the job has no confirmation of its best.
json confirmed_summary(const Catalog& catalog, long long job_id, long long best_id, const std::string& run_id) {
  const auto rows = catalog.confirmations(job_id, run_id);
  const ConfirmationRow* best = nullptr;
  for (const auto& r : rows)
    if (r.candidate_id && *r.candidate_id == best_id) best = &r;
  if (!best) return nullptr;
  // Intervals over the rounds and their samples (a round's samples share its clock).
  const stats::Interval best_ci = stats::bootstrap_median_ci_rounds(best->samples_ms, best->rounds());
  json out = {{"run_id", best->run_id}, {"basis", best->basis}, {"device", best->device},
              {"median_ms", best->median_ms}, {"ci95_ms", interval_json(best_ci)}, {"rounds", best->rounds()},
              {"n", best->samples_ms.size()}, {"runner_up", nullptr}, {"tie", false}, {"baselines", json::object()}};
  const ConfirmationRow* runner = nullptr;
  int finalists = 0;
  for (const auto& r : rows) {
    if (!r.candidate_id) continue;
    ++finalists;
    if (&r == best) continue;
    const json chk = r.conditions.value("check", json());
    if (!chk.is_object() || !chk.value("passed", false)) continue;
    if (!runner || r.median_ms < runner->median_ms) runner = &r;
  }
  out["finalists"] = finalists;
  if (runner) {
    const stats::Interval rci = stats::bootstrap_median_ci_rounds(runner->samples_ms, runner->rounds());
    out["runner_up"] = {{"candidate_id", *runner->candidate_id}, {"median_ms", runner->median_ms},
                        {"ci95_ms", interval_json(rci)},
                        {"margin", best->median_ms > 0 ? runner->median_ms / best->median_ms - 1 : 0.0}};
    out["tie"] = best_ci.overlaps(rci);
  }
  for (const auto& r : rows) {
    if (!r.baseline) continue;
    out["baselines"][*r.baseline] = {
        {"median_ms", r.median_ms}, {"ci95_ms", interval_json(stats::bootstrap_median_ci_rounds(r.samples_ms, r.rounds()))},
        {"speedup", best->median_ms > 0 ? r.median_ms / best->median_ms : 0.0},
        {"speedup_ci95", interval_json(stats::bootstrap_ratio_ci_rounds(r.samples_ms, best->samples_ms, best->rounds()))}};
  }
  const json& c = best->conditions;
  json summary = {{"clock_drop", c.value("clock_drop", false)}, {"identity", c.value("identity", json())}};
  // SM clock, temperature and power over the round's readings (min, max).
  for (const char* key : {"sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w"}) {
    std::vector<double> v;
    for (const auto& rc : c.value("rounds", json::array()))
      for (const char* at : {"start", "end"})
        if (rc.contains(at) && rc[at].contains(key) && rc[at][key].is_number()) v.push_back(rc[at][key].get<double>());
    if (!v.empty()) summary[key] = {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
  }
  out["conditions"] = summary;
  return out;
}

struct ConfirmedText {
  json median, runner_up, baselines;
};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string sig(double v) {  // 3 significant digits
  std::ostringstream os;
  os << std::setprecision(3) << v;
  return os.str();
}

ConfirmedText confirmed_text(const json& c) {
  if (c.is_null()) return {json("- (unconfirmed)"), nullptr, nullptr};
  ConfirmedText t;
  const auto ci = c["ci95_ms"];
  std::string m = fixed(c["median_ms"].get<double>(), 4) + " [" + fixed(ci[0].get<double>(), 4) + ", " +
                  fixed(ci[1].get<double>(), 4) + "]";
  if (c["basis"] == "cpu") m += " cpu";
  if (c["conditions"].value("clock_drop", false)) m += " (clock drop)";
  t.median = m;
  if (!c["runner_up"].is_null())
    t.runner_up = "+" + fixed(c["runner_up"]["margin"].get<double>() * 100, 1) + "%" + (c["tie"].get<bool>() ? " tie" : "");
  std::string b;
  for (const auto& [name, v] : c["baselines"].items())
    b += (b.empty() ? "" : ", ") + name + " " + sig(v["speedup"].get<double>()) + "x [" +
         sig(v["speedup_ci95"][0].get<double>()) + ", " + sig(v["speedup_ci95"][1].get<double>()) + "]";
  if (!b.empty()) t.baselines = b;
  return t;
}

}  // namespace

int cmd_best(const Args& args) {
  return catalog_command("best", true, [&](po::options_description& d) {
    d.add_options()("op", po::value<std::string>(), "only this operator")(
        "target", po::value<std::string>(), "only this target")(
        "batch", po::value<std::string>(), "only this batch's jobs");
    auto vm = parse(args, d,
                    "usage: kiln best [--op OP] [--target T] [--batch ID] [--json]\n"
                    "The best kernel per job: its latency and whether it was measured on a device of\n"
                    "the target's kind or estimated by the static model, its config, resources and\n"
                    "code object.");
    if (!vm) return 0;
    std::string target;
    if (vm->count("target")) {
      const Knowledge knowledge = load_knowledge();
      const Target* t = knowledge.targets.find((*vm)["target"].as<std::string>());
      if (!t) throw UsageError("unknown target '" + (*vm)["target"].as<std::string>() + "'");
      target = t->name;
    }
    Catalog catalog = open_catalog(*vm, true);
    BestFilter filter;
    if (vm->count("op")) filter.op = (*vm)["op"].as<std::string>();
    if (!target.empty()) filter.target = target;
    if (vm->count("batch")) filter.batch = (*vm)["batch"].as<std::string>();
    json rows = json::array();
    for (const BestReportRow& row : best_report(catalog, filter)) {
      json r = {{"op", row.op}, {"shape", row.shape}, {"dtype", row.dtype},
                {"target", row.target}, {"arch", row.arch}, {"state", row.state}};
      if (row.best) {
        const BestReportRow::Best& b = *row.best;
        r["basis"] = b.basis;
        r["ms"] = b.value_ms;
        r["device"] = or_null(b.device);
        r["config"] = b.config;
        r["candidate_id"] = b.candidate_id;
        r["max_rel_err"] = or_null(b.max_rel_err);
        r["checked_on"] = or_null(b.exec_device);
        r["seeds"] = or_null(b.seeds);
        r["p99_ms"] = b.basis == "measured" ? or_null(b.p99_ms) : json(nullptr);
        r["mean_ms"] = b.basis == "measured" ? or_null(b.mean_ms) : json(nullptr);
        r["confirmed"] = confirmed_summary(catalog, row.job_id, b.candidate_id, b.confirmed_run.value_or(""));
        r["registers"] = or_null(b.registers);
        r["spills"] = or_null(b.spills);
        r["shared_bytes"] = or_null(b.shared_bytes);
        r["occupancy"] = or_null(b.occupancy);
        if (b.code_object) {
          const CodeObjectInfo info = inspect_code_object(b.code_object->bytes);
          r["code_object"] = {{"kind", b.code_object->kind}, {"sha256", b.code_object->sha256},
                              {"kernel_name", b.code_object->kernel_name},
                              {"elf_machine", info.machine}, {"gfx", info.flags_gfx},
                              {"note_target", info.note_target}, {"summary", info.summary()}};
        }
      } else {
        r["message"] = or_null(row.message);
      }
      rows.push_back(std::move(r));
    }
    if (vm->count("json")) {
      std::cout << rows.dump(2) << "\n";
      return 0;
    }
    if (rows.empty()) {
      std::cout << "no jobs" << (vm->count("op") || !target.empty() ? " match" : " in the catalog") << "\n";
      return 0;
    }
    Table t{{"op", "shape", "dtype", "target", "best ms", "basis", "confirmed median [95% CI]",
             "vs runner-up", "speedup vs baselines [95% CI]", "config", "regs", "spills", "code object"},
            {}};
    for (const auto& r : rows) {
      if (!r.contains("basis")) {
        t.rows.push_back({r["op"], shape_text(r["shape"]), r["dtype"], r["target"], nullptr,
                          r["state"], nullptr, nullptr, nullptr, r.value("message", json(nullptr)), nullptr,
                          nullptr, nullptr});
        continue;
      }
      const std::string basis = r["basis"] == "measured"
                                    ? "measured on " + r["device"].get<std::string>()
                                    : "estimated";
      const ConfirmedText ct = confirmed_text(r["confirmed"]);
      t.rows.push_back({r["op"], shape_text(r["shape"]), r["dtype"], r["target"], r["ms"], basis,
                        ct.median, ct.runner_up, ct.baselines,
                        config_text(r["config"]), r["registers"], r["spills"],
                        r.contains("code_object") ? json(r["code_object"]["kind"].get<std::string>() + ": " +
                                                         r["code_object"]["summary"].get<std::string>())
                                                  : json(nullptr)});
    }
    t.print_text(std::cout);
    std::cout << "\nmeasured: median latency on a device of the target's kind. estimated: the static\n"
                 "model (docs/estimate.md) ranks candidates for targets with no such device here;\n"
                 "its ms are a model's, not a measurement. confirmed: the finalists and baselines timed\n"
                 "again together after the exploration (bootstrap 95% intervals over the raw samples;\n"
                 "tie: the best's interval overlaps the runner-up's; 'cpu': the CPU test path, not a\n"
                 "measurement; '-' (unconfirmed): the exploration's single median or the estimate).\n";
    return 0;
  });
}

// --- query ---------------------------------------------------------------------

int cmd_query(const Args& args) {
  return catalog_command("query", true, [&](po::options_description& d) {
    const Catalog::QueryLimits defaults;
    d.add_options()("csv", "CSV on stdout")("sql", po::value<std::string>()->required(), "the SQL")(
        "timeout", po::value<double>()->default_value(defaults.timeout_s), "stop the query after SECONDS")(
        "max-rows", po::value<long long>()->default_value(defaults.max_rows), "refuse a result of more rows")(
        "max-bytes", po::value<long long>()->default_value(defaults.max_bytes),
        "refuse a result (or one string or blob) of more bytes");
    auto vm = parse(args, d,
                    "usage: kiln query \"SELECT ...\" [--json|--csv] [--timeout S] [--max-rows N] [--max-bytes N]\n"
                    "Read-only SQL over the catalog (docs/catalog.md has the schema); writes are refused.\n"
                    "A query stops after --timeout seconds (default 30) and refuses results of more than\n"
                    "--max-rows rows (default 100000) or --max-bytes bytes (default 64 MiB).",
                    {{"sql"}});
    if (!vm) return 0;
    Catalog::QueryLimits limits;
    limits.timeout_s = (*vm)["timeout"].as<double>();
    limits.max_rows = (*vm)["max-rows"].as<long long>();
    limits.max_bytes = (*vm)["max-bytes"].as<long long>();
    if (!(limits.timeout_s > 0 && limits.timeout_s <= 86400)) throw UsageError("--timeout must be in (0, 86400] seconds");
    if (limits.max_rows < 1) throw UsageError("--max-rows must be positive");
    if (limits.max_bytes < 1024 || limits.max_bytes > (1LL << 30))
      throw UsageError("--max-bytes must be in [1024, 1073741824]");
    Catalog catalog = open_catalog(*vm, true);
    Catalog::QueryResult q;
    try {
      q = catalog.query((*vm)["sql"].as<std::string>(), limits);
    } catch (const CatalogError& e) {
      throw UsageError(e.what());
    }
    Table t{q.columns, q.rows};
    if (vm->count("json")) std::cout << t.to_json().dump(2) << "\n";
    else if (vm->count("csv")) t.print_csv(std::cout);
    else t.print_text(std::cout);
    return 0;
  });
}

}  // namespace kiln
