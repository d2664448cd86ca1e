// The SQLite catalog. See catalog.h and docs/catalog.md.
#include "catalog/catalog.h"

#include <signal.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include <sqlite3.h>

#include "catalog/evaluations.h"
#include "catalog/job_key.h"
#include "catalog/lineage.h"
#include "catalog/sql.h"
#include "common/output_path.h"
#include "common/hash.h"
#include "common/home.h"
#include "evaluate/protocol.h"
#include "stats/stats.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace kiln {

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace

namespace {

using sql::exec;
using sql::fail;
using sql::Blob;
using sql::NullIfEmpty;
using sql::Stmt;
using sql::Tx;

int user_version(sqlite3* db, const fs::path& path) {
  Stmt st(db, path, "PRAGMA user_version");
  st.step();
  return (int)st.i64(0);
}

// ---- job rows ---------------------------------------------------------------

const char* const kJobCols =
    "id, key, op, shape, dtype, params, target, arch, spec, state, attempts, message, "
    "lease_owner, lease_expires";

JobRow read_job(const Stmt& st) {
  JobRow j;
  st.into(0, j.id, j.key, j.op, j.shape, j.dtype, j.params, j.target, j.arch, j.spec, j.state, j.attempts,
          j.message, j.lease_owner, j.lease_expires);
  return j;
}

const char* const kCandCols =
    "c.id, c.job_id, c.key, c.generator, c.template, c.config, c.source, c.parent_id, c.round, "
    "c.instance, EXISTS (SELECT 1 FROM evaluations e WHERE e.candidate_id = c.id)";

CandidateRow read_candidate(const Stmt& st) {
  CandidateRow c;
  st.into(0, c.id, c.job_id, c.key, c.generator, c.template_name, c.config, c.source, c.parent_id, c.round,
          c.instance, c.evaluated);
  return c;
}

// "host:pid[:anything]" -> (host, pid); pid 0 if not of that form.
std::pair<std::string, long> parse_owner(const std::string& owner) {
  auto colon = owner.find(':');
  if (colon == std::string::npos) return {owner, 0};
  std::string host = owner.substr(0, colon);
  long pid = 0;
  size_t i = colon + 1;
  for (; i < owner.size() && std::isdigit((unsigned char)owner[i]); ++i) {
    pid = pid * 10 + (owner[i] - '0');
    if (pid > 1L << 30) return {host, 0};
  }
  if (i == colon + 1) return {host, 0};
  return {host, pid};
}

// True when owner names a process on this host that no longer exists.
bool owner_gone(const std::string& owner, const std::string& host) {
  auto [h, pid] = parse_owner(owner);
  if (pid <= 0 || host.empty() || h != host) return false;
  return kill((pid_t)pid, 0) == -1 && errno == ESRCH;
}

// ---- migrations -------------------------------------------------------------

void migrate(sqlite3* db, const fs::path& path, const std::vector<Migration>& migrations) {
  for (const auto& m : migrations) {
    if (user_version(db, path) >= m.version) continue;
    std::string sql;
    try {
      sql = read_file(m.file);
    } catch (const std::exception& e) {
      throw CatalogError("catalog " + path.string() + ": migration " + m.file.string() + ": " +
                         e.what());
    }
    Tx tx(db, path);
    // Another process may have migrated while we waited for the write lock.
    if (user_version(db, path) >= m.version) continue;
    exec(db, path, sql, "migration " + m.file.filename().string());
    exec(db, path, "PRAGMA user_version = " + std::to_string(m.version),
         "set user_version");
    tx.commit();
  }
}

std::string dir_of(const fs::path& path) {
  fs::path d = path.parent_path();
  return d.empty() ? std::string(".") : d.string();
}

constexpr int kBusyTimeoutMs = 10000;

// Throws a CatalogError explaining why the first real access of `db` failed.
[[noreturn]] void explain_failure(sqlite3* db, const fs::path& path, const std::string& what,
                                  bool read_only) {
  const int code = db ? (sqlite3_errcode(db) & 0xff) : SQLITE_ERROR;
  const std::string err = db ? sqlite3_errmsg(db) : "out of memory";
  if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
    throw CatalogError("catalog " + path.string() +
                       " is not a valid SQLite catalog (corrupt, or some other file): " + err);
  if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_IOERR ||
      code == SQLITE_PERM) {
    std::string why;
    if (access(dir_of(path).c_str(), W_OK) != 0)
      why = read_only
                ? " (directory " + dir_of(path) + " is not writable, so SQLite cannot create " +
                      path.filename().string() +
                      "-shm, and a -wal file holds unmerged changes; close the writer first)"
                : " (directory " + dir_of(path) + " is not writable; SQLite needs to create " +
                      path.filename().string() + "-wal and -shm beside the catalog)";
    else if (!read_only && access(path.c_str(), W_OK) != 0)
      why = " (the file is not writable)";
    throw CatalogError("catalog " + path.string() + ": cannot " +
                       (read_only ? "read: " : "write: ") + err + why);
  }
  fail(db, path, what);
}

// A file that holds other tables but no Kiln schema is somebody else's
// database: refuse it rather than add Kiln's tables to it. Only an empty
// database (user_version 0, no schema objects) is a new catalog.
void check_kiln_schema(sqlite3* db, const fs::path& path) {
  // One statement, so one snapshot: another process may be migrating a new
  // catalog right now.
  Stmt st(db, path,
          "SELECT (SELECT user_version FROM pragma_user_version), "
          "(SELECT COUNT(*) FROM sqlite_master), "
          "(SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('batches', 'jobs'))",
          "read schema");
  st.step();
  const long long version = st.i64(0), objects = st.i64(1), kiln_tables = st.i64(2);
  if ((version == 0 && objects > 0) || (version > 0 && kiln_tables != 2))
    throw CatalogError("catalog " + path.string() +
                       " is not a Kiln catalog: an SQLite database with " +
                       std::to_string(objects) +
                       " schema object(s) and no Kiln schema; Kiln leaves it unchanged (name a "
                       "new file or an existing Kiln catalog with --catalog)");
}

