#include "checkpoint.h"

#include <sqlite3.h>

#include <chrono>
#include <stdexcept>
#include <system_error>

namespace kiln::mpi {

namespace fs = std::filesystem;

CheckpointResult checkpoint_catalog(sqlite3* source, const fs::path& path) {
  const auto t0 = std::chrono::steady_clock::now();
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp";
  std::error_code ec;
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(tmp.string() + suffix, ec);

  sqlite3* dest = nullptr;
  auto fail = [&](const std::string& what) {
    std::string msg = "checkpoint to " + path.string() + ": " + what;
    if (dest) {
      msg += ": " + std::string(sqlite3_errmsg(dest));
      sqlite3_close_v2(dest);
      dest = nullptr;
    }
    for (const char* suffix : {"", "-journal", "-wal", "-shm"}) fs::remove(tmp.string() + suffix, ec);
    throw std::runtime_error(msg);
  };
  if (sqlite3_open_v2(tmp.c_str(), &dest, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
    fail("cannot create " + tmp.string());
  sqlite3_busy_timeout(dest, 10000);

  CheckpointResult r;
  sqlite3_backup* b = sqlite3_backup_init(dest, "main", source, "main");
  if (!b) fail("sqlite3_backup_init");
  int rc;
  // All pages in one step: the source connection is this thread's, so the
  // copy is one consistent snapshot (nothing can write between steps).
  for (int tries = 0;; ++tries) {
    rc = sqlite3_backup_step(b, -1);
    if (rc == SQLITE_OK) continue;
    if ((rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && tries < 1000) {
      sqlite3_sleep(10);
      continue;
    }
    break;
  }
  r.pages = sqlite3_backup_pagecount(b);
  sqlite3_backup_finish(b);
  if (rc != SQLITE_DONE) fail("sqlite3_backup_step failed (" + std::string(sqlite3_errstr(rc)) + ")");
  // A self-contained file: no -wal beside it on shared storage.
  char* err = nullptr;
  if (sqlite3_exec(dest, "PRAGMA journal_mode=DELETE", nullptr, nullptr, &err) != SQLITE_OK) {
    std::string e = err ? err : "";
    sqlite3_free(err);
    fail("journal_mode=DELETE (" + e + ")");
  }
  if (sqlite3_close_v2(dest) != SQLITE_OK) fail("close");
  dest = nullptr;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("checkpoint to " + path.string() + ": rename from " + tmp.string() + " failed: " +
                             ec.message());
  }
  r.bytes = static_cast<long long>(fs::file_size(path, ec));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kiln::mpi
