#include "package/package.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "catalog/packaging.h"
#include "common/hash.h"
#include "search/estimate.h"
#include "package/shortlist.h"
#include "package/bundle.h"
#include "package/code_object.h"
#include "package/out_dir.h"
#include "package/signing.h"

namespace kiln {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

std::string shape_tag(const json& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : "x") + (d.is_number_integer() ? std::to_string(d.get<long long>()) : std::string("_"));
  return s.empty() ? "scalar" : s;
}

// Removes the temporary directory unless released.
struct TmpGuard {
  fs::path dir;
  ~TmpGuard() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

// The result of package_info, checked for the fields the manifest needs.
void check_info(const json& r, const std::string& what) {
  auto bad = [&](const std::string& why) {
    throw std::runtime_error("package_info for " + what + " answered a malformed result: " + why);
  };
  if (!r.is_object()) bad("not an object");
  if (!r.contains("tensors") || !r["tensors"].is_array() || r["tensors"].empty()) bad("no tensors");
  if (!r.contains("grid") || !r["grid"].is_array() || r["grid"].size() != 3) bad("grid is not 3 expressions");
  for (const auto& g : r["grid"])
    if (!g.is_string()) bad("a grid entry is not an expression string");
  if (!r.contains("args") || !r["args"].is_array()) bad("no args");
  for (const auto& a : r["args"])
    if (!a.is_object() || !a.contains("bind") || !a["bind"].is_object()) bad("an argument without bind");
  if (!r.contains("verify") || !r["verify"].is_object()) bad("no verify data");
  if (r.contains("zero_before_launch")) {
    const json& z = r["zero_before_launch"];
    if (!z.is_array()) bad("zero_before_launch is not an array");
    for (const auto& name : z)
      if (!name.is_string()) bad("a zero_before_launch entry is not an argument name");
  }
}

std::string target_id_of(const std::string& bytes, const Target& t, const json& metadata) {
  const CodeObjectInfo info = inspect_code_object(bytes);
  if (info.machine == "AMDGPU") {
    if (!info.note_target.empty()) return info.note_target;
    if (metadata.is_object() && metadata.contains("resources") && metadata["resources"].is_object()) {
      const json& r = metadata["resources"];
      if (r.contains("amdhsa_target") && r["amdhsa_target"].is_string()) return r["amdhsa_target"];
    }
    return "amdgcn-amd-amdhsa--" + (info.flags_gfx.empty() ? t.arch : info.flags_gfx);
  }
  if (info.machine == "CUDA") return info.sm;
  return t.arch;
}

// One seed per kernel instance and target (its job): the variants of a
// shortlist are verified on the same inputs, so the evaluator builds that
// data once, and they share one verify/ file.
unsigned long long verify_seed(const std::string& job_key) {
  return std::stoull(sha256_hex(job_key + ":verify").substr(0, 8), nullptr, 16);
}

struct VariantRef {
  size_t kernel;       // index in kernels
  size_t variant;      // index in that kernel's variants
  std::string entry;   // the code object's target ID, then its bundle entry ID
  std::string sha;     // of the code object
  fs::path file;       // the code object in tmp
};

}  // namespace

int amd_code_object_version(std::string_view b) {
  if (b.size() < 64 || b.substr(0, 4) != std::string_view("\x7f" "ELF", 4)) return 0;
  const unsigned char osabi = static_cast<unsigned char>(b[7]), abiver = static_cast<unsigned char>(b[8]);
  const unsigned machine = static_cast<unsigned char>(b[18]) | (static_cast<unsigned char>(b[19]) << 8);
  if (machine != 224 || osabi != 64 /* ELFOSABI_AMDGPU_HSA */) return 0;
  return abiver >= 2 ? abiver + 2 : 0;
}

void check_package_out(const PackageOptions& o) {
  check_out_allowed(o.out, o.protected_dirs);
  const fs::path out = normalise_out(o.out);
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    if (const std::string why = why_not_kiln_package(out); !why.empty())
      throw std::invalid_argument("--out " + o.out.string() + " exists, is not empty and is not a Kiln package (" +
                                  why + "): refusing to replace it; name a new directory");
    if (!o.force)
      throw std::invalid_argument("--out " + o.out.string() + " holds a Kiln package (use --force to replace it)");
  }
}

