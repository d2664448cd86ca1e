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

namespace kiln::mpi {

struct CheckpointResult {
  double seconds = 0;
  long long pages = 0;
  long long bytes = 0;
};

// Throws std::runtime_error (naming the path and SQLite's message) on failure;
// PATH is then untouched and PATH.tmp removed.
CheckpointResult checkpoint_catalog(sqlite3* source, const std::filesystem::path& path);

}  // namespace kiln::mpi