// PRAGMA user_version as the first access, with explained failures.
int probe_version(sqlite3* db, const fs::path& path, bool read_only) {
  sqlite3_stmt* st = nullptr;
  int version = -1;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  if (version < 0) explain_failure(db, path, "read schema version", read_only);
  return version;
}

std::string uri_path(const fs::path& path) {
  std::string abs = fs::absolute(path).string(), out;
  for (unsigned char c : abs) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20) {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    } else {
      out += (char)c;
    }
  }
  return out;
}

// A read-only connection, probed. A WAL catalog in a directory this process
// cannot write (a published copy) cannot get its -shm file; when no -wal file
// holds unmerged pages, it is opened as immutable instead.
sqlite3* connect_read_only(const fs::path& path) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> db(raw, sqlite3_close_v2);
  if (rc != SQLITE_OK) explain_failure(raw, path, "cannot open", true);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);
  sqlite3_stmt* st = nullptr;
  bool ok = sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  if (ok) return db.release();
  const int code = sqlite3_errcode(raw) & 0xff;
  std::error_code ec;
  fs::path wal = path.string() + "-wal";
  const bool wal_empty = !fs::exists(wal, ec) || fs::file_size(wal, ec) == 0;
  if ((code == SQLITE_READONLY || code == SQLITE_CANTOPEN) &&
      access(dir_of(path).c_str(), W_OK) != 0 && wal_empty) {
    sqlite3* imm = nullptr;
    std::string uri = "file:" + uri_path(path) + "?immutable=1";
    rc = sqlite3_open_v2(uri.c_str(), &imm,
                         SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
    std::unique_ptr<sqlite3, int (*)(sqlite3*)> idb(imm, sqlite3_close_v2);
    if (rc != SQLITE_OK) explain_failure(imm, path, "cannot open", true);
    sqlite3_extended_result_codes(imm, 1);
    probe_version(imm, path, true);
    return idb.release();
  }
  explain_failure(raw, path, "read schema version", true);
}

// ---- query authorizer -------------------------------------------------------

struct AuthState {
  // Set when the authorizer refused the statement being prepared: "" for
  // "not a read statement", else the reason (ATTACH is not allowed, ...).
  std::optional<std::string> denied;
};

bool in(const char* s, std::initializer_list<const char*> list) {
  if (!s) return false;
  for (const char* x : list)
    if (sqlite3_stricmp(s, x) == 0) return true;
  return false;
}

int query_authorizer(void* ud, int action, const char* a1, const char* a2, const char*,
                     const char*) {
  auto* st = static_cast<AuthState*>(ud);
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_UPDATE:
      // Connecting an eponymous virtual table (pragma_table_info(...) and
      // friends) asks for UPDATE on sqlite_master while it declares its
      // schema. A real UPDATE of sqlite_master is not read-only (refused by
      // the sqlite3_stmt_readonly check) and refused by SQLite itself.
      if (a1 && (sqlite3_stricmp(a1, "sqlite_master") == 0 ||
                 sqlite3_stricmp(a1, "sqlite_schema") == 0))
        return SQLITE_OK;
      st->denied = "";
      return SQLITE_DENY;
    case SQLITE_FUNCTION:
      if (in(a2, {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})) {
        st->denied = std::string("function ") + a2 + "() is not allowed";
        return SQLITE_DENY;
      }
      return SQLITE_OK;
    case SQLITE_PRAGMA:
      // Introspection pragmas whose argument names a table/index: any argument.
      if (in(a1, {"table_info", "table_xinfo", "table_list", "index_list", "index_info",
                  "index_xinfo", "foreign_key_list", "foreign_key_check", "integrity_check",
                  "quick_check", "compile_options", "database_list", "collation_list",
                  "function_list", "pragma_list", "module_list"}))
        return SQLITE_OK;
      // Setting pragmas: reading only (no value).
      if (!a2 && in(a1, {"user_version", "schema_version", "application_id", "journal_mode",
                         "page_size", "page_count", "freelist_count", "encoding",
                         "data_version", "foreign_keys"}))
        return SQLITE_OK;
      st->denied = std::string("PRAGMA ") + (a1 ? a1 : "") + (a2 ? std::string(" = ") + a2 : "") +
                   " is not allowed";
      return SQLITE_DENY;
    case SQLITE_ATTACH:
      st->denied = "ATTACH is not allowed";
      return SQLITE_DENY;
    case SQLITE_DETACH:
      st->denied = "DETACH is not allowed";
      return SQLITE_DENY;
    case SQLITE_TRANSACTION:
    case SQLITE_SAVEPOINT:
      st->denied = "transaction control is not allowed";
      return SQLITE_DENY;
    default:
      st->denied = "";  // "is not a read statement"
      return SQLITE_DENY;
  }
}

std::string trim(std::string s) {
  auto ws = [](unsigned char c) { return std::isspace(c) || c == ';'; };
  while (!s.empty() && ws(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
  s = s.substr(i);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

}  // namespace

// ---- free functions ---------------------------------------------------------

std::vector<Migration> find_migrations(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw CatalogError("migrations directory " + dir.string() +
                       " not found (set KILN_HOME to the Kiln installation)");
  std::vector<Migration> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    // NNNN_name.sql: four digits, '_', a name, ".sql".
    const std::string name = e.path().filename().string();
    const bool digits = name.size() > 9 && std::all_of(name.begin(), name.begin() + 4, [](char c) {
                          return std::isdigit((unsigned char)c);
                        });
    if (!e.is_regular_file() || !digits || name[4] != '_' ||
        name.compare(name.size() - 4, 4, ".sql") != 0)
      continue;
    out.push_back({std::stoi(name.substr(0, 4)), e.path()});
  }
  std::sort(out.begin(), out.end(),
            [](const Migration& a, const Migration& b) { return a.version < b.version; });
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].version != (int)i + 1)
      throw CatalogError("migrations in " + dir.string() + " must be numbered 0001, 0002, ... " +
                         "without gaps or duplicates; found " + out[i].file.filename().string());
  if (out.empty()) throw CatalogError("no migrations (NNNN_*.sql) in " + dir.string());
  return out;
}

fs::path default_migrations_dir() { return kiln_home() / "db" / "migrations"; }

