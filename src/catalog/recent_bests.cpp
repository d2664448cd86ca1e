#include "catalog/recent_bests.h"

#include "catalog/sql.h"

namespace kiln {

std::vector<RecentBest> recent_bests(const Catalog& catalog, long long exclude_job, int limit) {
  sql::Stmt st(catalog,
               "SELECT b.job_id, j.op, j.target, j.dtype, j.spec, c.id, c.generator, c.template, c.config, "
               "c.source, b.value_ms, b.basis FROM best b JOIN jobs j ON j.id = b.job_id "
               "JOIN candidates c ON c.id = b.candidate_id "
               "WHERE b.job_id <> ?1 ORDER BY b.selected_at DESC LIMIT ?2",
               "retrieval: the recent best kernels");
  st.bind(1, exclude_job).bind(2, limit);
  std::vector<RecentBest> out;
  while (st.step()) {
    RecentBest r;
    r.job_id = st.i64(0);
    r.op = st.text(1);
    r.target = st.text(2);
    r.dtype = st.text(3);
    r.spec = st.js(4);
    r.candidate_id = st.i64(5);
    r.generator = st.text(6);
    r.template_name = st.text(7);
    r.config = st.js(8);
    r.source = st.text(9);
    r.value_ms = st.dbl(10);
    r.basis = st.text(11);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln
