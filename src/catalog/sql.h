// The catalog's one statement and transaction helper. Internal to
// src/catalog: no header outside this folder includes it, and nothing outside
// this folder speaks SQL.
//
// Failure: every failed prepare, bind or step throws CatalogError
// "catalog FILE: WHAT: SQLITE'S MESSAGE" (with the fix for a damaged file),
// never "no rows". Threading: as Catalog, one connection per thread.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

struct sqlite3;
struct sqlite3_stmt;
struct sqlite3_value;

namespace kiln::sql {

// Throws CatalogError "catalog PATH: WHAT[: SQLite's message for db][: the fix
// when the file is damaged]". db may be null (a message of ours).
[[noreturn]] void fail(sqlite3* db, const std::filesystem::path& path, const std::string& what);

// The connection behind a Catalog (Catalog befriends this one accessor).
struct Access {
  static sqlite3* db(const Catalog& c) { return c.db_; }
};

// Prepared statements of one connection kept for reuse, keyed by their SQL
// (preparing a join can cost more than running it). Owned by whoever owns the
// connection and destroyed before it; finalizes its statements. Threading: as
// the connection, one thread at a time.
// A JSON column read strictly (Stmt::into): text that does not parse throws.
struct Strict {
  nlohmann::json& out;
};
// Parameters for Stmt::binds: a text bound as NULL when empty; bytes bound as a blob.
struct NullIfEmpty {
  const std::string& v;
};
struct Blob {
  const std::string& v;
};

class StmtCache {
 public:
  StmtCache() = default;
  ~StmtCache();
  StmtCache(const StmtCache&) = delete;
  StmtCache& operator=(const StmtCache&) = delete;

 private:
  friend class Stmt;
  struct Entry {
    sqlite3_stmt* st = nullptr;
    bool in_use = false;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

class Stmt {
 public:
  // Prepares `sql` on db; `what` names the operation in error messages
  // (default: the statement's first line).
  Stmt(sqlite3* db, std::filesystem::path path, std::string_view sql, std::string what = "");
  Stmt(const Catalog& c, std::string_view sql, std::string what = "");
  // Reuses the cache's statement of `sql` (prepared on first use); while that
  // one is in use (a nested read of the same SQL) prepares a statement of its
  // own. When destroyed, a cached statement is reset, its bindings cleared,
  // and handed back. `cache` must belong to c's connection and outlive this.
  Stmt(StmtCache& cache, const Catalog& c, std::string_view sql, std::string what = "");
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // Binding (1-based). "" -> NULL with bind_text_or_null; nullopt -> NULL.
  Stmt& bind(int i, std::nullptr_t);
  Stmt& bind(int i, long long v);
  Stmt& bind(int i, int v) { return bind(i, static_cast<long long>(v)); }
  Stmt& bind(int i, double v);
  Stmt& bind(int i, const std::string& v);
  Stmt& bind(int i, const char* v) { return bind(i, std::string(v)); }
  Stmt& bind_blob(int i, const std::string& v);
  Stmt& bind_value(int i, sqlite3_value* v);  // a column of another statement
  Stmt& bind_text_or_null(int i, const std::string& v) { return v.empty() ? bind(i, nullptr) : bind(i, v); }
  template <class T>
  Stmt& bind(int i, const std::optional<T>& v) {
    return v ? bind(i, *v) : bind(i, nullptr);
  }
  Stmt& bind(int i, NullIfEmpty v) { return bind_text_or_null(i, v.v); }
  Stmt& bind(int i, Blob v) { return bind_blob(i, v.v); }
  // Binds `v...` to parameters first, first+1, ... in order, each as bind does.
  template <class... T>
  Stmt& binds(int first, const T&... v) {
    int i = first;
    (bind(i++, v), ...);
    return *this;
  }

  // true: a row is available; false: done. Throws on any error.
  bool step();
  // Steps to the end (a write, or rows nobody reads), then resets.
  void run();
  // Resets and clears the bindings, for the next use.
  Stmt& reset();
  // sqlite3_step's own result code, for callers that tell constraint errors
  // apart; they must fail() on anything else.
  int rc_step();

  // Columns (0-based) of the current row.
  bool is_null(int c) const;
  int type(int c) const;  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL
  long long i64(int c) const;
  double dbl(int c) const;
  std::string text(int c) const;  // "" for NULL
  std::string blob(int c) const;
  long long bytes(int c) const;
  std::optional<long long> opt_i64(int c) const;
  std::optional<double> opt_dbl(int c) const;
  std::optional<std::string> opt_text(int c) const;
  // A JSON column: null for NULL; text that does not parse is a discarded value.
  nlohmann::json js(int c) const;
  // Same, but text that does not parse throws CatalogError naming the column.
  nlohmann::json js_strict(int c) const;
  sqlite3_value* value(int c) const;
  int columns() const;

  // Steps through the remaining rows, each read by read(T&) into a new T.
  template <class T, class Read>
  std::vector<T> rows(Read&& read) {
    std::vector<T> out;
    while (step()) read(out.emplace_back());
    return out;
  }

  // Reads the current row's columns first, first+1, ... into `out...` in
  // order, each by its type: integers and bool from the integer column,
  // floating point, std::string (text), nlohmann::json (js), Strict (js_strict),
  // std::optional of any of those (unset for NULL).
  template <class... T>
  void into(int first, T&&... out) const {
    int c = first;
    (get(c++, out), ...);
  }
  void get(int c, Strict s) const { s.out = js_strict(c); }
  template <class T>
  void get(int c, T& out) const {
    if constexpr (std::is_same_v<T, bool>) {
      out = i64(c) != 0;
    } else if constexpr (std::is_integral_v<T>) {
      out = static_cast<T>(i64(c));
    } else if constexpr (std::is_floating_point_v<T>) {
      out = static_cast<T>(dbl(c));
    } else if constexpr (std::is_same_v<T, std::string>) {
      out = text(c);
    } else if constexpr (std::is_same_v<T, nlohmann::json>) {
      out = js(c);
    } else {
      static_assert(std::is_same_v<T, std::optional<typename T::value_type>>, "Stmt::get: no column type for T");
      if (is_null(c)) {
        out.reset();
      } else {
        typename T::value_type v{};
        get(c, v);
        out = std::move(v);
      }
    }
  }

  // Rows changed by the last write of this connection; the last rowid inserted.
  int changes() const;
  long long last_insert_rowid() const;
  [[noreturn]] void fail(const std::string& what) const { sql::fail(db_, path_, what); }
  const std::filesystem::path& path() const { return path_; }

 private:
  sqlite3* db_;
  std::filesystem::path path_;
  std::string what_;
  sqlite3_stmt* st_ = nullptr;
  StmtCache::Entry* cached_ = nullptr;  // the cache entry borrowed, if any
};

// Runs `sql` (several statements allowed); throws CatalogError naming `what`.
void exec(sqlite3* db, const std::filesystem::path& path, const std::string& sql, const std::string& what);

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed uncommitted.
class Tx {
 public:
  Tx(sqlite3* db, std::filesystem::path path);
  explicit Tx(const Catalog& c) : Tx(Access::db(c), c.path()) {}
  ~Tx();
  Tx(const Tx&) = delete;
  Tx& operator=(const Tx&) = delete;
  void commit();

 private:
  sqlite3* db_;
  std::filesystem::path path_;
  bool done_ = false;
};

bool has_table(sqlite3* db, const std::filesystem::path& path, const std::string& table);
// The table's columns in declaration order (empty when there is no such table).
std::vector<std::string> table_columns(sqlite3* db, const std::filesystem::path& path, const std::string& table);

}  // namespace kiln::sql
