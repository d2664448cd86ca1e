// A long-lived evaluator child process (worker/kiln_worker), spoken to in JSON
// lines over its stdin/stdout, driven by Boost.Asio on the caller's io_context.
//
// The child runs in its own process group, so a timeout kills the worker and
// anything it started (ptxas, ...), and asks the kernel for SIGKILL when its
// parent dies (prctl PR_SET_PDEATHSIG), so `kill -9` of the engine leaves no
// orphans. It also exits by itself when its stdin closes.
#pragma once
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace kiln {

struct WorkerOptions {
  std::vector<std::string> argv;               // e.g. {"python3", "-m", "kiln_worker"}
  std::map<std::string, std::string> env;      // added to / overriding the parent's environment
  std::string working_dir;                     // empty: inherit
  size_t stderr_tail_bytes = 8192;             // kept for crash reports
  bool echo_stderr = false;                    // copy the child's stderr to ours
};

struct WorkerOutcome {
  enum class Kind { kReply, kTimeout, kCrash };
  Kind kind = Kind::kReply;
  nlohmann::json reply;      // kReply: the child's JSON answer
  std::string detail;        // kTimeout/kCrash: what happened ("killed after 300 s",
                             // "exited with signal 11 (SIGSEGV)"), plus the stderr tail
};

class WorkerProcess {
 public:
  using Done = std::function<void(WorkerOutcome)>;

  WorkerProcess(boost::asio::io_context& io, WorkerOptions options);
  ~WorkerProcess();  // kills the child's process group
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Spawns the child. Throws std::runtime_error if it cannot be started.
  void start();

  // Sends one request (an "id" member is set) and calls done exactly once, on
  // the io_context, with the reply, or kTimeout after `timeout` (the child's
  // process group is then killed), or kCrash if the child exits or its stdout
  // closes first. One request at a time per worker.
  void request(nlohmann::json req, std::chrono::milliseconds timeout, Done done);

  // Kills the process group (SIGKILL) and reaps the child.
  void kill();
  // kill() then start(): a fresh child.
  void restart();

  bool alive() const;
  int pid() const;
  bool busy() const;
  const std::string& stderr_tail() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Starts a worker, sends one request, waits for the answer (own io_context).
// Throws std::runtime_error with the detail on timeout or crash.
nlohmann::json call_worker_once(const WorkerOptions& options, nlohmann::json req,
                                std::chrono::milliseconds timeout);

}  // namespace kiln