namespace {

// The most candidates the catalog returns per estimated job for the shortlist
// to be picked from (a tile repeats across num_stages).
constexpr int kShortlistPool = 64;

// An estimated job's shortlist: pick_shortlist over the pool the catalog returned.
void pick_shortlists(std::vector<PackageJob>& jobs, const PackageOptions& o) {
  for (PackageJob& j : jobs) {
    if (j.basis != "estimated" || j.candidates.size() < 2 || !j.candidates[0].estimate_ms) continue;
    std::vector<ShortlistEntry> pool;
    for (const PackageCandidate& c : j.candidates)
      pool.push_back({c.estimate_ms.value_or(std::numeric_limits<double>::infinity()), c.config});
    std::vector<PackageCandidate> keep;
    for (size_t i : pick_shortlist(pool, o.shortlist_max)) keep.push_back(std::move(j.candidates[i]));
    j.candidates = std::move(keep);
  }
}

}  // namespace

PackageResult write_package(const Catalog& catalog, const std::vector<const Target*>& targets,
                            const PackageOptions& o, const PackageInfoFn& info) {
  check_package_out(o);
  const fs::path out = normalise_out(o.out);
  fs::path bundler;
  if (o.bundle) bundler = find_offload_bundler();
  if (o.sign_key) (void)ed25519_sign_hex(*o.sign_key, "");  // an unusable key fails before any work

  std::vector<std::pair<const Target*, std::vector<PackageJob>>> per_target;
  size_t total_jobs = 0;
  for (const Target* t : targets) {
    // the pool: the first correct candidates by estimate, however far (a tile may repeat)
    per_target.push_back({t, package_jobs(catalog, t->name, o.shortlist_max > 1 ? kShortlistPool : 1, o.only_jobs)});
    pick_shortlists(per_target.back().second, o);
    total_jobs += per_target.back().second.size();
  }
  if (total_jobs == 0) {
    std::string names;
    for (const Target* t : targets) names += (names.empty() ? "" : ", ") + t->name;
    throw std::runtime_error("no finished job with a selected kernel for " + names +
                             " (run `kiln run` first; `kiln status` shows the queue)");
  }

  TmpGuard guard{make_temp_sibling(out)};
  const fs::path tmp = guard.dir;
  fs::create_directory(tmp / "objects");
  fs::create_directory(tmp / "verify");

  PackageResult r;
  r.dir = out;
  json kernels = json::array();
  std::map<std::string, size_t> kernel_index;  // (op, shape, dtype, params) -> kernels[i]
  json target_docs = json::array();
  std::vector<VariantRef> amd_variants;
  std::set<std::string> written;

  for (auto& [t, jobs] : per_target) {
    if (jobs.empty()) {
      r.warnings.push_back("no finished job with a selected kernel for " + t->name + ": not in the package");
      continue;
    }
    json tdoc = {{"name", t->name}, {"arch", t->arch}, {"backend", t->backend}, {"vendor", t->vendor},
                 {"target_id", nullptr}, {"warp_size", t->warp_size}, {"compute_units", t->compute_units},
                 {"max_shared_per_block", t->max_shared_per_block}, {"measured_on", nullptr}};
    for (PackageJob& j : jobs) {
      const std::string ident = j.op + "\n" + j.shape.dump() + "\n" + j.dtype + "\n" + j.params.dump();
      auto [it, fresh] = kernel_index.try_emplace(ident, kernels.size());
      if (fresh)
        kernels.push_back({{"operator", j.op}, {"shape", j.shape}, {"dtype", j.dtype}, {"params", j.params},
                           {"job_key", j.key}, {"tensors", nullptr}, {"variants", json::array()}});
      json& kernel = kernels[it->second];
      if (tdoc["measured_on"].is_null() && j.measured_on.is_object()) tdoc["measured_on"] = j.measured_on;
      for (size_t rank = 0; rank < j.candidates.size(); ++rank) {
        const PackageCandidate& c = j.candidates[rank];
        const std::string what = j.op + " " + shape_tag(j.shape) + " " + j.dtype + " on " + t->name +
                                 " (job " + j.key.substr(0, 12) + ", candidate " + std::to_string(c.candidate_id) + ")";
        json res;
        try {
          res = info({{"method", "package_info"}, {"job", j.spec}, {"config", c.config}, {"artifact", c.metadata},
                      {"neighbours", o.neighbours}, {"verify_seed", verify_seed(j.key)}});
          check_info(res, what);
        } catch (const std::exception& e) {
          if (rank == 0) throw std::runtime_error("package_info for " + what + ": " + e.what());
          r.warnings.push_back("left out shortlist rank " + std::to_string(rank) + " of " + what + ": " + e.what());
          continue;
        }
        const std::string base = safe_component(j.op) + "-" + safe_component(shape_tag(j.shape)) + "-" +
                                 safe_component(j.dtype) + "-" + c.sha256.substr(0, 12);
        const std::string obj_rel = "objects/" + base + "." + safe_component(c.kind);
        const fs::path obj = path_inside(tmp, obj_rel);
        if (written.insert(obj_rel).second) write_file(obj, c.bytes);
        json vdoc = res["verify"];
        if (!vdoc.contains("format")) vdoc["format"] = "kiln-verify/1";
        const std::string vtext = vdoc.dump(1) + "\n";
        // named by content: the variants verified on the same data share the file
        const std::string ver_rel = "verify/" + safe_component(j.op) + "-" + safe_component(shape_tag(j.shape)) + "-" +
                                    safe_component(j.dtype) + "-" + sha256_hex(vtext).substr(0, 12) + ".json";
        if (written.insert(ver_rel).second) write_file(path_inside(tmp, ver_rel), vtext);

        const std::string tid = target_id_of(c.bytes, *t, c.metadata);
        if (rank == 0 && tdoc["target_id"].is_null()) tdoc["target_id"] = tid;
        if (kernel["tensors"].is_null()) kernel["tensors"] = res["tensors"];
        const json& md = c.metadata.is_object() ? c.metadata : json::object();
        json v = {{"target", t->name}, {"rank", rank}, {"file", obj_rel}, {"sha256", c.sha256},
                  {"size", c.bytes.size()}, {"kernel_name", c.kernel_name}};
        if (const int cov = amd_code_object_version(c.bytes)) v["code_object_version"] = cov;
        for (const char* f : {"num_warps", "num_stages", "warp_size", "block", "shared_bytes", "registers", "sgprs",
                              "spills", "scratch_bytes"})
          v[f] = md.contains(f) ? md[f] : json(nullptr);
        const json tmd = md.contains("metadata") && md["metadata"].is_object() ? md["metadata"] : json::object();
        for (const char* f : {"global_scratch_size", "profile_scratch_size"}) v[f] = tmd.value(f, 0);
        for (const char* f : {"global_scratch_align", "profile_scratch_align"}) v[f] = tmd.value(f, 1);
        v["grid"] = res["grid"];
        v["args"] = res["args"];
        // tensors the kernel needs cleared before each launch (split-K outputs)
        if (res.contains("zero_before_launch") && !res["zero_before_launch"].empty())
          v["zero_before_launch"] = res["zero_before_launch"];
        v["assume"] = res.value("assume", json::array());
        v["range"] = res.contains("range") ? res["range"] : json{{"exact", true}};
        v["config"] = c.config;
        v["candidate_id"] = c.candidate_id;
        if (rank == 0) {
          v["basis"] = j.basis;
          v["value_ms"] = j.value_ms;
          if (j.confirmed.is_object()) v["confirmed"] = j.confirmed;
          if (j.basis == "measured") {
            v["device"] = j.device;
            v["driver"] = j.measured_on.value("driver", json(nullptr));
          }
        } else {
          v["basis"] = "estimated";
          v["value_ms"] = c.estimate_ms ? json(*c.estimate_ms) : json(nullptr);
        }
        v["verify"] = ver_rel;
        kernel["variants"].push_back(v);
        ++r.variants;
        if (t->vendor == "amd" && c.kind == "hsaco")
          amd_variants.push_back({it->second, kernel["variants"].size() - 1, tid, c.sha256, obj});
      }
    }
    target_docs.push_back(std::move(tdoc));
  }

  if (o.bundle && !amd_variants.empty()) {
    // Per kernel instance, bins of code objects with distinct entry IDs: one
    // bundle holds each gfx target once; a second code object for the same
    // entry (another rank, or MI300X and MI325X with different picks) opens
    // another bundle.
    std::map<size_t, std::vector<std::vector<VariantRef*>>> bins;
    for (VariantRef& v : amd_variants) {
      v.entry = bundle_entry_id(v.entry);  // the target ID, until here
      auto& kb = bins[v.kernel];
      bool placed = false;
      for (auto& bin : kb) {
        auto same = std::find_if(bin.begin(), bin.end(), [&](VariantRef* x) { return x->entry == v.entry; });
        if (same == bin.end() || (*same)->sha == v.sha) {
          bin.push_back(&v);
          placed = true;
          break;
        }
      }
      if (!placed) kb.push_back({&v});
    }
    std::set<std::string> bundled_objects;
    for (auto& [k, kb] : bins) {
      for (auto& bin : kb) {
        std::vector<std::pair<std::string, fs::path>> entries;
        std::set<std::string> ids;
        std::string content;
        for (VariantRef* v : bin)
          if (ids.insert(v->entry).second) {
            entries.push_back({v->entry, v->file});
            content += v->entry + "=" + v->sha + ";";
          }
        std::sort(entries.begin(), entries.end());
        const json& kd = kernels[k];
        const std::string rel = "objects/" + safe_component(kd["operator"].get<std::string>()) + "-" +
                                safe_component(shape_tag(kd["shape"])) + "-" +
                                safe_component(kd["dtype"].get<std::string>()) + "-" + sha256_hex(content).substr(0, 12) + ".co";
        const fs::path bundle = path_inside(tmp, rel);
        if (written.insert(rel).second) {
          write_offload_bundle(bundler, entries, bundle);
          std::vector<std::string> want = {kBundleHostEntry};
          for (const auto& e : entries) want.push_back(e.first);
          std::sort(want.begin(), want.end());
          if (list_offload_bundle(bundler, bundle) != want)
            throw std::runtime_error("the offload bundle " + rel + " does not list the entries written");
          ++r.bundles;
        }
        for (VariantRef* v : bin) {
          json& var = kernels[v->kernel]["variants"][v->variant];
          bundled_objects.insert(var["file"].get<std::string>());
          var["file"] = rel;
          var["bundle_entry"] = v->entry;
        }
      }
    }
    // The bundles hold the AMD code objects: their loose copies go, unless a
    // variant still points at one.
    std::set<std::string> used;
    for (const auto& kd : kernels)
      for (const auto& v : kd["variants"]) used.insert(v["file"].get<std::string>());
    for (const auto& f : bundled_objects)
      if (!used.count(f)) {
        fs::remove(tmp / f);
        written.erase(f);
      }
  }

  json manifest = {{"format", "kiln-package/2"},
                   {"created_at", static_cast<long long>(std::time(nullptr))},
                   {"toolchain", o.toolchain},
                   {"targets", target_docs},
                   {"kernels", kernels}};
  const std::string mtext = manifest.dump(2) + "\n";
  write_file(tmp / "manifest.json", mtext);
  written.insert("manifest.json");
  std::string sums;
  for (const auto& f : written) sums += sha256_file(tmp / f) + "  " + f + "\n";  // std::set: sorted by path
  write_file(tmp / "SHA256SUMS", sums);
  r.files.assign(written.begin(), written.end());
  r.files.push_back("SHA256SUMS");
  if (o.sign_key) {
    write_file(tmp / "SHA256SUMS.sig", ed25519_sign_hex(*o.sign_key, sums) + "\n");
    r.files.push_back("SHA256SUMS.sig");
    r.signed_ = true;
  }
  std::sort(r.files.begin(), r.files.end());
  r.kernels = static_cast<int>(kernels.size());
  install_dir(tmp, out, o.force);
  guard.dir.clear();
  return r;
}

}  // namespace kiln
