// Copies the live catalog to shared storage with SQLite's online backup API.
//
// The copy is written to PATH.tmp beside PATH and renamed over PATH when
// complete, so a reader of PATH (another node, a nightly report) sees either
// the previous checkpoint or the new one, never a torn file. The copy is a
// self-contained rollback-journal database (journal_mode=DELETE): no -wal or
// -shm file has to travel with it, and `kiln query/best/package --catalog PATH`
// open it read-only where it lies.
#pragma once
#include <filesystem>
#include <string>

struct sqlite3;
struct sqlite3_backup;

namespace kiln::mpi {

struct CheckpointResult {
  double seconds = 0;
  long long pages = 0;
  long long bytes = 0;
};

// One copy in progress, in steps, so that a large catalog does not stall the
// caller's event loop. The source connection may keep writing between steps
// (SQLite then updates the copy: it stays one consistent snapshot as of
// commit()). Destroying an unfinished copy removes PATH.tmp; PATH is untouched.
class CatalogCopy {
 public:
  CatalogCopy(sqlite3* source, std::filesystem::path path);  // throws std::runtime_error
  ~CatalogCopy();
  CatalogCopy(const CatalogCopy&) = delete;
  CatalogCopy& operator=(const CatalogCopy&) = delete;

  // Copies up to `pages` pages (-1: all); true when every page is copied.
  bool step(int pages);
  // After step() returned true: finishes PATH.tmp and renames it over PATH.
  CheckpointResult commit();
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

// The whole copy at once. Throws std::runtime_error (naming the path and
// SQLite's message) on failure; PATH is then untouched and PATH.tmp removed.
CheckpointResult checkpoint_catalog(sqlite3* source, const std::filesystem::path& path);

}  // namespace kiln::mpi
