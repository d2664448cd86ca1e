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
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "catalog/job_key.h"
#include "evaluate/fork_server.h"
#include "common/hash.h"
#include "common/home.h"
#include "search/estimate.h"
#include "evaluate/startup_steps.h"
#include "evaluate/worker_process.h"
#include "explore/select.h"
#include "explore/scheduler.h"

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

// Both read the timings and latency of an evaluate or confirm answer, typed
// (evaluate/protocol.h: the two share $defs.timings).
void append_gpu_spans(const nlohmann::json& reply, std::vector<std::pair<double, double>>& all,
                      std::vector<std::pair<double, double>>* bench) {
  for (const GpuSpan& sp : read_evaluation_result(reply).timings.gpu_spans) {
    all.emplace_back(sp.start, sp.end);
    if (bench && sp.kind == "bench") bench->emplace_back(sp.start, sp.end);
  }
}

double device_kernel_seconds(const nlohmann::json& reply) {
  const EvaluationResult r = read_evaluation_result(reply);
  double s = r.timings.kernel_s.value_or(0);
  if (r.latency && r.latency->mean_ms && r.latency->runs) s += *r.latency->mean_ms * *r.latency->runs / 1000;
  return s;
}

std::string this_owner() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
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
           {"PYTHONUNBUFFERED", "1"}};
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

std::string now_hms() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

struct Slot {
  std::unique_ptr<WorkerProcess> worker;
  size_t gpu = 0;                    // index into RunOptions::gpus.ids (0 when unbound)
  bool ready = false;                // hello answered
  bool busy = false;
  Clock::time_point started;         // the worker's (re)start, for its start-up time
  bool start_noted = false;          // its first worker's start-up counted (note_started)
};

// The local executor: N worker processes on this machine, fed by the scheduler.
class Explorer {
 public:
  Explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options)
      : opts_(options), out_(options.progress ? *options.progress : std::cerr),
        owner_(this_owner()), signals_(io_, SIGINT, SIGTERM), lease_timer_(io_),
        progress_timer_(io_), metrics_timer_(io_), catalog_(catalog) {
    signals_.add(SIGUSR1);
    setup_scratch();
    SchedulerOptions so;
    so.owner = owner_;
    so.scheduling = options.scheduling;
    so.lookahead = std::max(1, options.workers);
    so.batch = options.batch;
    if (options.shard) so.shard = JobShard{options.shard->first, options.shard->second};
    so.artifact_dir = artifact_dir_;
    so.metrics = options.metrics;
    scheduler_ = std::make_unique<Scheduler>(catalog, knowledge, io_, so, out_);
    scheduler_->on_work_available([this] { pump(); });
  }

  RunSummary run() {
    const auto t0 = Clock::now();
    start_epoch_ = epoch_now();
    if (opts_.metrics) opts_.metrics->run_started(start_epoch_, std::max(1, opts_.workers));
    start_workers();
    signals_.async_wait([this](auto ec, int sig) { on_signal(ec, sig); });
    arm_lease_timer();
    arm_progress_timer();
    if (opts_.metrics) arm_metrics_timer();
    io_.run();
    kill_workers();
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
    const SchedulerStats& st = scheduler_->stats();
    summary_.jobs_done = st.jobs_done;
    summary_.jobs_failed = st.jobs_failed;
    summary_.jobs_need_llm = st.jobs_need_llm;
    summary_.candidates = st.candidates;
    summary_.candidate_failures = st.candidate_failures;
    summary_.jobs_confirmed = st.jobs_confirmed;
    summary_.confirm_failures = st.confirm_failures;
    print_progress(true);
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
    std::string tag = owner_;
    for (char& c : tag)
      if (c == ':' || c == '/') c = '-';
    artifact_dir_ = base / ("run-" + tag);
    triton_cache_ = base / "triton-cache";
    std::filesystem::create_directories(artifact_dir_);
    std::filesystem::create_directories(triton_cache_);
  }

  void start_workers() {
    const int n = std::max(1, opts_.workers);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (n > cores)
      out_ << "[" << now_hms() << "] warning: " << n << " workers on " << cores
           << " cores: compiles will compete with the worker holding the GPU" << std::endl;
    WorkerOptions wo = evaluator_options(opts_.device, triton_cache_, opts_.echo_worker_stderr);
    // Each worker's torch CPU work (input generation, CPU references) gets its
    // share of the cores, not all of them: N workers x all cores of threads
    // would starve the one that holds the GPU.
    const std::string threads = std::to_string(std::max(1, cores / n));
    for (const char* var : {"OMP_NUM_THREADS", "MKL_NUM_THREADS"})
      if (!std::getenv(var)) wo.env[var] = threads;
    wo.fork_server = start_fork_server(wo, n, out_);
    const auto& ids = opts_.gpus.ids;
    gpu_spans_.assign(std::max<size_t>(1, ids.size()), {});
    bench_spans_.assign(gpu_spans_.size(), {});
    gpu_kernel_each_s_.assign(gpu_spans_.size(), 0);
    for (int i = 0; i < n; ++i) {
      Slot s;
      WorkerOptions slot_wo = wo;
      if (!ids.empty()) {
        // Slot i on GPU i mod G: consecutive slots alternate GPUs, so a job's
        // first candidates already spread over all of them.
        s.gpu = static_cast<size_t>(i) % ids.size();
        const GpuBinding b = bind_gpu(opts_.gpus, static_cast<int>(s.gpu), static_cast<int>(ids.size()), opts_.device);
        for (const auto& [k, v] : b.env) slot_wo.env[k] = v;
      }
      s.worker = std::make_unique<WorkerProcess>(io_, slot_wo);
      slots_.push_back(std::move(s));
    }
    if (ids.size() > 1)
      out_ << "[" << now_hms() << "] " << n << " workers over " << ids.size() << " GPUs ("
           << opts_.gpus.source << ")" << std::endl;
    for (size_t i = 0; i < slots_.size(); ++i) start_slot(i);
  }

  // Starts (or restarts) slot i's worker and sends hello.
  void start_slot(size_t i) {
    Slot& s = slots_[i];
    s.ready = false;
    s.busy = true;
    if (s.worker->alive()) s.worker->kill();
    s.worker->start();
    s.started = Clock::now();
    s.worker->request({{"method", "hello"}}, std::chrono::seconds(180),
                      [this, i](WorkerOutcome o) { on_hello(i, std::move(o)); });
  }

  void restart_slot(size_t i, const char* reason) {
    if (opts_.metrics) opts_.metrics->worker_restart(reason);
    try {
      start_slot(i);
    } catch (const std::exception& e) {
      stop(std::string("could not restart a worker: ") + e.what());
    }
  }

  void on_hello(size_t i, WorkerOutcome o) {
    Slot& s = slots_[i];
    s.busy = false;
    if (o.kind != WorkerOutcome::Kind::kReply || !o.reply.value("ok", false)) {
      std::string why = o.kind == WorkerOutcome::Kind::kReply ? o.reply.value("error", "") : o.detail;
      stop("the evaluator worker did not start: " + why);
      return;
    }
    const json& r = o.reply["result"];
    if (!opts_.gpus.ids.empty()) {
      // The binding must have reached the worker (a wrapper script that resets
      // CUDA_VISIBLE_DEVICES would put every slot on one GPU, silently).
      const std::string var = opts_.gpus.vendor == "amd" ? "rocr_visible_devices" : "cuda_visible_devices";
      const std::string want = opts_.gpus.ids[s.gpu];
      const std::string got = r.contains("device") ? r["device"].value(var, std::string("(unset)")) : "(unset)";
      if (got != want) {
        stop("worker " + std::to_string(i) + " was bound to GPU " + want + " but reports " + var + "=" + got);
        return;
      }
    }
    if (summary_.device.empty()) {
      summary_.device = r["device"].value("name", "unknown");
      scheduler_->set_device(summary_.device);
      out_ << "[" << now_hms() << "] kiln run: " << slots_.size() << " worker(s) on "
           << summary_.device << ", Triton " << r.value("triton", "") << ", torch "
           << r.value("torch", "") << std::endl;
    }
    s.ready = true;
    if (opts_.metrics) {
      int ready = 0;
      for (const auto& slot : slots_) ready += slot.ready ? 1 : 0;
      opts_.metrics->workers_ready(ready);
    }
    if (!s.start_noted) {  // a worker restarted later is not part of the run's start
      s.start_noted = true;
      note_started(std::chrono::duration<double>(Clock::now() - s.started).count(), startup_steps(r));
    }
    pump();
  }

  // Once every slot's first worker has answered: one line saying how long
  // the slowest took from its start to its hello, and where a worker's start
  // went (the median of each step the workers reported, startup_steps.h).
  void note_started(double seconds, const std::map<std::string, double>& steps) {
    first_ready_.push_back(seconds);
    for (const auto& [k, v] : steps) startup_steps_[k].push_back(v);
    if (first_ready_.size() < slots_.size()) return;
    summary_.workers_ready_s = *std::max_element(first_ready_.begin(), first_ready_.end());
    std::map<std::string, double> median;
    for (auto [k, v] : startup_steps_) {
      if (v.size() != first_ready_.size()) continue;  // not every worker reported it
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      median[k] = v[v.size() / 2];
    }
    std::ostringstream line;  // its own stream: the progress stream's format stays as it is
    line << "[" << now_hms() << "] workers ready: the last after " << std::fixed << std::setprecision(1)
         << summary_.workers_ready_s << " s";
    if (!median.empty()) line << " (median steps: " << describe_startup(median) << ")";
    out_ << line.str() << std::endl;
  }

  // Gives every idle slot work; stops the loop when the scheduler is done.
  void pump() {
    if (stopping_) return;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.ready || s.busy) continue;
      // A worker that exited between requests (it exits 4 after a fault that
      // leaves its GPU context unusable) is replaced before it gets new work,
      // so the next candidate is not blamed for it.
      if (!s.worker->alive()) {
        restart_slot(i, "exited");
        continue;
      }
      std::optional<WorkItem> item = scheduler_->next(static_cast<int>(i));
      if (!item) break;
      s.busy = true;
      const auto timeout = std::chrono::milliseconds(static_cast<long long>(item->timeout_s * 1000));
      s.worker->request(item->request, timeout, [this, i, w = *item](WorkerOutcome raw) {
        slots_[i].busy = false;
        // A reply that breaks the protocol fails this item alone and the
        // worker is replaced (evaluate/reply.h): the run goes on.
        WorkerOutcome o = checked_outcome(w.request.value("method", std::string()), std::move(raw));
        if (o.kind == WorkerOutcome::Kind::kReply) {
          const size_t g = slots_[i].gpu;
          append_gpu_spans(o.reply, gpu_spans_[g], &bench_spans_[g]);
          const double kernel_s = device_kernel_seconds(o.reply);
          summary_.gpu_kernel_s += kernel_s;
          gpu_kernel_each_s_[g] += kernel_s;
        }
        // evaluations.worker: the evaluator's pid, and its GPU where the run spans several
        std::string who = "pid " + std::to_string(slots_[i].worker->pid());
        if (opts_.gpus.ids.size() > 1) who += " gpu " + opts_.gpus.ids[slots_[i].gpu];
        if (o.kind != WorkerOutcome::Kind::kReply)
          restart_slot(i, o.kind == WorkerOutcome::Kind::kTimeout ? "timeout" : "crash");
        scheduler_->complete(w, o, who);
        pump();
      });
    }
    bool busy = false;
    for (const auto& s : slots_) busy = busy || s.busy;
    if (!busy && scheduler_->finished()) stop("");
    else if (!scheduler_->fatal().empty()) stop(scheduler_->fatal());
  }

  // At the end of a run: every result is recorded by now, so the workers'
  // exits (the driver's GPU context teardown) are not waited for.
  void kill_workers() {
    std::vector<WorkerProcess*> all;
    for (auto& s : slots_) all.push_back(s.worker.get());
    kill_all(all, /*wait=*/false);
  }

  static double epoch_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
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

  void arm_lease_timer() {
    lease_timer_.expires_after(std::chrono::milliseconds(static_cast<long long>(opts_.scheduling.lease_s * 1000 / 3)));
    lease_timer_.async_wait([this](auto ec) {
      if (ec || stopping_) return;
      try {
        catalog_.renew_leases(owner_, opts_.scheduling.lease_s);
      } catch (const std::exception& e) {
        out_ << "[" << now_hms() << "] warning: lease renewal failed: " << e.what() << std::endl;
      }
      arm_lease_timer();
    });
  }

  void arm_metrics_timer() {
    metrics_timer_.expires_after(std::chrono::milliseconds(static_cast<long long>(opts_.metrics_interval_s * 1000)));
    metrics_timer_.async_wait([this](auto ec) {
      if (ec || stopping_) return;
      publish_metrics(epoch_now());
      arm_metrics_timer();
    });
  }

  // The sampled metrics: jobs by state (a catalog count), the queue, and
  // each GPU's busy time so far (both accounts), once it has done GPU work.
  void publish_metrics(double now) {
    metrics::RunMetrics& m = *opts_.metrics;
    m.heartbeat(now);
    try {
      m.jobs_by_state(catalog_.job_state_counts(opts_.batch));
    } catch (const std::exception& e) {
      out_ << "[" << now_hms() << "] warning: metrics: " << e.what() << std::endl;
    }
    long long in_flight = 0;
    int ready = 0;
    for (const auto& s : slots_) {
      in_flight += (s.ready && s.busy) ? 1 : 0;
      ready += s.ready ? 1 : 0;
    }
    m.workers_ready(ready);  // a slot whose worker is being replaced is not ready
    m.queue(static_cast<long long>(scheduler_->ready_candidates()), in_flight);
    for (size_t g = 0; g < gpu_spans_.size(); ++g) {
      if (gpu_spans_[g].empty() && gpu_kernel_each_s_[g] <= 0) continue;
      const std::string id = opts_.gpus.ids.empty() ? "default" : opts_.gpus.ids[g];
      m.gpu(id, union_seconds(gpu_spans_[g], start_epoch_, now), union_seconds(bench_spans_[g], start_epoch_, now),
            gpu_kernel_each_s_[g], now - start_epoch_);
    }
  }

  void arm_progress_timer() {
    progress_timer_.expires_after(std::chrono::milliseconds(static_cast<long long>(opts_.progress_interval_s * 1000)));
    progress_timer_.async_wait([this](auto ec) {
      if (ec || stopping_) return;
      print_progress(false);
      arm_progress_timer();
    });
  }

  void print_progress(bool final_line) {
    const SchedulerStats& st = scheduler_->stats();
    std::ostringstream line;
    line << "[" << now_hms() << "] " << (final_line ? "finished: " : "") << "jobs " << st.jobs_done
         << " done, " << st.jobs_failed << " failed, " << scheduler_->active_jobs() << " running · candidates "
         << st.candidates << " evaluated, " << st.candidate_failures << " failed";
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
      if (summary_.gpu_busy_each_s.size() > 1) {
        line << "; per GPU";
        for (size_t g = 0; g < summary_.gpu_busy_each_s.size(); ++g)
          line << " " << summary_.gpu_ids[g] << ": "
               << (summary_.wall_s > 0 ? summary_.gpu_busy_each_s[g] / summary_.wall_s * 100 : 0) << "%";
      }
    }
    else if (final_line) line << " · " << std::fixed << std::setprecision(1) << summary_.wall_s << " s";
    else if (!st.last_best.empty()) line << " · last best: " << st.last_best;
    const std::string s = line.str();
    if (s != last_progress_ || final_line) out_ << s << std::endl;
    last_progress_ = s;
  }

  void on_signal(const boost::system::error_code& ec, int sig) {
    if (ec) return;
    out_ << "[" << now_hms() << "] signal " << sig << ": stopping; unfinished jobs go back to the queue"
         << std::endl;
    summary_.interrupted = true;
    // In-flight candidates are abandoned unrecorded (the next run evaluates
    // them, once) and their jobs released at once: a drain must finish well
    // inside the warning a scheduler gives before the wall time.
    kill_workers();
    scheduler_->drain();
    stop("");
  }

  void stop(const std::string& why) {
    if (!why.empty() && fatal_.empty()) fatal_ = why;
    if (stopping_) return;
    stopping_ = true;
    if (!why.empty()) scheduler_->drain();
    lease_timer_.cancel();
    progress_timer_.cancel();
    metrics_timer_.cancel();
    signals_.cancel();
    kill_workers();
    io_.stop();
  }

  RunOptions opts_;
  std::ostream& out_;
  std::string owner_;
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer lease_timer_, progress_timer_, metrics_timer_;
  Catalog& catalog_;
  std::filesystem::path artifact_dir_, triton_cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<Slot> slots_;
  bool stopping_ = false;
  RunSummary summary_;
  std::vector<double> first_ready_;                      // each slot's first start-up, seconds
  std::map<std::string, std::vector<double>> startup_steps_;  // hello's "startup", per step
  double start_epoch_ = 0;
  std::vector<std::vector<std::pair<double, double>>> gpu_spans_, bench_spans_;  // per GPU
  std::vector<double> gpu_kernel_each_s_;                // device-event kernel seconds per GPU
  std::string fatal_, last_progress_;
};

}  // namespace

RunSummary run_explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options) {
  Explorer explorer(catalog, knowledge, options);
  return explorer.run();
}

}  // namespace kiln
