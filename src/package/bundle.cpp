#include "package/bundle.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace kiln {

namespace fs = std::filesystem;

namespace {

// Runs argv (no shell), stdout and stderr together; returns (exit code, output).
std::pair<int, std::string> run_capture(const std::vector<std::string>& argv) {
  int p[2];
  if (::pipe(p) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    ::close(p[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

fs::path in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

}  // namespace

std::string bundle_entry_id(const std::string& target_id) {
  const std::string prefix = "amdgcn-amd-amdhsa--gfx";
  if (target_id.rfind(prefix, 0) != 0 || target_id.size() == prefix.size())
    throw std::invalid_argument("not an AMDGPU target ID: '" + target_id + "'");
  for (char c : target_id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == ':' || c == '+'))
      throw std::invalid_argument("not an AMDGPU target ID: '" + target_id + "'");
  return "hipv4-" + target_id;
}

fs::path find_offload_bundler() {
  if (const char* env = std::getenv("KILN_OFFLOAD_BUNDLER"); env && *env) {
    const fs::path p = std::string(env).find('/') == std::string::npos ? in_path(env) : fs::path(env);
    if (p.empty() || ::access(p.c_str(), X_OK) != 0)
      throw std::runtime_error(std::string("KILN_OFFLOAD_BUNDLER=") + env + " is not an executable");
    return p;
  }
  for (const char* name : {"clang-offload-bundler-15", "clang-offload-bundler"})
    if (fs::path p = in_path(name); !p.empty()) return p;
  throw std::runtime_error(
      "--bundle needs clang-offload-bundler-15, which is not installed: apt-get install clang-tools-15 "
      "(or set KILN_OFFLOAD_BUNDLER to a clang-offload-bundler)");
}

void write_offload_bundle(const fs::path& tool, const std::vector<std::pair<std::string, fs::path>>& entries,
                          const fs::path& output) {
  if (entries.empty()) throw std::invalid_argument("an offload bundle needs at least one entry");
  std::string targets = kBundleHostEntry;
  std::vector<std::string> argv = {tool.string(), "--type=o"};
  for (const auto& [id, file] : entries) targets += (targets.empty() ? "" : ",") + id;
  argv.push_back("--targets=" + targets);
  argv.push_back("--input=/dev/null");
  for (const auto& [id, file] : entries) argv.push_back("--input=" + file.string());
  argv.push_back("--output=" + output.string());
  const auto [rc, out] = run_capture(argv);
  if (rc != 0)
    throw std::runtime_error(tool.filename().string() + " failed (exit " + std::to_string(rc) + ") writing " +
                             output.string() + ": " + out);
}

std::vector<std::string> list_offload_bundle(const fs::path& tool, const fs::path& bundle) {
  const auto [rc, out] = run_capture({tool.string(), "--list", "--type=o", "--input=" + bundle.string()});
  if (rc != 0)
    throw std::runtime_error(tool.filename().string() + " --list failed (exit " + std::to_string(rc) + ") on " +
                             bundle.string() + ": " + out);
  std::vector<std::string> ids;
  std::stringstream ss(out);
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty()) ids.push_back(line);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace kiln
