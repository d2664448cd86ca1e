// `kiln serve`: a read-only HTTP service over a catalog (Boost.Beast).
//
//   GET /                          the dashboard (dashboard.h)
//   GET /api/best?op=&target=&shape=&dtype=   the deployment's lookup (api.h)
//   GET /api/jobs, /api/jobs/{id}  jobs; one job's candidates and evaluations
//   GET /api/code-objects/{sha256} a code object's bytes
//   GET /api/packages/{target}     a kiln-package/2 of the target as a tar,
//                                  built on request and cached by the target's set of best kernels (one per target: a new set evicts the old)
//   GET /metrics                   catalog-level gauges (catalog_metrics.h), rendered at most once a second
//
// Security: loopback unless a bearer token is configured (the constructor
// refuses another address without one); with a token every request needs
// `Authorization: Bearer TOKEN` (401 otherwise, compared in constant time).
// No request reaches SQL: parameters are bound as values. Requests are bounded:
// GET/HEAD only, headers <= max_header_bytes (431), bodies <= max_body_bytes
// (413), one request within request_timeout_s, at most max_connections open,
// rate_per_s requests per second per client address (429).
//
// Threading: one network thread (accept, read, write, and recent cached
// /api/best answers, which read no catalog) and `threads` handler threads,
// each request answered with a read-only catalog connection of its own
// (Catalog::open(path, true), from a pool): a WAL catalog that `kiln run`
// writes is read without blocking it. One package build at a time.
// /api/best answers are cached with bounded staleness (answer_cache.h): an
// answer reflects every commit made at least best_max_staleness before it is
// sent (headers X-Kiln-Staleness-Ms, X-Kiln-Max-Staleness-Ms); a cached answer
// is sent from the network thread without a catalog read, and revalidated on a
// handler thread in the background. best_max_staleness 0: every /api/best
// request checks the catalog's version on a handler thread.
// Construct, run() and stop() from one thread (stop() may also come from
// another thread, or from SIGINT/SIGTERM with stop_on_signals).
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "knowledge/targets.h"
#include "metrics/listen.h"

namespace kiln::server {

struct ServerOptions {
  metrics::ListenAddress listen;
  std::optional<std::string> token;        // bearer token; required unless listen is loopback
  std::filesystem::path catalog;
  const TargetRegistry* targets = nullptr;  // outlives the server
  int threads = 4;
  std::chrono::milliseconds best_max_staleness{1000};  // >= 0
  int max_connections = 512;
  double rate_per_s = 1000;                 // per client address; <= 0: unlimited
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t max_body_bytes = 1024;
  double request_timeout_s = 10;
  // Writes a kiln-package/2 directory of `target` at `out` (which does not
  // exist yet); throws std::runtime_error with the reason. Unset: 501.
  std::function<void(const Target& target, const std::filesystem::path& out)> build_package;
  std::filesystem::path cache_dir;          // built packages (created if missing)
  bool stop_on_signals = false;             // run() returns on SIGINT / SIGTERM
  std::ostream* log = nullptr;              // one line per failed request (500) and per package build
};

class Server {
 public:
  // Checks the options (std::invalid_argument: a non-loopback address without
  // a token, an empty token, no targets), opens the catalog once read-only
  // (CatalogError: missing, not a catalog), binds (std::runtime_error naming
  // the address: in use, not of this host).
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::string bound() const;  // "HOST:PORT" actually bound
  unsigned short port() const;

  // Serves until stop() (or a signal, with stop_on_signals); then waits for
  // the handlers in flight.
  void run();
  void stop();

  struct Impl;  // the implementation (server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server
