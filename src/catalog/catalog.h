// The SQLite catalog: batches, jobs (state machine + leases), candidates,
// evaluations, code objects and the best candidate per job. Schema in
// db/migrations/*.sql, applied in order on open; docs/catalog.md describes it.
//
// One Catalog object per thread. Every mutating call is one transaction.
// The catalog alone speaks SQL: the read models and writers other than the
// core ones below live in their own headers here (evaluations.h, reports.h,
// packaging.h, backup.h, ...), all on one statement helper (sql.h). Every
// SQLite failure is a CatalogError naming the file, what was being done and
// SQLite's message; never an empty result.
#pragma once
#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace kiln {

class CatalogError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An id the caller named (a batch, a job) is not in the catalog.
class CatalogNotFound : public CatalogError {
 public:
  using CatalogError::CatalogError;
};

namespace sql {
struct Access;  // src/catalog/sql.h: the statement helper of the catalog's own files
}

struct NewJob {
  std::string key;
  std::string op, dtype, target, arch;
  nlohmann::json shape, params, spec;
  double priority = 0;       // claim order, bigger first (roofline ms; 0: unknown)
  double compile_est_s = 0;  // claim order before priority, bigger first (0004_compile_estimate.sql)
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
  std::string status;       // ok | compile_error | resource_error | incorrect | timeout | crash | rejected
  std::string message;
  nlohmann::json result;    // full worker answer (may be {} for timeout/crash)
  std::optional<double> estimate_ms;
  std::string worker;
  std::optional<ArtifactIn> artifact;
};

// One chat-completions request of the llm generator (table llm_calls, 0002_llm.sql).
struct LlmCallIn {
  long long job_id = 0;
  std::optional<long long> candidate_id;    // set later by link_llm_call
  std::optional<long long> parent_id;       // the candidate the prompt repairs
  int instance = 0, round = 0;
  std::string model, url;
  std::optional<double> temperature;
  std::optional<long long> seed;
  std::string prompt;                       // JSON array of chat messages
  std::optional<std::string> response;      // the reply's content
  std::optional<long long> prompt_tokens, completion_tokens;
  std::optional<double> latency_s;
  int attempts = 1;
  std::string status = "ok";                // ok | error | skipped
  std::string error;                        // "" is stored as NULL
  nlohmann::json retrieval;                 // null is stored as NULL
};

struct LlmCallRow : LlmCallIn {
  long long id = 0;
  double created_at = 0;
};

struct BestRow {
  long long job_id = 0, candidate_id = 0;
  std::string basis;        // measured | estimated
  double value_ms = 0;      // the confirmed median when confirmed on the device, else the exploration's
  std::string device;       // "" is stored as NULL (estimated)
  // The confirmation round that chose this candidate and its confirmed median
  // there (0005_confirmation.sql); unset: chosen by the exploration alone.
  std::optional<std::string> confirmed_run = std::nullopt;
  std::optional<double> confirmed_ms = std::nullopt;
};

// A candidate of a job with its evaluation (Catalog::evaluated_candidates).
struct EvaluatedCandidate {
  long long candidate_id = 0;
  nlohmann::json config;
  bool generated = false;               // has source code (llm), not a template config
  std::string status;                   // the evaluation's status
  std::string bench_device;             // "" when not benchmarked
  std::optional<double> median_ms, estimate_ms;
};

// The number of rounds a confirmation's samples were taken in: the length of
// its conditions' "rounds" array (the worker's confirm writes one record per
// round, each entry's samples in round order), 1 where absent.
inline size_t confirmation_rounds(const nlohmann::json& conditions) {
  if (!conditions.is_object() || !conditions.contains("rounds") || !conditions.at("rounds").is_array()) return 1;
  return std::max<size_t>(1, conditions.at("rounds").size());
}

