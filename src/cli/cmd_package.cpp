// kiln package (kiln-package/2, src/package/) and kiln import-measurements.
#include <iostream>

#include "batch/measurements_file.h"
#include "batch/package.h"
#include "catalog/packaging.h"
#include "cli/cli_util.h"
#include "knowledge/target_list.h"
#include "package/package.h"

namespace kiln {

using namespace kiln::cli;

int cmd_package(const Args& args) {
  return catalog_command("package", true, [&](po::options_description& d) {
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
    auto vm = parse(args, d,
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
      r = batch::package(catalog, targets, o, device);
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

int cmd_import_measurements(const Args& args) {
  return catalog_command("import-measurements", true, [&](po::options_description& d) {
    d.add_options()("file", po::value<std::string>()->required(), "the measurements file `kiln-rt tune` wrote");
    auto vm = parse(args, d,
                    "usage: kiln import-measurements FILE [--catalog PATH] [--json]\n"
                    "FILE: {format: kiln-measurements/1, device, driver, uuid, target, versions,\n"
                    "       kernels: [{job_key, candidate_id, median_ms, samples, target?}]}\n"
                    "Records the latencies a `kiln-rt tune` run measured on a deployment node as measured\n"
                    "on that device, and re-selects the best of those jobs (the fastest measurement), so\n"
                    "the next `kiln package` ships it.",
                    {{"file"}});
    if (!vm) return 0;
    const std::filesystem::path file = (*vm)["file"].as<std::string>();
    const MeasurementsIn m = batch::read_measurements(file, load_knowledge());  // validated before the catalog is opened
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
