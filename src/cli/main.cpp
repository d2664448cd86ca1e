// kiln: YAML manifest of kernel requests -> verified, tuned Triton kernels and
// code objects, recorded in an SQLite catalog.
#include <iostream>
#include <string>
#include <string_view>
#include <utility>

#include "cli/commands.h"

namespace {

constexpr const char* kUsage = R"(usage: kiln <command> [options]

commands:
  submit MANIFEST      validate a manifest, expand it into jobs, store them
  run                  process queued jobs until none remain
  status               jobs and candidates per state
  retry                failed jobs back to the queue, their crashed/timed-out evaluations forgotten
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
  static const std::pair<std::string_view, int (*)(const kiln::Args&)> kCommands[] = {
      {"submit", kiln::cmd_submit},   {"run", kiln::cmd_run},         {"status", kiln::cmd_status},
      {"best", kiln::cmd_best},       {"query", kiln::cmd_query},     {"package", kiln::cmd_package},
      {"import-measurements", kiln::cmd_import_measurements},         {"merge", kiln::cmd_merge},
      {"nightly", kiln::cmd_nightly}, {"decide", kiln::cmd_decide},   {"lineage", kiln::cmd_lineage},
      {"serve", kiln::cmd_serve},     {"report", kiln::cmd_report},   {"retry", kiln::cmd_retry}};
  for (const auto& [name, run] : kCommands)
    if (cmd == name) return run(args);
  std::cerr << "kiln: unknown command '" << cmd << "'\n\n" << kUsage;
  return 2;
}