// One entry of a confirmation round (table confirmations, 0005_confirmation.sql):
// a candidate's or a baseline's raw samples from the worker's `confirm`.
struct ConfirmationRow {
  long long id = 0;                    // set when read back
  long long job_id = 0;
  std::optional<long long> candidate_id;  // exactly one of candidate_id, baseline
  std::optional<std::string> baseline;    // eager | compile
  std::string run_id;
  std::string basis;                   // device | cpu
  std::string device;
  std::vector<double> samples_ms;      // stored as float32 little-endian
  double median_ms = 0;                // computed from the samples when recorded
  nlohmann::json conditions = nlohmann::json::object();
  double created_at = 0;               // set when read back
  // The rounds its samples were taken in, in equal consecutive blocks
  // (confirmation_rounds of its conditions): what the intervals resample.
  size_t rounds() const { return confirmation_rounds(conditions); }
};

// What Catalog::retry_failed (kiln retry) does, and what it did.
struct RetryRequest {
  std::optional<std::string> batch_id;  // only this batch's jobs
  std::vector<long long> job_ids;       // only these jobs; empty: every failed job (of the batch)
  bool forget_evaluations = true;       // forget the evaluations that are no verdict (is_verdict)
  bool dry_run = false;                 // report what would change; change nothing
};

struct RetriedJob {
  long long job_id = 0;
  std::string op, dtype, target;
  nlohmann::json shape;
  std::string state;                    // the job's state before: failed when retried
  bool retried = false;                 // false: named in job_ids, but not failed (state says why)
  std::string message;                  // its message before (the failure's)
  std::map<std::string, int> forgotten; // evaluations forgotten, by status
};

struct RetryReport {
  std::vector<RetriedJob> jobs;         // by job id: the retried ones and the named ones left alone
  int retried = 0;                      // jobs requeued
  int forgotten = 0;                    // evaluations forgotten, in all
};

// Whether an evaluation status is a verdict on the candidate's own code, which
// a retry keeps: ok, incorrect, compile_error, resource_error, rejected (and any
// status this kiln does not know). Not verdicts: timeout and crash, where the
// evaluation stopped before it could judge the code (the worker died or was
// killed, out of GPU memory, no answer in time, the engine refused the reply).
bool is_verdict(const std::string& status);

// float32 little-endian bytes of the samples and back (the confirmations.samples
// encoding; exposed for tools and tests). decode throws CatalogError when the
// size is not a multiple of 4.
std::string encode_samples(const std::vector<double>& ms);
std::vector<double> decode_samples(const std::string& bytes);

// The measured template configs of one job (Catalog::measured_configs).
struct MeasuredJob {
  long long job_id = 0;
  std::string key, dtype;
  nlohmann::json shape, params;
  std::vector<std::pair<nlohmann::json, double>> best;  // (config, median ms), fastest first
};

// A slice of the job queue: the jobs whose id % count == index (0 <= index < count).
// In catalogs built the same way (a fresh catalog, the same manifest submitted)
// job ids are the same, so N runs with shards 0..N-1 split a manifest's jobs
// between them without overlap.
struct JobShard {
  int index = 0;
  int count = 1;
};

