// kiln serve (a read-only HTTP service over a catalog, src/server) and
// kiln report (the same dashboard as a static HTML file). docs/operations.md.
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <iostream>
#include <random>

#include "cli/cli_util.h"
#include "common/output_path.h"
#include "catalog/service_reads.h"
#include "batch/package.h"
#include "metrics/listen.h"
#include "package/package.h"
#include "server/dashboard.h"
#include "server/server.h"

namespace kiln {

using namespace kiln::cli;

namespace {

std::string read_token(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw UsageError("--token-file " + file + ": cannot read it");
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front()))) token.erase(token.begin());
  if (token.empty()) throw UsageError("--token-file " + file + ": the file is empty (put the bearer token in it)");
  if (token.find_first_of(" \t\r\n") != std::string::npos)
    throw UsageError("--token-file " + file + ": the token must be one line without spaces");
  return token;
}

}  // namespace

int cmd_serve(const Args& args) {
  return catalog_command("serve", false, [&](po::options_description& d) {
    d.add_options()("listen", po::value<std::string>()->default_value("127.0.0.1:8470"),
                    "HOST:PORT to serve on (port 0 picks a free one); any non-loopback address needs --token-file")(
        "token-file", po::value<std::string>(), "a file holding the bearer token every request must send")(
        "threads", po::value<int>()->default_value(4), "request handler threads")(
        "rate", po::value<double>()->default_value(1000), "requests per second per client address (0: unlimited)")(
        "max-connections", po::value<int>()->default_value(512), "connections open at once")(
        "max-staleness", po::value<double>()->default_value(1.0),
        "seconds: an /api/best answer reflects every commit made at least this long before it is sent "
        "(cached answers are revalidated in the background; 0: every request checks the catalog)")(
        "cache-dir", po::value<std::string>(), "where built packages are kept (default: a temporary directory)")(
        "package-device", po::value<std::string>()->default_value("cpu"),
        "where the evaluator that packages checks neighbouring shapes: cpu, gpu or auto");
    auto vm = parse(args, d,
                    "usage: kiln serve [--catalog PATH] [--listen HOST:PORT] [--token-file F]\n"
                    "A read-only HTTP service over the catalog: / (dashboard), /api/best, /api/jobs,\n"
                    "/api/jobs/{id}, /api/packages/{target}, /metrics. docs/operations.md.");
    if (!vm) return 0;
    server::ServerOptions o;
    try {
      o.listen = metrics::parse_listen((*vm)["listen"].as<std::string>(), true);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--listen: ") + e.what());
    }
    if (vm->count("token-file")) o.token = read_token((*vm)["token-file"].as<std::string>());
    if (!o.listen.host.is_loopback() && !o.token)
      throw UsageError("refusing to serve on " + (*vm)["listen"].as<std::string>() +
                       ", which is not a loopback address, without a token: pass --token-file FILE "
                       "(clients send Authorization: Bearer <token>)");
    o.threads = (*vm)["threads"].as<int>();
    if (o.threads < 1 || o.threads > 256) throw UsageError("--threads must be 1..256");
    o.rate_per_s = (*vm)["rate"].as<double>();
    if (o.rate_per_s < 0) throw UsageError("--rate must be >= 0");
    o.max_connections = (*vm)["max-connections"].as<int>();
    if (o.max_connections < 1) throw UsageError("--max-connections must be >= 1");
    const double staleness = (*vm)["max-staleness"].as<double>();
    if (!(staleness >= 0 && staleness <= 60)) throw UsageError("--max-staleness must be 0..60 seconds");
    o.best_max_staleness = std::chrono::milliseconds(static_cast<long long>(staleness * 1000 + 0.5));
    const std::string device = (*vm)["package-device"].as<std::string>();
    if (device != "cpu" && device != "gpu" && device != "auto") throw UsageError("--package-device must be cpu, gpu or auto");
    o.catalog = (*vm)["catalog"].as<std::string>();
    if (!std::filesystem::exists(o.catalog))
      throw UsageError("no catalog at " + o.catalog.string() + " (--catalog PATH, or $KILN_CATALOG)");
    const Knowledge knowledge = load_knowledge();
    o.targets = &knowledge.targets;
    bool temp_cache = false;
    if (vm->count("cache-dir")) {
      o.cache_dir = (*vm)["cache-dir"].as<std::string>();
    } else {
      std::random_device rd;
      o.cache_dir = std::filesystem::temp_directory_path() /
                    ("kiln-serve-" + std::to_string(getpid()) + "-" + std::to_string(rd() % 100000));
      temp_cache = true;
    }
    const std::filesystem::path catalog_path = o.catalog, cache_dir = o.cache_dir;
    o.build_package = [catalog_path, device](const Target& t, const std::filesystem::path& out) {
      Catalog catalog = Catalog::open(catalog_path, true);
      PackageOptions po;
      po.out = out;
      po.protected_dirs = {std::filesystem::absolute(catalog_path).parent_path()};
      const PackageResult r = batch::package(catalog, {&t}, po, device);
      (void)r;
    };
    o.stop_on_signals = true;
    o.log = &std::cerr;
    std::unique_ptr<server::Server> s;
    try {
      s = std::make_unique<server::Server>(std::move(o));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::cerr << "kiln serve: serving " << catalog_path.string() << " at http://" << s->bound() << "/" << std::endl;
    s->run();
    s.reset();
    if (temp_cache) {
      std::error_code ec;
      std::filesystem::remove_all(cache_dir, ec);
    }
    std::cerr << "kiln serve: stopped" << std::endl;
    return 0;
  });
}

int cmd_report(const Args& args) {
  return catalog_command("report", false, [&](po::options_description& d) {
    d.add_options()("batch", po::value<std::string>(), "only this batch's jobs")(
        "out", po::value<std::string>()->required(), "the HTML file to write");
    auto vm = parse(args, d,
                    "usage: kiln report [--batch ID] --out report.html\n"
                    "The dashboard of `kiln serve` as one self-contained HTML file (inline SVG charts, no\n"
                    "script, nothing fetched): best kernels, speedups, rooflines, failures, history, jobs.\n"
                    "Exit: 0 written, 1 error (an unknown batch id: nothing written), 2 usage.");
    if (!vm) return 0;
    const std::filesystem::path out = (*vm)["out"].as<std::string>();
    const std::filesystem::path dir = out.parent_path().empty() ? "." : out.parent_path();
    if (!std::filesystem::is_directory(dir)) throw UsageError("--out " + out.string() + ": no directory " + dir.string());
    const std::string catalog_path = (*vm)["catalog"].as<std::string>();
    const std::vector<std::filesystem::path> protect = catalog_files(catalog_path);
    try {
      check_output_file(out, "--out", protect);  // not the catalog, a device node, a database
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    if (!std::filesystem::exists(catalog_path))
      throw UsageError("no catalog at " + catalog_path + " (--catalog PATH, or $KILN_CATALOG)");
    const Knowledge knowledge = load_knowledge();
    reports::Reader reader(Catalog::open(catalog_path, true));
    server::DashboardOptions o;
    if (vm->count("batch")) {
      o.batch_id = (*vm)["batch"].as<std::string>();
      bool known = false;
      for (const auto& b : reports::batches(reader)) known = known || b.id == *o.batch_id;
      // An id the catalog lacks is an error (exit 1), as kiln status and kiln
      // retry answer it, not a usage error of the command line (exit 2).
      if (!known)
        throw std::runtime_error("no batch '" + *o.batch_id + "' in " + catalog_path + " (kiln status lists them)");
    }
    o.source = catalog_path;
    o.generated_at = server::utc_now_text();
    server::Facts facts;
    const std::string html = server::render_dashboard(reader, knowledge.targets, facts, o);
    write_output_file(out, html, "--out", protect);  // checked again: it may have changed while we rendered
    std::cerr << "kiln report: wrote " << out.string() << " (" << html.size() << " bytes)" << std::endl;
    return 0;
  });
}

}  // namespace kiln
