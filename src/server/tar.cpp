#include "server/tar.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace kiln::server {

namespace fs = std::filesystem;

namespace {

void octal(char* field, size_t width, unsigned long long v) {
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1), v);
}

void header(std::ofstream& out, const std::string& name, bool dir, unsigned long long size, bool exec) {
  char h[512];
  std::memset(h, 0, sizeof h);
  std::string n = name, prefix;
  if (n.size() > 100) {  // split at a '/' into prefix (<= 155) and name (<= 100)
    size_t cut = n.rfind('/', 155);
    while (cut != std::string::npos && n.size() - cut - 1 > 100) cut = cut ? n.rfind('/', cut - 1) : std::string::npos;
    if (cut == std::string::npos || cut == 0) throw std::runtime_error("path too long for a tar archive: " + name);
    prefix = n.substr(0, cut);
    n = n.substr(cut + 1);
  }
  std::memcpy(h, n.data(), n.size());
  octal(h + 100, 8, dir || exec ? 0755 : 0644);
  octal(h + 108, 8, 0);
  octal(h + 116, 8, 0);
  octal(h + 124, 12, size);
  octal(h + 136, 12, 0);
  std::memset(h + 148, ' ', 8);
  h[156] = dir ? '5' : '0';
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memcpy(h + 345, prefix.data(), prefix.size());
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  out.write(h, sizeof h);
}

}  // namespace

void write_tar(const fs::path& dir, const std::string& prefix, const fs::path& out_path) {
  std::vector<fs::path> entries;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it)
    entries.push_back(it->path());
  std::sort(entries.begin(), entries.end());
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + out_path.string());
  header(out, prefix + "/", true, 0, false);
  for (const auto& p : entries) {
    const std::string rel = prefix + "/" + fs::relative(p, dir).generic_string();
    const auto st = fs::symlink_status(p);
    if (fs::is_directory(st)) {
      header(out, rel + "/", true, 0, false);
    } else if (fs::is_regular_file(st)) {
      const auto size = fs::file_size(p);
      const bool exec = (st.permissions() & fs::perms::owner_exec) != fs::perms::none;
      header(out, rel, false, size, exec);
      if (size > 0) {  // inserting an empty stream buffer would set failbit
        std::ifstream in(p, std::ios::binary);
        out << in.rdbuf();
      }
      const size_t pad = (512 - size % 512) % 512;
      const char zeros[512] = {};
      out.write(zeros, static_cast<std::streamsize>(pad));
    } else {
      throw std::runtime_error("cannot archive " + p.string() + ": not a regular file or directory");
    }
  }
  const char zeros[1024] = {};
  out.write(zeros, sizeof zeros);
  out.close();
  if (!out) throw std::runtime_error("cannot write " + out_path.string());
}

}  // namespace kiln::server
