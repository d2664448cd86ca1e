// kiln package (kiln-package/2, src/package/) and kiln import-measurements.
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <tuple>

#include "catalog/packaging.h"
#include "cli/cli_util.h"
#include "knowledge/target_list.h"
#include "manifest/misses.h"
#include "package/info_worker.h"
#include "cli/package_cli.h"
#include "package/package.h"

namespace kiln {

using namespace kiln::cli;

namespace {

// The evaluator that answers package_info: a CPU worker, as kiln submit's.
PackageInfoFn info_from(InfoWorker& worker) {
  return [&worker](const json& req) {
    try {
      return worker.call(req);
    } catch (const WorkerRefused& e) {
      const std::string msg = e.what();
      if (msg.find("unknown method") != std::string::npos)
        throw std::runtime_error("this evaluator has no package_info method (" + msg +
                                 "): update worker/kiln_worker");
      throw;
    }
  };
}

}  // namespace

PackageResult package_with_worker(const Catalog& catalog, const std::vector<const Target*>& targets,
                                  PackageOptions o, const std::string& kiln_version,
                                  const std::string& device) {
  InfoWorker worker(evaluator_options(device, {}, false), std::chrono::seconds(900));
  json hello;
  try {
    hello = worker.hello();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot start the Python evaluator: ") + e.what());
  }
  o.toolchain = {{"kiln", kiln_version}, {"triton", hello.value("triton", "")}, {"torch", hello.value("torch", "")}};
  return write_package(catalog, targets, o, info_from(worker));
}

int cmd_package(const Args& args) {
  return guarded("package", [&] {
    po::options_description d("kiln package options");
    add_common(d, true);
    d.add_options()("target", po::value<std::string>()->required(),
                    "targets: names (MI300X), architectures (gfx942, sm_90, sm_90a), comma-separated")(
        "out", po::value<std::string>()->required(), "output directory (a new one, or a Kiln package with --force)")(
        "force", "replace --out if it holds a Kiln package")(
        "bundle", "AMD code objects of a kernel in one clang offload bundle (needs clang-offload-bundler-15)")(
        "sign", po::value<std::string>(), "Ed25519 private key (PEM): writes SHA256SUMS.sig")(
        "device", po::value<std::string>()->default_value("cpu"),
        "where the evaluator checks neighbouring shapes and computes the float64 reference of the "
        "verification data: cpu (Triton interpreter, tiny neighbours only), gpu, or auto")(
        "no-neighbours", "do not verify neighbouring shapes (every variant's range is its exact shape)")(
        "shortlist", po::value<int>()->default_value(8),
        "variants per kernel for a target whose best is estimated (1..8)");
    auto vm = parse(args, d, nullptr,
                    "usage: kiln package --target T[,T...] --out DIR [--bundle] [--sign KEY.pem] [--force]\n"
                    "Writes a kiln-package/2 directory (docs/package-format.md): the selected code object of\n"
                    "every finished job of the targets (and for an estimated target a shortlist for\n"
                    "`kiln-rt tune`), their launches and verification data, manifest.json, SHA256SUMS.");
    if (!vm) return 0;
    const Knowledge knowledge = load_knowledge();
    std::vector<const Target*> targets;
    try {
      targets = resolve_targets(knowledge.targets, (*vm)["target"].as<std::string>());
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    PackageOptions o;
    o.out = (*vm)["out"].as<std::string>();
    o.force = vm->count("force") > 0;
    o.bundle = vm->count("bundle") > 0;
    if (vm->count("sign")) o.sign_key = (*vm)["sign"].as<std::string>();
    o.neighbours = vm->count("no-neighbours") == 0;
    const std::string device = (*vm)["device"].as<std::string>();
    if (device != "cpu" && device != "gpu" && device != "auto")
      throw UsageError("--device must be cpu, gpu or auto");
    o.shortlist_max = (*vm)["shortlist"].as<int>();
    if (o.shortlist_max < 1 || o.shortlist_max > 8) throw UsageError("--shortlist must be 1..8");
    const std::string catalog_path = (*vm)["catalog"].as<std::string>();
    o.protected_dirs = {std::filesystem::absolute(catalog_path).parent_path()};
    PackageResult r;
    try {
      check_package_out(o);  // before the catalog and the evaluator
      Catalog catalog = open_catalog(*vm, true);
      r = package_with_worker(catalog, targets, o, KILN_VERSION, device);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    for (const auto& w : r.warnings) std::cerr << "kiln package: warning: " << w << "\n";
    std::string names;
    for (const Target* t : targets) names += (names.empty() ? "" : ", ") + t->name;
    if (vm->count("json"))
      std::cout << json{{"dir", r.dir.string()}, {"kernels", r.kernels}, {"variants", r.variants},
                        {"bundles", r.bundles}, {"signed", r.signed_}, {"files", r.files},
                        {"warnings", r.warnings}}.dump()
                << "\n";
    else
      std::cout << "packaged " << r.kernels << " kernel(s), " << r.variants << " variant(s) for " << names
                << " in " << r.dir.string() << (r.bundles ? ", " + std::to_string(r.bundles) + " bundle(s)" : "")
                << (r.signed_ ? ", signed" : "") << "\n";
    return 0;
  });
}

// --- import-measurements -------------------------------------------------------

namespace {

MeasurementsIn read_measurements(const std::filesystem::path& file, const Knowledge& knowledge) {
  const std::string name = file.string();
  auto bad = [&](const std::string& why) { return UsageError(name + ": " + why); };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) throw bad("not a regular file");
  if (std::filesystem::file_size(file, ec) > (64u << 20)) throw bad("larger than 64 MiB: not a measurements file");
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {
    throw bad(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad("expected a JSON object {device, driver, uuid, versions, kernels}");
  MeasurementsIn m;
  m.source = std::filesystem::absolute(file).string();
  if (!j.contains("device") || !j["device"].is_string() || j["device"].get<std::string>().empty())
    throw bad("'device' must be a non-empty string (the device the kernels were timed on)");
  m.device = j["device"];
  for (auto [key, dst] : {std::pair<const char*, std::string*>{"driver", &m.driver}, {"uuid", &m.uuid}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_string()) throw bad(std::string("'") + key + "' must be a string");
    *dst = j[key];
  }
  if (j.contains("format") && j["format"] != "kiln-measurements/1")
    throw bad("'format' must be kiln-measurements/1 (what kiln-rt tune writes)");
  // The target: per kernel, else the file's (kiln-rt tune writes its label,
  // "gfx942:sramecc+:xnack- (AMD Instinct MI300X)").
  auto targets_of = [&](const json& t, const std::string& at) {
    std::pair<std::vector<std::string>, std::string> out;
    if (t.is_null()) return out;
    if (!t.is_string() || t.get<std::string>().empty() || t.get<std::string>().size() > 256)
      throw bad(at + "target must be a non-empty string");
    try {
      for (const Target* x : miss_targets(knowledge.targets, t.get<std::string>())) out.first.push_back(x->name);
    } catch (const std::invalid_argument& e) {
      throw bad(at + "target: " + e.what());
    }
    out.second = t;
    return out;
  };
  const auto file_targets = targets_of(j.value("target", json(nullptr)), "");
  if (j.contains("versions") && !j["versions"].is_null()) {
    if (!j["versions"].is_object()) throw bad("'versions' must be an object");
    m.versions = j["versions"];
  }
  if (!j.contains("kernels") || !j["kernels"].is_array() || j["kernels"].empty())
    throw bad("'kernels' must be a non-empty list");
  for (size_t i = 0; i < j["kernels"].size(); ++i) {
    const json& k = j["kernels"][i];
    const std::string at = "kernels[" + std::to_string(i) + "]";
    if (!k.is_object()) throw bad(at + " must be an object");
    ImportedKernel ik;
    if (!k.contains("job_key") || !k["job_key"].is_string() || k["job_key"].get<std::string>().empty())
      throw bad(at + ".job_key must be a non-empty string");
    ik.job_key = k["job_key"];
    std::tie(ik.targets, ik.target_text) =
        k.contains("target") ? targets_of(k["target"], at + ".") : file_targets;
    if (!k.contains("candidate_id") || !k["candidate_id"].is_number_integer() || k["candidate_id"].get<long long>() <= 0)
      throw bad(at + ".candidate_id must be a positive integer");
    ik.candidate_id = k["candidate_id"];
    auto positive = [](const json& v) {
      return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0 && v.get<double>() < 1e7;
    };
    if (!k.contains("median_ms") || !positive(k["median_ms"]))
      throw bad(at + ".median_ms must be a positive number of milliseconds");
    ik.median_ms = k["median_ms"];
    if (!k.contains("samples") || !k["samples"].is_array() || k["samples"].empty() || k["samples"].size() > 100000)
      throw bad(at + ".samples must be a non-empty list of milliseconds");
    for (const auto& s : k["samples"]) {
      if (!positive(s)) throw bad(at + ".samples must hold positive numbers of milliseconds");
      ik.samples.push_back(s);
    }
    m.kernels.push_back(std::move(ik));
  }
  return m;
}

}  // namespace

int cmd_import_measurements(const Args& args) {
  return guarded("import-measurements", [&] {
    po::options_description d("kiln import-measurements options");
    add_common(d, true);
    d.add_options()("file", po::value<std::string>()->required(), "the measurements file `kiln-rt tune` wrote");
    po::positional_options_description pos;
    pos.add("file", 1);
    auto vm = parse(args, d, &pos,
                    "usage: kiln import-measurements FILE [--catalog PATH] [--json]\n"
                    "FILE: {format: kiln-measurements/1, device, driver, uuid, target, versions,\n"
                    "       kernels: [{job_key, candidate_id, median_ms, samples, target?}]}\n"
                    "Records the latencies a `kiln-rt tune` run measured on a deployment node as measured\n"
                    "on that device, and re-selects the best of those jobs (the fastest measurement), so\n"
                    "the next `kiln package` ships it.");
    if (!vm) return 0;
    const std::filesystem::path file = (*vm)["file"].as<std::string>();
    const MeasurementsIn m = read_measurements(file, load_knowledge());  // validated before the catalog is opened
    Catalog catalog = open_catalog(*vm, false);
    ImportStats st;
    try {
      st = import_measurements(catalog, m);
    } catch (const CatalogError& e) {
      throw UsageError(file.string() + ": " + e.what() + " (nothing was imported)");
    }
    if (vm->count("json"))
      std::cout << json{{"file", file.string()}, {"device", m.device}, {"measurements", st.measurements},
                        {"jobs", st.jobs}, {"best_changed", st.best_changed}}.dump()
                << "\n";
    else
      std::cout << "imported " << st.measurements << " measurement(s) on " << m.device << " for " << st.jobs
                << " job(s); best changed for " << st.best_changed << "\n";
    return 0;
  });
}

}  // namespace kiln
