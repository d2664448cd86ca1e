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
    st.into(0, r.job_id, r.op, r.target, r.dtype, r.spec, r.candidate_id, r.generator, r.template_name, r.config,
            r.source, r.value_ms, r.basis);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln
