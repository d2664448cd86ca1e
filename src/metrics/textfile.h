// Metrics as a file for node-exporter's textfile collector (its
// --collector.textfile.directory reads every *.prom there).
#pragma once
#include <filesystem>
#include <string>

namespace kiln::metrics {

// Writes `text` to `path` atomically: a temporary file beside it
// (PATH.<pid>.tmp, which the collector ignores), flushed and fsync'd, then
// renamed over `path`: a reader sees the old file or the new one, never half.
// Throws std::runtime_error naming the path when it cannot (the temporary
// file is removed).
void write_textfile(const std::filesystem::path& path, const std::string& text);

// Checks, before a run starts, that `path` can be written there: its
// directory exists and a file can be created in it. Throws
// std::invalid_argument naming the path and the fix.
void check_textfile_path(const std::filesystem::path& path);

}  // namespace kiln::metrics
