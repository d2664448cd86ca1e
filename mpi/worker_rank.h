// A worker rank: W evaluator slots (a SlotPool, explore/slot_pool.h: the
// same slots and failure policy as `kiln run`) fed with work items by the
// coordinator over MPI messages.
//
// It announces itself with `ready` once its first evaluator answers hello,
// runs the items it is sent in order (at most W at once; the rest wait in its
// queue: the coordinator prefetches one or two per rank), and sends one
// `result` per item. A timeout or crash is reported as such and the slot gets
// a fresh worker: a bad candidate never takes the rank down. A slot that
// cannot start is retried with backoff, then dropped; with no slot left the
// rank leaves (`bye`, "no evaluator worker is left: ...") and the coordinator
// requeues its items. Heartbeats go to the coordinator every
// heartbeat_interval_s; if the coordinator is silent for heartbeat_timeout_s
// the rank gives up (rank 0 is gone). A `stop` or a signal ends the rank: it
// kills its evaluators, says `bye` and finishes.
//
// Threading: single-threaded, on the io_context it is given (with its
// transport). Ownership: the io_context, transport and log outlive it.
#pragma once
#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "evaluate/worker_process.h"
#include "explore/slot_pool.h"
#include "transport.h"

namespace kiln::mpi {

struct WorkerRankOptions {
  int slots = 1;
  std::string device = "auto";                 // KILN_DEVICE for the evaluators
  std::filesystem::path scratch;               // this run's node-local dir for this rank: slot-N/ code objects
  std::filesystem::path triton_cache;          // node-local Triton cache (kept between runs)
  bool echo_stderr = false;
  std::map<std::string, std::string> env;      // GPU binding for the evaluators
  std::string gpu;                             // the GPU id bound ("" = CPU), for `ready`
  double heartbeat_interval_s = 5;
  double heartbeat_timeout_s = 30;             // coordinator silence before giving up; 0 = never
  bool noop = false;                           // answer every request at once, no Python (benchmarks)
  int noop_space = 1000;                       // configs in a noop `space` answer
  int coordinator = 0;
  int start_attempts = 3;                      // SlotPoolOptions: starts in a row before a slot is dropped
  double retry_backoff_s = 1;
};

class WorkerRank {
 public:
  WorkerRank(boost::asio::io_context& io, Transport& transport, WorkerRankOptions options, std::ostream& log);
  ~WorkerRank();

  void start();
  // A message from the coordinator (work, stop, heartbeat).
  void handle(const nlohmann::json& message);
  // Leaves: kills the evaluators, drops queued work, says bye (with the reason).
  void leave(const std::string& reason);
  bool finished() const { return finished_; }
  // Called once when the rank has finished (after leave()).
  void on_finished(std::function<void()> fn) { on_finished_ = std::move(fn); }
  // Exit status for this rank's process: 0 unless it gave up on a lost coordinator.
  int exit_code() const { return exit_code_; }

 private:
  struct Work {
    long long item_id = 0;
    nlohmann::json request;
    double timeout_s = 300;
    long long job_id = 0;   // the job document, from a `job` message
  };
  void on_ready(const nlohmann::json& hello);
  void pump();
  void run_noop(const Work& w, const nlohmann::json& job);
  void send_result(const Work& w, const CheckedAnswer& a, const std::string& worker,
                   const std::filesystem::path& artifact_dir);
  void arm_heartbeat();
  void send(const nlohmann::json& m);

  boost::asio::io_context& io_;
  Transport& transport_;
  WorkerRankOptions opts_;
  std::ostream& log_;
  std::string label_;  // "rank R"
  std::unique_ptr<SlotPool> pool_;  // null with noop
  std::deque<Work> queue_;
  std::map<long long, nlohmann::json> jobs_;  // job documents by id
  boost::asio::steady_timer heartbeat_timer_;
  std::chrono::steady_clock::time_point last_heard_;
  bool ready_sent_ = false, finished_ = false;
  int exit_code_ = 0;
  std::function<void()> on_finished_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace kiln::mpi
