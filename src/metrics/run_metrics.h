// What a run (kiln run, kiln-mpi run at rank 0) publishes: the kiln_* metric
// families over a Registry, with one method per event. docs/operations.md
// lists the families.
//
// Threading: any thread (the registry locks; the per-job label map has its
// own mutex). The explorer, the scheduler and the LLM generator hold a
// pointer to one RunMetrics (null: nothing is published). Lifetime: the
// registry outlives this.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "metrics/registry.h"

namespace kiln::metrics {

// The identity of a job in labels.
struct JobLabels {
  long long id = 0;
  std::string op, shape, dtype, target;
};

class RunMetrics {
 public:
  // Defines every family in `registry` (throws std::logic_error when one is
  // defined there already).
  explicit RunMetrics(Registry& registry);

  Registry& registry() { return registry_; }

  // The run's start (unix seconds) and its evaluator slots.
  void run_started(double unix_s, int workers);
  // Whether the run is still going (1) or over (0), and when it last published.
  void heartbeat(double unix_s);
  void run_finished(double unix_s);
  void workers_ready(int ready);
  // Both at once (kiln-mpi: slots are known as the ranks get ready).
  void workers(int total, int ready);

  // Catalog-wide job counts by state (queued, running, done, failed: each
  // present, 0 when absent from `counts`).
  void jobs_by_state(const std::map<std::string, long long>& counts);
  // A job this run finished: done or failed.
  void job_finished(const JobLabels& job, bool ok);
  // A job released back to the queue unfinished (drain): its best-so-far goes.
  void job_released(const JobLabels& job);

  // One recorded evaluation: its status and the worker's timings (seconds).
  void evaluation(const std::string& status, double compile_s, double check_s, double bench_s);
  // A running job's best correct latency so far (seconds), measured on the
  // target's kind of device or estimated by the static model.
  void best_so_far(const JobLabels& job, const std::string& basis, double seconds);
  // A confirmation round's outcome: "confirmed" or "failed".
  void confirmation(bool confirmed);

  // Ready candidates waiting for a slot, and items at the workers.
  void queue(long long ready_candidates, long long in_flight);
  // A worker replaced: "timeout", "crash" (it died or broke the protocol) or
  // "exited" (it left between requests).
  void worker_restart(const std::string& reason);

  // Per GPU (its id, "0" when unbound): seconds held by a worker (union of
  // spans; bench: timed benchmark runs alone), kernel seconds by device
  // events, and the run's wall seconds so far, for the busy ratios.
  void gpu(const std::string& gpu, double held_s, double bench_held_s, double kernel_s, double wall_s);
  // Per GPU: the driver's utilisation so far (0..1, the mean of its NVML
  // samples: explore/utilisation.h), kiln_gpu_busy_ratio{account="driver"}.
  void gpu_driver(const std::string& gpu, double fraction);

  // One LLM call ("ok" | "error"): tokens where the endpoint reported usage.
  void llm_call(const std::string& model, const std::string& status, std::optional<long long> prompt_tokens,
                std::optional<long long> completion_tokens, double latency_s);

 private:
  void drop_best(long long job_id);

  Registry& registry_;
  std::mutex mu_;
  std::map<long long, std::vector<std::string>> best_labels_;  // job id -> its best-so-far series
};

}  // namespace kiln::metrics
