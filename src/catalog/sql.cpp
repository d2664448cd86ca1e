// The catalog's statement and transaction helper (sql.h).
#include "catalog/sql.h"

#include <sqlite3.h>

#include <utility>

namespace kiln::sql {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string corruption_hint(sqlite3* db) {
  const int code = db ? (sqlite3_errcode(db) & 0xff) : SQLITE_OK;
  if (code != SQLITE_CORRUPT && code != SQLITE_NOTADB) return "";
  return " (the catalog file is damaged: check it with `kiln query \"PRAGMA integrity_check\"` and "
         "restore the last good copy)";
}

std::string first_line(std::string_view sql) {
  std::string s(sql.substr(0, sql.find('\n')));
  if (s.size() < sql.size()) s += " ...";
  if (s.size() > 160) s = s.substr(0, 160) + " ...";
  return "`" + s + "`";
}

}  // namespace

void fail(sqlite3* db, const fs::path& path, const std::string& what) {
  std::string msg = "catalog " + path.string() + ": " + what;
  if (db) {
    msg += ": ";
    msg += sqlite3_errmsg(db);
    msg += corruption_hint(db);
  }
  throw CatalogError(msg);
}

Stmt::Stmt(sqlite3* db, fs::path path, std::string_view sql, std::string what)
    : db_(db), path_(std::move(path)), what_(what.empty() ? first_line(sql) : std::move(what)) {
  if (sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &st_, nullptr) != SQLITE_OK)
    sql::fail(db_, path_, what_ + ": prepare");
  if (!st_) sql::fail(nullptr, path_, what_ + ": no SQL statement");
}

Stmt::Stmt(const Catalog& c, std::string_view sql, std::string what)
    : Stmt(Access::db(c), c.path(), sql, std::move(what)) {}

Stmt::Stmt(StmtCache& cache, const Catalog& c, std::string_view sql, std::string what)
    : db_(Access::db(c)), path_(c.path()), what_(what.empty() ? first_line(sql) : std::move(what)) {
  auto it = cache.entries_.find(sql);
  if (it == cache.entries_.end() || it->second.in_use) {
    Stmt fresh(db_, path_, sql, what_);
    st_ = std::exchange(fresh.st_, nullptr);
    if (it != cache.entries_.end()) return;  // the cached one is busy: this one is our own
    it = cache.entries_.emplace(std::string(sql), StmtCache::Entry{st_, false}).first;
  }
  it->second.in_use = true;
  cached_ = &it->second;
  st_ = it->second.st;
}

Stmt::~Stmt() {
  if (!cached_) {
    sqlite3_finalize(st_);
    return;
  }
  sqlite3_reset(st_);
  sqlite3_clear_bindings(st_);
  cached_->in_use = false;
}

StmtCache::~StmtCache() {
  for (auto& [sql, e] : entries_) sqlite3_finalize(e.st);
}

namespace {
int checked(int rc, const Stmt& st) {
  if (rc != SQLITE_OK) st.fail("bind");
  return rc;
}
}  // namespace

Stmt& Stmt::bind(int i, std::nullptr_t) {
  checked(sqlite3_bind_null(st_, i), *this);
  return *this;
}
Stmt& Stmt::bind(int i, long long v) {
  checked(sqlite3_bind_int64(st_, i, v), *this);
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  checked(sqlite3_bind_double(st_, i, v), *this);
  return *this;
}
Stmt& Stmt::bind(int i, const std::string& v) {
  checked(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), *this);
  return *this;
}
Stmt& Stmt::bind_blob(int i, const std::string& v) {
  checked(sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), *this);
  return *this;
}
Stmt& Stmt::bind_value(int i, sqlite3_value* v) {
  checked(sqlite3_bind_value(st_, i, v), *this);
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(st_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sql::fail(db_, path_, what_);
}

void Stmt::run() {
  while (step()) {
  }
  sqlite3_reset(st_);
}

Stmt& Stmt::reset() {
  sqlite3_reset(st_);
  sqlite3_clear_bindings(st_);
  return *this;
}

int Stmt::rc_step() { return sqlite3_step(st_); }

bool Stmt::is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
int Stmt::type(int c) const { return sqlite3_column_type(st_, c); }
long long Stmt::i64(int c) const { return sqlite3_column_int64(st_, c); }
double Stmt::dbl(int c) const { return sqlite3_column_double(st_, c); }
std::string Stmt::text(int c) const {
  auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, c));
  return p ? std::string(p, sqlite3_column_bytes(st_, c)) : std::string();
}
std::string Stmt::blob(int c) const {
  const void* p = sqlite3_column_blob(st_, c);
  return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : std::string();
}
long long Stmt::bytes(int c) const { return sqlite3_column_bytes(st_, c); }
std::optional<long long> Stmt::opt_i64(int c) const {
  return is_null(c) ? std::nullopt : std::optional<long long>(i64(c));
}
std::optional<double> Stmt::opt_dbl(int c) const {
  return is_null(c) ? std::nullopt : std::optional<double>(dbl(c));
}
std::optional<std::string> Stmt::opt_text(int c) const {
  return is_null(c) ? std::nullopt : std::optional<std::string>(text(c));
}
json Stmt::js(int c) const {
  if (is_null(c)) return json();
  return json::parse(text(c), nullptr, /*allow_exceptions=*/false);
}
json Stmt::js_strict(int c) const {
  if (is_null(c)) return json();
  try {
    return json::parse(text(c));
  } catch (const json::exception& e) {
    const char* name = sqlite3_column_name(st_, c);
    sql::fail(nullptr, path_,
              what_ + ": column " + (name ? name : "?") + " is not JSON (" + e.what() + ")");
  }
}
sqlite3_value* Stmt::value(int c) const { return sqlite3_column_value(st_, c); }
int Stmt::columns() const { return sqlite3_column_count(st_); }
int Stmt::changes() const { return sqlite3_changes(db_); }
long long Stmt::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

void exec(sqlite3* db, const fs::path& path, const std::string& sql, const std::string& what) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = "catalog " + path.string() + ": " + what + ": " + (err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    msg += corruption_hint(db);
    throw CatalogError(msg);
  }
}

Tx::Tx(sqlite3* db, fs::path path) : db_(db), path_(std::move(path)) {
  exec(db_, path_, "BEGIN IMMEDIATE", "begin transaction");
}

Tx::~Tx() {
  if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Tx::commit() {
  exec(db_, path_, "COMMIT", "commit");
  done_ = true;
}

bool has_table(sqlite3* db, const fs::path& path, const std::string& table) {
  Stmt q(db, path, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", "look up table " + table);
  q.bind(1, table);
  return q.step();
}

std::vector<std::string> table_columns(sqlite3* db, const fs::path& path, const std::string& table) {
  Stmt q(db, path, "SELECT name FROM pragma_table_info(?1) ORDER BY cid", "columns of table " + table);
  q.bind(1, table);
  std::vector<std::string> out;
  while (q.step()) out.push_back(q.text(0));
  return out;
}

}  // namespace kiln::sql
