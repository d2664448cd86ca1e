// A consistent copy of a live catalog, with SQLite's online backup API: what
// kiln-mpi's checkpoints write to shared storage (mpi/checkpoint.h).
//
// The copy is written to PATH.tmp beside PATH and renamed over PATH when
// complete, so a reader of PATH (another node, a nightly report) sees either
// the previous copy or the new one, never a torn file. The copy is a
// self-contained rollback-journal database (journal_mode=DELETE): no -wal or
// -shm file has to travel with it, and `kiln query/best/package --catalog PATH`
// open it read-only where it lies.
//
// Threading: on the source Catalog's thread (it reads the source connection).
// Failure: CatalogError "copy of the catalog to PATH: WHAT: SQLite's message";
// PATH is then untouched and PATH.tmp removed.
#pragma once
#include <filesystem>
#include <string>

#include "catalog/catalog.h"

struct sqlite3;
struct sqlite3_backup;

namespace kiln {

struct BackupResult {
  double seconds = 0;
  long long pages = 0;
  long long bytes = 0;
};

// One copy in progress, in steps, so that a large catalog does not stall the
// caller's event loop. The source may keep writing between steps (SQLite then
// updates the copy: it stays one consistent snapshot as of commit()). The
// source Catalog must outlive this object. Destroying an unfinished copy
// removes PATH.tmp; PATH is untouched.
class CatalogBackup {
 public:
  CatalogBackup(const Catalog& source, std::filesystem::path path);
  ~CatalogBackup();
  CatalogBackup(const CatalogBackup&) = delete;
  CatalogBackup& operator=(const CatalogBackup&) = delete;

  // Copies up to `pages` pages (-1: all); true when every page is copied.
  bool step(int pages);
  // After step() returned true: finishes PATH.tmp and renames it over PATH.
  BackupResult commit();
  const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& what);
  void abandon();
  std::filesystem::path path_, tmp_;
  sqlite3* dest_ = nullptr;
  sqlite3_backup* backup_ = nullptr;
  long long pages_ = 0;
  double t0_ = 0;
  bool done_ = false;
};

// The whole copy at once.
BackupResult backup_catalog(const Catalog& source, const std::filesystem::path& path);

}  // namespace kiln
