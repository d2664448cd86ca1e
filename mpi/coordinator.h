// Rank 0 of kiln-mpi: the coordinator, the catalog's only writer.
//
// It runs the Scheduler (src/explore/scheduler.h) on its io_context and ships
// the scheduler's WorkItems to worker ranks as `work` messages, keeping up to
// slots + prefetch items outstanding per rank: a rank gets more as its slots
// free (self-scheduling, never a static split). Results are recorded through
// the scheduler. A rank that says `bye` or stays silent for the heartbeat
// timeout has its outstanding items requeued (Scheduler::requeue) and the
// batch goes on with the others; with none left the coordinator drains and
// exits 4 (a rank leaves when its last evaluator slot is dropped, under the
// slot pool's failure policy, explore/slot_pool.h). Leases, progress lines,
// metrics and signals are a RunSupervisor's (explore/run_supervisor.h):
// SIGTERM / SIGINT / SIGUSR1 drain: no new work, `stop` to every rank, active
// jobs released to the queue, exit 130.
#pragma once
#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <ostream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "checkpoint.h"
#include "explore/run_supervisor.h"
#include "explore/scheduler.h"
#include "metrics/run_metrics.h"
#include "manifest/manifest.h"
#include "transport.h"

namespace kiln::mpi {

// Exit codes of kiln-mpi (rank 0; mpirun/srun pass them on, see docs/cluster.md).
inline constexpr int kExitOk = 0, kExitError = 1, kExitUsage = 2, kExitNoWorkers = 4, kExitInterrupted = 130;

struct CoordinatorOptions {
  int prefetch = 2;                            // items beyond a rank's slots kept at the rank
  std::optional<std::string> batch;
  SchedulingSettings scheduling;               // lease, bench cutoff, ready candidates per slot
  std::filesystem::path scratch;               // rank 0's node-local scratch (received code objects)
  double heartbeat_interval_s = 5;
  double heartbeat_timeout_s = 30;
  std::optional<std::filesystem::path> checkpoint_to;
  double checkpoint_every_s = 0;               // 0: only at the end
  std::optional<std::filesystem::path> status_file;
  double progress_interval_s = 5;
  std::string owner;                           // lease owner (host:pid of rank 0)
  int record_batch = 64;                       // evaluations per catalog transaction (flushed every 200 ms)
  // Where the run's metrics go (src/metrics; refreshed with each progress
  // line and at the end); null: nowhere. Not owned.
  metrics::RunMetrics* metrics = nullptr;
};

struct CoordinatorSummary {
  int jobs_done = 0, jobs_failed = 0, candidates = 0, candidate_failures = 0;
  bool interrupted = false;
  int exit_code = 0;
  std::string error;
  std::string device;
  int worker_ranks = 0, ranks_ready = 0, ranks_lost = 0;
  long long items_sent = 0, items_requeued = 0;
  double wall_s = 0;       // whole run at rank 0
  double busy_s = 0;       // first work sent -> last result
  double cpu_s = 0;        // rank 0 user+sys, whole run
  double busy_cpu_s = 0;   // rank 0 user+sys during busy_s
  int checkpoints = 0;
  // GPU time from the evaluators' own spans (timings.gpu_spans), per
  // evaluating rank (one GPU each): the union over rank 0's wall time.
  std::vector<std::string> gpu_ranks;      // "rank R on HOST (DEVICE)" per rank with GPU work
  std::vector<double> gpu_busy_each_s;
  std::optional<double> gpu_busy_fraction;  // sum / (wall_s x ranks with GPU work)
  // The device's own account (explorer.h, RunSummary::gpu_kernel_s): kernel
  // time measured by device events in the timed calls, over wall_s x ranks.
  double gpu_kernel_s = 0;
  std::optional<double> gpu_kernel_fraction;
  nlohmann::json to_json() const;
};

class Coordinator {
 public:
  // `peers`: the ranks that evaluate (1..size-1, plus 0 with coordinator slots).
  Coordinator(boost::asio::io_context& io, Transport& transport, Catalog& catalog, const Knowledge& knowledge,
              std::vector<int> peers, CoordinatorOptions options, std::ostream& log);
  ~Coordinator();

