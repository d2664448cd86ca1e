// kiln merge OUT.db IN.db...: gather catalogs into one (e.g. the node-local
// catalogs of a Slurm job array, scripts/slurm/array.sbatch). The merge itself
// is merge_catalog (src/catalog/merge.cpp); docs/cluster.md.
#include <filesystem>
#include <iostream>

#include "cli/cli_util.h"

namespace kiln {

using namespace kiln::cli;

namespace {

json stats_json(const MergeStats& s) {
  return {{"batches", s.batches},         {"batch_links", s.batch_links},
          {"jobs_new", s.jobs_new},       {"jobs_updated", s.jobs_updated},
          {"candidates", s.candidates},   {"evaluations", s.evaluations},
          {"blobs", s.blobs},             {"artifacts", s.artifacts},
          {"best_new", s.best_new},       {"best_replaced", s.best_replaced},
          {"llm_calls", s.llm_calls},     {"confirmations", s.confirmations},
          {"imported_measurements", s.imported_measurements}, {"retries", s.retries},
          {"skipped_tables", s.skipped_tables}};
}

}  // namespace

int cmd_merge(const Args& args) {
  return guarded("merge", [&] {
    po::options_description d("kiln merge options");
    d.add_options()("help,h", "show this help")("json", "machine-readable JSON on stdout")(
        "out", po::value<std::string>()->required(), "the catalog to merge into (created if missing)")(
        "in", po::value<std::vector<std::string>>()->required(), "catalogs to merge from");
    auto vm = parse(args, d,
                    "usage: kiln merge OUT.db IN.db... [--json]\n"
                    "Copies every batch, job, candidate, evaluation, code object, artifact and best\n"
                    "selection of the IN catalogs into OUT (created if missing). Jobs match by key and\n"
                    "candidates by (job, key), so merging the same file twice adds nothing; a job done\n"
                    "in an input becomes done in OUT; of two best selections for a job, a measured one\n"
                    "beats an estimated one, else the lower latency wins. The inputs are only read.\n"
                    "Keep OUT on node-local disk and copy it to shared storage afterwards.",
                    {{"out", 1}, {"in", -1}});
    if (!vm) return 0;
    const std::filesystem::path out = (*vm)["out"].as<std::string>();
    const auto inputs = (*vm)["in"].as<std::vector<std::string>>();
    // Check every input exists before OUT is created or touched.
    for (const auto& in : inputs)
      if (!std::filesystem::is_regular_file(in)) throw UsageError("no catalog at " + in);
    if (const std::string w = network_filesystem_warning(out); !w.empty())
      std::cerr << "kiln merge: warning: " << w << "\n";
    Catalog catalog = Catalog::open(out, false);
    json report = {{"out", out.string()}, {"inputs", json::array()}};
    MergeStats total;
    for (const auto& in : inputs) {
      const MergeStats s = merge_catalog(catalog, in);
      report["inputs"].push_back({{"path", in}, {"merged", stats_json(s)}});
      total.add_counts(s);
      if (!vm->count("json")) {
        std::cout << "merged " << in << ": " << s.jobs_new << " new job(s), " << s.jobs_updated
                  << " updated, " << s.candidates << " candidate(s), " << s.evaluations
                  << " evaluation(s), " << s.artifacts << " artifact(s), "
                  << s.best_new + s.best_replaced << " best selection(s)";
        if (!s.skipped_tables.empty()) {
          std::cout << "; not merged (unknown tables):";
          for (const auto& t : s.skipped_tables) std::cout << " " << t;
        }
        std::cout << "\n";
      }
    }
    report["total"] = stats_json(total);
    {
      long long jobs = 0;
      const auto counts = catalog.job_state_counts();
      for (const auto& [state, n] : counts) jobs += n;
      report["jobs"] = {{"total", jobs}, {"done", counts.count("done") ? counts.at("done") : 0}};
    }
    if (vm->count("json")) {
      std::cout << report.dump(2) << "\n";
    } else {
      std::cout << out.string() << ": " << cell_text(report["jobs"]["total"]) << " job(s), "
                << cell_text(report["jobs"]["done"]) << " done\n";
    }
    return 0;
  });
}

}  // namespace kiln
