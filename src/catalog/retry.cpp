// Catalog::retry_failed (kiln retry): failed jobs back to the queue, their
// evaluations that are no verdict forgotten. See catalog.h and docs/catalog.md.
#include <chrono>
#include <set>

#include "catalog/catalog.h"
#include "catalog/sql.h"
#include "common/utc_text.h"

namespace kiln {

bool is_verdict(const std::string& status) { return status != "timeout" && status != "crash"; }

RetryReport Catalog::retry_failed(const RetryRequest& req) {
  using sql::Stmt;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string where = "catalog " + path_.string() + ": ";
  // One write transaction for the dry run too: it sees what the real one would,
  // and is rolled back.
  sql::Tx tx(db_, path_);
  if (req.batch_id) {
    Stmt q(db_, path_, "SELECT 1 FROM batches WHERE id = ?1", "retry: find the batch");
    if (!q.bind(1, *req.batch_id).step()) throw CatalogNotFound(where + "no batch " + *req.batch_id);
  }
  std::vector<long long> ids;
  if (!req.job_ids.empty()) {
    std::set<long long> named(req.job_ids.begin(), req.job_ids.end());
    Stmt has(db_, path_, "SELECT 1 FROM jobs WHERE id = ?1", "retry: find the job");
    Stmt in_batch(db_, path_, "SELECT 1 FROM batch_jobs WHERE batch_id = ?1 AND job_id = ?2",
                  "retry: find the job in the batch");
    for (long long id : named) {
      has.reset().bind(1, id);
      if (!has.step()) throw CatalogNotFound(where + "no job " + std::to_string(id));
      if (req.batch_id) {
        in_batch.reset().bind(1, *req.batch_id).bind(2, id);
        if (!in_batch.step())
          throw CatalogNotFound(where + "job " + std::to_string(id) + " is not in batch " + *req.batch_id);
      }
      ids.push_back(id);
    }
  } else {
    std::string q = "SELECT id FROM jobs WHERE state = 'failed'";
    if (req.batch_id) q += " AND id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)";
    q += " ORDER BY id";
    Stmt st(db_, path_, q, "retry: list the failed jobs");
    if (req.batch_id) st.bind(1, *req.batch_id);
    while (st.step()) ids.push_back(st.i64(0));
  }

  Stmt read_job(db_, path_, "SELECT op, shape, dtype, target, state, message, attempts FROM jobs WHERE id = ?1",
                "retry: read the job");
  Stmt evals(db_, path_,
             "SELECT e.id, c.id, c.key, e.status, e.message, e.worker, e.exec_device, e.created_at "
             "FROM evaluations e JOIN candidates c ON c.id = e.candidate_id WHERE c.job_id = ?1 ORDER BY c.id",
             "retry: read the job's evaluations");
  Stmt del_eval(db_, path_, "DELETE FROM evaluations WHERE id = ?1", "retry: forget an evaluation");
  Stmt art_shas(db_, path_, "SELECT sha256 FROM artifacts WHERE candidate_id = ?1", "retry: read artifacts");
  Stmt del_arts(db_, path_, "DELETE FROM artifacts WHERE candidate_id = ?1", "retry: forget artifacts");
  Stmt del_blob(db_, path_,
                "DELETE FROM blobs WHERE sha256 = ?1 AND NOT EXISTS (SELECT 1 FROM artifacts WHERE sha256 = ?1)",
                "retry: forget an unused blob");
  Stmt log(db_, path_,
           "INSERT INTO retries (job_id, retried_at, attempts, message, forgotten) VALUES (?1, ?2, ?3, ?4, ?5)",
           "retry: record the retry");
  Stmt requeue(db_, path_,
               "UPDATE jobs SET state = 'queued', finished_at = NULL, message = ?1 WHERE id = ?2 AND state = 'failed'",
               "retry: requeue the job");

  RetryReport report;
  for (long long id : ids) {
    read_job.reset().bind(1, id);
    if (!read_job.step()) sql::fail(nullptr, path_, "retry: job " + std::to_string(id) + " vanished");
    RetriedJob r;
    r.job_id = id;
    int attempts = 0;
    read_job.into(0, r.op, r.shape, r.dtype, r.target, r.state, r.message, attempts);
    if (r.state != "failed") {
      report.jobs.push_back(std::move(r));
      continue;
    }
    struct Forget {
      long long evaluation, candidate;
    };
    std::vector<Forget> forget;
    nlohmann::json forgotten = nlohmann::json::array();
    if (req.forget_evaluations) {
      evals.reset().bind(1, id);
      while (evals.step()) {
        const std::string status = evals.text(3);
        if (is_verdict(status)) continue;
        forget.push_back({evals.i64(0), evals.i64(1)});
        ++r.forgotten[status];
        forgotten.push_back({{"candidate_key", evals.text(2)},
                             {"status", status},
                             {"message", evals.is_null(4) ? nlohmann::json(nullptr) : nlohmann::json(evals.text(4))},
                             {"worker", evals.is_null(5) ? nlohmann::json(nullptr) : nlohmann::json(evals.text(5))},
                             {"exec_device", evals.is_null(6) ? nlohmann::json(nullptr) : nlohmann::json(evals.text(6))},
                             {"evaluated_at", evals.dbl(7)}});
      }
      evals.reset();
    }
    for (const Forget& f : forget) {
      del_eval.reset().bind(1, f.evaluation).run();
      std::vector<std::string> shas;
      art_shas.reset().bind(1, f.candidate);
      while (art_shas.step()) shas.push_back(art_shas.text(0));
      art_shas.reset();
      del_arts.reset().bind(1, f.candidate).run();
      for (const std::string& sha : shas) del_blob.reset().bind(1, sha).run();
    }
    log.reset()
        .bind(1, id)
        .bind(2, now)
        .bind(3, attempts)
        .bind_text_or_null(4, r.message)
        .bind(5, forgotten.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
        .run();
    const std::string was = r.message.empty() ? "" : "; was: " + r.message;
    requeue.reset().bind(1, "retried at " + utc_text(now, "%Y-%m-%dT%H:%M:%SZ") + was).bind(2, id).run();
    if (requeue.changes() != 1) sql::fail(nullptr, path_, "retry: job " + std::to_string(id) + " changed under us");
    r.retried = true;
    ++report.retried;
    report.forgotten += static_cast<int>(forget.size());
    report.jobs.push_back(std::move(r));
  }
  if (!req.dry_run) tx.commit();  // else the Tx rolls back: nothing changed
  return report;
}

}  // namespace kiln
