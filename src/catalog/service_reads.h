// Typed reads for reports over a catalog: what `kiln serve` answers and what
// `kiln report` draws (src/server). Every function only reads; none takes SQL
// from its caller (the filters are bound parameters).
//
// Threading: a Reader belongs to one thread at a time, as its Catalog; open
// the catalog read-only (Catalog::open(path, true)) for a service, so that a
// running `kiln run` on the same WAL catalog is never blocked.
// Failure: an SQLite error throws CatalogError (never "no rows").
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln::sql {
class StmtCache;
}

namespace kiln::reports {

// A catalog connection with its report statements prepared once (preparing
// the best-kernel lookup costs more than running it). Owns the Catalog.
class Reader {
 public:
  explicit Reader(Catalog catalog);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  const Catalog& catalog() const { return catalog_; }

  // The prepared report statements of this connection (for this file's reads).
  sql::StmtCache& statements();

 private:
  Catalog catalog_;
  std::unique_ptr<sql::StmtCache> statements_;
};

struct BatchSummary {
  std::string id, name;
  double created_at = 0;
  int jobs = 0;
};

// Every batch, newest first.
std::vector<BatchSummary> batches(Reader& reader);

struct JobOverview {
  long long id = 0;
  std::string key, op, dtype, target, arch, state, message;
  nlohmann::json shape, params;
  double created_at = 0;
  std::optional<double> started_at, finished_at;
  int candidates = 0, evaluated = 0, correct = 0;  // correct: evaluations with status ok
  std::optional<BestRow> best;
};

// The jobs (of one batch, if given), by id.
std::vector<JobOverview> jobs(Reader& reader, const std::optional<std::string>& batch_id = std::nullopt);
// One job; nullopt when there is none.
std::optional<JobOverview> job(Reader& reader, long long job_id);

// A candidate and its evaluation, if it has one.
struct CandidateResult {
  long long id = 0;
  std::string generator, template_name;  // template_name "" when none (llm)
  nlohmann::json config;
  int round = 0, instance = 0;
  std::optional<long long> parent_id;
  bool evaluated = false;
  std::string status, message, bench_device;    // "" when not evaluated / not benchmarked
  std::optional<double> median_ms, estimate_ms, compile_s, evaluated_at;
};

// The job's candidates in evaluation order (evaluations by id, then the
// candidates not evaluated yet, by id): the order the search saw its results.
std::vector<CandidateResult> candidates(Reader& reader, long long job_id);

// The best kernel of a done job, with what a deployment needs to fetch it.
struct BestKernel {
  JobOverview job;                // its candidate counts are left 0 (a cheap lookup)
  BestRow best;
  nlohmann::json config;
  std::string code_kind, code_sha256, kernel_name;  // "" when no code object for the job's target
  std::optional<double> traffic_bytes, traffic_flops;  // the evaluation's minimum traffic model, if it had one
};

struct BestFilter {
  std::optional<std::string> op, target, dtype;
  std::optional<std::string> shape;     // canonical JSON of the shape (canonical_json)
  std::optional<std::string> batch_id;
};

// Jobs with a best that match every given field, newest job first (created_at,
// then id): for one kernel, the first is the latest nightly's.
std::vector<BestKernel> best_kernels(Reader& reader, const BestFilter& filter);

// One kernel across nightly runs: its done jobs with a best and the same
// (op, shape, dtype, params, target) -- other keys, as `kiln nightly` compares
// them -- oldest first. shape and params are canonical JSON.
std::vector<BestKernel> kernel_history(Reader& reader, const std::string& op, const std::string& shape,
                                       const std::string& dtype, const std::string& params,
                                       const std::string& target);

// A kernel's identity across nightly runs, as its jobs store it: shape and
// params are the jobs' JSON text (canonical JSON, canonical_json), the form
// kernel_history takes them in.
struct KernelKey {
  std::string op, shape, dtype, params, target;
  auto operator<=>(const KernelKey&) const = default;
};

// Every kernel's history at once, in one query: for each key, what
// kernel_history(reader, op, shape, dtype, params, target) returns (oldest
// first). For a render over all kernels (GET /metrics), instead of one query per kernel.
std::map<KernelKey, std::vector<BestKernel>> kernel_histories(Reader& reader);

// PRAGMA data_version of the reader's connection: a number that changes
// whenever another connection has committed to the catalog since this one
// last asked, and only grows (numbers of different connections are not
// comparable). Reads no page: what a cache of answers checks per request.
long long data_version(Reader& reader);

// A stored code object's bytes by its sha256; nullopt when there is none.
std::optional<std::string> code_object_bytes(Reader& reader, const std::string& sha256);

// Text that changes whenever the set of best code objects of `target` changes
// (jobs, candidates, code objects): a package cache key.
std::string best_fingerprint(Reader& reader, const std::string& target);

}  // namespace kiln::reports
