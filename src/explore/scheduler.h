// The scheduler: the catalog-facing half of exploration, independent of where
// candidates run. It claims jobs, asks the worker for a job's config space,
// asks the job's generator for candidates, hands out worker requests
// (WorkItems), records what comes back, and selects each job's best.
//
// Executors drive it: the local explorer (src/explore/explorer.h) runs
// WorkItems on worker processes of this machine; the MPI launcher (mpi/) ships
// them to worker ranks. Everything runs on one thread, the io_context's.
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "evaluate/protocol.h"
#include "evaluate/reply.h"
#include "evaluate/worker_process.h"
#include "explore/dispatch.h"
#include "explore/run_counts.h"
#include "explore/scheduling.h"
#include "generate/generator.h"
#include "manifest/manifest.h"
#include "metrics/run_metrics.h"

namespace kiln {

// A request for one worker: enumerate a job's config space, evaluate one
// candidate, or time a job's finalists and baselines again (the confirmation
// round, confirm.h). `request` is the protocol message without its id.
struct WorkItem {
  enum class Kind { kSpace, kEvaluate, kConfirm };
  Kind kind = Kind::kEvaluate;
  long long job_id = 0;
  CandidateRow candidate;          // kEvaluate
  nlohmann::json request;
  double timeout_s = 300;
  std::string label;               // for logs
};

struct SchedulerOptions {
  std::string owner;               // lease owner, host:pid
  SchedulingSettings scheduling;   // lease, bench cutoff, ready candidates per slot
  std::optional<std::string> batch;
  std::optional<JobShard> shard;   // only jobs with id % count == index
  ClaimOrder claim_order = ClaimOrder::kLongestFirst;  // Catalog::claim_job's
  std::filesystem::path artifact_dir;  // the worker writes code objects here (per slot subdirs)
  // > 1: evaluations are buffered and written up to this many per transaction
  // (Catalog::record_evaluations), and a round's candidates in one transaction;
  // buffered ones are written by flush(), before selection and on drain. The
  // MPI coordinator uses it; 1 writes each evaluation at once.
  int record_batch = 1;
  // > 0: claim the next job ahead, as soon as fewer than this many candidates
  // are ready to hand out (and no active job is being planned), instead of
  // only when none is; executors pass their slot count. 0: claim on empty.
  int lookahead = 0;
  // Reads a code object the worker reported at `path` (default: the file).
  std::function<std::string(const std::filesystem::path&)> read_artifact;
  // Where evaluations, jobs' ends, best-so-far latencies, confirmation rounds
  // and (through JobContext) LLM calls are published; null: nowhere. Not owned.
  metrics::RunMetrics* metrics = nullptr;
};

struct SchedulerStats : RunCounts {
  std::string last_best;
};

class Scheduler {
 public:
  Scheduler(Catalog& catalog, const Knowledge& knowledge, boost::asio::io_context& io,
            SchedulerOptions options, std::ostream& log);
  ~Scheduler();

  // The executing device, from the workers' hello: decides whether a job's
  // latencies count as measured (device of the target's kind) and so whether
  // the worker benchmarks at all.
  void set_device(const std::string& device_name);
  // SchedulerOptions::lookahead, for executors that learn their slots late
  // (MPI ranks report theirs when ready).
  void set_lookahead(int candidates) { opts_.lookahead = candidates; }

  // Called whenever new work may have become available (a generator answered
  // asynchronously); the executor then calls next() for its idle slots.
  void on_work_available(std::function<void()> fn) { wake_ = std::move(fn); }

  // The next request for an idle slot, claiming a job when no active job has
  // work. `slot` names the artifact subdirectory. nullopt: nothing to do now.
  std::optional<WorkItem> next(int slot);

  // The worker's answer (or timeout / crash) for an item from next(), checked
  // and typed once by the executor (evaluate/reply.h check_answer): the
  // scheduler reads that value and never the reply's JSON again.
  void complete(const WorkItem& item, const CheckedAnswer& answer, const std::string& worker);
  // The same for an answer not yet checked (one that came over MPI): checked
  // here, by the item's kind, then as above.
  void complete(const WorkItem& item, WorkerOutcome outcome, const std::string& worker);

  // Takes back an item from next() unrecorded, as if it had never been handed
  // out: its executor lost it (an MPI worker rank that stopped answering). An
  // evaluation goes back to the front of its job's queue; a space request will
  // be asked again. No-op when the job is no longer active (drained). Does not
  // call the on_work_available callback: the executor calls next() afterwards.
  void requeue(const WorkItem& item);
  // Writes buffered evaluations (record_batch > 1); a catalog error is fatal().
  void flush();

  // No claimable job left and nothing active: the run is over.
  bool finished() const;
  // Stops claiming; releases every active job back to the queue.
  void drain();
  // Fatal catalog error (the executor stops and reports it).
  const std::string& fatal() const { return fatal_; }

  const SchedulerStats& stats() const { return stats_; }
  size_t active_jobs() const;
  // Candidates generated and waiting for a slot, over the active jobs.
  size_t ready_candidates() const;

 private:
  struct Job;
  bool claim();
  bool planning() const;  // an active job still waits for its space or its next round
  void plan(Job& job);
  void on_proposals(long long job_id, std::vector<Proposal> proposals, std::vector<std::string> notes);
  void maybe_finish(long long job_id);
  bool start_confirmation(Job& job);  // true: a confirm item is queued for the job
  void complete_confirmation(Job& job, const CheckedAnswer& a);
  void select_and_finish(Job& job);
  void finish(Job& job, bool ok, const std::string& message);
  void record(const WorkItem& item, const CheckedAnswer& a, const std::string& worker);
  void publish_evaluation(Job& job, const EvaluationIn& e, const EvaluationResult& result);
  std::vector<Outcome> history(const Job& job) const;
  void fail(const std::string& why);

  Catalog& catalog_;
  const Knowledge& knowledge_;
  boost::asio::io_context& io_;
  SchedulerOptions opts_;
  std::ostream& log_;
  std::function<void()> wake_;
  std::string device_;
  std::map<long long, std::unique_ptr<Job>> active_;
  SlotAffinity affinity_;  // which jobs each slot has set up (dispatch.h)
  bool queue_empty_ = false, draining_ = false;
  std::string fatal_;
  SchedulerStats stats_;
  std::vector<std::pair<long long, EvaluationIn>> unflushed_;
};

}  // namespace kiln
