#include "evaluate/artifact_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/hash.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

std::string short_path(const std::string& p) { return p.size() > 200 ? p.substr(0, 197) + "..." : p; }

// `p` lies strictly inside `dir` (both canonical).
bool inside(const fs::path& dir, const fs::path& p) {
  const fs::path rel = p.lexically_relative(dir);
  if (rel.empty() || rel == ".") return false;
  return *rel.begin() != "..";
}

}  // namespace

void check_artifact_bytes(const std::string& bytes, const ArtifactClaim& claim, size_t max_bytes) {
  if (bytes.size() > max_bytes)
    throw ArtifactRejected("the code object is " + std::to_string(bytes.size()) + " bytes, over the bound of " +
                           std::to_string(max_bytes));
  const std::string got = sha256_hex(bytes);
  if (got != claim.sha256)
    throw ArtifactRejected("the code object's sha256 is " + got.substr(0, 16) + "..., the worker claimed " +
                           claim.sha256.substr(0, 16) + "...");
}

std::string take_artifact(const fs::path& artifact_dir, const ArtifactClaim& claim, size_t max_bytes) {
  const std::string named = short_path(claim.path);
  if (artifact_dir.empty()) throw ArtifactRejected("no artifact directory was given for " + named);
  std::error_code ec;
  const fs::path dir = fs::canonical(artifact_dir, ec);
  if (ec) throw ArtifactRejected("the artifact directory " + artifact_dir.string() + ": " + ec.message());
  const fs::path given(claim.path);
  if (!given.is_absolute()) throw ArtifactRejected("the code object path " + named + " is not absolute");
  const fs::file_status ls = fs::symlink_status(given, ec);
  if (ec || !fs::exists(ls)) throw ArtifactRejected("no code object at " + named);
  if (fs::is_symlink(ls)) throw ArtifactRejected("the code object path " + named + " is a symbolic link");
  const fs::path real = fs::canonical(given, ec);
  if (ec) throw ArtifactRejected("the code object path " + named + ": " + ec.message());
  if (!inside(dir, real))
    throw ArtifactRejected("the code object path " + named + " lies outside the evaluation's artifact directory " +
                           dir.string() + " (left untouched)");
  const int fd = ::open(real.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ArtifactRejected("cannot open the code object " + named + ": " + std::strerror(errno));
  struct stat st {};
  std::string bytes;
  std::string why;
  if (::fstat(fd, &st) != 0) why = std::string("cannot stat: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "not a regular file";
  else if (static_cast<unsigned long long>(st.st_size) > max_bytes)
    why = std::to_string(st.st_size) + " bytes, over the bound of " + std::to_string(max_bytes);
  else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        why = n < 0 ? std::string("read: ") + std::strerror(errno) : "the file shrank while read";
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!why.empty()) throw ArtifactRejected("the code object " + named + ": " + why);
  check_artifact_bytes(bytes, claim, max_bytes);
  fs::remove(real, ec);  // inside the run's directory: ours to delete
  return bytes;
}

}  // namespace kiln
