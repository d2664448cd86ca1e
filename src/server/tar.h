// A POSIX ustar archive of a directory tree (regular files and directories,
// sorted, mode 0644/0755, mtime 0, owner 0): what /api/packages/{target}
// serves. Same tree, same bytes.
#pragma once
#include <filesystem>

namespace kiln::server {

// Writes the archive of `dir`'s contents (paths relative to dir, under
// `prefix/`) to `out`. Throws std::runtime_error for a path longer than ustar
// allows (100 bytes of name + 155 of prefix), a symlink or special file, or
// an I/O error.
void write_tar(const std::filesystem::path& dir, const std::string& prefix, const std::filesystem::path& out);

}  // namespace kiln::server
