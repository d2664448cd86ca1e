#include "catalog/job_lookup.h"

#include "catalog/sql.h"

namespace kiln {

std::optional<JobRow> job_by_key(const Catalog& catalog, const std::string& key) {
  long long id = 0;
  {
    sql::Stmt st(catalog, "SELECT id FROM jobs WHERE key = ?1", "look up job " + key);
    st.bind(1, key);
    if (!st.step()) return std::nullopt;
    id = st.i64(0);
  }
  return catalog.job(id);
}

std::vector<std::pair<long long, std::string>> earlier_jobs_of_kernel(const Catalog& catalog, long long job_id) {
  sql::Stmt st(catalog,
               "SELECT j.id, j.key FROM jobs me JOIN jobs j ON j.op = me.op AND j.shape = me.shape "
               "AND j.dtype = me.dtype AND j.params = me.params AND j.target = me.target "
               "JOIN best b ON b.job_id = j.id "
               "WHERE me.id = ?1 AND j.key <> me.key AND j.state = 'done' "
               "AND (j.created_at < me.created_at OR (j.created_at = me.created_at AND j.id < me.id)) "
               "ORDER BY j.created_at DESC, j.id DESC",
               "earlier jobs of the kernel of job " + std::to_string(job_id));
  st.bind(1, job_id);
  std::vector<std::pair<long long, std::string>> out;
  while (st.step()) out.emplace_back(st.i64(0), st.text(1));
  return out;
}

}  // namespace kiln
