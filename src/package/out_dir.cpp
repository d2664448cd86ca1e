#include "package/out_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace kiln {

namespace fs = std::filesystem;

namespace {

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(p, ec);
  return ec ? p.lexically_normal() : r;
}

// a == b or a is an ancestor of b (both absolute and normal).
bool same_or_ancestor(const fs::path& a, const fs::path& b) {
  auto ai = a.begin(), bi = b.begin();
  for (; ai != a.end(); ++ai, ++bi) {
    if (ai->empty()) continue;  // a trailing separator
    if (bi == b.end() || *ai != *bi) return false;
  }
  return true;
}

}  // namespace

fs::path normalise_out(const fs::path& out) {
  if (out.empty()) throw std::invalid_argument("--out is empty");
  fs::path p = fs::absolute(out).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return fs::path(s);
}

void check_out_allowed(const fs::path& out_given, const std::vector<fs::path>& protected_dirs) {
  const fs::path out = resolved(normalise_out(out_given));
  const std::string shown = out_given.string();
  if (out == out.root_path())
    throw std::invalid_argument("--out " + shown + " is the filesystem root: refusing to write a package there");
  struct Guard {
    fs::path dir;
    std::string what;
  };
  std::vector<Guard> guards;
  std::error_code ec;
  guards.push_back({resolved(fs::current_path(ec)), "the working directory"});
  if (const char* home = std::getenv("HOME"); home && *home) guards.push_back({resolved(home), "the home directory"});
  for (const auto& d : protected_dirs) guards.push_back({resolved(fs::absolute(d)), "the catalog's directory"});
  for (const auto& g : guards) {
    if (g.dir.empty()) continue;
    if (same_or_ancestor(out, g.dir))
      throw std::invalid_argument("--out " + shown + " is " + (out == g.dir ? "" : "an ancestor of ") + g.what +
                                  " (" + g.dir.string() + "): refusing to replace it; name a new directory");
  }
  if (fs::exists(fs::symlink_status(out, ec)) && !fs::is_directory(out, ec))
    throw std::invalid_argument("--out " + shown + " exists and is not a directory: refusing to replace it");
}

std::string why_not_kiln_package(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return dir.string() + " is not a directory";
  auto slurp = [](const fs::path& p, std::string& out) {
    std::ifstream f(p, std::ios::binary);
    if (!f) return false;
    std::stringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
  };
  std::string text;
  if (!fs::is_regular_file(fs::symlink_status(dir / "manifest.json", ec)) || !slurp(dir / "manifest.json", text))
    return "no manifest.json";
  try {
    const auto j = nlohmann::json::parse(text);
    if (!(j.is_object() && j.contains("format") && j["format"].is_string() &&
          j["format"].get<std::string>().rfind("kiln-package/", 0) == 0))
      return "manifest.json is not of format kiln-package/*";
  } catch (const std::exception&) {
    return "manifest.json is not JSON";
  }
  if (!fs::is_regular_file(fs::symlink_status(dir / "SHA256SUMS", ec)) || !slurp(dir / "SHA256SUMS", text))
    return "no SHA256SUMS";
  std::set<std::string> listed;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.size() < 67 || line.compare(64, 2, "  ") != 0) return "SHA256SUMS is not '<sha256>  <path>' lines";
    listed.insert(line.substr(66));
  }
  std::set<std::string> foreign;  // sorted: the message names the first
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return "cannot list " + dir.string() + ": " + ec.message();
  for (; it != end; it.increment(ec)) {
    if (ec) return "cannot list " + dir.string() + ": " + ec.message();
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    const fs::file_status st = it->symlink_status(ec);
    if (fs::is_directory(st)) {
      if (it.depth() != 0 || (rel != "objects" && rel != "verify")) {
        foreign.insert(rel + "/ (a directory a package does not have)");
        it.disable_recursion_pending();
      }
      continue;
    }
    if (it.depth() == 0 && (rel == "SHA256SUMS" || rel == "SHA256SUMS.sig")) continue;
    if (fs::is_symlink(st)) foreign.insert(rel + " (a symbolic link)");
    else if (!fs::is_regular_file(st)) foreign.insert(rel + " (not a regular file)");
    else if (!listed.count(rel)) foreign.insert(rel + " (not listed in SHA256SUMS)");
  }
  if (!foreign.empty())
    return "foreign file " + *foreign.begin() +
           (foreign.size() > 1 ? ", and " + std::to_string(foreign.size() - 1) + " more" : std::string());
  return "";
}

bool is_kiln_package(const fs::path& dir) { return why_not_kiln_package(dir).empty(); }

fs::path make_temp_sibling(const fs::path& out_given) {
  const fs::path out = normalise_out(out_given);
  const fs::path parent = out.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  std::string tmpl = (parent / ("." + safe_component(out.filename().string()) + ".kiln-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error("cannot create a temporary directory in " + parent.string() + ": " +
                             std::strerror(errno));
  return fs::path(tmpl);
}

void install_dir(const fs::path& tmp, const fs::path& out_given, bool force) {
  const fs::path out = normalise_out(out_given);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out, ec))) {
    fs::rename(tmp, out);
    return;
  }
  if (fs::is_symlink(fs::symlink_status(out, ec)))
    throw std::invalid_argument("--out " + out.string() + " is a symbolic link: refusing to replace it");
  if (!fs::is_directory(out, ec))
    throw std::invalid_argument("--out " + out.string() + " exists and is not a directory: refusing to replace it");
  if (fs::is_empty(out, ec)) {
    fs::rename(tmp, out);  // rename(2) replaces an empty directory
    return;
  }
  if (const std::string why = why_not_kiln_package(out); !why.empty())
    throw std::invalid_argument("--out " + out.string() + " exists, is not empty and is not a Kiln package (" + why +
                                "): refusing to replace it; name a new directory");
  if (!force)
    throw std::invalid_argument("--out " + out.string() + " holds a Kiln package (use --force to replace it)");
  const fs::path old = make_temp_sibling(out);  // an empty fresh dir: rename(2) replaces it
  fs::rename(out, old);
  try {
    fs::rename(tmp, out);
  } catch (...) {
    fs::rename(old, out, ec);
    throw;
  }
  fs::remove_all(old, ec);
}

std::string safe_component(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (s.size() >= 80) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '+' || c == '.';
    s += !ok || (c == '.' && !s.empty() && s.back() == '.') ? '_' : c;  // no ".." either
  }
  while (!s.empty() && s.front() == '.') s.front() = '_';
  return s.empty() ? "_" : s;
}

fs::path path_inside(const fs::path& root, const std::string& rel) {
  const fs::path r(rel);
  if (rel.empty() || r.is_absolute()) throw std::invalid_argument("unsafe path '" + rel + "': not relative");
  for (const auto& c : r) {
    const std::string s = c.string();
    if (s.empty() || s == "." || s == "..")
      throw std::invalid_argument("unsafe path '" + rel + "': '" + s + "' component");
  }
  const fs::path full = (root / r).lexically_normal();
  if (!same_or_ancestor(root.lexically_normal(), full))
    throw std::invalid_argument("unsafe path '" + rel + "' leaves " + root.string());
  return full;
}

}  // namespace kiln
