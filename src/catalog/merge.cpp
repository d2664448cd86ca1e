// kiln merge: copy one catalog into another, idempotently (catalog.h,
// merge_catalog). Used to gather the node-local catalogs of a Slurm job array
// (scripts/slurm/array.sbatch) into one.
//
// `from` is read on its own read-only connection; rows are copied column by
// column (the columns both catalogs have), with the row ids that differ between
// the two files remapped: jobs by key, candidates by (job, key), everything
// else through those two maps.
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "catalog/merge_check.h"
#include "catalog/sql.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

using sql::Stmt;

// The columns of `table` both catalogs have, in `into`'s order, minus `drop`.
std::vector<std::string> common_columns(sqlite3* into, const fs::path& into_path, sqlite3* from,
                                        const fs::path& from_path, const std::string& table,
                                        const std::set<std::string>& drop = {}) {
  const auto theirs = sql::table_columns(from, from_path, table);
  std::vector<std::string> out;
  for (const auto& c : sql::table_columns(into, into_path, table))
    if (!drop.count(c) && std::find(theirs.begin(), theirs.end(), c) != theirs.end()) out.push_back(c);
  return out;
}

std::string join(const std::vector<std::string>& cols, const std::string& prefix = "") {
  std::string s;
  for (const auto& c : cols) s += (s.empty() ? "" : ", ") + prefix + "\"" + c + "\"";
  return s;
}

int index_of(const std::vector<std::string>& cols, const std::string& name) {
  auto it = std::find(cols.begin(), cols.end(), name);
  return it == cols.end() ? -1 : static_cast<int>(it - cols.begin());
}

// Reads `cols` of every row of `table` in `from` (rowid order), and the rowid
// last (column cols.size(): what a refused row is named by).
std::unique_ptr<Stmt> select_all(sqlite3* from, const fs::path& from_path, const std::string& table,
                                 const std::vector<std::string>& cols) {
  return std::make_unique<Stmt>(from, from_path,
                                "SELECT " + join(cols) + ", rowid FROM \"" + table + "\" ORDER BY rowid",
                                "merge: read " + table);
}

// INSERT [OR IGNORE] INTO table (cols) VALUES (?1, ...).
std::unique_ptr<Stmt> insert_into(sqlite3* into, const fs::path& into_path, const std::string& table,
                                  const std::vector<std::string>& cols, bool or_ignore) {
  std::string marks;
  for (size_t i = 1; i <= cols.size(); ++i) marks += (i > 1 ? ", ?" : "?") + std::to_string(i);
  return std::make_unique<Stmt>(into, into_path,
                                std::string("INSERT ") + (or_ignore ? "OR IGNORE " : "") + "INTO \"" + table +
                                    "\" (" + join(cols) + ") VALUES (" + marks + ")",
                                "merge: write " + table);
}

// Binds a source row into an insert: column i from `src`, except the columns in
// `ids` (remapped row ids; a missing optional means NULL).
void bind_row(Stmt& ins, const Stmt& src, size_t ncols,
              const std::map<int, std::optional<long long>>& ids = {}) {
  ins.reset();
  for (size_t i = 0; i < ncols; ++i) {
    auto it = ids.find(static_cast<int>(i));
    if (it == ids.end()) ins.bind_value(static_cast<int>(i) + 1, src.value(static_cast<int>(i)));
    else if (it->second) ins.bind(static_cast<int>(i) + 1, *it->second);
    else ins.bind(static_cast<int>(i) + 1, nullptr);
  }
}

int state_rank(const std::string& state) {
  if (state == "done") return 3;
  if (state == "failed") return 2;
  return 1;  // queued, running
}

std::string uri_escape(const std::string& path) {
  std::string out;
  const char* hex = "0123456789ABCDEF";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

struct Conn {
  sqlite3* db = nullptr;
  ~Conn() {
    if (db) sqlite3_close_v2(db);
  }
};

// Opens `path` read-only; in a directory it cannot write (no -shm possible),
// falls back to immutable=1, as Catalog::open does.
void open_source(Conn& c, const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw CatalogError("merge: no catalog at " + path.string());
  const std::string base = "file:" + uri_escape(fs::absolute(path).string());
  for (const char* extra : {"?mode=ro", "?mode=ro&immutable=1"}) {
    if (c.db) {
      sqlite3_close_v2(c.db);
      c.db = nullptr;
    }
    const std::string uri = base + extra;
    if (sqlite3_open_v2(uri.c_str(), &c.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) != SQLITE_OK)
      continue;
    sqlite3_busy_timeout(c.db, 10000);
    // The shard is untrusted: its schema may not run functions.
    sqlite3_db_config(c.db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
    sqlite3_db_config(c.db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
    if (sqlite3_exec(c.db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) == SQLITE_OK)
      return;
  }
  const std::string why = c.db ? sqlite3_errmsg(c.db) : "cannot open";
  throw CatalogError("merge: cannot read " + path.string() + ": " + why +
                     " (not a SQLite catalog, or its directory needs to be writable for the -shm file)");
}

}  // namespace

void MergeStats::add_counts(const MergeStats& o) {
  for (auto [mine, theirs] : {std::pair{&batches, &o.batches}, {&batch_links, &o.batch_links},
                              {&jobs_new, &o.jobs_new}, {&jobs_updated, &o.jobs_updated},
                              {&candidates, &o.candidates}, {&evaluations, &o.evaluations},
                              {&blobs, &o.blobs}, {&artifacts, &o.artifacts},
                              {&best_new, &o.best_new}, {&best_replaced, &o.best_replaced},
                              {&llm_calls, &o.llm_calls}, {&confirmations, &o.confirmations},
                              {&imported_measurements, &o.imported_measurements},
                              {&retries, &o.retries}})
    *mine += *theirs;
}

MergeStats merge_catalog(Catalog& into_cat, const fs::path& from_path) {
  if (into_cat.read_only()) throw CatalogError("merge: the output catalog is open read-only");
  std::error_code ec;
  if (fs::equivalent(into_cat.path(), from_path, ec))
    throw CatalogError("merge: " + from_path.string() + " is the output catalog itself");
  Conn src;
  open_source(src, from_path);
  sqlite3* from = src.db;
  sqlite3* into = sql::Access::db(into_cat);
  const fs::path into_path = into_cat.path();
  auto has_table = [&](sqlite3* db, const std::string& t) {
    return sql::has_table(db, db == from ? from_path : into_path, t);
  };
  auto common = [&](const std::string& table, const std::set<std::string>& drop = {}) {
    return common_columns(into, into_path, from, from_path, table, drop);
  };

  int from_version = 0;
  {
    Stmt q(from, from_path, "PRAGMA user_version", "merge: read the schema version");
    if (q.step()) from_version = static_cast<int>(q.i64(0));
  }
  for (const char* t : {"batches", "jobs", "batch_jobs", "candidates", "evaluations", "blobs",
                        "artifacts", "best"})
    if (!has_table(from, t))
      throw CatalogError("merge: " + from_path.string() + " is not a Kiln catalog (no table " + t + ")");
  if (from_version > into_cat.schema_version())
    throw CatalogError("merge: " + from_path.string() + " has schema version " +
                       std::to_string(from_version) + ", newer than this kiln knows (" +
                       std::to_string(into_cat.schema_version()) + "); use a newer kiln");

  MergeStats st;
  const std::set<std::string> known = {"batches", "jobs", "batch_jobs", "candidates", "evaluations",
                                       "blobs", "artifacts", "best", "llm_calls", "confirmations",
                                       "imported_measurements", "retries"};
  {
    Stmt q(from, from_path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
           "merge: list tables");
    while (q.step())
      if (!known.count(q.text(0)) || !has_table(into, q.text(0))) st.skipped_tables.push_back(q.text(0));
  }

  // Every row read from the shard is checked before it is written
  // (merge_check.h); a refused row aborts the merge and the transaction rolls
  // back: nothing of the shard is imported.
  auto refuse = [&](const std::string& why) {
    throw CatalogError("merge: " + from_path.string() + ": refused, nothing was merged: " + why);
  };
  auto check = [&](const std::string& table, const std::vector<std::string>& cols, const Stmt& sel) {
    try {
      merge_check::check_row(table, cols, sel, 0, sel.i64(static_cast<int>(cols.size())));
    } catch (const CatalogError& e) {
      refuse(e.what());
    }
  };

  sql::Tx tx(into, into_path);
  // --- batches: by id -----------------------------------------------------------
  {
    const auto cols = common("batches");
    auto sel = select_all(from, from_path, "batches", cols);
    auto ins = insert_into(into, into_path, "batches", cols, true);
    while (sel->step()) {
      check("batches", cols, *sel);
      bind_row(*ins, *sel, cols.size());
      ins->run();
      st.batches += ins->changes();
    }
  }

  // --- jobs: by key ---------------------------------------------------------------
  std::map<long long, long long> job_map;  // from id -> into id
  {
    auto cols = common("jobs", {"id"});
    std::vector<std::string> sel_cols = cols;
    sel_cols.insert(sel_cols.begin(), "id");
    auto sel = select_all(from, from_path, "jobs", sel_cols);
    // Offsets into the insert's columns (sel column = insert column + 1).
    const int c_key = index_of(cols, "key"), c_state = index_of(cols, "state"),
              c_owner = index_of(cols, "lease_owner"), c_exp = index_of(cols, "lease_expires");
    if (c_key < 0 || c_state < 0) throw CatalogError("merge: jobs lack key or state");
    auto ins = insert_into(into, into_path, "jobs", cols, false);
    Stmt find(into, into_path, "SELECT id, state FROM jobs WHERE key = ?1", "merge: find job by key");
    std::vector<std::string> upd_cols;
    for (const char* c : {"state", "message", "attempts", "started_at", "finished_at"})
      if (index_of(cols, c) >= 0) upd_cols.push_back(c);
    std::string upd_sql = "UPDATE jobs SET lease_owner = NULL, lease_expires = NULL";
    for (size_t i = 0; i < upd_cols.size(); ++i)
      upd_sql += ", \"" + upd_cols[i] + "\" = ?" + std::to_string(i + 2);
    upd_sql += " WHERE id = ?1";
    Stmt upd(into, into_path, upd_sql, "merge: advance a job");
    while (sel->step()) {
      check("jobs", sel_cols, *sel);
      const long long from_id = sel->i64(0);
      const std::string key = sel->text(c_key + 1), state = sel->text(c_state + 1);
      find.reset().bind(1, key);
      if (find.step()) {
        const long long id = find.i64(0);
        const std::string into_state = find.text(1);
        find.reset();
        job_map[from_id] = id;
        if (state_rank(state) > state_rank(into_state)) {
          upd.reset().bind(1, id);
          for (size_t i = 0; i < upd_cols.size(); ++i)
            upd.bind_value(static_cast<int>(i) + 2, sel->value(index_of(cols, upd_cols[i]) + 1));
          upd.run();
          ++st.jobs_updated;
        }
        continue;
      }
      find.reset();
      // Insert; a job some run held in `from` is queued here (that run is not ours).
      ins->reset();
      for (size_t i = 0; i < cols.size(); ++i) {
        const int k = static_cast<int>(i);
        if (state == "running" && k == c_state) ins->bind(k + 1, std::string("queued"));
        else if (state == "running" && (k == c_owner || k == c_exp)) ins->bind(k + 1, nullptr);
        else ins->bind_value(k + 1, sel->value(k + 1));
      }
      ins->run();
      job_map[from_id] = ins->last_insert_rowid();
      ++st.jobs_new;
    }
  }
  auto job_of = [&](const Stmt& q, int i) -> long long {
    auto it = job_map.find(q.i64(i));
    if (it == job_map.end())
      refuse("it references job " + std::to_string(q.i64(i)) + " that it does not have");
    return it->second;
  };
  // Copies every row of `table` but the columns `drop` (INSERT OR IGNORE: the
  // table's unique key decides), column `id_col` translated by `map_id`;
  // counts the rows added.
  auto copy_mapped = [&](const std::string& table, const std::set<std::string>& drop, const char* id_col,
                         const auto& map_id, int& added) {
    const auto cols = common(table, drop);
    const int c_id = index_of(cols, id_col);
    auto sel = select_all(from, from_path, table, cols);
    auto ins = insert_into(into, into_path, table, cols, true);
    while (sel->step()) {
      check(table, cols, *sel);
      bind_row(*ins, *sel, cols.size(), {{c_id, map_id(*sel, c_id)}});
      ins->run();
      added += ins->changes();
    }
  };

  // --- batch_jobs -------------------------------------------------------------------
  copy_mapped("batch_jobs", {}, "job_id", job_of, st.batch_links);

  // --- candidates: by (job, key) -------------------------------------------------------
  std::map<long long, long long> cand_map;      // from id -> into id
  std::map<long long, long long> cand_job;      // from candidate id -> from job id
  {
    auto cols = common("candidates", {"id"});
    std::vector<std::string> sel_cols = cols;
    sel_cols.insert(sel_cols.begin(), "id");
    auto sel = select_all(from, from_path, "candidates", sel_cols);
    const int c_job = index_of(cols, "job_id"), c_key = index_of(cols, "key"),
              c_parent = index_of(cols, "parent_id");
    auto ins = insert_into(into, into_path, "candidates", cols, false);
    Stmt find(into, into_path, "SELECT id FROM candidates WHERE job_id = ?1 AND key = ?2",
              "merge: find candidate by key");
    std::vector<std::pair<long long, long long>> parents;  // (into id, from parent id)
    std::vector<std::pair<long long, long long>> parent_of;  // (from id, from parent id)
    while (sel->step()) {
      check("candidates", sel_cols, *sel);
      const long long from_id = sel->i64(0);
      const long long job = job_of(*sel, c_job + 1);
      cand_job[from_id] = sel->i64(c_job + 1);
      if (c_parent >= 0 && !sel->is_null(c_parent + 1)) parent_of.emplace_back(from_id, sel->i64(c_parent + 1));
      find.reset().bind(1, job).bind(2, sel->text(c_key + 1));
      if (find.step()) {
        cand_map[from_id] = find.i64(0);
        find.reset();
        continue;
      }
      find.reset();
      std::map<int, std::optional<long long>> ids = {{c_job + 1, job}};
      std::optional<long long> from_parent;
      if (c_parent >= 0) {
        if (!sel->is_null(c_parent + 1)) from_parent = sel->i64(c_parent + 1);
        ids[c_parent + 1] = std::nullopt;  // set below, once the parent is here
        if (from_parent)
          if (auto it = cand_map.find(*from_parent); it != cand_map.end()) ids[c_parent + 1] = it->second;
      }
      // bind_row works on the select's columns; the insert's are shifted by one (no id).
      ins->reset();
      for (size_t i = 0; i < cols.size(); ++i) {
        const int k = static_cast<int>(i) + 1;
        auto it = ids.find(k);
        if (it == ids.end()) ins->bind_value(k, sel->value(k));
        else if (it->second) ins->bind(k, *it->second);
        else ins->bind(k, nullptr);
      }
      ins->run();
      const long long id = ins->last_insert_rowid();
      cand_map[from_id] = id;
      if (from_parent && !cand_map.count(*from_parent)) parents.emplace_back(id, *from_parent);
      ++st.candidates;
    }
    // A parent is a candidate of the same job.
    for (const auto& [child, parent] : parent_of) {
      auto it = cand_job.find(parent);
      if (it != cand_job.end() && it->second != cand_job[child])
        refuse("candidates row " + std::to_string(child) + ": parent_id " + std::to_string(parent) +
               " is a candidate of another job");
    }
    // Parents form trees: a candidate that is its own ancestor (a cycle, which
    // no run writes) is refused. Rows already in `into` never point at the
    // rows this merge inserts, so a cycle could only come from this source.
    {
      const std::map<long long, long long> up(parent_of.begin(), parent_of.end());
      std::map<long long, int> seen;  // 1: on the chain being walked, 2: its chain ends
      for (const auto& [start, ignored] : up) {
        std::vector<long long> chain;
        for (long long cur = start;;) {
          const int s = seen.count(cur) ? seen.at(cur) : 0;
          if (s == 2) break;
          if (s == 1)
            refuse("candidates row " + std::to_string(cur) + ": its parent_id chain comes back to it (a cycle)");
          seen[cur] = 1;
          chain.push_back(cur);
          const auto it = up.find(cur);
          if (it == up.end()) break;
          cur = it->second;
        }
        for (long long c : chain) seen[c] = 2;
      }
    }
    Stmt fix(into, into_path, "UPDATE candidates SET parent_id = ?1 WHERE id = ?2", "merge: link a parent");
    for (const auto& [id, parent] : parents)
      if (auto it = cand_map.find(parent); it != cand_map.end()) fix.reset().bind(1, it->second).bind(2, id).run();
  }
  auto cand_of = [&](const Stmt& q, int i) -> std::optional<long long> {
    if (q.is_null(i)) return std::nullopt;
    auto it = cand_map.find(q.i64(i));
    if (it == cand_map.end())
      refuse("it references candidate " + std::to_string(q.i64(i)) + " that it does not have");
    return it->second;
  };
  // A candidate column that must name a candidate of the row's job.
  auto same_job = [&](const char* table, const Stmt& q, int c_cand, int c_job, size_t ncols) {
    if (c_cand < 0 || c_job < 0 || q.is_null(c_cand)) return;
    auto it = cand_job.find(q.i64(c_cand));
    if (it != cand_job.end() && it->second != q.i64(c_job))
      refuse(std::string(table) + " row " + std::to_string(q.i64(static_cast<int>(ncols))) + ": candidate " +
             std::to_string(q.i64(c_cand)) + " is not a candidate of job " + std::to_string(q.i64(c_job)));
  };

  // --- blobs: by sha256 (before artifacts, which reference them) ---------------------------
  {
    const auto cols = common("blobs");
    auto sel = select_all(from, from_path, "blobs", cols);
    auto ins = insert_into(into, into_path, "blobs", cols, true);
    Stmt have(into, into_path, "SELECT 1 FROM blobs WHERE sha256 = ?1", "merge: find blob");
    const int c_sha = index_of(cols, "sha256");
    while (sel->step()) {
      check("blobs", cols, *sel);
      have.reset().bind(1, sel->text(c_sha));
      const bool present = have.step();
      have.reset();
      if (present) continue;
      bind_row(*ins, *sel, cols.size());
      ins->run();
      st.blobs += ins->changes();
    }
  }

  // --- evaluations: one per candidate; artifacts: by (candidate, target) -------------------
  copy_mapped("evaluations", {"id"}, "candidate_id", cand_of, st.evaluations);
  copy_mapped("artifacts", {"id"}, "candidate_id", cand_of, st.artifacts);

  // --- best: measured beats estimated; then the lower value ----------------------------------
  {
    const auto cols = common("best");
    const int c_job = index_of(cols, "job_id"), c_cand = index_of(cols, "candidate_id"),
              c_basis = index_of(cols, "basis"), c_value = index_of(cols, "value_ms");
    auto sel = select_all(from, from_path, "best", cols);
    auto ins = insert_into(into, into_path, "best", cols, false);
    Stmt cur(into, into_path, "SELECT basis, value_ms FROM best WHERE job_id = ?1", "merge: read best");
    Stmt del(into, into_path, "DELETE FROM best WHERE job_id = ?1", "merge: replace best");
    while (sel->step()) {
      check("best", cols, *sel);
      same_job("best", *sel, c_cand, c_job, cols.size());
      const long long job = job_of(*sel, c_job);
      const std::string basis = sel->text(c_basis);
      const double value = sel->dbl(c_value);
      cur.reset().bind(1, job);
      bool replace = false;
      if (cur.step()) {
        const std::string have_basis = cur.text(0);
        const double have_value = cur.dbl(1);
        cur.reset();
        if (basis == have_basis) replace = value < have_value;
        else replace = basis == "measured";
        if (!replace) continue;
        del.reset().bind(1, job).run();
        ++st.best_replaced;
      } else {
        cur.reset();
        ++st.best_new;
      }
      bind_row(*ins, *sel, cols.size(), {{c_job, job}, {c_cand, cand_of(*sel, c_cand)}});
      ins->run();
    }
  }

  // A child table of jobs and candidates (its own id dropped), merged row by
  // row: job_id and the candidate columns `cand_cols` are translated; a row
  // whose `key` columns (those the table has; translated ids, NULL matching
  // NULL) match a row already in `into` is skipped, else inserted and counted
  // in `added`. With `ids_required`, a row whose job or candidate is NULL is
  // refused.
  auto merge_child = [&](const char* table, std::initializer_list<const char*> key,
                         std::initializer_list<const char*> cand_cols, bool ids_required, int& added) {
    const auto cols = common(table, {"id"});
    const int c_job = index_of(cols, "job_id");
    std::vector<int> cand_at;
    for (const char* c : cand_cols)
      if (const int k = index_of(cols, c); k >= 0) cand_at.push_back(k);
    std::vector<int> key_at;
    std::string find_sql = std::string("SELECT 1 FROM ") + table + " WHERE 1";
    for (const char* c : key)
      if (const int k = index_of(cols, c); k >= 0) {
        key_at.push_back(k);
        find_sql += " AND \"" + std::string(c) + "\" IS ?" + std::to_string(key_at.size());
      }
    Stmt find(into, into_path, find_sql, std::string("merge: find ") + table + " row");
    auto sel = select_all(from, from_path, table, cols);
    auto ins = insert_into(into, into_path, table, cols, false);
    while (sel->step()) {
      check(table, cols, *sel);
      for (int k : cand_at) same_job(table, *sel, k, c_job, cols.size());
      std::map<int, std::optional<long long>> ids;
      if (c_job >= 0) ids[c_job] = job_of(*sel, c_job);
      for (int k : cand_at) ids[k] = cand_of(*sel, k);
      if (ids_required)
        for (const auto& [k, id] : ids)
          if (!id) refuse(std::string(table) + ": a row names a job or candidate the shard does not hold");
      find.reset();
      for (size_t i = 0; i < key_at.size(); ++i) {
        const int k = key_at[i];
        if (auto it = ids.find(k); it != ids.end() && it->second) find.bind(static_cast<int>(i) + 1, *it->second);
        else find.bind_value(static_cast<int>(i) + 1, sel->value(k));
      }
      const bool present = find.step();
      find.reset();
      if (present) continue;  // e.g. the catalog's own import of that device stands
      bind_row(*ins, *sel, cols.size(), ids);
      ins->run();
      ++added;
    }
  };
  if (has_table(from, "llm_calls") && has_table(into, "llm_calls"))
    merge_child("llm_calls", {"job_id", "created_at", "instance", "round", "prompt"}, {"candidate_id", "parent_id"},
                false, st.llm_calls);
  if (has_table(from, "confirmations") && has_table(into, "confirmations"))
    merge_child("confirmations", {"job_id", "run_id", "candidate_id", "baseline"}, {"candidate_id"}, false,
                st.confirmations);
  // imported_measurements: by (candidate, device), as an import keys them
  if (has_table(from, "imported_measurements") && has_table(into, "imported_measurements"))
    merge_child("imported_measurements", {"candidate_id", "device"}, {"candidate_id"}, true,
                st.imported_measurements);
  // retries: by (job, time); `forgotten` names candidates by key, so it needs no mapping
  if (has_table(from, "retries") && has_table(into, "retries"))
    merge_child("retries", {"job_id", "retried_at"}, {}, true, st.retries);

  tx.commit();
  return st;
}

}  // namespace kiln
