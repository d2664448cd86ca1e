#include "explore/select.h"

#include <sqlite3.h>

#include <map>

namespace kiln {

namespace {

struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK)
      throw_sqlite_error(db, "select_best: prepare");
  }
  ~Stmt() { sqlite3_finalize(s); }
  bool step(sqlite3* db) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw_sqlite_error(db, "select_best");
  }
};

}  // namespace

Selection select_best(const Catalog& catalog, long long job_id, const Target& target) {
  Selection sel;
  Stmt st(catalog.handle(),
          "SELECT c.id, e.status, e.bench_device, e.median_ms, e.estimate_ms "
          "FROM candidates c JOIN evaluations e ON e.candidate_id = c.id "
          "WHERE c.job_id = ? ORDER BY c.id");
  sqlite3_bind_int64(st.s, 1, job_id);
  std::optional<BestRow> measured, estimated;
  std::map<std::string, int> failures;
  while (st.step(catalog.handle())) {
    ++sel.evaluated;
    const long long cid = sqlite3_column_int64(st.s, 0);
    const std::string status = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1));
    if (status != "ok") {
      ++failures[status];
      continue;
    }
    ++sel.correct;
    const bool has_bench = sqlite3_column_type(st.s, 2) != SQLITE_NULL &&
                           sqlite3_column_type(st.s, 3) != SQLITE_NULL;
    if (has_bench) {
      const std::string device = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 2));
      const double median = sqlite3_column_double(st.s, 3);
      if (TargetRegistry::matches_device(target, device) && (!measured || median < measured->value_ms))
        measured = BestRow{job_id, cid, "measured", median, device};
    }
    if (sqlite3_column_type(st.s, 4) != SQLITE_NULL) {
      const double est = sqlite3_column_double(st.s, 4);
      if (!estimated || est < estimated->value_ms) estimated = BestRow{job_id, cid, "estimated", est, ""};
    }
  }
  sel.best = measured ? measured : estimated;
  for (const auto& [status, n] : failures) {
    if (!sel.failure_summary.empty()) sel.failure_summary += ", ";
    sel.failure_summary += std::to_string(n) + " " + status;
  }
  return sel;
}

}  // namespace kiln