std::string network_filesystem_warning(const fs::path& path) {
  fs::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  struct statfs sf{};
  if (statfs(dir.c_str(), &sf) != 0) return "";
  struct Fs {
    unsigned long magic;
    const char* name;
  };
  static const Fs known[] = {
      {0x6969, "NFS"},         {0x0BD00BD0, "Lustre"}, {0x47504653, "GPFS"},
      {0xFF534D42, "CIFS/SMB"}, {0xFE534D42, "SMB2"},  {0x19830326, "BeeGFS"},
      {0x65735546, "FUSE"},     {0x00C36400, "CephFS"}, {0x013111A8, "IBRIX"},
      {0xAAD7AAEA, "PanFS"},
  };
  for (const auto& f : known)
    if ((unsigned long)(unsigned int)sf.f_type == f.magic)
      return std::string("catalog ") + path.string() + " is on " + f.name +
             "; SQLite WAL needs node-local disk (see docs/catalog.md)";
  return "";
}

// ---- Catalog ----------------------------------------------------------------

Catalog::Catalog(sqlite3* db, fs::path path, bool read_only)
    : db_(db), path_(std::move(path)), read_only_(read_only) {}

Catalog::Catalog(Catalog&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)), path_(std::move(o.path_)), read_only_(o.read_only_) {}

Catalog& Catalog::operator=(Catalog&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
    path_ = std::move(o.path_);
    read_only_ = o.read_only_;
  }
  return *this;
}

Catalog::~Catalog() {
  if (db_) sqlite3_close_v2(db_);
}

Catalog Catalog::open(const fs::path& path, bool read_only) {
  return open(path, read_only, default_migrations_dir());
}

void Catalog::check_path(const fs::path& path, bool read_only) {
  std::error_code ec;
  // SQLite would open "" as a private temporary database and lose everything.
  if (path.empty()) throw CatalogError("the catalog path is empty: name a catalog file (--catalog PATH)");
  if (fs::is_symlink(path, ec) && !fs::exists(path, ec))
    throw CatalogError("catalog " + path.string() + " is a symbolic link to " +
                       fs::read_symlink(path, ec).string() +
                       ", which does not exist: name the catalog file itself");
  if (read_only && !fs::exists(path, ec))
    throw CatalogError("no catalog at " + path.string() + "; run `kiln submit` first");
  if (fs::is_directory(path, ec))
    throw CatalogError("catalog " + path.string() + " is a directory, not a catalog file");
  try {
    check_catalog_file(path);  // /dev/null, a FIFO: SQLite would write its -journal beside it
  } catch (const std::invalid_argument& e) {
    throw CatalogError(e.what());
  }
}

Catalog Catalog::open(const fs::path& path, bool read_only, const fs::path& migrations_dir) {
  check_path(path, read_only);
  std::error_code ec;

  auto migrations = find_migrations(migrations_dir);
  const int latest = migrations.back().version;

  if (read_only) {
    Catalog cat(connect_read_only(path), path, true);
    const int version = user_version(cat.db_, path);
    check_kiln_schema(cat.db_, path);
    if (version > latest)
      throw CatalogError("catalog " + path.string() + " has schema version " +
                         std::to_string(version) + ", newer than this kiln knows (" +
                         std::to_string(latest) + "); use a newer kiln");
    if (version < latest)
      throw CatalogError("catalog " + path.string() + " has schema version " +
                         std::to_string(version) + " but this kiln needs " +
                         std::to_string(latest) +
                         "; open it read-write once (e.g. `kiln submit`) to migrate");
    exec(cat.db_, path, "PRAGMA foreign_keys = ON", "configure");
    return cat;
  }

  fs::path dir = path.parent_path();
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      throw CatalogError("catalog " + path.string() + ": cannot create directory " +
                         dir.string() + ": " + ec.message());
  }

  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  Catalog cat(raw, path, false);  // closes raw on any throw below
  if (rc != SQLITE_OK) {
    if (access(dir_of(path).c_str(), W_OK) != 0)
      throw CatalogError("catalog " + path.string() + ": cannot create it: directory " +
                         dir_of(path) + " is not writable");
    explain_failure(raw, path, "cannot open", false);
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);

  // Reading the header is the first real access; it detects non-database files.
  const int version = probe_version(raw, path, false);
  check_kiln_schema(raw, path);
  if (version > latest)
    throw CatalogError("catalog " + path.string() + " has schema version " +
                       std::to_string(version) + ", newer than this kiln knows (" +
                       std::to_string(latest) + "); use a newer kiln");

  // Switching to WAL needs an exclusive lock, and SQLite does not call the busy
  // handler for it: when several processes open a fresh catalog at once, the
  // losers get SQLITE_BUSY. Retry until the busy timeout; once one of them has
  // switched, the mode is stored in the file and the others find it set.
  {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    std::string mode;
    for (int attempt = 0;; ++attempt) {
      sqlite3_stmt* st = nullptr;
      rc = sqlite3_prepare_v2(raw, "PRAGMA journal_mode = WAL", -1, &st, nullptr);
      if (rc == SQLITE_OK) rc = sqlite3_step(st);
      if (rc == SQLITE_ROW) mode = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      sqlite3_finalize(st);
      if (rc == SQLITE_ROW) break;
      const int code = sqlite3_errcode(raw) & 0xff;
      if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) ||
          std::chrono::steady_clock::now() > deadline)
        explain_failure(raw, path, "set WAL mode", false);
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 + 5 * attempt, 50)));
    }
    if (sqlite3_stricmp(mode.c_str(), "wal") != 0)
      throw CatalogError("catalog " + path.string() + ": cannot use WAL mode (journal mode is " +
                         mode + ")");
  }
  exec(raw, path, "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON", "configure");
  migrate(raw, path, migrations);
  return cat;
}

int Catalog::schema_version() const { return user_version(db_, path_); }

