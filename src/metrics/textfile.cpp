#include "metrics/textfile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/output_path.h"

namespace kiln::metrics {

namespace {
std::filesystem::path temp_of(const std::filesystem::path& path) {
  return path.string() + "." + std::to_string(getpid()) + ".tmp";
}
}  // namespace

void write_textfile(const std::filesystem::path& path, const std::string& text,
                    const std::vector<std::filesystem::path>& protected_files) {
  try {
    check_output_file(path, "--metrics-file", protected_files);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  const auto tmp = temp_of(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  size_t off = 0;
  int err = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    off += static_cast<size_t>(n);
  }
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(err));
  }
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
