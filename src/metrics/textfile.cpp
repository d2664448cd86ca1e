#include "metrics/textfile.h"

#include <unistd.h>

#include <stdexcept>

#include "common/output_path.h"

namespace kiln::metrics {

void write_textfile(const std::filesystem::path& path, const std::string& text,
                    const std::vector<std::filesystem::path>& protected_files) {
  write_output_file(path, text, "--metrics-file", protected_files);
}

void check_textfile_path(const std::filesystem::path& path,
                         const std::vector<std::filesystem::path>& protected_files) {
  check_output_file(path, "--metrics-file", protected_files);
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::invalid_argument("--metrics-file " + path.string() + ": directory " + dir.string() +
                                " does not exist (create it, or point at node-exporter's textfile directory)");
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument("--metrics-file " + path.string() + " is a directory; give a file name (e.g. kiln.prom)");
  if (::access(dir.c_str(), W_OK) != 0)
    throw std::invalid_argument("--metrics-file " + path.string() + ": directory " + dir.string() +
                                " is not writable");
}

}  // namespace kiln::metrics
