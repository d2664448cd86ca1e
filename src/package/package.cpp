#include "package/package.h"

#include <sqlite3.h>

#include <ctime>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/hash.h"

namespace kiln {

namespace {

using nlohmann::json;

std::string col_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

std::string shape_tag(const json& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : "x") + std::to_string(d.get<long long>());
  return s;
}

}  // namespace

PackageResult package_target(const Catalog& catalog, const Target& target,
                             const std::filesystem::path& out, bool force) {
  const char* sql =
      "SELECT j.key, j.op, j.shape, j.dtype, j.params, b.basis, b.value_ms, b.device, "
      "       a.kind, a.sha256, a.kernel_name, a.metadata, bl.data, c.config, c.id "
      "FROM best b JOIN jobs j ON j.id = b.job_id "
      "JOIN candidates c ON c.id = b.candidate_id "
      "JOIN artifacts a ON a.candidate_id = b.candidate_id AND a.target = j.target "
      "JOIN blobs bl ON bl.sha256 = a.sha256 "
      "WHERE j.target = ? AND j.state = 'done' ORDER BY j.op, j.id";
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(catalog.handle(), sql, -1, &st, nullptr) != SQLITE_OK)
    throw std::runtime_error(std::string("package: ") + sqlite3_errmsg(catalog.handle()));
  sqlite3_bind_text(st, 1, target.name.c_str(), -1, SQLITE_TRANSIENT);

  if (std::filesystem::exists(out)) {
    if (!force && !std::filesystem::is_empty(out))
      throw std::runtime_error(out.string() + " exists and is not empty (use --force to replace it)");
  }
  std::filesystem::path tmp = out;
  tmp += ".tmp-kiln";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);

  PackageResult r;
  r.dir = out;
  json kernels = json::array();
  std::string sums;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const std::string key = col_text(st, 0), op = col_text(st, 1);
    const json shape = json::parse(col_text(st, 2));
    const std::string dtype = col_text(st, 3);
    const json meta = json::parse(col_text(st, 11));
    const std::string kind = col_text(st, 8), sha = col_text(st, 9), name = col_text(st, 10);
    const void* blob = sqlite3_column_blob(st, 12);
    const std::string bytes(static_cast<const char*>(blob), sqlite3_column_bytes(st, 12));
    if (sha256_hex(bytes) != sha)
      throw std::runtime_error("catalog blob " + sha + " does not match its checksum");
    const std::string file = op + "-" + shape_tag(shape) + "-" + dtype + "-" + sha.substr(0, 12) + "." + kind;
    write_file(tmp / file, bytes);
    sums += sha + "  " + file + "\n";
    json k = {{"file", file},
              {"sha256", sha},
              {"size", bytes.size()},
              {"kernel_name", name},
              {"operator", op},
              {"shape", shape},
              {"dtype", dtype},
              {"params", json::parse(col_text(st, 4))},
              {"config", json::parse(col_text(st, 13))},
              {"job_key", key},
              {"candidate_id", sqlite3_column_int64(st, 14)},
              {"basis", col_text(st, 5)},
              {"value_ms", sqlite3_column_double(st, 6)}};
    if (sqlite3_column_type(st, 7) != SQLITE_NULL) k["device"] = col_text(st, 7);
    for (const char* f : {"num_warps", "num_stages", "warp_size", "shared_bytes", "grid", "block",
                          "args", "registers", "sgprs", "spills", "scratch_bytes", "occupancy"})
      if (meta.contains(f)) k[f] = meta[f];
    // The hidden scratch arguments' sizes (Triton's metadata; absent = 0): a
    // kernel with device-side tensor descriptors needs global scratch.
    if (auto md = meta.find("metadata"); md != meta.end() && md->is_object())
      for (const char* f : {"global_scratch_size", "global_scratch_align", "profile_scratch_size",
                            "profile_scratch_align"})
        if (md->contains(f)) k[f] = (*md)[f];
    kernels.push_back(std::move(k));
    r.files.push_back(file);
    ++r.kernels;
  }
  sqlite3_finalize(st);
  if (r.kernels == 0) {
    std::filesystem::remove_all(tmp);
    throw std::runtime_error("no finished job with a selected kernel for target " + target.name +
                             " (run `kiln run` first; `kiln status` shows the queue)");
  }
  json manifest = {{"format", "kiln-package/1"},
                   {"target", {{"name", target.name}, {"arch", target.arch},
                               {"backend", target.backend}, {"vendor", target.vendor},
                               {"warp_size", target.warp_size}}},
                   {"created_at", static_cast<long long>(std::time(nullptr))},
                   {"launch_notes",
                    "Triton 3.x kernels take two hidden trailing pointer arguments (global and "
                    "profile scratch): pass 0 when the kernel's global_scratch_size / "
                    "profile_scratch_size is 0 or absent, else a buffer of that many bytes per "
                    "program of the grid, aligned to *_scratch_align. block = num_warps x "
                    "warp_size threads; dynamic shared memory = shared_bytes. An argument of "
                    "type nvTmaDesc (a Gluon kernel's host-side TMA descriptor) is a 128-byte "
                    "CUtensorMap passed by value: encode it with cuTensorMapEncodeTiled over the "
                    "2-D row-major view its shape and strides arguments (which follow it) give, "
                    "with its `tensormap` entry's element type, swizzle and box (block_size)."},
                   {"kernels", kernels}};
  const std::string mtext = manifest.dump(2) + "\n";
  write_file(tmp / "manifest.json", mtext);
  sums += sha256_hex(mtext) + "  manifest.json\n";
  write_file(tmp / "SHA256SUMS", sums);
  r.files.push_back("manifest.json");
  r.files.push_back("SHA256SUMS");
  if (std::filesystem::exists(out)) std::filesystem::remove_all(out);
  std::filesystem::rename(tmp, out);
  return r;
}

}  // namespace kiln
