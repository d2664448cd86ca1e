// kiln: YAML manifest of kernel requests -> verified, tuned Triton kernels and
// code objects, recorded in an SQLite catalog.
#include <iostream>
#include <string>

#include "cli/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: kiln <command> [options]

commands:
  submit MANIFEST      validate a manifest, expand it into jobs, store them
  run                  process queued jobs until none remain
  status               jobs and candidates per state
  best                 the best kernel per job, its metrics and their basis
  query "SELECT ..."   read-only SQL over the catalog
  package              a kiln-package/2 of the best code objects for targets
  import-measurements FILE   latencies timed by `kiln-rt tune` on a deployment node
  lineage --job ID     which candidate repairs which: rounds, instances, LLM calls
  merge OUT IN...      merge catalogs (e.g. the shards of a Slurm job array)
  nightly MANIFEST     regenerate a kernel set: run what changed, report regressions (exit 4)
  decide               kiln nightly's regression decision on raw samples (JSON on stdin)
  serve                a read-only HTTP service over the catalog: dashboard, /api, /metrics
  report --out FILE    the dashboard as one static HTML file

Every command takes --help. The catalog is --catalog PATH, else $KILN_CATALOG,
else ./kiln.db. Docs: docs/manifest.md, docs/catalog.md, docs/architecture.md.
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string cmd = argv[1];
  kiln::Args args(argv + 2, argv + argc);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::cout << "kiln " << KILN_VERSION << "\n";
    return 0;
  }
  if (cmd == "submit") return kiln::cmd_submit(args);
  if (cmd == "run") return kiln::cmd_run(args);
  if (cmd == "status") return kiln::cmd_status(args);
  if (cmd == "best") return kiln::cmd_best(args);
  if (cmd == "query") return kiln::cmd_query(args);
  if (cmd == "package") return kiln::cmd_package(args);
  if (cmd == "import-measurements") return kiln::cmd_import_measurements(args);
  if (cmd == "merge") return kiln::cmd_merge(args);
  if (cmd == "nightly") return kiln::cmd_nightly(args);
  if (cmd == "decide") return kiln::cmd_decide(args);
  if (cmd == "lineage") return kiln::cmd_lineage(args);
  if (cmd == "serve") return kiln::cmd_serve(args);
  if (cmd == "report") return kiln::cmd_report(args);
  std::cerr << "kiln: unknown command '" << cmd << "'\n\n" << kUsage;
  return 2;
}