SubmitResult Catalog::submit(const std::string& name, const std::string& manifest_path,
                             const std::string& manifest_text, const std::vector<NewJob>& jobs) {
  std::set<std::string> keys;
  for (const auto& j : jobs) {
    if (j.key.empty()) throw CatalogError("submit: a job has an empty key");
    keys.insert(j.key);
  }
  std::string joined;
  for (const auto& k : keys) joined += k + "\n";
  SubmitResult r;
  r.batch_id = sha256_hex(joined).substr(0, 12);
  r.total_jobs = (int)keys.size();

  const double t = now_s();
  Tx tx(db_, path_);
  Stmt(db_, path_,
       "INSERT OR IGNORE INTO batches (id, name, manifest_path, manifest_sha256, manifest_text, "
       "created_at) VALUES (?, ?, ?, ?, ?, ?)")
      .bind(1, r.batch_id)
      .bind(2, name)
      .bind(3, manifest_path)
      .bind(4, sha256_hex(manifest_text))
      .bind(5, manifest_text)
      .bind(6, t)
      .run();
  Stmt ins(db_, path_,
           "INSERT OR IGNORE INTO jobs (key, op, shape, dtype, params, target, arch, spec, "
           "created_at, priority, compile_est_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  Stmt sel(db_, path_, "SELECT id FROM jobs WHERE key = ?");
  Stmt link(db_, path_, "INSERT OR IGNORE INTO batch_jobs (batch_id, job_id) VALUES (?, ?)");
  std::set<std::string> seen;
  for (const auto& j : jobs) {
    if (!seen.insert(j.key).second) continue;
    ins.reset();
    ins.bind(1, j.key)
        .bind(2, j.op)
        .bind(3, canonical_json(j.shape))
        .bind(4, j.dtype)
        .bind(5, canonical_json(j.params.is_null() ? json::object() : j.params))
        .bind(6, j.target)
        .bind(7, j.arch)
        .bind(8, canonical_json(j.spec))
        .bind(9, t)
        .bind(10, j.priority)
        .bind(11, j.compile_est_s)
        .run();
    if (sqlite3_changes(db_) == 1) ++r.new_jobs;
    sel.reset();
    sel.bind(1, j.key);
    if (!sel.step()) fail(nullptr, path_, "submit: job " + j.key + " vanished");
    long long id = sel.i64(0);
    link.reset();
    link.bind(1, r.batch_id).bind(2, id).run();
  }
  tx.commit();
  return r;
}

std::optional<JobRow> Catalog::claim_job(const std::string& owner, double lease_s,
                                         const std::optional<std::string>& batch_id,
                                         const std::optional<JobShard>& shard, ClaimOrder order) {
  if (owner.empty()) throw CatalogError("claim_job: empty owner");
  if (shard && (shard->count < 1 || shard->index < 0 || shard->index >= shard->count))
    throw CatalogError("claim_job: bad shard " + std::to_string(shard->index) + "/" +
                       std::to_string(shard->count));
  const std::string host = this_host();
  Tx tx(db_, path_);
  const double t = now_s();
  std::string sql =
      "SELECT id, state, lease_owner, lease_expires FROM jobs "
      "WHERE state IN ('queued', 'running')";
  if (batch_id) sql += " AND id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)";
  if (shard) sql += " AND id % ?2 = ?3";
  // kLongestFirst: the most compiling first (jobs.compile_est_s), so the run
  // ends on GPU work rather than on compiles that leave the GPUs idle; then
  // the most expensive (jobs.priority: the roofline ms), so the cheap jobs
  // fill the last slots instead of a big one running alone. kCheapestFirst:
  // the reverse, for a run with a time limit. Both keys are set at submit.
  sql += order == ClaimOrder::kCheapestFirst ? " ORDER BY compile_est_s ASC, priority ASC, id"
                                             : " ORDER BY compile_est_s DESC, priority DESC, id";
  Stmt st(db_, path_, sql.c_str());
  if (batch_id) st.bind(1, *batch_id);
  if (shard) st.bind(2, (long long)shard->count).bind(3, (long long)shard->index);
  std::optional<long long> pick;
  std::string reclaim_note;
  while (st.step()) {
    std::string state = st.text(1);
    if (state == "queued") {
      pick = st.i64(0);
      break;
    }
    std::string prev = st.text(2);
    auto expires = st.opt_dbl(3);
    if (!expires || *expires < t) {
      pick = st.i64(0);
      reclaim_note = "reclaimed from " + prev + " (lease expired)";
      break;
    }
    if (prev != owner && owner_gone(prev, host)) {
      pick = st.i64(0);
      reclaim_note = "reclaimed from " + prev + " (process gone)";
      break;
    }
  }
  if (!pick) return std::nullopt;  // Tx rolls back: nothing written
  Stmt up(db_, path_,
          "UPDATE jobs SET state = 'running', lease_owner = ?1, lease_expires = ?2, "
          "attempts = attempts + 1, started_at = ?3, finished_at = NULL, message = ?4 "
          "WHERE id = ?5");
  up.bind(1, owner).bind(2, t + lease_s).bind(3, t).bind_text_or_null(4, reclaim_note);
  up.bind(5, *pick).run();
  auto row = job(*pick);
  tx.commit();
  return row;
}

int Catalog::renew_leases(const std::string& owner, double lease_s) {
  Tx tx(db_, path_);
  Stmt(db_, path_,
       "UPDATE jobs SET lease_expires = ?1 WHERE state = 'running' AND lease_owner = ?2")
      .bind(1, now_s() + lease_s)
      .bind(2, owner)
      .run();
  int n = sqlite3_changes(db_);
  tx.commit();
  return n;
}

namespace {

[[noreturn]] void not_held(const Catalog& cat, sqlite3* db, const fs::path& path,
                           long long job_id, const std::string& owner, const char* op) {
  auto j = cat.job(job_id);
  std::string msg = std::string(op) + ": job " + std::to_string(job_id);
  if (!j)
    msg += " does not exist";
  else if (j->state != "running")
    msg += " is " + j->state + ", not running";
  else
    msg += " is held by " + j->lease_owner + ", not " + owner;
  throw CatalogError("catalog " + path.string() + ": " + msg);
}

}  // namespace

void Catalog::finish_job(long long job_id, const std::string& owner, bool ok,
                         const std::string& message) {
  Tx tx(db_, path_);
  Stmt(db_, path_,
       "UPDATE jobs SET state = ?1, lease_owner = NULL, lease_expires = NULL, finished_at = ?2, "
       "message = ?3 WHERE id = ?4 AND state = 'running' AND lease_owner = ?5")
      .bind(1, ok ? "done" : "failed")
      .bind(2, now_s())
      .bind_text_or_null(3, message)
      .bind(4, job_id)
      .bind(5, owner)
      .run();
  if (sqlite3_changes(db_) != 1) not_held(*this, db_, path_, job_id, owner, "finish_job");
  tx.commit();
}

void Catalog::release_job(long long job_id, const std::string& owner) {
  Tx tx(db_, path_);
  Stmt(db_, path_,
       "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_expires = NULL "
       "WHERE id = ?1 AND state = 'running' AND lease_owner = ?2")
      .bind(1, job_id)
      .bind(2, owner)
      .run();
  if (sqlite3_changes(db_) != 1) not_held(*this, db_, path_, job_id, owner, "release_job");
  tx.commit();
}

int Catalog::requeue_failed(const std::optional<std::string>& batch_id) {
  Tx tx(db_, path_);
  std::string sql =
      "UPDATE jobs SET state = 'queued', finished_at = NULL WHERE state = 'failed'";
  if (batch_id) sql += " AND id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)";
  Stmt st(db_, path_, sql.c_str());
  if (batch_id) st.bind(1, *batch_id);
  st.run();
  int n = sqlite3_changes(db_);
  tx.commit();
  return n;
}

std::map<std::string, long long> Catalog::job_state_counts(const std::optional<std::string>& batch_id) const {
  std::string sql = "SELECT state, COUNT(*) FROM jobs";
  if (batch_id) sql += " WHERE id IN (SELECT job_id FROM batch_jobs WHERE batch_id = ?1)";
  sql += " GROUP BY state";
  Stmt st(db_, path_, sql.c_str());
  if (batch_id) st.bind(1, *batch_id);
  std::map<std::string, long long> out;
  while (st.step()) out[st.text(0)] = st.i64(1);
  return out;
}

std::optional<JobRow> Catalog::job(long long job_id) const {
  std::string sql = std::string("SELECT ") + kJobCols + " FROM jobs WHERE id = ?";
  Stmt st(db_, path_, sql.c_str());
  st.bind(1, job_id);
  if (!st.step()) return std::nullopt;
  return read_job(st);
}

CandidateRow Catalog::add_candidate(const CandidateRow& c) {
  return add_candidates({c}).front();
}

std::vector<CandidateRow> Catalog::candidates(long long job_id) const {
  std::string sql =
      std::string("SELECT ") + kCandCols + " FROM candidates c WHERE c.job_id = ? ORDER BY c.id";
  Stmt st(db_, path_, sql.c_str());
  st.bind(1, job_id);
  std::vector<CandidateRow> out;
  while (st.step()) out.push_back(read_candidate(st));
  return out;
}

void Catalog::record_evaluation(long long candidate_id, const EvaluationIn& e) {
  record_evaluations({{candidate_id, e}});
}

std::vector<CandidateRow> Catalog::add_candidates(const std::vector<CandidateRow>& cs) {
  std::vector<CandidateRow> out;
  out.reserve(cs.size());
  if (cs.empty()) return out;
  Tx tx(db_, path_);
  Stmt ins(db_, path_,
           "INSERT OR IGNORE INTO candidates (job_id, key, generator, template, config, source, "
           "parent_id, round, instance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  const std::string sql =
      std::string("SELECT ") + kCandCols + " FROM candidates c WHERE c.job_id = ? AND c.key = ?";
  Stmt sel(db_, path_, sql.c_str());
  const double now = now_s();
  for (const CandidateRow& c : cs) {
    const std::string key =
        c.key.empty() ? candidate_key(c.generator, c.template_name, c.config, c.source) : c.key;
    ins.reset();
    ins.bind(1, c.job_id)
        .bind(2, key)
        .bind(3, c.generator)
        .bind_text_or_null(4, c.template_name)
        .bind(5, canonical_json(c.config.is_null() ? json::object() : c.config))
        .bind(6, c.source)
        .bind(7, c.parent_id)
        .bind(8, c.round)
        .bind(9, c.instance)
        .bind(10, now)
        .run();
    sel.reset();
    sel.bind(1, c.job_id).bind(2, key);
    if (!sel.step()) fail(nullptr, path_, "add_candidates: row vanished");
    out.push_back(read_candidate(sel));
  }
  tx.commit();
  return out;
}

void Catalog::record_evaluations(const std::vector<std::pair<long long, EvaluationIn>>& batch) {
  if (batch.empty()) return;
  Tx tx(db_, path_);
  Stmt chk(db_, path_, "SELECT 1 FROM evaluations WHERE candidate_id = ?");
  Stmt ins(db_, path_,
           "INSERT INTO evaluations (candidate_id, status, message, exec_device, seeds, "
           "max_abs_err, max_rel_err, bench_device, runs, mean_ms, median_ms, p99_ms, min_ms, "
           "stddev_ms, estimate_ms, registers, sgprs, spills, shared_bytes, scratch_bytes, "
           "occupancy, compile_s, check_s, bench_s, worker, result, created_at) VALUES "
           "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  Stmt blob(db_, path_, "INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)");
  Stmt art(db_, path_,
           "INSERT INTO artifacts (candidate_id, target, arch, kind, sha256, kernel_name, metadata) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)");
  const double now = now_s();
  for (const auto& [candidate_id, e] : batch) {
    // The typed columns come from the worker's result object, read through its
    // typed form (evaluate/protocol.h; the whole answer is accepted too).
    const EvaluationResult r = read_evaluation_result(e.result);
    const Correctness c = r.correctness.value_or(Correctness{});
    const Latency l = r.latency.value_or(Latency{});
    const ArtifactInfo a = r.artifact.value_or(ArtifactInfo{});
    chk.reset();
    chk.bind(1, candidate_id);
    if (chk.step())
      throw CatalogError("catalog " + path_.string() + ": candidate " + std::to_string(candidate_id) +
                         " already has an evaluation");
    ins.reset();
    ins.bind(1, candidate_id)
        .bind(2, e.status)
        .bind_text_or_null(3, e.message.empty() ? r.message : e.message)
        .bind(4, r.exec_device)
        .bind(5, c.seeds)
        .bind(6, c.max_abs_err)
        .bind(7, c.max_rel_err)
        .bind(8, l.device)
        .bind(9, l.runs)
        .bind(10, l.mean_ms)
        .bind(11, l.median_ms)
        .bind(12, l.p99_ms)
        .bind(13, l.min_ms)
        .bind(14, l.stddev_ms)
        .bind(15, e.estimate_ms)
        .bind(16, a.registers)
        .bind(17, a.sgprs)
        .bind(18, a.spills)
        .bind(19, a.shared_bytes)
        .bind(20, a.scratch_bytes)
        .bind(21, a.occupancy)
        .bind(22, r.timings.compile_s)
        .bind(23, r.timings.check_s)
        .bind(24, r.timings.bench_s)
        .bind_text_or_null(25, e.worker)
        .bind(26, e.result.is_null() ? std::string("{}")
                                     : e.result.dump(-1, ' ', false, json::error_handler_t::replace))
        .bind(27, now);
    if (int rc = ins.rc_step(); rc != SQLITE_DONE) {
      if (rc == SQLITE_CONSTRAINT_UNIQUE)
        throw CatalogError("catalog " + path_.string() + ": candidate " + std::to_string(candidate_id) +
                           " already has an evaluation");
      fail(db_, path_, "record_evaluations for candidate " + std::to_string(candidate_id));
    }
    if (e.artifact) {
      const ArtifactIn& a = *e.artifact;
      const std::string sha = sha256_hex(a.bytes);
      blob.reset();
      blob.bind(1, sha).bind(2, (long long)a.bytes.size()).bind_blob(3, a.bytes).run();
      art.reset();
      art.bind(1, candidate_id)
          .bind(2, a.target)
          .bind(3, a.arch)
          .bind(4, a.kind)
          .bind(5, sha)
          .bind(6, a.kernel_name)
          .bind(7, canonical_json(a.metadata.is_null() ? json::object() : a.metadata))
          .run();
    }
  }
  tx.commit();
}

void Catalog::set_best(const BestRow& b) {
  Tx tx(db_, path_);
  const std::optional<long long> job = job_of_candidate(*this, b.candidate_id);
  if (!job)
    throw CatalogError("catalog " + path_.string() + ": set_best: no candidate " + std::to_string(b.candidate_id));
  if (*job != b.job_id)
    throw CatalogError("catalog " + path_.string() + ": set_best: candidate " + std::to_string(b.candidate_id) +
                       " belongs to job " + std::to_string(*job) + ", not " + std::to_string(b.job_id));
  Stmt(db_, path_,
       "INSERT OR REPLACE INTO best (job_id, candidate_id, basis, value_ms, device, selected_at, "
       "confirmed_run, confirmed_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
      .binds(1, b.job_id, b.candidate_id, b.basis, b.value_ms, NullIfEmpty{b.device}, now_s(), b.confirmed_run,
             b.confirmed_ms)
      .run();
  tx.commit();
}

std::map<std::pair<std::string, std::string>, double> Catalog::compile_seconds(int min_evaluations,
                                                                               int recent) const {
  Stmt st(db_, path_,
          "SELECT j.op, j.arch, AVG(e.compile_s), COUNT(*) FROM evaluations e "
          "JOIN candidates c ON c.id = e.candidate_id JOIN jobs j ON j.id = c.job_id "
          "WHERE e.id > (SELECT COALESCE(MAX(id), 0) FROM evaluations) - ?1 AND e.compile_s IS NOT NULL "
          "GROUP BY j.op, j.arch HAVING COUNT(*) >= ?2");
  st.bind(1, static_cast<long long>(recent)).bind(2, static_cast<long long>(min_evaluations));
  std::map<std::pair<std::string, std::string>, double> out;
  while (st.step()) out[{st.text(0), st.text(1)}] = st.dbl(2);
  return out;
}

std::optional<BestRow> Catalog::best(long long job_id) const {
  Stmt st(db_, path_,
          "SELECT job_id, candidate_id, basis, value_ms, device, confirmed_run, confirmed_ms FROM best "
          "WHERE job_id = ?");
  st.bind(1, job_id);
  if (!st.step()) return std::nullopt;
  BestRow b;
  st.into(0, b.job_id, b.candidate_id, b.basis, b.value_ms, b.device, b.confirmed_run, b.confirmed_ms);
  return b;
}

std::string encode_samples(const std::vector<double>& ms) {
  std::string out(ms.size() * 4, '\0');
  for (size_t i = 0; i < ms.size(); ++i) {
    const float f = static_cast<float>(ms[i]);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    for (int k = 0; k < 4; ++k) out[i * 4 + k] = static_cast<char>((bits >> (8 * k)) & 0xff);
  }
  return out;
}

std::vector<double> decode_samples(const std::string& bytes) {
  if (bytes.size() % 4 != 0)
    throw CatalogError("confirmation samples of " + std::to_string(bytes.size()) +
                       " bytes: not float32 values (a multiple of 4 bytes)");
  std::vector<double> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    std::uint32_t bits = 0;
    for (int k = 0; k < 4; ++k)
      bits |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i * 4 + k])) << (8 * k);
    float f = 0;
    std::memcpy(&f, &bits, 4);
    out[i] = f;
  }
  return out;
}

std::vector<EvaluatedCandidate> Catalog::evaluated_candidates(long long job_id) const {
  std::vector<EvaluatedCandidate> out;
  for (JobEvaluation& e : evaluations(*this, job_id)) {
    EvaluatedCandidate c;
    c.candidate_id = e.candidate.id;
    c.config = std::move(e.candidate.config);
    c.generated = e.candidate.source.has_value();
    c.status = std::move(e.status);
    c.bench_device = e.bench_device.value_or("");
    c.median_ms = e.median_ms;
    c.estimate_ms = e.estimate_ms;
    out.push_back(std::move(c));
  }
  return out;
}

Catalog::Settings Catalog::settings() const {
  Settings s;
  {
    Stmt st(db_, path_, "PRAGMA journal_mode");
    if (st.step()) s.journal_mode = st.text(0);
  }
  {
    Stmt st(db_, path_, "PRAGMA foreign_keys");
    if (st.step()) s.foreign_keys = st.i64(0) != 0;
  }
  {
    Stmt st(db_, path_, "PRAGMA synchronous");
    if (st.step()) s.synchronous = static_cast<int>(st.i64(0));
  }
  return s;
}

void Catalog::record_confirmations(const std::vector<ConfirmationRow>& rows) {
  Tx tx(db_, path_);
  const double now = now_s();
  for (const ConfirmationRow& r : rows) {
    if (r.candidate_id.has_value() == r.baseline.has_value())
      throw CatalogError("catalog " + path_.string() +
                         ": record_confirmations: a row names a candidate or a baseline, exactly one");
    if (r.samples_ms.empty())
      throw CatalogError("catalog " + path_.string() + ": record_confirmations: a row without samples");
    if (r.candidate_id && job_of_candidate(*this, *r.candidate_id) != r.job_id)
      throw CatalogError("catalog " + path_.string() + ": record_confirmations: candidate " +
                         std::to_string(*r.candidate_id) + " is not of job " + std::to_string(r.job_id));
    const std::string blob = encode_samples(r.samples_ms);
    Stmt(db_, path_,
         "INSERT INTO confirmations (job_id, candidate_id, baseline, run_id, basis, device, samples, n, "
         "median_ms, conditions, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .binds(1, r.job_id, r.candidate_id, r.baseline, r.run_id, r.basis, r.device, Blob{blob},
               static_cast<long long>(r.samples_ms.size()), stats::median(decode_samples(blob)),
               (r.conditions.is_null() ? json::object() : r.conditions).dump(), now)
        .run();
  }
  tx.commit();
}

std::vector<ConfirmationRow> Catalog::confirmations(long long job_id, const std::string& run_id) const {
  std::string run = run_id;
  if (run.empty()) {
    Stmt last(db_, path_,
              "SELECT run_id FROM confirmations WHERE job_id = ? ORDER BY created_at DESC, id DESC LIMIT 1");
    last.bind(1, job_id);
    if (!last.step()) return {};
    run = last.text(0);
  }
  Stmt st(db_, path_,
          "SELECT id, candidate_id, baseline, run_id, basis, device, samples, median_ms, conditions, created_at "
          "FROM confirmations WHERE job_id = ? AND run_id = ? "
          "ORDER BY candidate_id IS NULL, candidate_id, baseline");
  st.bind(1, job_id).bind(2, run);
  std::vector<ConfirmationRow> out;
  while (st.step()) {
    ConfirmationRow r;
    r.job_id = job_id;
    st.into(0, r.id, r.candidate_id, r.baseline, r.run_id, r.basis, r.device);
    r.samples_ms = decode_samples(st.blob(6));
    st.into(7, r.median_ms, r.conditions, r.created_at);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<MeasuredJob> Catalog::measured_configs(const std::string& op, const std::string& arch,
                                                   const std::string& template_name,
                                                   const std::string& device, int per_job,
                                                   int max_jobs) const {
  // One row per correct, benchmarked config; a job's rows fastest first.
  Stmt st(db_, path_,
          "SELECT j.id, j.key, j.dtype, j.shape, j.params, c.config, e.median_ms "
          "FROM jobs j JOIN candidates c ON c.job_id = j.id JOIN evaluations e ON e.candidate_id = c.id "
          "WHERE j.id IN (SELECT id FROM jobs WHERE op = ? AND arch = ? ORDER BY id DESC LIMIT ?) "
          "AND c.generator = 'template' AND c.template = ? "
          "AND e.status = 'ok' AND e.bench_device = ? AND e.median_ms > 0 "
          "ORDER BY j.id, e.median_ms, c.id");
  st.bind(1, op).bind(2, arch).bind(3, max_jobs).bind(4, template_name).bind(5, device);
  std::vector<MeasuredJob> out;
  while (st.step()) {
    const long long id = st.i64(0);
    if (out.empty() || out.back().job_id != id) {
      MeasuredJob m;
      m.job_id = id;
      m.key = st.text(1);
      m.dtype = st.text(2);
      m.shape = st.js(3);
      m.params = st.js(4);
      out.push_back(std::move(m));
    }
    MeasuredJob& m = out.back();
    if (static_cast<int>(m.best.size()) < per_job) m.best.emplace_back(st.js(5), st.dbl(6));
  }
  return out;
}

namespace {

// kiln query's deadline: SQLite calls this every 1000 virtual-machine steps;
// non-zero interrupts the statement (SQLITE_INTERRUPT).
struct Deadline {
  std::chrono::steady_clock::time_point at;
  bool hit = false;
};

int past_deadline(void* p) {
  auto* d = static_cast<Deadline*>(p);
  if (std::chrono::steady_clock::now() < d->at) return 0;
  d->hit = true;
  return 1;
}

}  // namespace

Catalog::QueryResult Catalog::query(const std::string& sql, const QueryLimits& limits) const {
  // A separate read-only connection: even a statement that slipped past the
  // checks below cannot write through it.
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> db(connect_read_only(path_), sqlite3_close_v2);
  sqlite3* raw = db.get();
  int rc = SQLITE_OK;
  sqlite3_db_config(raw, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  AuthState auth;
  sqlite3_set_authorizer(raw, query_authorizer, &auth);
  // Bounds: a deadline (an endless recursive CTE stops), SQLite's longest
  // string or blob (randomblob(1e9) fails inside SQLite), rows and bytes.
  Deadline deadline{std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(limits.timeout_s))};
  sqlite3_progress_handler(raw, 1000, past_deadline, &deadline);
  sqlite3_limit(raw, SQLITE_LIMIT_LENGTH,
                static_cast<int>(std::clamp<long long>(limits.max_bytes, 1024, 1LL << 30)));
  auto timed_out = [&] {
    std::ostringstream t;
    t << limits.timeout_s;
    return CatalogError("query: stopped after " + t.str() +
                        " s (the time limit; raise it with --timeout SECONDS)");
  };

  struct Finalize {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
  };
  std::vector<std::unique_ptr<sqlite3_stmt, Finalize>> stmts;
  // Prepare and check every statement before running any.
  const char* p = sql.c_str();
  const char* end = p + sql.size();
  while (p < end) {
    sqlite3_stmt* st = nullptr;
    const char* tail = nullptr;
    auth.denied.reset();
    rc = sqlite3_prepare_v2(raw, p, (int)(end - p), &st, &tail);
    std::string text = trim(std::string(p, tail && tail > p ? tail : end));
    if (rc != SQLITE_OK) {
      if (deadline.hit) throw timed_out();
      if (auth.denied) {
        if (auth.denied->empty())
          throw CatalogError("kiln query is read-only: `" + text + "` is not a read statement");
        throw CatalogError("kiln query is read-only: `" + text + "`: " + *auth.denied);
      }
      throw CatalogError("query: " + std::string(sqlite3_errmsg(raw)) + " in `" + text + "`");
    }
    p = tail ? tail : end;
    if (!st) continue;  // whitespace or a comment
    stmts.emplace_back(st);
    if (!sqlite3_stmt_readonly(st))
      throw CatalogError("kiln query is read-only: `" + text + "` is not a read statement");
  }
  if (stmts.empty()) throw CatalogError("query: no SQL statement given");

  QueryResult out;
  for (auto& s : stmts) {
    sqlite3_stmt* st = s.get();
    const int n = sqlite3_column_count(st);
    QueryResult cur;
    for (int c = 0; c < n; ++c) cur.columns.emplace_back(sqlite3_column_name(st, c));
    long long bytes = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      if (static_cast<long long>(cur.rows.size()) >= limits.max_rows)
        throw CatalogError("query: more than " + std::to_string(limits.max_rows) +
                           " rows (the row limit; add a LIMIT or raise it with --max-rows N)");
      for (int c = 0; c < n; ++c) bytes += sqlite3_column_bytes(st, c) + 8;
      if (bytes > limits.max_bytes)
        throw CatalogError("query: the result passed " + std::to_string(limits.max_bytes) +
                           " bytes (the size limit; select fewer or shorter columns, or raise it with --max-bytes N)");
      std::vector<json> row;
      row.reserve(n);
      for (int c = 0; c < n; ++c) {
        switch (sqlite3_column_type(st, c)) {
          case SQLITE_INTEGER: row.emplace_back((std::int64_t)sqlite3_column_int64(st, c)); break;
          case SQLITE_FLOAT: row.emplace_back(sqlite3_column_double(st, c)); break;
          case SQLITE_TEXT:
            row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, c)),
                                         sqlite3_column_bytes(st, c)));
            break;
          case SQLITE_BLOB:
            row.emplace_back("<blob " + std::to_string(sqlite3_column_bytes(st, c)) + " bytes>");
            break;
          default: row.emplace_back(nullptr);
        }
      }
      cur.rows.push_back(std::move(row));
    }
    if (rc != SQLITE_DONE) {
      if (deadline.hit) throw timed_out();
      if ((rc & 0xff) == SQLITE_TOOBIG)
        throw CatalogError("query: " + std::string(sqlite3_errmsg(raw)) + " (the size limit is " +
                           std::to_string(limits.max_bytes) + " bytes; raise it with --max-bytes N)");
      if (auth.denied)
        throw CatalogError("kiln query is read-only: " +
                           (auth.denied->empty() ? std::string("not a read statement")
                                                 : *auth.denied));
      throw CatalogError("query: " + std::string(sqlite3_errmsg(raw)));
    }
    if (n > 0) out = std::move(cur);
  }
  return out;
}

// ---- llm calls ----------------------------------------------------------------

long long Catalog::record_llm_call(const LlmCallIn& c) {
  Tx tx(db_, path_);
  Stmt st(db_, path_,
          "INSERT INTO llm_calls (candidate_id, job_id, instance, round, parent_id, model, url, "
          "temperature, seed, prompt, response, prompt_tokens, completion_tokens, latency_s, "
          "attempts, status, error, retrieval, created_at) VALUES "
          "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  st.bind(1, c.candidate_id)
      .bind(2, c.job_id)
      .bind(3, c.instance)
      .bind(4, c.round)
      .bind(5, c.parent_id)
      .bind_text_or_null(6, c.model)
      .bind_text_or_null(7, c.url)
      .bind(8, c.temperature)
      .bind(9, c.seed)
      .bind(10, c.prompt)
      .bind(11, c.response)
      .bind(12, c.prompt_tokens)
      .bind(13, c.completion_tokens)
      .bind(14, c.latency_s)
      .bind(15, c.attempts)
      .bind(16, c.status)
      .bind_text_or_null(17, c.error)
      .bind_text_or_null(18, c.retrieval.is_null() ? std::string() : canonical_json(c.retrieval))
      .bind(19, now_s())
      .run();
  const long long id = sqlite3_last_insert_rowid(db_);
  tx.commit();
  return id;
}

void Catalog::link_llm_call(long long call_id, long long candidate_id) {
  Tx tx(db_, path_);
  Stmt(db_, path_, "UPDATE llm_calls SET candidate_id = ?1 WHERE id = ?2")
      .bind(1, candidate_id)
      .bind(2, call_id)
      .run();
  tx.commit();
}

std::vector<LlmCallRow> Catalog::llm_calls(long long job_id) const {
  Stmt st(db_, path_,
          "SELECT id, candidate_id, job_id, instance, round, parent_id, model, url, temperature, "
          "seed, prompt, response, prompt_tokens, completion_tokens, latency_s, attempts, status, "
          "error, retrieval, created_at FROM llm_calls WHERE job_id = ? ORDER BY id");
  st.bind(1, job_id);
  return st.rows<LlmCallRow>([&](LlmCallRow& r) {
    st.into(0, r.id, r.candidate_id, r.job_id, r.instance, r.round, r.parent_id, r.model, r.url, r.temperature,
            r.seed, r.prompt, r.response, r.prompt_tokens, r.completion_tokens, r.latency_s, r.attempts, r.status,
            r.error, r.retrieval, r.created_at);
  });
}

}  // namespace kiln
