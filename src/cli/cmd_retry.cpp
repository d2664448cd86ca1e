// kiln retry: failed jobs back to the queue, and the evaluations of their
// candidates that are no verdict (timeout, crash) forgotten, so the next
// `kiln run` does that work again. The catalog side is Catalog::retry_failed.
#include <iostream>

#include "cli/cli_util.h"

namespace kiln {

using namespace kiln::cli;

namespace {

std::string forgotten_text(const std::map<std::string, int>& by_status) {
  int n = 0;
  std::string parts;
  for (const auto& [status, k] : by_status) {
    n += k;
    parts += (parts.empty() ? "" : ", ") + status + " " + std::to_string(k);
  }
  if (n == 0) return "no evaluation forgotten";
  return std::to_string(n) + " evaluation(s) forgotten (" + parts + ")";
}

std::string why_left(const RetriedJob& j) {
  if (j.state == "done") return "done: a done job is never retried";
  if (j.state == "running") return "running: a running job is never touched (its run finishes or drains it)";
  if (j.state == "queued") return "already queued";
  return j.state;
}

}  // namespace

int cmd_retry(const Args& args) {
  return catalog_command("retry", true, [&](po::options_description& d) {
    d.add_options()("batch", po::value<std::string>(), "only this batch's failed jobs")(
        "job", po::value<std::vector<long long>>()->composing(), "only this job id (repeatable)")(
        "keep-evaluations", "requeue only: forget no evaluation")(
        "dry-run", "print what would change and change nothing");
    auto vm = parse(args, d,
                    "usage: kiln retry [--batch ID] [--job ID]... [--keep-evaluations] [--dry-run] [--json]\n"
                    "Puts failed jobs back in the queue (every failed job, a batch's, or the given ids) and\n"
                    "forgets the evaluations of their candidates that are no verdict on the candidate's\n"
                    "code -- timeout and crash (worker died or killed, out of GPU memory, no answer in time,\n"
                    "reply refused) -- so the next `kiln run` evaluates those candidates again. Verdicts\n"
                    "(ok, incorrect, compile_error, resource_error, rejected) are kept. Queued, running and\n"
                    "done jobs are never changed. Each retry is recorded in table `retries`\n"
                    "(docs/catalog.md). Exit: 0 done, 1 error (an unknown batch or job id: nothing changed),\n"
                    "2 usage.");
    if (!vm) return 0;
    RetryRequest req;
    if (vm->count("batch")) req.batch_id = (*vm)["batch"].as<std::string>();
    if (vm->count("job")) req.job_ids = (*vm)["job"].as<std::vector<long long>>();
    req.forget_evaluations = vm->count("keep-evaluations") == 0;
    req.dry_run = vm->count("dry-run") > 0;
    const std::string path = (*vm)["catalog"].as<std::string>();
    // retry changes an existing catalog: it never creates one (as kiln status: "no catalog at PATH").
    Catalog::check_path(path, /*read_only=*/true);
    Catalog catalog = open_catalog(*vm, false);
    RetryReport r;
    try {
      r = catalog.retry_failed(req);
    } catch (const CatalogNotFound& e) {
      // exit 1, as kiln status and kiln lineage for an id the catalog lacks
      throw std::runtime_error(std::string(e.what()) + "; nothing changed");
    }
    if (vm->count("json")) {
      json jobs = json::array();
      for (const RetriedJob& j : r.jobs) {
        json forgotten = json::object();
        for (const auto& [status, n] : j.forgotten) forgotten[status] = n;
        jobs.push_back({{"id", j.job_id}, {"op", j.op}, {"shape", j.shape}, {"dtype", j.dtype},
                        {"target", j.target}, {"state", j.state}, {"retried", j.retried},
                        {"message", j.message.empty() ? json(nullptr) : json(j.message)},
                        {"forgotten", forgotten}});
      }
      std::cout << json{{"dry_run", req.dry_run}, {"retried", r.retried}, {"forgotten", r.forgotten},
                        {"jobs", jobs}}.dump(2)
                << "\n";
      return 0;
    }
    const char* verb = req.dry_run ? "would retry" : "retried";
    for (const RetriedJob& j : r.jobs) {
      const std::string label = j.op + " " + shape_text(j.shape) + " " + j.dtype + " " + j.target;
      std::string line = "job " + std::to_string(j.job_id) + " " + label + ": ";
      if (j.retried)
        line += std::string(verb) + "; was: " + (j.message.empty() ? "(no message)" : first_line(j.message, 80)) +
                "; " + forgotten_text(j.forgotten);
      else
        line += "left alone: " + why_left(j);
      std::cout << terminal_safe(line) << "\n";
    }
    if (req.dry_run) std::cout << "dry run: would retry ";
    else std::cout << "retried ";
    std::cout << r.retried << " job(s), " << r.forgotten << " evaluation(s) "
              << (req.dry_run ? "would be " : "") << "forgotten";
    if (req.dry_run) std::cout << "; nothing changed\n";
    else if (r.retried > 0) std::cout << "; `kiln run` does them again\n";
    else std::cout << "\n";
    return 0;
  });
}

}  // namespace kiln
