// The metrics flags that kiln run and kiln-mpi run share: --metrics HOST:PORT,
// --metrics-allow-remote, --metrics-file PATH, --metrics-file-interval S.
// Header-only: the binaries link Boost.Program_options, the libraries do not.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>

#include "metrics/exporter.h"
#include "metrics/registry.h"
#include "metrics/run_metrics.h"
#include "metrics/textfile.h"

namespace kiln::metrics {

inline void add_metrics_flags(boost::program_options::options_description& d) {
  namespace po = boost::program_options;
  d.add_options()("metrics", po::value<std::string>(),
                  "HOST:PORT: serve Prometheus metrics at http://HOST:PORT/metrics while the run goes on "
                  "(loopback only unless --metrics-allow-remote; port 0 picks a free one, said on stderr)")(
      "metrics-allow-remote", "allow --metrics on an address other than loopback (e.g. 0.0.0.0:9464)")(
      "metrics-file", po::value<std::string>(),
      "PATH: write the metrics there (atomically) periodically and at the end, for node-exporter's "
      "textfile collector (name it *.prom)")(
      "metrics-file-interval", po::value<double>()->default_value(15), "seconds between --metrics-file rewrites")(
      "metrics-linger", po::value<double>()->default_value(0),
      "seconds to keep serving /metrics after the run ends, so that a scraper reads the final values "
      "(e.g. twice the scrape interval)");
}

// A run's metrics: null members when neither --metrics nor --metrics-file was
// given. Members are destroyed exporter first (it reads the registry).
struct MetricsSetup {
  std::unique_ptr<Registry> registry;
  std::unique_ptr<RunMetrics> run;
  std::unique_ptr<Exporter> exporter;
  double linger_s = 0;  // --metrics-linger

  // Serves the final values for linger_s seconds where --metrics was given,
  // then stops serving and writes the final textfile (Exporter::stop).
  void finish() {
    if (exporter && linger_s > 0 && !exporter->bound().empty())
      std::this_thread::sleep_for(std::chrono::duration<double>(linger_s));
    if (exporter) exporter->stop();
  }
};

// The flags' values, checked for form (std::invalid_argument: a usage error
// naming the flag); nothing bound or written yet.
struct MetricsFlags {
  std::optional<ListenAddress> listen;
  std::optional<std::filesystem::path> textfile;
  double textfile_interval_s = 15;
  double linger_s = 0;
  std::vector<std::filesystem::path> protected_files;  // the textfile never goes there (catalog_files)
  bool any() const { return listen || textfile; }
};

inline MetricsFlags read_metrics_flags(const boost::program_options::variables_map& vm) {
  MetricsFlags f;
  if (vm.count("metrics"))
    f.listen = parse_listen(vm["metrics"].as<std::string>(), vm.count("metrics-allow-remote") > 0);
  if (vm.count("metrics-file")) f.textfile = vm["metrics-file"].as<std::string>();
  f.textfile_interval_s = vm["metrics-file-interval"].as<double>();
  if (!(f.textfile_interval_s > 0)) throw std::invalid_argument("--metrics-file-interval must be positive");
  if (vm.count("metrics-linger")) f.linger_s = vm["metrics-linger"].as<double>();
  if (!(f.linger_s >= 0 && f.linger_s <= 3600))
    throw std::invalid_argument("--metrics-linger must be in [0, 3600] seconds");
  return f;
}

// Checks the textfile's path (std::invalid_argument naming it; see
// check_textfile_path, with f.protected_files), then
// binds and starts the exporter (std::runtime_error when it cannot) and says
// where on `log`. Empty MetricsSetup when no flag was given.
inline MetricsSetup start_metrics(const MetricsFlags& f, std::ostream& log, const std::string& program) {
  MetricsSetup m;
  if (!f.any()) return m;
  if (f.textfile) check_textfile_path(*f.textfile, f.protected_files);
  ExporterOptions o;
  o.textfile_protected = f.protected_files;
  o.listen = f.listen;
  o.textfile = f.textfile;
  o.textfile_interval_s = f.textfile_interval_s;
  o.log = &log;
  m.linger_s = f.linger_s;
  m.registry = std::make_unique<Registry>();
  m.run = std::make_unique<RunMetrics>(*m.registry);
  m.exporter = std::make_unique<Exporter>(*m.registry, o);
  if (o.listen) log << program << ": metrics at http://" << m.exporter->bound() << "/metrics" << std::endl;
  return m;
}

}  // namespace kiln::metrics
