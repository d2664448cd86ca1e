// The engine's side of worker/kiln_worker/processes/forkserver.py: one Python process
// that imports torch and Triton once and forks each evaluator worker, instead
// of every worker importing them itself (seconds each, longer when many start
// at once and compete for the cores; docs/performance-journal.md, "The fork server").
//
// The server is our child; the workers are its children, each in its own
// process group: the engine kills a worker's group as it would a worker it
// started itself, and learns its exit status from the server (which reaps
// it). Workers die when the server dies, and the server when the engine
// does (PR_SET_PDEATHSIG), so destroy the server after its workers.
//
// Thread-safe (one mutex); spawn() blocks until the server answers, the
// first time until it has finished its imports.
#pragma once
#include <chrono>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace kiln {

class ForkServer {
 public:
  // Starts `INTERPRETER [FLAGS] -m kiln_worker.processes.forkserver` for workers started
  // as `worker_argv` = INTERPRETER [FLAGS] ARGS (FLAGS: the arguments before
  // "-m" or the first one not starting with '-'), with the workers' common
  // environment `env` (our environment plus these). `preload`: the modules to
  // import before forking, nullopt for the worker's own list (forkserver.py).
  // Returns at once: the server imports while the engine goes on. Throws
  // std::runtime_error if the interpreter cannot be started.
  static std::shared_ptr<ForkServer> start(const std::vector<std::string>& worker_argv,
                                           const std::map<std::string, std::string>& env,
                                           std::optional<std::vector<std::string>> preload = std::nullopt);
  ~ForkServer();  // closes the socket, kills and reaps the server (and so its workers)
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  // ARGS of `argv` if this server can start it (the same interpreter and
  // flags), nullopt otherwise.
  std::optional<std::vector<std::string>> args_for(const std::vector<std::string>& argv) const;

  // Forks a worker running ARGS, with in_r, out_w, err_w as its fds 0-2 (the
  // caller keeps and closes its copies) and `env` as its whole environment.
  // Returns its pid once the server has forked it. Throws std::runtime_error
  // when the server refuses (a Python start-up variable such as PYTHONPATH
  // differs from the server's), is gone, or does not answer within `timeout`
  // (it is then killed: later calls fail at once).
  pid_t spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
              const std::string& working_dir, int in_r, int out_w, int err_w,
              std::chrono::milliseconds timeout);

  // The worker `pid` has exited (true too once the server is gone: its workers
  // die with it). Does not consume its status.
  bool has_exited(pid_t pid);
  // Waits at most `limit` for the worker's exit and returns its waitpid
  // status (consumed), nullopt if it is unknown (the server is gone).
  std::optional<int> reap(pid_t pid, std::chrono::milliseconds limit);
  // True the first time only: for saying once that workers are started
  // without the server.
  bool tell_fallback_once() { return !fallback_told_.exchange(true); }

  bool alive();                 // the server is running
  pid_t pid() const { return pid_; }
  // Says why the server stopped serving ("" while it serves).
  std::string failure();

 private:
  ForkServer(pid_t pid, int sock, std::vector<std::string> prefix);
  // Reads one message if one comes within `wait` (0: only what is queued).
  // False on timeout; marks the server gone on EOF or error.
  bool read_one(std::chrono::milliseconds wait);
  void drain();
  void fail(const std::string& why);  // stops serving: kills and reaps the server

  std::mutex mu_;
  pid_t pid_ = 0;
  int sock_ = -1;
  std::vector<std::string> prefix_;  // INTERPRETER [FLAGS]
  long long next_seq_ = 0;
  std::map<long long, std::pair<pid_t, std::string>> replies_;  // seq -> (pid, error)
  std::map<pid_t, int> exits_;                                  // worker pid -> status
  std::string failure_;
  std::chrono::steady_clock::time_point started_;
  bool greeted_ = false;  // its first message came
  std::atomic<bool> fallback_told_{false};
};

// Whether the engine starts its evaluator workers through a fork server, for
// `workers` of them on a node of `cores`. KILN_FORK_SERVER=1: always; 0:
// never; unset (auto): when the workers outnumber the cores, so their imports
// would compete for them (with no more workers than cores the server gains
// nothing: docs/performance-journal.md, "The fork server"). Reads the environment;
// thread-safe.
bool want_fork_server(int workers, unsigned cores);

}  // namespace kiln
