// One policy for every file a Kiln command writes at a path the user names
// (kiln report --out, kiln nightly --report, --metrics-file): the catalog, a
// device node or somebody's database is never the victim. See
// docs/robustness.md, "Output files".
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace kiln {

// The files of the SQLite database at `db`: db and its -wal, -shm and
// -journal sidecars, both as given and with symbolic links resolved (SQLite
// names its sidecars after the resolved path).
std::vector<std::filesystem::path> catalog_files(const std::filesystem::path& db);

// Checks that `path` may be (re)written by a command. `flag` names the option
// in the message (e.g. "--out"). Throws std::invalid_argument naming the path
// and the reason when
//   - it is, or resolves to (symbolic links followed; a hard link: same
//     device and inode), one of `protected_files` (e.g. catalog_files(db));
//   - it exists and is not a regular file (device node, FIFO, socket,
//     directory): a rename over it would delete it;
//   - it exists and is an SQLite database ("SQLite format 3\0"): somebody's
//     catalog.
// An existing regular file of any other content may be overwritten (a re-run
// replaces its report, as a compiler's -o does). Reads only; thread-safe.
void check_output_file(const std::filesystem::path& path, const std::string& flag,
                       const std::vector<std::filesystem::path>& protected_files = {});

// Writes `text` to `path` atomically: a temporary file beside it
// (PATH.<pid>.tmp), flushed and fsync'd, then renamed over `path`: a reader
// sees the old file or the new one, never half. Just before, checks `path`
// with check_output_file(path, flag, protected_files) (it may have changed
// since the command started). Throws std::runtime_error naming the path when
// it cannot or may not (the temporary file is removed).
void write_output_file(const std::filesystem::path& path, const std::string& text, const std::string& flag,
                       const std::vector<std::filesystem::path>& protected_files = {});

// Checks a catalog path before SQLite opens it: where it exists it must be a
// regular file (not /dev/null, a FIFO, a directory), else SQLite would write
// its -journal beside it. Throws std::invalid_argument naming the path.
void check_catalog_file(const std::filesystem::path& db);

}  // namespace kiln