  void start();
  // A message from a worker rank (ready, result, heartbeat, bye).
  void handle(int source, const nlohmann::json& message);
  // Called once when the run is over and every rank has said bye (or the grace ran out).
  void on_finished(std::function<void()> fn) { on_finished_ = std::move(fn); }
  // Whether every remote rank said bye (then MPI_Finalize cannot wait on a lost one).
  bool all_ranks_said_bye() const;
  CoordinatorSummary summary() const;
  // Writes the status file (exit code + summary), if one was asked for.
  void write_status() const;

 private:
  struct Peer {
    enum class State { kStarting, kReady, kGone };
    int rank = 0;
    State state = State::kStarting;
    int slots = 0;
    std::map<long long, WorkItem> outstanding;
    std::chrono::steady_clock::time_point last_heard;
    bool said_bye = false, lost = false;
    std::string host, device;
    long long evaluated = 0;
    std::set<long long> jobs;  // job documents this rank has been sent
    std::vector<std::pair<double, double>> gpu_spans;  // unix seconds, from its evaluators
    std::vector<std::pair<double, double>> bench_spans;  // the timed benchmark runs among them
    double gpu_kernel_s = 0;                           // device-event kernel seconds, from its evaluators
  };
  void on_ready(Peer& p, const nlohmann::json& m);
  void on_result(Peer& p, const nlohmann::json& m);
  void on_bye(Peer& p, const nlohmann::json& m);
  void lose(Peer& p, const std::string& why);
  void pump();
  bool send_one(Peer& p);
  void end(int code, const std::string& why);
  void finish();
  void check_byes();
  void arm_heartbeat();
  void arm_checkpoint();
  void arm_flush();
  void checkpoint(const char* when);
  void step_checkpoint();
  std::string progress_line(bool final_line) const;
  void publish_metrics();
  // The code object sent with a reply (`res`: the reply typed), kept under a
  // path of rank 0's scratch that replaces the worker's in `reply` (also
  // stored in *key); "" or why it is lost.
  std::string attach_artifact(Peer& p, long long item_id, const EvaluationResult& res, nlohmann::json& reply,
                              const nlohmann::json& m, std::string* key);
  size_t live_peers() const;
  size_t outstanding() const;

  boost::asio::io_context& io_;
  Transport& transport_;
  Catalog& catalog_;
  CoordinatorOptions opts_;
  std::ostream& log_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<int, Peer> peers_;
  std::filesystem::path artifact_dir_;
  std::unique_ptr<RunSupervisor> supervisor_;  // leases, progress lines, metrics, signals
  boost::asio::steady_timer heartbeat_timer_, checkpoint_timer_, grace_timer_, flush_timer_;
  std::map<std::string, std::string> artifacts_;
  std::map<std::string, std::string> artifact_errors_;  // path -> why the rank refused the file
  std::unique_ptr<CatalogCopy> copy_;  // a periodic checkpoint in progress  // code objects received, by the path the scheduler is given
  std::string device_;
  long long next_item_ = 1;
  int rr_ = 0;  // round-robin start among peers
  bool ending_ = false, finished_ = false, pumping_ = false;
  std::function<void()> on_finished_;
  CoordinatorSummary sum_;
  std::chrono::steady_clock::time_point t0_, t_first_, t_last_;
  double t0_epoch_ = 0;  // t0_ in unix seconds (the evaluators' span clock)
  double cpu_first_ = 0, cpu_last_ = 0;
  bool any_dispatched_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// user+sys CPU seconds of this process so far (getrusage).
double process_cpu_seconds();

}  // namespace kiln::mpi
