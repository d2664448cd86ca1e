// A long-lived evaluator child process (worker/kiln_worker), spoken to in JSON
// lines over its stdin/stdout, driven by Boost.Asio on the caller's io_context.
//
// The child runs in its own process group, so a timeout kills the worker and
// anything it started (ptxas, ...), and asks the kernel for SIGKILL when its
// parent dies (prctl PR_SET_PDEATHSIG), so `kill -9` of the engine leaves no
// orphans. It also exits by itself when its stdin closes.
//
// Threading: a WorkerProcess is not thread-safe. Call its methods from the
// thread that runs the io_context (or before io.run()), and run that
// io_context on one thread only. PR_SET_PDEATHSIG fires when the *thread* that
// called start() exits, not only the process: call start()/restart() from a
// thread that lives as long as the worker (the main thread / the io thread).
//
// A child is either started here (fork and exec) or forked by a ForkServer
// (WorkerOptions::fork_server): the same process group, kill and crash
// reports either way; the server tells its children's exit status.
//
// Process-wide effects: the first start() sets SIGPIPE to SIG_IGN if it was
// SIG_DFL (a write to a dead worker must be an error, not the engine's death);
// the child gets SIGPIPE back to SIG_DFL and an empty signal mask. Children are
// reaped with waitpid(pid): do not set SIGCHLD to SIG_IGN or reap with
// waitpid(-1) elsewhere in the engine.
#pragma once
#include <utility>  // before Asio: Boost 1.74's Asio misses it under newer GCC
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace kiln {

class ForkServer;  // evaluate/fork_server.h

struct WorkerOptions {
  std::vector<std::string> argv;               // e.g. {"python3", "-m", "kiln_worker"}
                                               // argv[0] without '/' is searched in PATH
                                               // (the PATH of the child's environment)
  std::map<std::string, std::string> env;      // added to / overriding the parent's environment
  std::string working_dir;                     // empty: inherit
  size_t stderr_tail_bytes = 8192;             // kept for crash reports
  bool echo_stderr = false;                    // copy the child's stderr to ours, each line
                                               // prefixed "[worker PID] "
  std::shared_ptr<ForkServer> fork_server;     // when set (and it serves argv's interpreter),
                                               // the child is forked by it instead of started
                                               // here; if it cannot, the child is started here
};

struct WorkerOutcome {
  enum class Kind { kReply, kTimeout, kCrash };
  Kind kind = Kind::kReply;
  nlohmann::json reply;      // kReply: the child's JSON answer (may be {"ok": false, ...})
  std::string detail;        // kTimeout/kCrash: what happened ("killed after 300 s",
                             // "exited with code 3", "killed by signal 11 (SIGSEGV)"),
                             // then "; stderr:\n" and the stderr tail (valid UTF-8)
};

class WorkerProcess {
 public:
  using Done = std::function<void(WorkerOutcome)>;

  WorkerProcess(boost::asio::io_context& io, WorkerOptions options);
  // Kills the child's process group and reaps the child. A pending request's
  // done is never called after destruction; handlers still queued on the
  // io_context are harmless (they hold the internals alive and do nothing).
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Spawns the child. Throws std::runtime_error if it cannot be started
  // ("cannot start python3: No such file or directory — install Python 3 or
  // set KILN_PYTHON"), std::logic_error if a live child is already running (a
  // dead one not yet noticed is reaped first, its pending request ends kCrash).
  void start();

  // Sends one request (an "id" member is set) and calls done exactly once, on
  // the io_context (never inside request()), with the reply, or kTimeout after
  // `timeout` (the child's process group is then killed), or kCrash if the
  // child exits or its stdout closes first (the child is then reaped, its
  // group killed). After kTimeout/kCrash the worker is not running: call
  // restart(). On a worker that is not running, done gets kCrash. Lines on the
  // child's stdout that are not JSON objects with this id are skipped (and
  // kept in the stderr tail as "[stdout] ..."). One request at a time per
  // worker: throws std::logic_error if busy().
  void request(nlohmann::json req, std::chrono::milliseconds timeout, Done done);

  // Kills the process group (SIGKILL) and reaps the child. A pending request
  // completes with kCrash ("killed by the engine"). No-op when not running.
  void kill();
  // Sends SIGKILL to the process group and returns at once; a later kill()
  // reaps the child. See kill_all().
  void signal_kill();
  // SIGKILL, then forgets the child without reaping it (kill_all reaps it
  // elsewhere): returns its pid, 0 if none was running. A pending request
  // completes with kCrash ("killed by the engine").
  int abandon();
  // kill() then start(): a fresh child.
  void restart();
  // Closes the child's stdin (the worker exits by itself), waits up to `grace`
  // for it to exit, then kill()s what is left. Blocks the calling thread.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  bool alive() const;        // a child is running (started, not exited)
  int pid() const;           // the running child's pid (= its process group), 0 if none
  bool busy() const;         // a request is pending (false again before its done runs)
  const std::string& stderr_tail() const;  // the current child's stderr tail (raw bytes)

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with in-flight handlers
};

// Starts a worker, sends one request, waits for the answer (own io_context),
// then kills the worker. Returns the reply as is (check "ok" yourself).
// Throws std::runtime_error if the worker cannot start, and with the detail on
// timeout ("worker timed out: killed after ...") or crash ("worker crashed: ...").
nlohmann::json call_worker_once(const WorkerOptions& options, nlohmann::json req,
                                std::chrono::milliseconds timeout);

// Kills several workers at once: SIGKILL to every one first, then reaps each.
// A GPU worker takes about 0.1 s to exit (the driver tears down its CUDA
// context), so killing 24 one after the other took 2-3 s at the end of a run.
// With `wait` false the children are reaped by a detached thread instead and
// kill_all returns at once (each worker is no longer alive() and its pending
// request has ended): for the end of a run, whose results are all recorded by
// then; the driver's teardown of 24 GPU workers still took 2 s when they were
// killed together.
void kill_all(const std::vector<WorkerProcess*>& workers, bool wait = true);

// The same with several requests, sent one after the other to one worker (each
// with `timeout`); the replies in order. Throws as call_worker_once.
std::vector<nlohmann::json> call_worker(const WorkerOptions& options, std::vector<nlohmann::json> reqs,
                                        std::chrono::milliseconds timeout);

}  // namespace kiln
