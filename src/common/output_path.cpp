#include "common/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace kiln {

namespace fs = std::filesystem;

namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

bool is_sqlite(const fs::path& p) {
  static const char kMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};
  std::ifstream f(p, std::ios::binary);
  char head[16];
  if (!f.read(head, sizeof head)) return false;
  return std::memcmp(head, kMagic, sizeof head) == 0;
}

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p, ec).lexically_normal() : r;
}

}  // namespace

std::vector<fs::path> catalog_files(const fs::path& db) {
  std::vector<fs::path> out;
  for (const fs::path& base : {db, resolved(db)})
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) out.push_back(base.string() + suffix);
  return out;
}

void check_output_file(const fs::path& path, const std::string& flag, const std::vector<fs::path>& protected_files) {
  const std::string shown = flag + " " + path.string();
  if (path.empty()) throw std::invalid_argument(flag + " is empty");
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const fs::path target = resolved(path);
  for (const fs::path& p : protected_files) {
    struct stat ps {};
    const bool same_file = exists && ::stat(p.c_str(), &ps) == 0 && ps.st_dev == st.st_dev && ps.st_ino == st.st_ino;
    if (same_file || resolved(p) == target)
      throw std::invalid_argument(shown + " is the catalog's file " + p.string() +
                                  ": refusing to overwrite it (name another output file)");
  }
  if (!exists) return;
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument(shown + " exists and is " + kind_of(st.st_mode) +
                                ": refusing to write there (name a regular file)");
  if (is_sqlite(path))
    throw std::invalid_argument(shown + " is an SQLite database (a catalog?): refusing to overwrite it "
                                "(name another output file, or remove it first)");
}

void write_output_file(const fs::path& path, const std::string& text, const std::string& flag,
                       const std::vector<fs::path>& protected_files) {
  try {
    check_output_file(path, flag, protected_files);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  const fs::path tmp = path.string() + "." + std::to_string(getpid()) + ".tmp";
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

void check_catalog_file(const fs::path& db) {
  struct stat st {};
  if (::stat(db.c_str(), &st) != 0) return;  // a new catalog
  if (!S_ISREG(st.st_mode))
    throw std::invalid_argument("catalog " + db.string() + " is " + kind_of(st.st_mode) +
                                ", not a catalog file (--catalog PATH names an SQLite file)");
}

}  // namespace kiln
