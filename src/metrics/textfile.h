// Metrics as a file for node-exporter's textfile collector (its
// --collector.textfile.directory reads every *.prom there).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::metrics {

// Writes `text` to `path` atomically (common/output_path.h's
// write_output_file; the temporary PATH.<pid>.tmp is one the collector
// ignores): a reader sees the old file or the new one, never half. Throws
// std::runtime_error naming the path when it cannot, or when `path` has
// meanwhile become a file check_output_file refuses.
void write_textfile(const std::filesystem::path& path, const std::string& text,
                    const std::vector<std::filesystem::path>& protected_files = {});

// Checks, before a run starts, that `path` can be written there: its
// directory exists and a file can be created in it, and check_output_file
// accepts it (not one of `protected_files`, e.g. the catalog's files; not a
// device node, FIFO or database). Throws std::invalid_argument naming the
// path and the fix.
void check_textfile_path(const std::filesystem::path& path,
                         const std::vector<std::filesystem::path>& protected_files = {});

}  // namespace kiln::metrics
