// Serves a Registry while a run goes on: GET /metrics over HTTP (Boost.Beast)
// and/or a textfile rewritten periodically and at the end.
//
// Threading: the exporter has its own thread and io_context; it only reads
// the registry (Registry::render, which takes the registry's mutex for the
// copy), so a slow or stuck scraper never blocks the explorer. At most
// kMaxConnections scrapes are served at once; a request must arrive within
// 10 s (header limit 8 KiB, body limit 1 KiB; only GET and HEAD are answered); every answer closes the
// connection. Construct and stop() from one thread.
#pragma once
#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>
#include <thread>

#include "metrics/listen.h"
#include "metrics/registry.h"

namespace kiln::metrics {

struct ExporterOptions {
  std::optional<ListenAddress> listen;           // serve /metrics here
  std::optional<std::filesystem::path> textfile;  // write the textfile here
  double textfile_interval_s = 15;               // and rewrite it this often
  std::vector<std::filesystem::path> textfile_protected;  // never write over these (the catalog's files)
  std::ostream* log = nullptr;                   // warnings (a failed periodic write); nullptr: none
};

class Exporter {
 public:
  static constexpr int kMaxConnections = 16;

  // Binds the listen address (throws std::runtime_error naming it when it
  // cannot: in use, not an address of this host), writes the textfile once
  // (throws std::runtime_error when it cannot), and starts the thread.
  Exporter(const Registry& registry, ExporterOptions options);
  ~Exporter();  // stop(), errors swallowed
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // "HOST:PORT" actually bound (port 0 resolved); empty without listen.
  std::string bound() const { return bound_; }
  unsigned short port() const { return port_; }

  // Stops serving and joins the thread, then writes the textfile with the
  // registry's values as they are now (the final ones). Idempotent. Throws
  // std::runtime_error if that last write fails.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::string bound_;
  unsigned short port_ = 0;
  bool stopped_ = false;
};

}  // namespace kiln::metrics
