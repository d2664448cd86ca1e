// The explorer (`kiln run`): claims jobs from the catalog and runs their
// candidates over N evaluator slots in parallel, until no claimable job
// remains.
//
// Single-threaded: everything runs on one Boost.Asio io_context (worker pipes,
// timers, signals), so the catalog is written from one thread. The slots are
// a SlotPool (explore/slot_pool.h, whose failure policy kiln-mpi shares: a
// slot that cannot start is retried with backoff, then dropped; a candidate
// that times out or crashes its worker is recorded as `timeout` / `crash` and
// the slot gets a fresh worker); leases, progress and signals are a
// RunSupervisor's (explore/run_supervisor.h).
#pragma once
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "evaluate/gpu_binding.h"
#include "evaluate/protocol.h"
#include "evaluate/worker_process.h"
#include "explore/run_supervisor.h"
#include "explore/run_counts.h"
#include "explore/scheduling.h"
#include "manifest/manifest.h"
#include "metrics/run_metrics.h"

namespace kiln {

struct RunOptions {
  int workers = 1;
  std::string device = "auto";              // auto | cpu | gpu (KILN_DEVICE for workers)
  // The GPUs the slots are spread over (slot i on gpus.ids[i % G], bound
  // through CUDA_/ROCR_VISIBLE_DEVICES, see gpu_binding.h); no ids: the
  // evaluators see whatever this process sees (and use its first GPU).
  NodeGpus gpus;
  std::optional<std::string> batch;         // only this batch's jobs
  std::optional<std::pair<int, int>> shard; // (I, N): only jobs with id % N == I (kiln run --shard I/N)
  SchedulingSettings scheduling;             // lease, bench cutoff, ready candidates per slot
  std::filesystem::path scratch_dir;        // artifacts in flight + Triton cache; empty: a temp dir
  bool echo_worker_stderr = false;
  std::ostream* progress = nullptr;         // progress lines; nullptr: std::cerr
  double progress_interval_s = 5;
  // Where the run publishes its metrics (src/metrics), refreshing the sampled
  // ones (jobs by state, queue, GPU busy) every metrics_interval_s; null:
  // none. Not owned; the registry is read by another thread (the exporter).
  metrics::RunMetrics* metrics = nullptr;
  double metrics_interval_s = 2;
  // > 0: a run with a time limit (kiln run --time-limit). It claims the
  // cheapest jobs first (ClaimOrder::kCheapestFirst), so it finishes as many
  // as it can, and time_limit_s after it starts it drains as on a signal:
  // in-flight candidates are abandoned unrecorded and unfinished jobs go back
  // to the queue, for the next run. 0: no limit, the longest jobs first.
  double time_limit_s = 0;
};

// The counts (jobs done / failed / needing an LLM, candidates, confirmation
// rounds) are the scheduler's (RunCounts, scheduler.h).
struct RunSummary : RunCounts {
  bool interrupted = false;                 // stopped by SIGINT/SIGTERM/SIGUSR1
  bool time_limited = false;                // stopped by RunOptions::time_limit_s (not a signal)
  double wall_s = 0;
  double workers_ready_s = 0;               // the slowest worker's start to its hello (first starts)
  std::string device;                       // the executing device the workers reported
  // Time the GPU was held by some worker (benchmarks exclusively, correctness
  // checks shared), from the workers' own timestamps (timings.gpu_spans), as
  // the union of those spans over the run; unset when nothing ran on a GPU.
  // With several GPUs: each GPU's union, and the sums / the mean fraction.
  double gpu_busy_s = 0, gpu_bench_s = 0;   // all GPU work; timed benchmark runs alone
  std::optional<double> gpu_busy_fraction;  // gpu_busy_s / (wall_s x GPUs)
  std::vector<std::string> gpu_ids;         // the bound GPUs ({} when unbound)
  std::vector<double> gpu_busy_each_s;      // per bound GPU (one entry when unbound)
  // The device's own account: kernel time measured by device events (every
  // timed call of the benchmarks and confirmation rounds), summed over the
  // run, and its share of wall_s x GPUs. The lock-held figures above count
  // what the workers reserved; this counts what the GPU executed while timed
  // (checks' and set-ups' kernels are not event-timed and not in it: a lower
  // bound). Unset when nothing was timed on a GPU.
  double gpu_kernel_s = 0;
  std::optional<double> gpu_kernel_fraction;
  // The drivers' account (explore/utilisation.h): the mean of NVML's
  // utilisation samples inside the run -- any kernel running, checks, L2
  // flushes and set-up included -- averaged over the GPUs; the distinct
  // samples and the share of the run they span (the lowest GPU's). Unset
  // where no worker sent samples (CPU, no NVML, AMD).
  std::optional<double> gpu_driver_fraction;
  long long gpu_driver_samples = 0;
  double gpu_driver_coverage = 0;
};

// Runs until the queue is empty or a signal asks to stop. Throws
// std::runtime_error when no slot's worker can start (missing Python
// packages...) or a slot is left to run on, or on a fatal catalog error.
RunSummary run_explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options);

// Seconds covered by the union of [start, end) spans, clipped to [from, to].
double union_seconds(std::vector<std::pair<double, double>> spans, double from, double to);

// Both read one evaluate or confirm answer's result, typed once
// (evaluate/reply.h CheckedAnswer::typed.result; the two share $defs.timings).

// Appends the spans during which an evaluator held its GPU for one request
// (timings.gpu_spans: [start, end, "bench" | "check"] in unix seconds) to
// `all`, and the timed-benchmark ones also to `bench` when given. A result
// without them adds nothing.
void append_gpu_spans(const EvaluationResult& result, std::vector<std::pair<double, double>>& all,
                      std::vector<std::pair<double, double>>* bench = nullptr);

// Seconds of kernel time the worker's device events measured in one answer:
// an evaluation's benchmark (latency.mean_ms x latency.runs) or a confirmation
// round (timings.kernel_s). 0 for a result without GPU timings.
double device_kernel_seconds(const EvaluationResult& result);

// How evaluator workers are started: `python3 -m kiln_worker` with Kiln's
// worker/ and kernels/ on PYTHONPATH, KILN_DEVICE, and the Triton cache dir.
WorkerOptions evaluator_options(const std::string& device, const std::filesystem::path& triton_cache,
                                bool echo_stderr);

// A fork server for `count` workers on this node started with `workers` (their
// argv and common environment; evaluate/fork_server.h), or null when
// want_fork_server says no or it cannot start (said on `log`; the workers then
// start by themselves).
std::shared_ptr<ForkServer> start_fork_server(const WorkerOptions& workers, int count, std::ostream& log);

}  // namespace kiln
