#include "catalog/service_reads.h"
#include "catalog/sql.h"

#include <sqlite3.h>

#include <utility>

#include "common/hash.h"

namespace kiln::reports {

namespace {

using nlohmann::json;

// A report statement of the reader's connection (its cached one when free).
sql::Stmt query(Reader& r, const std::string& sql) { return sql::Stmt(r.statements(), r.catalog(), sql, "read a report"); }

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

JobOverview read_job(const sql::Stmt& q) {
  JobOverview j;
  q.into(0, j.id, j.key, j.op, j.dtype, j.target, j.arch, j.state, j.message, j.shape, j.params, j.created_at,
         j.started_at, j.finished_at, j.candidates, j.evaluated, j.correct);
  if (!q.is_null(16)) {
    BestRow b;
    b.job_id = j.id;
    q.into(16, b.candidate_id, b.basis, b.value_ms, b.device, b.confirmed_run, b.confirmed_ms);
    j.best = b;
  }
  return j;
}

// Best kernels: the job columns, then config, code object and traffic
// (kBestKernelColumnsN in all), then `extra` columns if any.
constexpr int kBestKernelColumnsN = kJobColumnsN + 6;
std::string best_kernel_sql(const std::string& where, const std::string& extra = "") {
  return std::string("SELECT ") + kJobColumnsLight +
         ", c.config, COALESCE(a.kind, ''), COALESCE(a.sha256, ''), COALESCE(a.kernel_name, ''), "
         "json_extract(e.result, '$.traffic.bytes'), json_extract(e.result, '$.traffic.flops')" +
         (extra.empty() ? "" : ", " + extra) +
         " FROM jobs j JOIN best b ON b.job_id = j.id JOIN candidates c ON c.id = b.candidate_id "
         "LEFT JOIN evaluations e ON e.candidate_id = c.id "
         "LEFT JOIN artifacts a ON a.candidate_id = c.id AND a.target = j.target WHERE " +
         where;
}

BestKernel read_best_kernel(const sql::Stmt& q) {
  BestKernel k;
  k.job = read_job(q);
  k.best = *k.job.best;
  const int n = kJobColumnsN;
  // json_extract gives a number, or NULL for a result without the traffic model
  q.into(n, k.config, k.code_kind, k.code_sha256, k.kernel_name, k.traffic_bytes, k.traffic_flops);
  return k;
}

}  // namespace

Reader::Reader(Catalog catalog) : catalog_(std::move(catalog)), statements_(std::make_unique<sql::StmtCache>()) {}

Reader::~Reader() = default;

sql::StmtCache& Reader::statements() { return *statements_; }

std::vector<BatchSummary> batches(Reader& reader) {
  sql::Stmt q = query(reader, "SELECT b.id, b.name, b.created_at, (SELECT COUNT(*) FROM batch_jobs bj WHERE bj.batch_id = b.id) "
          "FROM batches b ORDER BY b.created_at DESC, b.id");
  std::vector<BatchSummary> out;
  while (q.step()) out.push_back({q.text(0), q.text(1), q.dbl(2), static_cast<int>(q.i64(3))});
  return out;
}

std::vector<JobOverview> jobs(Reader& reader, const std::optional<std::string>& batch_id) {
  sql::Stmt q = query(reader, std::string("SELECT ") + kJobColumns + " FROM jobs j LEFT JOIN best b ON b.job_id = j.id" +
                       (batch_id ? " WHERE j.id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)" : "") +
                       " ORDER BY j.id");
  if (batch_id) q.bind(1, *batch_id);
  std::vector<JobOverview> out;
  while (q.step()) out.push_back(read_job(q));
  return out;
}

std::optional<JobOverview> job(Reader& reader, long long job_id) {
  sql::Stmt q = query(reader, std::string("SELECT ") + kJobColumns + " FROM jobs j LEFT JOIN best b ON b.job_id = j.id WHERE j.id = ?1");
  q.bind(1, job_id);
  if (!q.step()) return std::nullopt;
  return read_job(q);
}

std::vector<CandidateResult> candidates(Reader& reader, long long job_id) {
  sql::Stmt q = query(reader, "SELECT c.id, c.generator, COALESCE(c.template, ''), c.config, c.round, c.instance, c.parent_id, "
          "e.id IS NOT NULL, COALESCE(e.status, ''), COALESCE(e.message, ''), COALESCE(e.bench_device, ''), "
          "e.median_ms, e.estimate_ms, e.compile_s, e.created_at "
          "FROM candidates c LEFT JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = ?1 "
          "ORDER BY e.id IS NULL, e.id, c.id");
  q.bind(1, job_id);
  return q.rows<CandidateResult>([&](CandidateResult& c) {
    q.into(0, c.id, c.generator, c.template_name, c.config, c.round, c.instance, c.parent_id, c.evaluated, c.status,
           c.message, c.bench_device, c.median_ms, c.estimate_ms, c.compile_s, c.evaluated_at);
  });
}

std::vector<BestKernel> best_kernels(Reader& reader, const BestFilter& f) {
  std::string where = "j.state = 'done'";
  if (f.op) where += " AND j.op = ?1";
  if (f.target) where += " AND j.target = ?2";
  if (f.dtype) where += " AND j.dtype = ?3";
  if (f.shape) where += " AND j.shape = ?4";
  if (f.batch_id) where += " AND j.id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?5)";
  sql::Stmt q = query(reader, best_kernel_sql(where) + " ORDER BY j.created_at DESC, j.id DESC");
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
  sql::Stmt q = query(reader, best_kernel_sql("j.state = 'done' AND j.op = ?1 AND j.shape = ?2 AND j.dtype = ?3 AND "
                                   "j.params = ?4 AND j.target = ?5") +
                       " ORDER BY j.created_at, j.id");
  q.bind(1, op).bind(2, shape).bind(3, dtype).bind(4, params).bind(5, target);
  std::vector<BestKernel> out;
  while (q.step()) out.push_back(read_best_kernel(q));
  return out;
}

std::map<KernelKey, std::vector<BestKernel>> kernel_histories(Reader& reader) {
  // kernel_history's rows and order, all keys at once; the key columns are the
  // jobs' own text, which kernel_history compares with what it is given
  sql::Stmt q = query(reader, best_kernel_sql("j.state = 'done'", "j.shape, j.params") + " ORDER BY j.created_at, j.id");
  std::map<KernelKey, std::vector<BestKernel>> out;
  while (q.step()) {
    BestKernel k = read_best_kernel(q);
    KernelKey key{k.job.op, q.text(kBestKernelColumnsN), k.job.dtype, q.text(kBestKernelColumnsN + 1), k.job.target};
    out[std::move(key)].push_back(std::move(k));
  }
  return out;
}

long long data_version(Reader& reader) {
  sql::Stmt q = query(reader, "PRAGMA data_version");
  if (!q.step()) throw CatalogError("catalog " + reader.catalog().path().string() + ": PRAGMA data_version gave no row");
  return q.i64(0);
}

std::optional<std::string> code_object_bytes(Reader& reader, const std::string& sha256) {
  sql::Stmt q = query(reader, "SELECT data FROM blobs WHERE sha256 = ?1");
  q.bind(1, sha256);
  if (!q.step()) return std::nullopt;
  return q.blob(0);
}

std::string best_fingerprint(Reader& reader, const std::string& target) {
  sql::Stmt q = query(reader, "SELECT j.id, b.candidate_id, b.basis, b.value_ms, COALESCE(a.sha256, '') "
          "FROM jobs j JOIN best b ON b.job_id = j.id "
          "LEFT JOIN artifacts a ON a.candidate_id = b.candidate_id AND a.target = j.target "
          "WHERE j.target = ?1 AND j.state = 'done' ORDER BY j.id");
  q.bind(1, target);
  std::string text;
  while (q.step())
    text += std::to_string(q.i64(0)) + ":" + std::to_string(q.i64(1)) + ":" + q.text(2) + ":" +
            std::to_string(q.dbl(3)) + ":" + q.text(4) + "\n";
  return sha256_hex(text);
}

}  // namespace kiln::reports
