#include "catalog/reports.h"

#include "catalog/sql.h"

namespace kiln {

StatusReport status_report(const Catalog& catalog, const std::optional<std::string>& batch) {
  const std::string job_filter = batch ? " WHERE j.id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)" : "";
  StatusReport out;
  {
    sql::Stmt st(catalog,
                 std::string("SELECT b.id, b.name, b.created_at, "
                             "COALESCE(SUM(j.state='queued'), 0), COALESCE(SUM(j.state='running'), 0), "
                             "COALESCE(SUM(j.state='done'), 0), COALESCE(SUM(j.state='failed'), 0), COUNT(j.id) "
                             "FROM batches b LEFT JOIN batch_jobs bj ON bj.batch_id = b.id "
                             "LEFT JOIN jobs j ON j.id = bj.job_id ") +
                     (batch ? "WHERE b.id = ?1 " : "") + "GROUP BY b.id ORDER BY b.created_at",
                 "status: batches");
    if (batch) st.bind(1, *batch);
    while (st.step()) {
      BatchStatus b;
      st.into(0, b.id, b.name, b.created_at, b.queued, b.running, b.done, b.failed, b.jobs);
      out.batches.push_back(std::move(b));
    }
  }
  {
    sql::Stmt st(catalog,
                 "SELECT e.status, COUNT(*) FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
                 "JOIN jobs j ON j.id = c.job_id" + job_filter + " GROUP BY e.status ORDER BY e.status",
                 "status: evaluations");
    if (batch) st.bind(1, *batch);
    while (st.step()) out.evaluations[st.text(0)] = st.i64(1);
  }
  {
    sql::Stmt st(catalog,
                 "SELECT j.id, j.op, j.shape, j.dtype, j.target, j.message FROM jobs j" +
                     (job_filter.empty() ? std::string(" WHERE") : job_filter + " AND") +
                     " j.state = 'failed' ORDER BY j.id",
                 "status: failed jobs");
    if (batch) st.bind(1, *batch);
    while (st.step()) {
      FailedJob f;
      st.into(0, f.id, f.op, sql::Strict{f.shape}, f.dtype, f.target, f.message);
      out.failed_jobs.push_back(std::move(f));
    }
  }
  return out;
}

std::vector<BestReportRow> best_report(const Catalog& catalog, const BestFilter& filter) {
  std::string q =
      "SELECT j.id, j.op, j.shape, j.dtype, j.target, j.arch, j.state, j.message, "
      "b.basis, b.value_ms, b.device, b.confirmed_run, c.id, c.config, "
      "e.max_rel_err, e.p99_ms, e.mean_ms, e.occupancy, e.exec_device, e.seeds, e.registers, e.spills, "
      "e.shared_bytes, a.kind, a.sha256, a.kernel_name, bl.data "
      "FROM jobs j LEFT JOIN best b ON b.job_id = j.id "
      "LEFT JOIN candidates c ON c.id = b.candidate_id "
      "LEFT JOIN evaluations e ON e.candidate_id = c.id "
      "LEFT JOIN artifacts a ON a.candidate_id = c.id AND a.target = j.target "
      "LEFT JOIN blobs bl ON bl.sha256 = a.sha256 WHERE 1=1";
  if (filter.op) q += " AND j.op = ?1";
  if (filter.target) q += " AND j.target = ?2";
  if (filter.batch) q += " AND j.id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?3)";
  q += " ORDER BY j.op, j.target, j.dtype, j.id";
  sql::Stmt st(catalog, q, "best: the best kernel per job");
  if (filter.op) st.bind(1, *filter.op);
  if (filter.target) st.bind(2, *filter.target);
  if (filter.batch) st.bind(3, *filter.batch);
  std::vector<BestReportRow> out;
  while (st.step()) {
    BestReportRow r;
    st.into(0, r.job_id, r.op, sql::Strict{r.shape}, r.dtype, r.target, r.arch, r.state, r.message);
    if (!st.is_null(8)) {
      BestReportRow::Best b;
      st.into(8, b.basis, b.value_ms, b.device, b.confirmed_run, b.candidate_id, sql::Strict{b.config}, b.max_rel_err,
              b.p99_ms, b.mean_ms, b.occupancy, b.exec_device, b.seeds, b.registers, b.spills, b.shared_bytes);
      if (!st.is_null(23)) b.code_object = BestReportRow::CodeObject{st.text(23), st.text(24), st.text(25), st.blob(26)};
      r.best = std::move(b);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln
