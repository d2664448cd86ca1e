#include "catalog/backup.h"

#include <sqlite3.h>

#include <chrono>
#include <system_error>

#include "catalog/sql.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {
double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

CatalogBackup::CatalogBackup(const Catalog& source, fs::path path)
    : path_(std::move(path)), tmp_(path_.string() + ".tmp"), t0_(steady_s()) {
  std::error_code ec;
  if (path_.has_parent_path()) fs::create_directories(path_.parent_path(), ec);
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(tmp_.string() + suffix, ec);
  if (sqlite3_open_v2(tmp_.c_str(), &dest_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
    fail("cannot create " + tmp_.string());
  sqlite3_busy_timeout(dest_, 10000);
  backup_ = sqlite3_backup_init(dest_, "main", sql::Access::db(source), "main");
  if (!backup_) fail("sqlite3_backup_init");
}

CatalogBackup::~CatalogBackup() { abandon(); }

void CatalogBackup::abandon() {
  if (backup_) sqlite3_backup_finish(backup_);
  backup_ = nullptr;
  if (dest_) sqlite3_close_v2(dest_);
  dest_ = nullptr;
  if (!done_) {
    std::error_code ec;
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(tmp_.string() + suffix, ec);
  }
}

void CatalogBackup::fail(const std::string& what) {
  std::string msg = "copy of the catalog to " + path_.string() + ": " + what;
  if (dest_) msg += ": " + std::string(sqlite3_errmsg(dest_));
  abandon();
  throw CatalogError(msg);
}

bool CatalogBackup::step(int pages) {
  if (!backup_) return true;
  for (int tries = 0;; ++tries) {
    const int rc = sqlite3_backup_step(backup_, pages);
    if (rc == SQLITE_DONE) {
      pages_ = sqlite3_backup_pagecount(backup_);
      return true;
    }
    if (rc == SQLITE_OK) {
      if (pages >= 0) return false;
      continue;
    }
    if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 1000) {
      sqlite3_sleep(10);
      continue;
    }
    fail("sqlite3_backup_step failed (" + std::string(sqlite3_errstr(rc)) + ")");
  }
}

BackupResult CatalogBackup::commit() {
  if (!step(-1)) fail("incomplete copy");
  const int rc = sqlite3_backup_finish(backup_);
  backup_ = nullptr;
  if (rc != SQLITE_OK) fail("sqlite3_backup_finish failed (" + std::string(sqlite3_errstr(rc)) + ")");
  // A self-contained file: no -wal beside it on shared storage.
  char* err = nullptr;
  if (sqlite3_exec(dest_, "PRAGMA journal_mode=DELETE", nullptr, nullptr, &err) != SQLITE_OK) {
    std::string e = err ? err : "";
    sqlite3_free(err);
    fail("journal_mode=DELETE (" + e + ")");
  }
  if (sqlite3_close_v2(dest_) != SQLITE_OK) fail("close");
  dest_ = nullptr;
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) {
    fs::remove(tmp_, ec);
    throw CatalogError("copy of the catalog to " + path_.string() + ": rename from " + tmp_.string() +
                       " failed: " + ec.message());
  }
  done_ = true;
  BackupResult r;
  r.pages = pages_;
  r.bytes = static_cast<long long>(fs::file_size(path_, ec));
  r.seconds = steady_s() - t0_;
  return r;
}

BackupResult backup_catalog(const Catalog& source, const fs::path& path) {
  CatalogBackup copy(source, path);
  copy.step(-1);
  return copy.commit();
}

}  // namespace kiln
