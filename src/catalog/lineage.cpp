#include "catalog/lineage.h"

#include "catalog/sql.h"

namespace kiln {

std::optional<long long> job_of_candidate(const Catalog& catalog, long long candidate_id) {
  sql::Stmt st(catalog, "SELECT job_id FROM candidates WHERE id = ?1",
               "the job of candidate " + std::to_string(candidate_id));
  st.bind(1, candidate_id);
  if (!st.step()) return std::nullopt;
  return st.i64(0);
}

std::optional<Lineage> lineage(const Catalog& catalog, long long job_id) {
  const std::string of = " of job " + std::to_string(job_id);
  Lineage out;
  {
    sql::Stmt st(catalog,
                 "SELECT j.id, j.op, j.shape, j.dtype, j.target, j.state, j.message, b.candidate_id, b.basis, "
                 "b.value_ms FROM jobs j LEFT JOIN best b ON b.job_id = j.id WHERE j.id = ?1",
                 "lineage: the job" + of);
    st.bind(1, job_id);
    if (!st.step()) return std::nullopt;
    st.into(0, out.job_id, out.op, out.shape, out.dtype, out.target, out.state, out.message, out.best_candidate_id,
            out.best_basis, out.best_ms);
  }
  {
    sql::Stmt st(catalog,
                 "SELECT c.id, c.parent_id, c.round, c.instance, c.generator, c.template, c.config, "
                 "e.status, e.message, e.median_ms, e.estimate_ms, e.max_abs_err "
                 "FROM candidates c LEFT JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = ?1 "
                 "ORDER BY c.id",
                 "lineage: the candidates" + of);
    st.bind(1, job_id);
    out.candidates = st.rows<LineageCandidate>([&](LineageCandidate& c) {
      st.into(0, c.id, c.parent_id, c.round, c.instance, c.generator, c.template_name, c.config, c.status, c.message,
              c.median_ms, c.estimate_ms, c.max_abs_err);
    });
  }
  if (sql::has_table(sql::Access::db(catalog), catalog.path(), "llm_calls")) {
    sql::Stmt st(catalog,
                 "SELECT id, candidate_id, model, prompt_tokens, completion_tokens, latency_s, attempts, status "
                 "FROM llm_calls WHERE job_id = ?1 AND candidate_id IS NOT NULL ORDER BY id",
                 "lineage: the llm calls" + of);
    st.bind(1, job_id);
    out.llm_calls = st.rows<LineageLlmCall>([&](LineageLlmCall& l) {
      st.into(0, l.id, l.candidate_id, l.model, l.prompt_tokens, l.completion_tokens, l.latency_s, l.attempts,
              l.status);
    });
  }
  return out;
}

}  // namespace kiln