// The order in which claim_job hands out queued jobs.
enum class ClaimOrder {
  // The most compiling first (jobs.compile_est_s), then the most expensive
  // (jobs.priority, the roofline ms): a run that finishes everything ends on
  // GPU work, and cheap jobs fill the last slots (the shortest makespan).
  kLongestFirst,
  // The cheapest first (the same two keys, ascending): a run that stops at a
  // time limit finishes as many jobs as it can (kiln run --time-limit).
  kCheapestFirst,
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
  // The checks open() makes of the path before it touches anything (empty,
  // a dangling symbolic link, a directory, /dev/null or a FIFO; missing when
  // read_only): throws CatalogError naming the path. For commands that do
  // slow work before they open the catalog (kiln submit's plan).
  static void check_path(const std::filesystem::path& path, bool read_only);
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
  // running, lease, attempts+1. Optionally restricted to one batch, and to one
  // shard: only jobs with id % shard.count == shard.index (kiln run --shard I/N).
  // Among queued jobs, `order` picks which (ties by id).
  std::optional<JobRow> claim_job(const std::string& owner, double lease_s,
                                  const std::optional<std::string>& batch_id = std::nullopt,
                                  const std::optional<JobShard>& shard = std::nullopt,
                                  ClaimOrder order = ClaimOrder::kLongestFirst);
  // Extends every lease held by owner; returns how many running jobs it holds
  // (fewer than expected means a job was reclaimed by another run).
  int renew_leases(const std::string& owner, double lease_s);
  // running -> done | failed; clears the lease. Throws if owner does not hold it.
  void finish_job(long long job_id, const std::string& owner, bool ok, const std::string& message);
  // running -> queued (drain); clears the lease.
  void release_job(long long job_id, const std::string& owner);
  // failed -> queued for every failed job (of one batch, if given); returns the count.
  int requeue_failed(const std::optional<std::string>& batch_id = std::nullopt);
  // kiln retry: requeues failed jobs (every one, one batch's, or the given
  // ids) and, with forget_evaluations, deletes the evaluations of their
  // candidates that are no verdict (is_verdict), with those candidates'
  // artifacts (and blobs no other artifact uses), so the next run evaluates
  // them again; verdicts are kept. Per retried job it writes a row of table
  // `retries` (0007_retries.sql: its message and attempts before, and what was
  // forgotten) and sets its message to "retried at TIME; was: MESSAGE".
  // Jobs that are queued, running (under a live lease or not: the next claim
  // reclaims an expired one) or done are never changed; named in job_ids they
  // are reported with retried = false. One transaction, all or nothing: an
  // unknown batch or job id, or a job id not in the given batch, throws
  // CatalogNotFound naming it and changes nothing; dry_run rolls the
  // transaction back and returns the same report. Same thread as the Catalog.
  RetryReport retry_failed(const RetryRequest& request);
  // One job by id; nullopt if there is none.
  std::optional<JobRow> job(long long job_id) const;
  // How many jobs are in each state (of one batch, if given): what a run's
  // metrics report (src/metrics). States without jobs are absent.
  std::map<std::string, long long> job_state_counts(const std::optional<std::string>& batch_id = std::nullopt) const;

  // Candidates: inserts or returns the existing row with the same (job, key).
  CandidateRow add_candidate(const CandidateRow& c);
  std::vector<CandidateRow> candidates(long long job_id) const;

  // Records an evaluation (and its artifact) in one transaction. Throws if the
  // candidate already has one.
  void record_evaluation(long long candidate_id, const EvaluationIn& e);
  // Several evaluations (candidate id, evaluation) in one transaction, each
  // statement prepared once: what MPI rank 0 uses to keep up with many ranks.
  // All or nothing: throws, writing nothing, if a candidate already has an
  // evaluation (or appears twice).
  void record_evaluations(const std::vector<std::pair<long long, EvaluationIn>>& batch);
  // add_candidate for many candidates in one transaction; the rows in order.
  std::vector<CandidateRow> add_candidates(const std::vector<CandidateRow>& cs);

  // LLM calls: record_llm_call inserts one row (its own transaction) and
  // returns its id; link_llm_call sets the candidate its code became.
  long long record_llm_call(const LlmCallIn& call);
  void link_llm_call(long long call_id, long long candidate_id);
  std::vector<LlmCallRow> llm_calls(long long job_id) const;

  // Best selection. set_best replaces the job's best row; throws if the
  // candidate does not belong to the job.
  void set_best(const BestRow& best);
  std::optional<BestRow> best(long long job_id) const;

  // Every evaluated candidate of the job, by candidate id: what the
  // confirmation round picks its finalists from (src/explore/confirm.h).
  std::vector<EvaluatedCandidate> evaluated_candidates(long long job_id) const;

  // Confirmation rounds. record_confirmations writes one round's entries in
  // one transaction (all or nothing); each candidate must belong to its job
  // and every row must have samples. median_ms is computed here from the
  // samples as stored (float32), so it is what a reader recomputes.
  void record_confirmations(const std::vector<ConfirmationRow>& rows);
  // The job's rows of one round (run_id), or of its latest round when run_id is
  // empty; candidates first (by id), then baselines. Empty when none.
  std::vector<ConfirmationRow> confirmations(long long job_id, const std::string& run_id = "") const;

