#include "catalog/service_reads.h"
#include "catalog/sql.h"

#include <sqlite3.h>

#include <utility>

#include "common/hash.h"

namespace kiln::reports {

namespace {

using nlohmann::json;

// A statement of the reader's connection (its cached one when free);
// errors throw CatalogError.
class Query {
 public:
  Query(Reader& r, const std::string& sql) : reader_(r), sql_(sql), db_(sql::Access::db(r.catalog())) {
    st_ = r.take(sql);
    cached_ = st_ != nullptr;
    if (!st_ && sqlite3_prepare_v2(db_, sql.c_str(), -1, &st_, nullptr) != SQLITE_OK)
      sql::fail(db_, reader_.catalog().path(), "prepare a report");
  }
  ~Query() {
    if (cached_)
      reader_.give_back(sql_, st_);
    else
      sqlite3_finalize(st_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind(int i, const std::string& v) {
    check(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Query& bind(int i, long long v) {
    check(sqlite3_bind_int64(st_, i, v));
    return *this;
  }
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    sql::fail(db_, reader_.catalog().path(), "read a report");
  }
  bool null(int i) const { return sqlite3_column_type(st_, i) == SQLITE_NULL; }
  std::string text(int i) const {
    const auto* p = sqlite3_column_text(st_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(st_, i)) : std::string();
  }
  std::string blob(int i) const {
    const void* p = sqlite3_column_blob(st_, i);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(st_, i)) : std::string();
  }
  long long integer(int i) const { return sqlite3_column_int64(st_, i); }
  double real(int i) const { return sqlite3_column_double(st_, i); }
  std::optional<double> opt_real(int i) const { return null(i) ? std::nullopt : std::optional<double>(real(i)); }
  json parsed(int i) const {
    if (null(i)) return nullptr;
    return json::parse(text(i), nullptr, false);  // a damaged cell reads as discarded, never throws
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) sql::fail(db_, reader_.catalog().path(), "bind a report's parameter");
  }
  Reader& reader_;
  std::string sql_;
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  bool cached_ = false;
};

// The columns of a JobOverview with its best, in this order (kJobColumnsN of
// them); the light variant leaves the candidate counts 0 (the best-kernel
// lookups, which must stay cheap: GET /api/best).
#define KILN_JOB_HEAD \
  "j.id, j.key, j.op, j.dtype, j.target, j.arch, j.state, COALESCE(j.message, ''), j.shape, j.params, " \
  "j.created_at, j.started_at, j.finished_at, "
#define KILN_JOB_BEST "b.candidate_id, b.basis, b.value_ms, COALESCE(b.device, ''), b.confirmed_run, b.confirmed_ms"
constexpr const char* kJobColumns =
    KILN_JOB_HEAD
    "(SELECT COUNT(*) FROM candidates c WHERE c.job_id = j.id), "
    "(SELECT COUNT(*) FROM candidates c JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = j.id), "
    "(SELECT COUNT(*) FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
    "  WHERE c.job_id = j.id AND e.status = 'ok'), " KILN_JOB_BEST;
constexpr const char* kJobColumnsLight = KILN_JOB_HEAD "0, 0, 0, " KILN_JOB_BEST;
#undef KILN_JOB_HEAD
#undef KILN_JOB_BEST
constexpr int kJobColumnsN = 22;

JobOverview read_job(const Query& q) {
  JobOverview j;
  j.id = q.integer(0);
  j.key = q.text(1);
  j.op = q.text(2);
  j.dtype = q.text(3);
  j.target = q.text(4);
  j.arch = q.text(5);
  j.state = q.text(6);
  j.message = q.text(7);
  j.shape = q.parsed(8);
  j.params = q.parsed(9);
  j.created_at = q.real(10);
  j.started_at = q.opt_real(11);
  j.finished_at = q.opt_real(12);
  j.candidates = static_cast<int>(q.integer(13));
  j.evaluated = static_cast<int>(q.integer(14));
  j.correct = static_cast<int>(q.integer(15));
  if (!q.null(16)) {
    BestRow b;
    b.job_id = j.id;
    b.candidate_id = q.integer(16);
    b.basis = q.text(17);
    b.value_ms = q.real(18);
    b.device = q.text(19);
    if (!q.null(20)) b.confirmed_run = q.text(20);
    b.confirmed_ms = q.opt_real(21);
    j.best = b;
  }
  return j;
}

// Best kernels: the job columns, then config, code object and traffic.
std::string best_kernel_sql(const std::string& where) {
  return std::string("SELECT ") + kJobColumnsLight +
         ", c.config, COALESCE(a.kind, ''), COALESCE(a.sha256, ''), COALESCE(a.kernel_name, ''), "
         "json_extract(e.result, '$.traffic.bytes'), json_extract(e.result, '$.traffic.flops') "
         "FROM jobs j JOIN best b ON b.job_id = j.id JOIN candidates c ON c.id = b.candidate_id "
         "LEFT JOIN evaluations e ON e.candidate_id = c.id "
         "LEFT JOIN artifacts a ON a.candidate_id = c.id AND a.target = j.target WHERE " +
         where;
}

BestKernel read_best_kernel(const Query& q) {
  BestKernel k;
  k.job = read_job(q);
  k.best = *k.job.best;
  const int n = kJobColumnsN;
  k.config = q.parsed(n);
  k.code_kind = q.text(n + 1);
  k.code_sha256 = q.text(n + 2);
  k.kernel_name = q.text(n + 3);
  // json_extract gives a number, or NULL for a result without the model
  if (!q.null(n + 4)) k.traffic_bytes = q.real(n + 4);
  if (!q.null(n + 5)) k.traffic_flops = q.real(n + 5);
  return k;
}

}  // namespace

Reader::Reader(Catalog catalog) : catalog_(std::move(catalog)) {}

Reader::~Reader() {
  for (auto& [sql, e] : cache_) sqlite3_finalize(e.st);
}

sqlite3_stmt* Reader::take(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it == cache_.end()) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(sql::Access::db(catalog_), sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      sql::fail(sql::Access::db(catalog_), catalog_.path(), "prepare a report");
    it = cache_.emplace(sql, Entry{st, false}).first;
  }
  if (it->second.in_use) return nullptr;
  it->second.in_use = true;
  return it->second.st;
}

void Reader::give_back(const std::string& sql, sqlite3_stmt* st) {
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  auto it = cache_.find(sql);
  if (it != cache_.end() && it->second.st == st) it->second.in_use = false;
}

std::vector<BatchSummary> batches(Reader& reader) {
  Query q(reader,
          "SELECT b.id, b.name, b.created_at, (SELECT COUNT(*) FROM batch_jobs bj WHERE bj.batch_id = b.id) "
          "FROM batches b ORDER BY b.created_at DESC, b.id");
  std::vector<BatchSummary> out;
  while (q.step()) out.push_back({q.text(0), q.text(1), q.real(2), static_cast<int>(q.integer(3))});
  return out;
}

std::vector<JobOverview> jobs(Reader& reader, const std::optional<std::string>& batch_id) {
  Query q(reader, std::string("SELECT ") + kJobColumns + " FROM jobs j LEFT JOIN best b ON b.job_id = j.id" +
                       (batch_id ? " WHERE j.id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)" : "") +
                       " ORDER BY j.id");
  if (batch_id) q.bind(1, *batch_id);
  std::vector<JobOverview> out;
  while (q.step()) out.push_back(read_job(q));
  return out;
}

std::optional<JobOverview> job(Reader& reader, long long job_id) {
  Query q(reader, std::string("SELECT ") + kJobColumns + " FROM jobs j LEFT JOIN best b ON b.job_id = j.id WHERE j.id = ?1");
  q.bind(1, job_id);
  if (!q.step()) return std::nullopt;
  return read_job(q);
}

std::vector<CandidateResult> candidates(Reader& reader, long long job_id) {
  Query q(reader,
          "SELECT c.id, c.generator, COALESCE(c.template, ''), c.config, c.round, c.instance, c.parent_id, "
          "e.id IS NOT NULL, COALESCE(e.status, ''), COALESCE(e.message, ''), COALESCE(e.bench_device, ''), "
          "e.median_ms, e.estimate_ms, e.compile_s, e.created_at "
          "FROM candidates c LEFT JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = ?1 "
          "ORDER BY e.id IS NULL, e.id, c.id");
  q.bind(1, job_id);
  std::vector<CandidateResult> out;
  while (q.step()) {
    CandidateResult c;
    c.id = q.integer(0);
    c.generator = q.text(1);
    c.template_name = q.text(2);
    c.config = q.parsed(3);
    c.round = static_cast<int>(q.integer(4));
    c.instance = static_cast<int>(q.integer(5));
    if (!q.null(6)) c.parent_id = q.integer(6);
    c.evaluated = q.integer(7) != 0;
    c.status = q.text(8);
    c.message = q.text(9);
    c.bench_device = q.text(10);
    c.median_ms = q.opt_real(11);
    c.estimate_ms = q.opt_real(12);
    c.compile_s = q.opt_real(13);
    c.evaluated_at = q.opt_real(14);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<BestKernel> best_kernels(Reader& reader, const BestFilter& f) {
  std::string where = "j.state = 'done'";
  if (f.op) where += " AND j.op = ?1";
  if (f.target) where += " AND j.target = ?2";
  if (f.dtype) where += " AND j.dtype = ?3";
  if (f.shape) where += " AND j.shape = ?4";
  if (f.batch_id) where += " AND j.id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?5)";
  Query q(reader, best_kernel_sql(where) + " ORDER BY j.created_at DESC, j.id DESC");
  if (f.op) q.bind(1, *f.op);
  if (f.target) q.bind(2, *f.target);
  if (f.dtype) q.bind(3, *f.dtype);
  if (f.shape) q.bind(4, *f.shape);
  if (f.batch_id) q.bind(5, *f.batch_id);
  std::vector<BestKernel> out;
  while (q.step()) out.push_back(read_best_kernel(q));
  return out;
}

std::vector<BestKernel> kernel_history(Reader& reader, const std::string& op, const std::string& shape,
                                       const std::string& dtype, const std::string& params,
                                       const std::string& target) {
  Query q(reader, best_kernel_sql("j.state = 'done' AND j.op = ?1 AND j.shape = ?2 AND j.dtype = ?3 AND "
                                   "j.params = ?4 AND j.target = ?5") +
                       " ORDER BY j.created_at, j.id");
  q.bind(1, op).bind(2, shape).bind(3, dtype).bind(4, params).bind(5, target);
  std::vector<BestKernel> out;
  while (q.step()) out.push_back(read_best_kernel(q));
  return out;
}

std::optional<std::string> code_object_bytes(Reader& reader, const std::string& sha256) {
  Query q(reader, "SELECT data FROM blobs WHERE sha256 = ?1");
  q.bind(1, sha256);
  if (!q.step()) return std::nullopt;
  return q.blob(0);
}

std::string best_fingerprint(Reader& reader, const std::string& target) {
  Query q(reader,
          "SELECT j.id, b.candidate_id, b.basis, b.value_ms, COALESCE(a.sha256, '') "
          "FROM jobs j JOIN best b ON b.job_id = j.id "
          "LEFT JOIN artifacts a ON a.candidate_id = b.candidate_id AND a.target = j.target "
          "WHERE j.target = ?1 AND j.state = 'done' ORDER BY j.id");
  q.bind(1, target);
  std::string text;
  while (q.step())
    text += std::to_string(q.integer(0)) + ":" + std::to_string(q.integer(1)) + ":" + q.text(2) + ":" +
            std::to_string(q.real(3)) + ":" + q.text(4) + "\n";
  return sha256_hex(text);
}

}  // namespace kiln::reports
