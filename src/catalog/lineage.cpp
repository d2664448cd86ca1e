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
    out.job_id = st.i64(0);
    out.op = st.text(1);
    out.shape = st.js(2);
    out.dtype = st.text(3);
    out.target = st.text(4);
    out.state = st.text(5);
    out.message = st.opt_text(6);
    out.best_candidate_id = st.opt_i64(7);
    out.best_basis = st.opt_text(8);
    out.best_ms = st.opt_dbl(9);
  }
  {
    sql::Stmt st(catalog,
                 "SELECT c.id, c.parent_id, c.round, c.instance, c.generator, c.template, c.config, "
                 "e.status, e.message, e.median_ms, e.estimate_ms, e.max_abs_err "
                 "FROM candidates c LEFT JOIN evaluations e ON e.candidate_id = c.id WHERE c.job_id = ?1 "
                 "ORDER BY c.id",
                 "lineage: the candidates" + of);
    st.bind(1, job_id);
    while (st.step()) {
      LineageCandidate c;
      c.id = st.i64(0);
      c.parent_id = st.opt_i64(1);
      c.round = static_cast<int>(st.i64(2));
      c.instance = static_cast<int>(st.i64(3));
      c.generator = st.text(4);
      c.template_name = st.opt_text(5);
      c.config = st.js(6);
      c.status = st.opt_text(7);
      c.message = st.opt_text(8);
      c.median_ms = st.opt_dbl(9);
      c.estimate_ms = st.opt_dbl(10);
      c.max_abs_err = st.opt_dbl(11);
      out.candidates.push_back(std::move(c));
    }
  }
  if (sql::has_table(sql::Access::db(catalog), catalog.path(), "llm_calls")) {
    sql::Stmt st(catalog,
                 "SELECT id, candidate_id, model, prompt_tokens, completion_tokens, latency_s, attempts, status "
                 "FROM llm_calls WHERE job_id = ?1 AND candidate_id IS NOT NULL ORDER BY id",
                 "lineage: the llm calls" + of);
    st.bind(1, job_id);
    while (st.step()) {
      LineageLlmCall l;
      l.id = st.i64(0);
      l.candidate_id = st.i64(1);
      l.model = st.opt_text(2);
      l.prompt_tokens = st.opt_i64(3);
      l.completion_tokens = st.opt_i64(4);
      l.latency_s = st.opt_dbl(5);
      l.attempts = st.i64(6);
      l.status = st.text(7);
      out.llm_calls.push_back(std::move(l));
    }
  }
  return out;
}

}  // namespace kiln
