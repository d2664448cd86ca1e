// Shared by the runtime tests: the fixture packages (tests/data/runtime/
// make_suite.py, run by ctest as the runtime_packages fixture, or here when
// the binary runs alone), copies to tamper with, and running commands.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <sys/wait.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace rt_test {

namespace fs = std::filesystem;

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CmdResult {
  int rc;
  std::string out;
};

inline CmdResult run(const std::string& cmd) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

inline fs::path pkgs() {
  fs::path d = KILN_RT_PKGS;
  if (!fs::exists(d / "full" / "manifest.json")) {
    CmdResult r = run("TRITON_INTERPRET=0 " + shell_quote(KILN_PYTHON) + " " +
                shell_quote(std::string(KILN_SOURCE_DIR) + "/tests/data/runtime/make_suite.py") + " " +
                shell_quote(d.string()));
    if (r.rc != 0) ADD_FAILURE() << "make_suite.py failed: " << r.out;
  }
  return d;
}

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

// A fresh copy of a fixture package to modify.
inline fs::path copy_pkg(const std::string& name, const std::string& tag) {
  fs::path dst = fs::path(KILN_BINARY_DIR) / "tests" / "runtime_tmp" /
                 (name + "-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::create_directories(dst.parent_path());
  fs::copy(pkgs() / name, dst, fs::copy_options::recursive);
  return dst;
}

inline CmdResult make_package(const std::string& args) {
  return run("TRITON_INTERPRET=0 " + shell_quote(KILN_PYTHON) + " " +
             shell_quote(std::string(KILN_SOURCE_DIR) + "/tests/data/runtime/make_package.py") + " " + args);
}

inline nlohmann::json facts(const std::string& name) {
  return nlohmann::json::parse(slurp(pkgs() / (name + ".facts.json")));
}

}  // namespace rt_test
