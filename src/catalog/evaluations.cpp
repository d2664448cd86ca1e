#include "catalog/evaluations.h"

#include "catalog/sql.h"

namespace kiln {

std::vector<JobEvaluation> evaluations(const Catalog& catalog, long long job_id) {
  sql::Stmt st(catalog,
               "SELECT c.id, c.job_id, c.key, c.generator, c.template, c.config, c.source, c.parent_id, "
               "c.round, c.instance, e.status, e.message, e.result, e.bench_device, e.median_ms, e.estimate_ms "
               "FROM candidates c JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = ?1 ORDER BY c.id",
               "evaluations of job " + std::to_string(job_id));
  st.bind(1, job_id);
  std::vector<JobEvaluation> out;
  while (st.step()) {
    JobEvaluation e;
    CandidateRow& c = e.candidate;
    c.id = st.i64(0);
    c.job_id = st.i64(1);
    c.key = st.text(2);
    c.generator = st.text(3);
    c.template_name = st.text(4);
    c.config = st.js(5);
    c.source = st.opt_text(6);
    c.parent_id = st.opt_i64(7);
    c.round = static_cast<int>(st.i64(8));
    c.instance = static_cast<int>(st.i64(9));
    c.evaluated = true;
    e.status = st.text(10);
    e.message = st.text(11);
    e.result = st.js(12);
    e.bench_device = st.opt_text(13);
    e.median_ms = st.opt_dbl(14);
    e.estimate_ms = st.opt_dbl(15);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln
