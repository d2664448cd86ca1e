// The SQLite catalog: batches, jobs (state machine + leases), candidates,
// evaluations, code objects and the best candidate per job. Schema in
// db/migrations/*.sql, applied in order on open; docs/catalog.md describes it.
//
// One Catalog object per thread. Every mutating call is one transaction.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace kiln {

class CatalogError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NewJob {
  std::string key;
  std::string op, dtype, target, arch;
  nlohmann::json shape, params, spec;
};

struct SubmitResult {
  std::string batch_id;
  int total_jobs = 0;
  int new_jobs = 0;
};

struct JobRow {
  long long id = 0;
  std::string key, op, dtype, target, arch, state;
  nlohmann::json shape, params, spec;
  int attempts = 0;
  std::string message;
};

struct CandidateRow {
  long long id = 0;
  long long job_id = 0;
  std::string key, generator, template_name;
  nlohmann::json config;
  std::optional<std::string> source;
  std::optional<long long> parent_id;
  int round = 0, instance = 0;
  bool evaluated = false;   // has an evaluation row
};

struct ArtifactIn {
  std::string target, arch, kind, kernel_name;
  std::string bytes;        // the code object
  nlohmann::json metadata;
};

// One evaluation, as the explorer records it. `result` is the worker's JSON.
struct EvaluationIn {
  std::string status;       // ok | compile_error | resource_error | incorrect | timeout | crash
  std::string message;
  nlohmann::json result;    // full worker answer (may be {} for timeout/crash)
  std::optional<double> estimate_ms;
  std::string worker;
  std::optional<ArtifactIn> artifact;
};

struct BestRow {
  long long job_id = 0, candidate_id = 0;
  std::string basis;        // measured | estimated
  double value_ms = 0;
  std::string device;
};

class Catalog {
 public:
  // Opens (creating if needed) and migrates. read_only opens with
  // SQLITE_OPEN_READONLY and never migrates (fails if the file is missing or old).
  static Catalog open(const std::filesystem::path& path, bool read_only = false);
  Catalog(Catalog&&) noexcept;
  Catalog& operator=(Catalog&&) noexcept;
  ~Catalog();

  int schema_version() const;

  // Batches and jobs. Stores the batch and every job whose key is new, in one
  // transaction; the batch id is a hash of the sorted job keys.
  SubmitResult submit(const std::string& name, const std::string& manifest_path,
                      const std::string& manifest_text, const std::vector<NewJob>& jobs);

  // Claims one job for `owner` (host:pid): a queued job, or a running one whose
  // lease expired or whose owner process on this host is gone. Sets state
  // running, lease, attempts+1. Optionally restricted to one batch.
  std::optional<JobRow> claim_job(const std::string& owner, double lease_s,
                                  const std::optional<std::string>& batch_id = std::nullopt);
  // Extends every lease held by owner.
  void renew_leases(const std::string& owner, double lease_s);
  // running -> done | failed; clears the lease. Throws if owner does not hold it.
  void finish_job(long long job_id, const std::string& owner, bool ok, const std::string& message);
  // running -> queued (drain); clears the lease.
  void release_job(long long job_id, const std::string& owner);

  // Candidates: inserts or returns the existing row with the same (job, key).
  CandidateRow add_candidate(const CandidateRow& c);
  std::vector<CandidateRow> candidates(long long job_id) const;

  // Records an evaluation (and its artifact) in one transaction. Throws if the
  // candidate already has one.
  void record_evaluation(long long candidate_id, const EvaluationIn& e);

  // Best selection. set_best replaces the job's best row.
  void set_best(const BestRow& best);
  std::optional<BestRow> best(long long job_id) const;

  // Read-only SQL; throws CatalogError for anything that is not a read.
  struct QueryResult {
    std::vector<std::string> columns;
    std::vector<std::vector<nlohmann::json>> rows;  // null, integer, real, string (blobs as "<blob N bytes>")
  };
  QueryResult query(const std::string& sql) const;

  // Raw handle for the CLI's reports; prefer the calls above.
  sqlite3* handle() const { return db_; }

 private:
  explicit Catalog(sqlite3* db);
  sqlite3* db_ = nullptr;
};

}  // namespace kiln
