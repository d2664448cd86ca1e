// kiln nightly MANIFEST: flags into batch::nightly (batch/nightly.h: submit,
// run what changed, compare with the previous bests, package), its report
// printed (Markdown, or --json) and written (--report FILE: FILE.md, FILE.json).
// Exit 4 when a job run now regressed (or failed where it had a kernel before),
// so cron and Slurm notice.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "batch/nightly.h"
#include "batch/nightly_report.h"
#include "cli/cli_util.h"
#include "common/output_path.h"
#include "metrics/flags.h"
#include "batch/workers.h"

namespace kiln {

using namespace kiln::cli;

namespace {

constexpr int kExitRegression = 4;

}  // namespace

int cmd_nightly(const Args& args) {
  return catalog_command("nightly", true, [&](po::options_description& d) {
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
    const std::string usage =
        "usage: kiln nightly MANIFEST [--package-dir DIR] [--threshold 0.05] [--report FILE]\n"
        "                    [--catalog PATH] [--workers N] [--device auto|cpu|gpu] [--json]\n"
        "Regenerates a kernel set: submits MANIFEST (idempotent), runs only the jobs whose\n"
        "key is new (a changed manifest entry, template, Triton version or target), compares\n"
        "every job's best with the previous best of the same (op, shape, dtype, params,\n"
        "target), writes a Markdown + JSON report and packages the targets that changed.\n"
        "Exit codes: 0 no regression · 4 a job run now is slower than its previous best by\n"
        "more than --threshold, or failed where it had a kernel · 1, 2, 3, 130 as kiln run.";
    // --help shows the documented options only; --report-only stays hidden.
    auto vm = parse(args, d, usage, {{"manifest"}}, &hidden);
    if (!vm) return 0;
    const bool report_only = vm->count("report-only") > 0;
    const double threshold = (*vm)["threshold"].as<double>();
    if (!(threshold >= 0)) throw UsageError("--threshold must be >= 0");
    const double min_effect = (*vm)["min-effect"].as<double>();
    if (!(min_effect >= 0)) throw UsageError("--min-effect must be >= 0");
    batch::NightlyOptions no;
    no.catalog = (*vm)["catalog"].as<std::string>();
    no.report_only = report_only;
    no.threshold = threshold;
    no.min_effect = min_effect;
    if (vm->count("package-dir")) no.package_dir = (*vm)["package-dir"].as<std::string>();
    RunOptions& o = no.run;
    o.workers = (*vm)["workers"].as<int>();
    o.device = (*vm)["device"].as<std::string>();
    set_scheduling_flags(o, *vm);
    if (o.workers < 1 || o.workers > batch::kMaxWorkers)
      throw UsageError("--workers must be 1.." + std::to_string(batch::kMaxWorkers));
    if (o.device != "auto" && o.device != "cpu" && o.device != "gpu")
      throw UsageError("--device must be auto, cpu or gpu");
    if (vm->count("scratch")) o.scratch_dir = (*vm)["scratch"].as<std::string>();
    o.echo_worker_stderr = vm->count("verbose") > 0;
    // --report FILE: FILE.md and FILE.json, both checked before anything runs
    std::filesystem::path mdp, jsp;
    if (vm->count("report")) {
      mdp = (*vm)["report"].as<std::string>();
      jsp = mdp;
      if (mdp.extension() == ".md") jsp.replace_extension(".json");
      else if (mdp.extension() == ".json") mdp.replace_extension(".md");
      else jsp += ".json";
    }
    const std::vector<std::filesystem::path> protect = catalog_files(no.catalog);
    try {
      no.metrics = metrics::read_metrics_flags(*vm);
      no.metrics.protected_files = protect;
      if (no.metrics.textfile) metrics::check_textfile_path(*no.metrics.textfile, protect);
      if (!mdp.empty()) {
        check_output_file(mdp, "--report", protect);
        check_output_file(jsp, "--report", protect);
      }
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }

    const Knowledge knowledge = load_knowledge();
    Manifest m = load_manifest((*vm)["manifest"].as<std::string>(), knowledge);
    metrics::MetricsSetup metrics_setup;
    const batch::NightlyReport rep = batch::nightly(m, knowledge, no, metrics_setup, std::cerr);
    const std::string md = batch::markdown(rep);
    const json rep_json = batch::to_json(rep);
    if (!mdp.empty()) {
      if (mdp.has_parent_path()) std::filesystem::create_directories(mdp.parent_path());
      write_output_file(mdp, md, "--report", protect);
      write_output_file(jsp, rep_json.dump(2) + "\n", "--report", protect);
      std::cerr << "kiln nightly: report in " << mdp.string() << " and " << jsp.string() << "\n";
    }
    metrics_setup.finish();
    if (vm->count("json")) std::cout << rep_json.dump(2) << "\n";
    else std::cout << md;
    if (rep.interrupted) return 130;
    return rep.regressions().empty() ? 0 : kExitRegression;
  });
}

}  // namespace kiln
