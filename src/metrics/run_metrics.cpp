#include "metrics/run_metrics.h"

#include <algorithm>

namespace kiln::metrics {

RunMetrics::RunMetrics(Registry& r) : registry_(r) {
  const auto C = Type::kCounter, G = Type::kGauge;
  r.define("kiln_run_start_time_seconds", G, "When this run started, in unix seconds.");
  r.define("kiln_run_last_update_time_seconds", G, "When this run last published its metrics, in unix seconds.");
  r.define("kiln_run_running", G, "1 while the run goes on, 0 once it is over.");
  r.define("kiln_workers", G, "Evaluator slots of this run, by state (ready: answered hello).", {"state"});
  r.define("kiln_jobs", G, "Jobs in the catalog (of the run's batch, if given) by state.", {"state"});
  r.define("kiln_jobs_finished_total", C, "Jobs this run finished, by result (done, failed).", {"result"});
  r.define("kiln_candidates_evaluated_total", C, "Candidates this run evaluated, by evaluation status.",
           {"status"});
  r.define("kiln_compile_seconds_total", C, "Seconds the evaluators spent compiling candidates.");
  r.define("kiln_check_seconds_total", C, "Seconds the evaluators spent checking candidates against the reference.");
  r.define("kiln_bench_seconds_total", C, "Wall seconds the evaluators spent in timed benchmarks.");
  r.define("kiln_job_best_latency_seconds", G,
           "Best correct latency so far of each running job (median; basis measured or estimated).",
           {"job", "op", "shape", "dtype", "target", "basis"});
  r.define("kiln_confirmation_rounds_total", C, "Confirmation rounds by outcome (confirmed, failed).", {"result"});
  r.define("kiln_queue_candidates", G, "Candidates generated and waiting for an evaluator slot.");
  r.define("kiln_candidates_in_flight", G, "Requests handed to evaluators and not yet answered.");
  r.define("kiln_worker_restarts_total", C, "Evaluator workers replaced, by reason (timeout, crash, exited).",
           {"reason"});
  r.define("kiln_gpu_held_seconds_total", C,
           "Seconds some worker held the GPU (union of the workers' lock-held spans).", {"gpu"});
  r.define("kiln_gpu_bench_held_seconds_total", C, "Seconds the GPU was held for timed benchmark runs alone.",
           {"gpu"});
  r.define("kiln_gpu_kernel_seconds_total", C,
           "Kernel seconds the device's own events measured in timed calls (a lower bound of GPU work).", {"gpu"});
  r.define("kiln_gpu_busy_ratio", G,
           "Share of the run's wall time the GPU was busy so far, by account (lock_held, device_kernel).",
           {"gpu", "account"});
  r.define("kiln_llm_calls_total", C, "Calls to the LLM endpoint, by model and status (ok, error).",
           {"model", "status"});
  r.define("kiln_llm_tokens_total", C, "Tokens the LLM endpoint reported, by model and kind (prompt, completion).",
           {"model", "kind"});
  r.define("kiln_llm_call_seconds_total", C, "Seconds spent in LLM calls (retries and backoff included), by model.",
           {"model"});
  // Series that exist from the start, so rate() and absent() see them at 0.
  for (const char* s : {"done", "failed"}) r.add("kiln_jobs_finished_total", {s}, 0);
  for (const char* s : {"confirmed", "failed"}) r.add("kiln_confirmation_rounds_total", {s}, 0);
  for (const char* s : {"timeout", "crash", "exited"}) r.add("kiln_worker_restarts_total", {s}, 0);
  r.add("kiln_candidates_evaluated_total", {"ok"}, 0);
  r.add("kiln_compile_seconds_total", {}, 0);
  r.add("kiln_check_seconds_total", {}, 0);
  r.add("kiln_bench_seconds_total", {}, 0);
  jobs_by_state({});
  queue(0, 0);
}

void RunMetrics::run_started(double unix_s, int workers) {
  registry_.set("kiln_run_start_time_seconds", {}, unix_s);
  registry_.set("kiln_workers", {"total"}, workers);
  registry_.set("kiln_workers", {"ready"}, 0);
  heartbeat(unix_s);
  registry_.set("kiln_run_running", {}, 1);
}

void RunMetrics::heartbeat(double unix_s) { registry_.set("kiln_run_last_update_time_seconds", {}, unix_s); }

void RunMetrics::run_finished(double unix_s) {
  heartbeat(unix_s);
  registry_.set("kiln_run_running", {}, 0);
  registry_.set("kiln_workers", {"ready"}, 0);
  queue(0, 0);
}

void RunMetrics::workers_ready(int ready) { registry_.set("kiln_workers", {"ready"}, ready); }

void RunMetrics::workers(int total, int ready) {
  registry_.set("kiln_workers", {"total"}, total);
  registry_.set("kiln_workers", {"ready"}, ready);
}

void RunMetrics::jobs_by_state(const std::map<std::string, long long>& counts) {
  for (const char* s : {"queued", "running", "done", "failed"}) {
    auto it = counts.find(s);
    registry_.set("kiln_jobs", {s}, it == counts.end() ? 0 : static_cast<double>(it->second));
  }
  for (const auto& [s, n] : counts)
    if (s != "queued" && s != "running" && s != "done" && s != "failed")
      registry_.set("kiln_jobs", {s}, static_cast<double>(n));
}

void RunMetrics::drop_best(long long job_id) {
  std::lock_guard lock(mu_);
  auto it = best_labels_.find(job_id);
  if (it == best_labels_.end()) return;
  registry_.remove("kiln_job_best_latency_seconds", it->second);
  best_labels_.erase(it);
}

void RunMetrics::job_finished(const JobLabels& job, bool ok) {
  registry_.add("kiln_jobs_finished_total", {ok ? "done" : "failed"}, 1);
  drop_best(job.id);
}

void RunMetrics::job_released(const JobLabels& job) { drop_best(job.id); }

void RunMetrics::evaluation(const std::string& status, double compile_s, double check_s, double bench_s) {
  registry_.add("kiln_candidates_evaluated_total", {status}, 1);
  registry_.add("kiln_compile_seconds_total", {}, std::max(0.0, compile_s));
  registry_.add("kiln_check_seconds_total", {}, std::max(0.0, check_s));
  registry_.add("kiln_bench_seconds_total", {}, std::max(0.0, bench_s));
}

void RunMetrics::best_so_far(const JobLabels& job, const std::string& basis, double seconds) {
  std::vector<std::string> labels{std::to_string(job.id), job.op, job.shape, job.dtype, job.target, basis};
  std::lock_guard lock(mu_);
  auto it = best_labels_.find(job.id);
  if (it != best_labels_.end() && it->second != labels) registry_.remove("kiln_job_best_latency_seconds", it->second);
  registry_.set("kiln_job_best_latency_seconds", labels, seconds);
  best_labels_[job.id] = std::move(labels);
}

void RunMetrics::confirmation(bool confirmed) {
  registry_.add("kiln_confirmation_rounds_total", {confirmed ? "confirmed" : "failed"}, 1);
}

void RunMetrics::queue(long long ready_candidates, long long in_flight) {
  registry_.set("kiln_queue_candidates", {}, static_cast<double>(ready_candidates));
  registry_.set("kiln_candidates_in_flight", {}, static_cast<double>(in_flight));
}

void RunMetrics::worker_restart(const std::string& reason) { registry_.add("kiln_worker_restarts_total", {reason}, 1); }

void RunMetrics::gpu(const std::string& gpu, double held_s, double bench_held_s, double kernel_s, double wall_s) {
  registry_.raise_to("kiln_gpu_held_seconds_total", {gpu}, held_s);
  registry_.raise_to("kiln_gpu_bench_held_seconds_total", {gpu}, bench_held_s);
  registry_.raise_to("kiln_gpu_kernel_seconds_total", {gpu}, kernel_s);
  if (wall_s > 0) {
    registry_.set("kiln_gpu_busy_ratio", {gpu, "lock_held"}, std::min(1.0, held_s / wall_s));
    registry_.set("kiln_gpu_busy_ratio", {gpu, "device_kernel"}, std::min(1.0, kernel_s / wall_s));
  }
}

void RunMetrics::gpu_driver(const std::string& gpu, double fraction) {
  registry_.set("kiln_gpu_busy_ratio", {gpu, "driver"}, std::clamp(fraction, 0.0, 1.0));
}

void RunMetrics::llm_call(const std::string& model, const std::string& status, std::optional<long long> prompt_tokens,
                          std::optional<long long> completion_tokens, double latency_s) {
  registry_.add("kiln_llm_calls_total", {model, status}, 1);
  if (prompt_tokens) registry_.add("kiln_llm_tokens_total", {model, "prompt"}, static_cast<double>(*prompt_tokens));
  if (completion_tokens)
    registry_.add("kiln_llm_tokens_total", {model, "completion"}, static_cast<double>(*completion_tokens));
  registry_.add("kiln_llm_call_seconds_total", {model}, std::max(0.0, latency_s));
}

}  // namespace kiln::metrics