  // Jobs of operator `op` on `arch` whose candidates of template `template_name`
  // were benchmarked on `device` (evaluations.bench_device): per job its
  // `per_job` fastest correct configs, jobs in id order. Only the `max_jobs`
  // most recent jobs of that operator and arch are read, so the cost stays
  // flat as the catalog grows. What the halving strategy starts from on a new
  // shape (src/search/priors.h).
  std::vector<MeasuredJob> measured_configs(const std::string& op, const std::string& arch,
                                            const std::string& template_name, const std::string& device,
                                            int per_job, int max_jobs = 256) const;
  // Mean seconds to compile one candidate, per (operator, arch), over the
  // latest `recent` evaluations, where an operator on an arch has at least
  // `min_evaluations` of them: what kiln submit's claim order estimates a
  // job's compile time from (NewJob::compile_est_s).
  std::map<std::pair<std::string, std::string>, double> compile_seconds(int min_evaluations = 20,
                                                                        int recent = 20000) const;
  // Read-only SQL; throws CatalogError for anything that is not a read. Runs on
  // a separate SQLITE_OPEN_READONLY connection with an authorizer that allows
  // only reads; several statements are allowed if all are reads, and the rows
  // of the last one that returns columns are returned.
  struct QueryResult {
    std::vector<std::string> columns;
    std::vector<std::vector<nlohmann::json>> rows;  // null, integer, real, string (blobs as "<blob N bytes>")
  };
  // Bounds on one query (kiln query --timeout/--max-rows/--max-bytes): past any
  // of them the query stops with a CatalogError saying which and how to raise it.
  struct QueryLimits {
    double timeout_s = 30;              // wall clock, checked by a progress handler
    long long max_rows = 100000;        // rows returned (of the last statement)
    long long max_bytes = 64LL << 20;   // text bytes returned; also SQLite's longest string or blob
  };
  QueryResult query(const std::string& sql, const QueryLimits& limits) const;
  QueryResult query(const std::string& sql) const { return query(sql, QueryLimits{}); }

  // The connection's settings (what open() configures): journal_mode
  // ("wal" read-write), foreign_keys (on), synchronous (1: NORMAL, read-write).
  struct Settings {
    std::string journal_mode;
    bool foreign_keys = false;
    int synchronous = 0;
  };
  Settings settings() const;

 private:
  friend struct sql::Access;
  Catalog(sqlite3* db, std::filesystem::path path, bool read_only);
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
  bool read_only_ = false;
};

// kiln merge (src/catalog/merge.cpp): copies everything of the catalog at
// `from` into `into`, in one transaction, idempotently: batches by id, jobs by
// key (a job done in `from` but not in `into` becomes done, with its best),
// batch links, candidates by (job key, candidate key), evaluations (one per
// candidate), blobs by sha256, artifacts by (candidate, target), the best
// candidate per job (measured beats estimated; on the same basis the lower
// value_ms wins; a tie keeps `into`'s), and llm_calls, confirmations,
// imported_measurements and retries where both catalogs have them. `from` is opened read-only and never changed; it may be an older schema
// version (columns it lacks take their defaults). Merging the same file twice
// changes nothing the second time. `into` should not be in use by a run.
struct MergeStats {
  int batches = 0, batch_links = 0;
  int jobs_new = 0, jobs_updated = 0;       // updated: state advanced (e.g. queued -> done)
  int candidates = 0, evaluations = 0, blobs = 0, artifacts = 0;
  int best_new = 0, best_replaced = 0;
  int llm_calls = 0;
  int confirmations = 0;                    // rows of confirmation rounds (0005), by (job, run, entry)
  int imported_measurements = 0;            // kiln-rt tune rows (0006), by (candidate, device)
  int retries = 0;                          // kiln retry's records (0007), by (job, retried_at)
  std::vector<std::string> skipped_tables;  // tables of `from` this kiln does not merge

  // Adds `o`'s row counts to these (skipped_tables is left as it is).
  void add_counts(const MergeStats& o);
};
MergeStats merge_catalog(Catalog& into, const std::filesystem::path& from);

}  // namespace kiln
