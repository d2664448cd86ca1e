// The evaluator slots of one process: N long-lived Python workers
// (evaluate/worker_process.h), each started, greeted with `hello`, fed one
// request at a time, and restarted when it times out or crashes. Both
// executors use it: `kiln run` (explore/explorer.h) and each kiln-mpi worker
// rank (mpi/worker_rank.h).
//
// Failure policy (the one policy of both modes, docs/architecture.md):
//   - Start-up: a slot whose worker cannot be spawned, or whose `hello` fails
//     (an error reply, a crash, no answer within hello_timeout), is started
//     again after retry_backoff_s, doubling each time, up to start_attempts
//     starts in a row; then the slot is dropped (said on the log). A hello
//     that the owner's check rejects (a GPU binding that did not reach the
//     worker) drops the slot at once: a restart would answer the same.
//   - The pool fails only when no slot is left: Hooks::exhausted is called
//     once, with the last slot's reason. Until then the run goes on with the
//     slots it has.
//   - Every answer is checked against the protocol and typed once
//     (evaluate/reply.h check_answer) before its done gets it.
//   - A request that ends in a timeout, a crash or a reply that breaks the
//     protocol is handed to its done with
//     that outcome (the caller records the candidate as an infrastructure
//     fault: `timeout` / `crash`), and the slot gets a fresh worker under the
//     start-up rule above. A worker that exited between requests is replaced
//     before it gets new work, so the next candidate is not blamed for it.
//   - stop() kills every worker; from then on no callback of the pool runs
//     (in-flight requests are abandoned unrecorded).
//
// Threading: single-threaded, like WorkerProcess. Construct, call and destroy
// it on the thread that runs its io_context; every hook and done runs there,
// never inside start, submit or stop (idle_slot may call `restarting` when it
// replaces an exited worker).
// Ownership: the pool owns its workers; the io_context and the log outlive it.
#pragma once
#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "evaluate/reply.h"
#include "evaluate/worker_process.h"

namespace kiln {

struct SlotPoolOptions {
  int slots = 1;
  WorkerOptions worker;                                  // argv, environment, fork server: every slot's
  // Extra environment per slot (a GPU binding): slot i gets slot_env[i]; none: nothing extra.
  std::vector<std::map<std::string, std::string>> slot_env;
  std::chrono::milliseconds hello_timeout{180000};
  int start_attempts = 3;                                // starts in a row before a slot is dropped
  double retry_backoff_s = 1;                            // before the second start; doubled each time
  std::string label;                                     // prefix of log lines ("kiln run", "rank 2")
};

class SlotPool {
 public:
  struct Hooks {
    // A slot answered hello: its result, the seconds from its (re)start,
    // and whether it is the slot's first worker of the run.
    std::function<void(size_t slot, const nlohmann::json& hello, double startup_s, bool first)> ready;
    // "" accepts the hello; anything else drops the slot with that reason.
    std::function<std::string(size_t slot, const nlohmann::json& hello)> check_hello;
    // A slot may take work now (a slot became ready or finished a request).
    std::function<void()> idle;
    // A slot was dropped (its reason); exhausted follows when it was the last.
    std::function<void(size_t slot, const std::string& why)> dropped;
    // No slot is left: the pool cannot evaluate anything more.
    std::function<void(const std::string& why)> exhausted;
    // A worker is being replaced: "timeout", "crash" or "exited" (metrics).
    std::function<void(const char* reason)> restarting;
  };
  // The answer (protocol-checked and typed) and the pid of the worker that produced it.
  using Done = std::function<void(CheckedAnswer answer, int pid)>;

  SlotPool(boost::asio::io_context& io, SlotPoolOptions options, std::ostream& log);
  ~SlotPool();  // kills the workers, waiting for none
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // Starts every slot's worker and sends hello.
  void start(Hooks hooks);
  // A slot that is ready and not busy, or nullopt. A slot whose worker exited
  // between requests is restarted here and not returned.
  std::optional<size_t> idle_slot();
  // Sends `request` to an idle slot (from idle_slot()); done runs once.
  void submit(size_t slot, nlohmann::json request, std::chrono::milliseconds timeout, Done done);
  // Kills every worker at once (not waiting for their exits); no hook or done
  // runs afterwards. Idempotent.
  void stop();

  size_t size() const { return slots_.size(); }
  int ready() const;       // slots whose worker answered hello
  int in_flight() const;   // ready slots with a request out
  int dropped() const;     // slots given up under the failure policy
  bool any_busy() const;   // a request or a hello is out
  int pid(size_t slot) const;

 private:
  struct Slot;
  void start_slot(size_t i);
  void on_hello(size_t i, WorkerOutcome o);
  void failed_start(size_t i, const std::string& why, bool retry);
  void restart(size_t i, const char* reason);

  boost::asio::io_context& io_;
  SlotPoolOptions opts_;
  std::ostream& log_;
  Hooks hooks_;
  std::vector<std::unique_ptr<Slot>> slots_;
  bool stopped_ = false, exhausted_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // guards queued handlers
};

}  // namespace kiln
