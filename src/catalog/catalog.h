// The SQLite catalog: batches, jobs (state machine + leases), candidates,
// evaluations, code objects and the best candidate per job. Schema in
// db/migrations/*.sql, applied in order on open; docs/catalog.md describes it.
//
// One Catalog object per thread. Every mutating call is one transaction.
#pragma once
#include <filesystem>
#include <stdexcept>
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
  int attempts = 0;          // times claimed (a reclaim or a release-then-claim counts)
  std::string message;
  std::string lease_owner;   // "" when not running
  std::optional<double> lease_expires;
};

struct CandidateRow {
  long long id = 0;
  long long job_id = 0;
  std::string key;          // "" in add_candidate: computed by candidate_key() (job_key.h)
  std::string generator, template_name;  // template_name "" is stored as NULL
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
  std::string device;       // "" is stored as NULL (estimated)
};

// One migration file, db/migrations/NNNN_name.sql; version = NNNN.
struct Migration {
  int version = 0;
  std::filesystem::path file;
};

// The migration files of `dir`, sorted by version; throws CatalogError if the
// directory is missing or versions are not exactly 1, 2, ..., N.
std::vector<Migration> find_migrations(const std::filesystem::path& dir);

// <kiln_home()>/db/migrations.
std::filesystem::path default_migrations_dir();

// Non-empty (a warning naming the filesystem) when `path`'s directory is on a
// network / cluster filesystem (NFS, Lustre, GPFS, CIFS, BeeGFS, ...), where
// SQLite's WAL locking is unsafe. Callers decide whether to warn or refuse.
std::string network_filesystem_warning(const std::filesystem::path& path);

class Catalog {
 public:
  // Opens (creating if needed) and migrates. read_only opens with
  // SQLITE_OPEN_READONLY and never migrates (fails if the file is missing or old).
  // Migrations come from default_migrations_dir().
  static Catalog open(const std::filesystem::path& path, bool read_only = false);
  // Same, with an explicit migrations directory (tests, relocated installs).
  static Catalog open(const std::filesystem::path& path, bool read_only,
                      const std::filesystem::path& migrations_dir);
  Catalog(Catalog&&) noexcept;
  Catalog& operator=(Catalog&&) noexcept;
  ~Catalog();

  int schema_version() const;
  const std::filesystem::path& path() const { return path_; }
  bool read_only() const { return read_only_; }

  // Batches and jobs. Stores the batch and every job whose key is new, in one
  // transaction; the batch id is a hash of the sorted job keys.
  SubmitResult submit(const std::string& name, const std::string& manifest_path,
                      const std::string& manifest_text, const std::vector<NewJob>& jobs);

  // Claims one job for `owner` (host:pid): a queued job, or a running one whose
  // lease expired or whose owner process on this host is gone. Sets state
  // running, lease, attempts+1. Optionally restricted to one batch.
  std::optional<JobRow> claim_job(const std::string& owner, double lease_s,
                                  const std::optional<std::string>& batch_id = std::nullopt);
  // Extends every lease held by owner; returns how many running jobs it holds
  // (fewer than expected means a job was reclaimed by another run).
  int renew_leases(const std::string& owner, double lease_s);
  // running -> done | failed; clears the lease. Throws if owner does not hold it.
  void finish_job(long long job_id, const std::string& owner, bool ok, const std::string& message);
  // running -> queued (drain); clears the lease.
  void release_job(long long job_id, const std::string& owner);
  // failed -> queued for every failed job (of one batch, if given); returns the count.
  int requeue_failed(const std::optional<std::string>& batch_id = std::nullopt);
  // One job by id; nullopt if there is none.
  std::optional<JobRow> job(long long job_id) const;

  // Candidates: inserts or returns the existing row with the same (job, key).
  CandidateRow add_candidate(const CandidateRow& c);
  std::vector<CandidateRow> candidates(long long job_id) const;

  // Records an evaluation (and its artifact) in one transaction. Throws if the
  // candidate already has one.
  void record_evaluation(long long candidate_id, const EvaluationIn& e);

  // Best selection. set_best replaces the job's best row; throws if the
  // candidate does not belong to the job.
  void set_best(const BestRow& best);
  std::optional<BestRow> best(long long job_id) const;

  // Read-only SQL; throws CatalogError for anything that is not a read. Runs on
  // a separate SQLITE_OPEN_READONLY connection with an authorizer that allows
  // only reads; several statements are allowed if all are reads, and the rows
  // of the last one that returns columns are returned.
  struct QueryResult {
    std::vector<std::string> columns;
    std::vector<std::vector<nlohmann::json>> rows;  // null, integer, real, string (blobs as "<blob N bytes>")
  };
  QueryResult query(const std::string& sql) const;

  // Raw handle for the CLI's reports; prefer the calls above.
  sqlite3* handle() const { return db_; }

 private:
  Catalog(sqlite3* db, std::filesystem::path path, bool read_only);
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
  bool read_only_ = false;
};

}  // namespace kiln
