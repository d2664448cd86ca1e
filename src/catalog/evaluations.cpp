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
    st.into(0, c.id, c.job_id, c.key, c.generator, c.template_name, c.config, c.source, c.parent_id, c.round,
            c.instance);
    c.evaluated = true;
    st.into(10, e.status, e.message, e.result, e.bench_device, e.median_ms, e.estimate_ms);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln
