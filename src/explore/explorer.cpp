#include "explore/explorer.h"

#include "evaluate/protocol.h"
#include "evaluate/reply.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "catalog/job_key.h"
#include "evaluate/fork_server.h"
#include "common/hash.h"
#include "common/home.h"
#include "search/estimate.h"
#include "evaluate/startup_steps.h"
#include "evaluate/worker_process.h"
#include "explore/first_results.h"
#include "explore/select.h"
#include "explore/run_supervisor.h"
#include "explore/scheduler.h"
#include "explore/slot_pool.h"
#include "explore/utilisation.h"

namespace kiln {

double union_seconds(std::vector<std::pair<double, double>> spans, double from, double to) {
  for (auto& [a, b] : spans) {
    a = std::max(a, from);
    b = std::min(b, to);
  }
  std::sort(spans.begin(), spans.end());
  double total = 0, cur_a = 0, cur_b = 0;
  bool open = false;
  for (const auto& [a, b] : spans) {
    if (b <= a) continue;
    if (open && a <= cur_b) {
      cur_b = std::max(cur_b, b);
      continue;
    }
    if (open) total += cur_b - cur_a;
    cur_a = a;
    cur_b = b;
    open = true;
  }
  if (open) total += cur_b - cur_a;
  return total;
}

void append_gpu_spans(const EvaluationResult& result, std::vector<std::pair<double, double>>& all,
                      std::vector<std::pair<double, double>>* bench) {
  for (const GpuSpan& sp : result.timings.gpu_spans) {
    all.emplace_back(sp.start, sp.end);
    if (bench && sp.kind == "bench") bench->emplace_back(sp.start, sp.end);
  }
}

double device_kernel_seconds(const EvaluationResult& r) {
  double s = r.timings.kernel_s.value_or(0);
  if (r.latency && r.latency->mean_ms && r.latency->runs) s += *r.latency->mean_ms * *r.latency->runs / 1000;
  return s;
}

WorkerOptions evaluator_options(const std::string& device, const std::filesystem::path& triton_cache,
                                bool echo_stderr) {
  const auto home = kiln_home();
  WorkerOptions w;
  w.argv = {python_executable(), "-m", "kiln_worker"};
  std::string pythonpath = (home / "worker").string() + ":" + home.string();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += std::string(":") + old;
  w.env = {{"PYTHONPATH", pythonpath},
           {"KILN_HOME", home.string()},
           {"KILN_DEVICE", device},
           {"PYTHONUNBUFFERED", "1"},
           // `python3 -m` would put the user's working directory first on
           // sys.path: an http.py or random.py there would replace the
           // standard module inside torch (Python 3.11+ reads this; -P).
           {"PYTHONSAFEPATH", "1"}};
  if (!triton_cache.empty()) w.env["TRITON_CACHE_DIR"] = triton_cache.string();
  w.echo_stderr = echo_stderr;
  return w;
}

std::shared_ptr<ForkServer> start_fork_server(const WorkerOptions& workers, int count, std::ostream& log) {
  if (!want_fork_server(count, std::max(1u, std::thread::hardware_concurrency()))) return nullptr;
  try {
    return ForkServer::start(workers.argv, workers.env);
  } catch (const std::exception& e) {
    log << "warning: no fork server (" << e.what() << "); each worker imports torch and Triton itself"
        << std::endl;
    return nullptr;
  }
}

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// The local executor: a pool of N evaluator slots on this machine
// (slot_pool.h), fed by the scheduler, under a run supervisor
// (run_supervisor.h).
class Explorer {
 public:
  Explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options)
      : opts_(options), out_(options.progress ? *options.progress : std::cerr), owner_(this_owner()),
        catalog_(catalog) {
    setup_scratch();
    SchedulerOptions so;
    so.owner = owner_;
    so.scheduling = options.scheduling;
    so.lookahead = std::max(1, options.workers);
    so.batch = options.batch;
    if (options.shard) so.shard = JobShard{options.shard->first, options.shard->second};
    if (options.time_limit_s > 0) so.claim_order = ClaimOrder::kCheapestFirst;
    so.artifact_dir = artifact_dir_;
    so.metrics = options.metrics;
    scheduler_ = std::make_unique<Scheduler>(catalog, knowledge, io_, so, out_);
    scheduler_->on_work_available([this] { pump(); });
    SupervisorOptions sup;
    sup.catalog = &catalog_;
    sup.owner = owner_;
    sup.lease_s = options.scheduling.lease_s;
    sup.progress_interval_s = options.progress_interval_s;
    if (options.metrics) sup.metrics_interval_s = options.metrics_interval_s;
    supervisor_ = std::make_unique<RunSupervisor>(io_, sup, out_);
  }

  RunSummary run() {
    const auto t0 = Clock::now();
    run_t0_ = t0;
    start_epoch_ = epoch_now();
    if (opts_.metrics) opts_.metrics->run_started(start_epoch_, std::max(1, opts_.workers));
    // The signal handlers go in before any worker starts: a SIGTERM while the
    // workers (or the fork server) are still starting is then a drain (exit
    // 130, jobs back in the queue), not the default action. The hooks run
    // inside io_.run(), once start_workers() has made the pool.
    RunSupervisor::Hooks hooks;
    hooks.progress = [this] { return progress_line(false); };
    if (opts_.metrics) hooks.metrics = [this] { publish_metrics(epoch_now()); };
    hooks.signal = [this](int sig) { on_signal(sig); };
    supervisor_->start(std::move(hooks));
    boost::asio::steady_timer limit(io_);
    if (opts_.time_limit_s > 0) {
      limit.expires_after(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(opts_.time_limit_s)));
      limit.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) on_time_limit();
      });
    }
    start_workers();
    io_.run();
    pool_->stop();
    if (opts_.metrics) {  // the final values: what --metrics-file keeps
      publish_metrics(epoch_now());
      opts_.metrics->run_finished(epoch_now());
    }
    summary_.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    summary_.gpu_ids = opts_.gpus.ids;
    gpu_busy(epoch_now());
    const double gpus = static_cast<double>(std::max<size_t>(1, opts_.gpus.ids.size()));
    if (summary_.wall_s > 0 && summary_.gpu_kernel_s > 0)
      summary_.gpu_kernel_fraction = std::min(1.0, summary_.gpu_kernel_s / (summary_.wall_s * gpus));
    if (auto u = driver_util_ ? driver_util_->overall(start_epoch_, start_epoch_ + summary_.wall_s) : std::nullopt) {
      summary_.gpu_driver_fraction = u->fraction;
      summary_.gpu_driver_samples = static_cast<long long>(u->samples);
      summary_.gpu_driver_coverage = u->coverage;
    }
    static_cast<RunCounts&>(summary_) = scheduler_->stats();
    note_first_results(true);
    out_ << stamp() << progress_line(true) << std::endl;
    std::error_code ec;
    std::filesystem::remove_all(artifact_dir_, ec);
    if (fatal_.empty()) fatal_ = scheduler_->fatal();
    if (!fatal_.empty()) throw std::runtime_error(fatal_);
    return summary_;
  }

 private:
  void setup_scratch() {
    std::filesystem::path base = opts_.scratch_dir;
    if (base.empty()) base = std::filesystem::temp_directory_path() / "kiln";
    artifact_dir_ = base / ("run-" + path_tag(owner_));
    triton_cache_ = base / "triton-cache";
    std::filesystem::create_directories(artifact_dir_);
    std::filesystem::create_directories(triton_cache_);
  }

  void start_workers() {
    const int n = std::max(1, opts_.workers);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (n > cores)
      out_ << stamp() << "warning: " << n << " workers on " << cores
           << " cores: compiles will compete with the worker holding the GPU" << std::endl;
    SlotPoolOptions po;
    po.slots = n;
    po.label = "kiln run";
    po.worker = evaluator_options(opts_.device, triton_cache_, opts_.echo_worker_stderr);
    // Each worker's torch CPU work (input generation, CPU references) gets its
    // share of the cores, not all of them: N workers x all cores of threads
    // would starve the one that holds the GPU.
    const std::string threads = std::to_string(std::max(1, cores / n));
    for (const char* var : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"})
      if (!std::getenv(var)) po.worker.env[var] = threads;
    po.worker.fork_server = start_fork_server(po.worker, n, out_);
    const auto& ids = opts_.gpus.ids;
    gpu_spans_.assign(std::max<size_t>(1, ids.size()), {});
    bench_spans_.assign(gpu_spans_.size(), {});
    gpu_kernel_each_s_.assign(gpu_spans_.size(), 0);
    driver_util_ = std::make_unique<DriverUtilisation>(gpu_spans_.size());
    slot_gpu_.assign(static_cast<size_t>(n), 0);
    first_results_ = std::make_unique<FirstResults>(static_cast<size_t>(n));
    if (!ids.empty()) {
      // Slot i on GPU i mod G: consecutive slots alternate GPUs, so a job's
      // first candidates already spread over all of them.
      for (int i = 0; i < n; ++i) {
        slot_gpu_[static_cast<size_t>(i)] = static_cast<size_t>(i) % ids.size();
        po.slot_env.push_back(bind_gpu(opts_.gpus, static_cast<int>(slot_gpu_[static_cast<size_t>(i)]),
                                       static_cast<int>(ids.size()), opts_.device).env);
      }
      // How many workers share each one's GPU: a worker bounds the inputs it
      // caches to its share of the GPU's memory (the Python evaluator).
      for (int i = 0; i < n; ++i) {
        const auto g = slot_gpu_[static_cast<size_t>(i)];
        const auto sharers = std::count(slot_gpu_.begin(), slot_gpu_.end(), g);
        po.slot_env[static_cast<size_t>(i)][kGpuSharersEnv] = std::to_string(sharers);
      }
      if (ids.size() > 1)
        out_ << stamp() << n << " workers over " << ids.size() << " GPUs (" << opts_.gpus.source << ")"
             << std::endl;
    }
    pool_ = std::make_unique<SlotPool>(io_, std::move(po), out_);
    SlotPool::Hooks hooks;
    hooks.check_hello = [this](size_t i, const json& r) { return check_binding(i, r); };
    hooks.ready = [this](size_t i, const json& r, double startup_s, bool first) {
      on_ready(i, r, startup_s, first);
    };
    hooks.idle = [this] { pump(); };
    hooks.dropped = [this](size_t i, const std::string&) {
      first_results_->dropped(i);
      note_started();
      note_first_results(false);
    };
    hooks.exhausted = [this](const std::string& why) { stop("no evaluator worker is left: " + why); };
    if (opts_.metrics) hooks.restarting = [this](const char* reason) { opts_.metrics->worker_restart(reason); };
    pool_->start(std::move(hooks));
  }

  // The GPU binding must have reached the worker (a wrapper script that
  // resets CUDA_VISIBLE_DEVICES would put every slot on one GPU, silently).
  std::string check_binding(size_t i, const json& r) const {
    if (opts_.gpus.ids.empty()) return "";
    const std::string var = opts_.gpus.vendor == "amd" ? "rocr_visible_devices" : "cuda_visible_devices";
    const std::string want = opts_.gpus.ids[slot_gpu_[i]];
    const std::string got =
        r.contains("device") && r["device"].is_object() ? r["device"].value(var, std::string("(unset)")) : "(unset)";
    if (got == want) return "";
    return "worker " + std::to_string(i) + " was bound to GPU " + want + " but reports " + var + "=" + got;
  }

  void on_ready(size_t i, const json& r, double startup_s, bool first) {
    if (summary_.device.empty()) {
      summary_.device = r.value("device", json::object()).value("name", "unknown");
      scheduler_->set_device(summary_.device);
      out_ << stamp() << "kiln run: " << pool_->size() << " worker(s) on " << summary_.device << ", Triton "
           << r.value("triton", "") << ", torch " << r.value("torch", "") << std::endl;
    }
    if (opts_.metrics) opts_.metrics->workers_ready(pool_->ready());
    if (first) {  // a worker restarted later is not part of the run's start
      first_results_->ready(i, since_start());
      first_ready_.push_back(startup_s);
      for (const auto& [k, v] : startup_steps(r)) startup_steps_[k].push_back(v);
      note_started();
    }
  }

  // Once every slot's first worker has answered (or its slot was dropped):
  // one line saying how long the slowest took from its start to its hello,
  // and where a worker's start went (the median of each step the workers
  // reported, startup_steps.h).
  void note_started() {
    if (noted_ || first_ready_.empty() ||
        first_ready_.size() + static_cast<size_t>(pool_->dropped()) < pool_->size())
      return;
    noted_ = true;
    summary_.workers_ready_s = *std::max_element(first_ready_.begin(), first_ready_.end());
    std::map<std::string, double> median;
    for (auto [k, v] : startup_steps_) {
      if (v.size() != first_ready_.size()) continue;  // not every worker reported it
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      median[k] = v[v.size() / 2];
    }
    std::ostringstream line;  // its own stream: the progress stream's format stays as it is
    line << stamp() << "workers ready: the last after " << std::fixed << std::setprecision(1)
         << summary_.workers_ready_s << " s";
    if (!median.empty()) line << " (median steps: " << describe_startup(median) << ")";
    out_ << line.str() << std::endl;
  }

  // Seconds since run() began.
  double since_start() const { return std::chrono::duration<double>(Clock::now() - run_t0_).count(); }

  // Once, the line on the run's first results (first_results.h): when every
  // slot has answered its first evaluation, or at the end of the run with those
  // that have.
  void note_first_results(bool at_end) {
    if (first_noted_ || !first_results_ || !(at_end || first_results_->all_answered())) return;
    const std::string line = first_results_->line();
    if (line.empty()) return;
    first_noted_ = true;
    out_ << stamp() << line << std::endl;
  }

  // Gives every idle slot work; stops the loop when the scheduler is done.
  void pump() {
    if (stopping_) return;
    while (std::optional<size_t> slot = pool_->idle_slot()) {
      const size_t i = *slot;
      std::optional<WorkItem> item = scheduler_->next(static_cast<int>(i));
      if (!item) break;
      const auto timeout = std::chrono::milliseconds(static_cast<long long>(item->timeout_s * 1000));
      const double sent = since_start();
      if (item->kind == WorkItem::Kind::kEvaluate) first_results_->sent(i, sent);
      // The answer comes checked and typed once (evaluate/reply.h); every
      // account below and the scheduler read that one value.
      pool_->submit(i, item->request, timeout, [this, i, sent, w = *item](CheckedAnswer a, int pid) {
        const bool reply = a.outcome.kind == WorkerOutcome::Kind::kReply;
        if (reply) {
          const size_t g = slot_gpu_[i];
          driver_util_->take(g, a);  // the GPU's samples, not the candidate's: not recorded with it
          append_gpu_spans(a.typed.result, gpu_spans_[g], &bench_spans_[g]);
          const double kernel_s = device_kernel_seconds(a.typed.result);
          summary_.gpu_kernel_s += kernel_s;
          gpu_kernel_each_s_[g] += kernel_s;
        }
        if (w.kind == WorkItem::Kind::kSpace) first_results_->space(sent, since_start());
        if (w.kind == WorkItem::Kind::kEvaluate)
          first_results_->answered(i, since_start(), reply ? &a.typed.result.timings : nullptr);
        // evaluations.worker: the evaluator's pid, and its GPU where the run spans several
        std::string who = "pid " + std::to_string(pid);
        if (opts_.gpus.ids.size() > 1) who += " gpu " + opts_.gpus.ids[slot_gpu_[i]];
        scheduler_->complete(w, a, who);
        note_first_results(false);
      });
    }
    if (!pool_->any_busy() && scheduler_->finished()) stop("");
    else if (!scheduler_->fatal().empty()) stop(scheduler_->fatal());
  }

  // The run's GPU busy time: per GPU, the union of its workers' spans over
  // the run; summed over the GPUs, and the mean fraction.
  void gpu_busy(double end_epoch) {
    bool any = false;
    for (const auto& g : gpu_spans_) any = any || !g.empty();
    if (!any) return;
    for (size_t g = 0; g < gpu_spans_.size(); ++g) {
      const double busy = union_seconds(gpu_spans_[g], start_epoch_, end_epoch);
      summary_.gpu_busy_each_s.push_back(busy);
      summary_.gpu_busy_s += busy;
      summary_.gpu_bench_s += union_seconds(bench_spans_[g], start_epoch_, end_epoch);
    }
    const double capacity = summary_.wall_s * static_cast<double>(gpu_spans_.size());
    if (capacity > 0) summary_.gpu_busy_fraction = std::min(1.0, summary_.gpu_busy_s / capacity);
  }

  // The sampled metrics: jobs by state (a catalog count), the queue, and
  // each GPU's busy time so far (both accounts), once it has done GPU work.
  void publish_metrics(double now) {
    metrics::RunMetrics& m = *opts_.metrics;
    m.heartbeat(now);
    try {
      m.jobs_by_state(catalog_.job_state_counts(opts_.batch));
    } catch (const std::exception& e) {
      out_ << stamp() << "warning: metrics: " << e.what() << std::endl;
    }
    m.workers_ready(pool_->ready());  // a slot whose worker is being replaced is not ready
    m.queue(static_cast<long long>(scheduler_->ready_candidates()), pool_->in_flight());
    for (size_t g = 0; g < gpu_spans_.size(); ++g) {
      if (gpu_spans_[g].empty() && gpu_kernel_each_s_[g] <= 0) continue;
      const std::string id = opts_.gpus.ids.empty() ? "default" : opts_.gpus.ids[g];
      m.gpu(id, union_seconds(gpu_spans_[g], start_epoch_, now), union_seconds(bench_spans_[g], start_epoch_, now),
            gpu_kernel_each_s_[g], now - start_epoch_);
      if (auto f = driver_util_ ? driver_util_->figure(g, start_epoch_, now) : std::nullopt)
        m.gpu_driver(id, f->fraction);
    }
  }

  std::string progress_line(bool final_line) const {
    const SchedulerStats& st = scheduler_->stats();
    std::ostringstream line;
    line << (final_line ? "finished: " : "") << progress_counts(st, scheduler_->active_jobs());
    if (final_line && summary_.gpu_busy_fraction) {
      const double capacity = summary_.wall_s * static_cast<double>(summary_.gpu_busy_each_s.size());
      line << " · GPU" << (summary_.gpu_busy_each_s.size() > 1 ? "s" : "") << " busy " << std::fixed
           << std::setprecision(0) << *summary_.gpu_busy_fraction * 100 << "% of " << std::setprecision(1)
           << summary_.wall_s << " s (timed runs alone " << std::setprecision(0)
           << (capacity > 0 ? summary_.gpu_bench_s / capacity * 100 : 0) << "%)";
      // The device's own account beside the lock-held one: event-timed kernel time.
      if (summary_.gpu_kernel_fraction)
        line << " · GPU kernel time by device events " << std::setprecision(0)
             << *summary_.gpu_kernel_fraction * 100 << "% (" << std::setprecision(1) << summary_.gpu_kernel_s
             << " s)";
      // The driver's account: any kernel running (checks, flushes and set-up included).
      if (summary_.gpu_driver_fraction)
        line << " · driver utilisation " << std::setprecision(0) << *summary_.gpu_driver_fraction * 100 << "% ("
             << summary_.gpu_driver_samples << " samples over " << summary_.gpu_driver_coverage * 100
             << "% of the run)";
      if (summary_.gpu_busy_each_s.size() > 1) {
        line << "; per GPU";
        for (size_t g = 0; g < summary_.gpu_busy_each_s.size(); ++g)
          line << " " << summary_.gpu_ids[g] << ": "
               << (summary_.wall_s > 0 ? summary_.gpu_busy_each_s[g] / summary_.wall_s * 100 : 0) << "%";
      }
    } else if (final_line) {
      line << " · " << std::fixed << std::setprecision(1) << summary_.wall_s << " s";
    } else if (!st.last_best.empty()) {
      line << " · last best: " << st.last_best;
    }
    return line.str();
  }

  void on_signal(int sig) {
    summary_.interrupted = true;
    drain_now("signal " + std::to_string(sig));
  }

  void on_time_limit() {
    if (stopping_) return;  // the run is ending anyway
    summary_.time_limited = true;
    std::ostringstream why;
    why << "time limit (" << opts_.time_limit_s << " s)";
    drain_now(why.str());
  }

  // Stops now: in-flight candidates are abandoned unrecorded (the next run
  // evaluates them, once) and their jobs released at once: a drain must
  // finish well inside the warning a scheduler gives before the wall time.
  void drain_now(const std::string& why) {
    out_ << stamp() << why << ": stopping; unfinished jobs go back to the queue" << std::endl;
    pool_->stop();
    scheduler_->drain();
    stop("");
  }

  void stop(const std::string& why) {
    if (!why.empty() && fatal_.empty()) fatal_ = why;
    if (stopping_) return;
    stopping_ = true;
    if (!why.empty()) scheduler_->drain();
    supervisor_->stop();
    pool_->stop();
    io_.stop();
  }

  RunOptions opts_;
  std::ostream& out_;
  std::string owner_;
  boost::asio::io_context io_;
  Catalog& catalog_;
  std::filesystem::path artifact_dir_, triton_cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<RunSupervisor> supervisor_;
  std::unique_ptr<SlotPool> pool_;
  std::vector<size_t> slot_gpu_;                         // each slot's index into opts_.gpus.ids (0 unbound)
  bool stopping_ = false, noted_ = false, first_noted_ = false;
  Clock::time_point run_t0_ = Clock::now();
  std::unique_ptr<FirstResults> first_results_;           // the slots' first evaluations (the run's start)
  RunSummary summary_;
  std::vector<double> first_ready_;                      // each slot's first start-up, seconds
  std::map<std::string, std::vector<double>> startup_steps_;  // hello's "startup", per step
  double start_epoch_ = 0;
  std::vector<std::vector<std::pair<double, double>>> gpu_spans_, bench_spans_;  // per GPU
  std::vector<double> gpu_kernel_each_s_;                // device-event kernel seconds per GPU
  std::unique_ptr<DriverUtilisation> driver_util_;       // the drivers' utilisation samples per GPU
  std::string fatal_;
};

}  // namespace

RunSummary run_explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options) {
  Explorer explorer(catalog, knowledge, options);
  return explorer.run();
}

}  // namespace kiln
