#include "explore/explorer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "catalog/job_key.h"
#include "common/hash.h"
#include "common/home.h"
#include "evaluate/estimate.h"
#include "evaluate/worker_process.h"
#include "explore/select.h"
#include "explore/strategy.h"

namespace kiln {

std::string this_owner() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
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

std::string shape_str(const json& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : "x") + std::to_string(d.get<long long>());
  return s;
}

std::string fmt_ms(double ms) {
  std::ostringstream os;
  os << std::setprecision(4) << ms << " ms";
  return os.str();
}

// A job being explored.
struct ActiveJob {
  JobRow row;
  const Target* target = nullptr;
  std::string module;                // kernels/<module>.py
  json job;                          // what the worker gets
  Traffic traffic;
  bool space_requested = false, planned = false;
  std::deque<CandidateRow> pending;  // planned, not yet evaluated
  int in_flight = 0;
  std::optional<double> best_ms;     // best so far, for progress lines
  std::string best_basis;
  std::string label() const {
    return row.op + " " + shape_str(row.shape) + " " + row.dtype + " " + row.target;
  }
};

struct Slot {
  std::unique_ptr<WorkerProcess> worker;
  bool ready = false;                // hello answered
  bool busy = false;
};

class Explorer {
 public:
  Explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options)
      : catalog_(catalog), knowledge_(knowledge), opts_(options),
        out_(options.progress ? *options.progress : std::cerr),
        owner_(this_owner()), signals_(io_, SIGINT, SIGTERM), lease_timer_(io_),
        progress_timer_(io_) {
    signals_.add(SIGUSR1);
  }

  RunSummary run() {
    const auto t0 = Clock::now();
    setup_scratch();
    start_workers();
    signals_.async_wait([this](auto ec, int sig) { on_signal(ec, sig); });
    arm_lease_timer();
    arm_progress_timer();
    io_.run();
    for (auto& s : slots_) s.worker->kill();
    summary_.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    print_progress(true);
    if (remove_scratch_) {
      std::error_code ec;
      std::filesystem::remove_all(artifact_dir_, ec);
    }
    if (!fatal_.empty()) throw std::runtime_error(fatal_);
    return summary_;
  }

 private:
  // --- setup ---------------------------------------------------------------

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
    remove_scratch_ = true;
  }

  WorkerOptions worker_options() const {
    const auto home = kiln_home();
    WorkerOptions w;
    w.argv = {python_executable(), "-m", "kiln_worker"};
    std::string pythonpath = (home / "worker").string() + ":" + home.string();
    if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += std::string(":") + old;
    w.env = {{"PYTHONPATH", pythonpath},
             {"KILN_HOME", home.string()},
             {"KILN_DEVICE", opts_.device},
             {"TRITON_CACHE_DIR", triton_cache_.string()},
             {"PYTHONUNBUFFERED", "1"}};
    w.echo_stderr = opts_.echo_worker_stderr;
    return w;
  }

  void start_workers() {
    const int n = std::max(1, opts_.workers);
    for (int i = 0; i < n; ++i) {
      Slot s;
      s.worker = std::make_unique<WorkerProcess>(io_, worker_options());
      slots_.push_back(std::move(s));
    }
    for (size_t i = 0; i < slots_.size(); ++i) start_slot(i);
  }

  // Starts (or restarts) slot i's worker and sends hello.
  void start_slot(size_t i) {
    Slot& s = slots_[i];
    s.ready = false;
    s.busy = true;
    if (s.worker->alive()) s.worker->kill();
    s.worker->start();
    s.worker->request({{"method", "hello"}}, std::chrono::seconds(180),
                      [this, i](WorkerOutcome o) { on_hello(i, std::move(o)); });
  }

  void on_hello(size_t i, WorkerOutcome o) {
    Slot& s = slots_[i];
    s.busy = false;
    if (o.kind != WorkerOutcome::Kind::kReply || !o.reply.value("ok", false)) {
      std::string why = o.kind == WorkerOutcome::Kind::kReply ? o.reply.value("error", "")
                                                             : o.detail;
      fail_run("the evaluator worker did not start: " + why);
      return;
    }
    const json& r = o.reply["result"];
    if (device_.empty()) {
      device_ = r["device"].value("name", "unknown");
      device_kind_ = r["device"].value("kind", "cpu");
      summary_.device = device_;
      templates_ = r.value("templates", json::object());
      triton_version_ = r.value("triton", "");
      out_ << "[" << now_hms() << "] kiln run: " << slots_.size() << " worker(s) on "
           << device_ << ", Triton " << triton_version_ << ", torch " << r.value("torch", "")
           << std::endl;
    }
    s.ready = true;
    pump();
  }

  // --- scheduling ----------------------------------------------------------

  // Gives every idle slot work: a job's config space, a candidate, or a new job.
  void pump() {
    if (stopping_) return;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].ready || slots_[i].busy) continue;
      if (!assign(i)) break;
    }
    maybe_finish();
  }

  bool assign(size_t i) {
    // A worker that exited between requests (it exits 4 after a fault that
    // leaves its GPU context unusable) is replaced before it gets new work, so
    // the next candidate is not blamed for it.
    if (!slots_[i].worker->alive()) {
      restart_slot(i);
      return true;
    }
    for (;;) {
      for (auto& [id, job] : active_) {
        if (!job.space_requested) {
          request_space(i, job);
          return true;
        }
      }
      for (auto& [id, job] : active_) {
        if (!job.pending.empty()) {
          request_evaluate(i, job);
          return true;
        }
      }
      if (draining_ || queue_empty_ || !claim_one()) return false;
    }
  }

  bool claim_one() {
    std::optional<JobRow> row;
    try {
      row = catalog_.claim_job(owner_, opts_.lease_s, opts_.batch);
    } catch (const std::exception& e) {
      fail_run(std::string("catalog: ") + e.what());
      return false;
    }
    if (!row) {
      queue_empty_ = true;
      return false;
    }
    ActiveJob job;
    job.row = *row;
    job.target = knowledge_.targets.find(row->target);
    const OperatorSpec* op = knowledge_.operators.find(row->op);
    if (!job.target || !op) {
      catalog_.finish_job(row->id, owner_, false,
                          "unknown " + std::string(job.target ? "operator " + row->op
                                                              : "target " + row->target));
      ++summary_.jobs_failed;
      return true;
    }
    job.module = op->module;
    job.job = row->spec;
    // Benchmark only where the executing device is of the target's kind: an
    // H200's latency says nothing about an MI300X.
    if (!TargetRegistry::matches_device(*job.target, device_))
      job.job["benchmark"]["runs"] = 0;
    ++jobs_seen_;
    active_.emplace(row->id, std::move(job));
    return true;
  }

  void request_space(size_t i, ActiveJob& job) {
    job.space_requested = true;
    slots_[i].busy = true;
    const long long id = job.row.id;
    slots_[i].worker->request({{"method", "space"}, {"job", job.job}}, std::chrono::seconds(120),
                              [this, i, id](WorkerOutcome o) { on_space(i, id, std::move(o)); });
  }

  void on_space(size_t i, long long id, WorkerOutcome o) {
    slots_[i].busy = false;
    if (o.kind != WorkerOutcome::Kind::kReply) restart_slot(i);
    auto it = active_.find(id);
    if (it == active_.end()) return pump();
    ActiveJob& job = it->second;
    if (o.kind != WorkerOutcome::Kind::kReply || !o.reply.value("ok", false)) {
      std::string why = o.kind == WorkerOutcome::Kind::kReply ? o.reply.value("error", "") : o.detail;
      finish(job, false, "could not enumerate the config space: " + why);
      return pump();
    }
    const json& r = o.reply["result"];
    job.traffic = Traffic::from_json(r.value("traffic", json::object()));
    std::vector<json> space = r.value("configs", json::array()).get<std::vector<json>>();
    std::vector<const Principle*> principles;
    for (const auto& c : job.row.spec.value("constraints", json::array()))
      if (const Principle* p = knowledge_.principles.find(c.get<std::string>())) principles.push_back(p);
    const json& ex = job.row.spec.value("explore", json::object());
    Plan plan;
    try {
      plan = plan_candidates(space, principles, job.target->backend, ex.value("strategy", "exhaustive"),
                             ex.value("max_candidates", 64), ex.value("seed", 0ULL));
    } catch (const std::exception& e) {
      finish(job, false, e.what());
      return pump();
    }
    for (const auto& note : plan.notes) out_ << "[" << now_hms() << "]   " << job.label() << ": " << note << std::endl;
    int resumed = 0;
    for (const json& cfg : plan.configs) {
      CandidateRow c;
      c.job_id = job.row.id;
      c.generator = "template";
      c.template_name = job.module;
      c.config = cfg;
      c.key = sha256_hex("template\n" + job.module + "\n" + canonical_json(cfg));
      CandidateRow stored = catalog_.add_candidate(c);
      if (stored.evaluated) {
        ++resumed;
        continue;
      }
      job.pending.push_back(stored);
    }
    job.planned = true;
    if (resumed > 0)
      out_ << "[" << now_hms() << "]   " << job.label() << ": resuming, " << resumed
           << " candidate(s) already evaluated" << std::endl;
    maybe_finish_job(job.row.id);
    pump();
  }

  void request_evaluate(size_t i, ActiveJob& job) {
    CandidateRow c = job.pending.front();
    job.pending.pop_front();
    ++job.in_flight;
    slots_[i].busy = true;
    const double timeout_s = job.row.spec.value("explore", json::object()).value("timeout_s", 300.0);
    // One artifact directory per slot: two candidates may compile to the same
    // bytes (same file name) and must not race on the file.
    const std::filesystem::path dir = artifact_dir_ / ("slot-" + std::to_string(i));
    std::filesystem::create_directories(dir);
    json req = {{"method", "evaluate"},
                {"job", job.job},
                {"config", c.config},
                {"artifact_dir", dir.string()}};
    const long long id = job.row.id;
    const auto timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    slots_[i].worker->request(std::move(req), timeout, [this, i, id, c, timeout_s](WorkerOutcome o) {
      on_evaluated(i, id, c, timeout_s, std::move(o));
    });
  }

  void on_evaluated(size_t i, long long id, const CandidateRow& c, double timeout_s, WorkerOutcome o) {
    slots_[i].busy = false;
    const std::string worker = "pid " + std::to_string(slots_[i].worker->pid());
    auto it = active_.find(id);
    if (it == active_.end()) return pump();  // released by a signal meanwhile
    ActiveJob& job = it->second;
    --job.in_flight;

    EvaluationIn e;
    e.worker = worker;
    e.result = json::object();
    if (o.kind == WorkerOutcome::Kind::kTimeout) {
      e.status = "timeout";
      e.message = "no answer within " + std::to_string(static_cast<int>(timeout_s)) + " s; " + o.detail;
      restart_slot(i);
    } else if (o.kind == WorkerOutcome::Kind::kCrash) {
      e.status = "crash";
      e.message = o.detail;
      restart_slot(i);
    } else if (!o.reply.value("ok", false)) {
      e.status = "crash";
      e.message = "worker error: " + o.reply.value("error", "");
    } else {
      e.result = o.reply["result"];
      e.status = e.result.value("status", "crash");
      e.message = e.result.value("message", "");
      attach_artifact(job, e);
    }
    try {
      catalog_.record_evaluation(c.id, e);
    } catch (const std::exception& ex) {
      fail_run(std::string("catalog: ") + ex.what());
      return;
    }
    ++summary_.candidates;
    if (e.status != "ok") ++summary_.candidate_failures;
    else note_best(job, e);
    maybe_finish_job(id);
    pump();
  }

  // Reads the code object the worker wrote, adds the static estimate.
  void attach_artifact(const ActiveJob& job, EvaluationIn& e) {
    auto a = e.result.find("artifact");
    if (a == e.result.end() || !a->is_object() || !a->contains("path")) return;
    const std::filesystem::path path = (*a)["path"].get<std::string>();
    try {
      ArtifactIn art;
      art.target = job.row.target;
      art.arch = job.row.arch;
      art.kind = a->value("kind", "");
      art.kernel_name = a->value("kernel_name", "");
      art.bytes = read_file(path);
      art.metadata = *a;
      art.metadata.erase("path");
      e.artifact = std::move(art);
      std::error_code ec;
      std::filesystem::remove(path, ec);
    } catch (const std::exception& ex) {
      e.status = "crash";
      e.message = std::string("code object missing: ") + ex.what();
      return;
    }
    if (e.status == "ok") {
      try {
        Estimate est = estimate_latency(*job.target, job.row.dtype,
                                        Traffic::from_json(e.result.value("traffic", json::object())).bytes > 0
                                            ? Traffic::from_json(e.result["traffic"])
                                            : job.traffic,
                                        KernelResources::from_artifact(*a));
        e.estimate_ms = est.ms;
        e.result["estimate"] = est.to_json();
      } catch (const std::exception&) {
        // A target without bandwidth figures: no estimate, selection uses measurements only.
      }
    }
  }

  void note_best(ActiveJob& job, const EvaluationIn& e) {
    const json lat = e.result.value("latency", json());
    if (lat.is_object() && lat.contains("median_ms") && TargetRegistry::matches_device(*job.target, lat.value("device", ""))) {
      const double m = lat["median_ms"].get<double>();
      if (job.best_basis != "measured" || m < *job.best_ms) {
        job.best_ms = m;
        job.best_basis = "measured";
      }
    } else if (e.estimate_ms && job.best_basis != "measured" && (!job.best_ms || *e.estimate_ms < *job.best_ms)) {
      job.best_ms = e.estimate_ms;
      job.best_basis = "estimated";
    }
    last_best_ = job.label() + " " + fmt_ms(*job.best_ms) + " (" + job.best_basis + ")";
  }

  void maybe_finish_job(long long id) {
    auto it = active_.find(id);
    if (it == active_.end()) return;
    ActiveJob& job = it->second;
    if (!job.planned || !job.pending.empty() || job.in_flight > 0) return;
    Selection sel = select_best(catalog_, id, *job.target);
    if (sel.best) {
      catalog_.set_best(*sel.best);
      finish(job, true, "");
    } else {
      finish(job, false, "no correct candidate among " + std::to_string(sel.evaluated) +
                             (sel.failure_summary.empty() ? "" : " (" + sel.failure_summary + ")"));
    }
  }

  void finish(ActiveJob& job, bool ok, const std::string& message) {
    try {
      catalog_.finish_job(job.row.id, owner_, ok, message);
    } catch (const std::exception& e) {
      fail_run(std::string("catalog: ") + e.what());
      return;
    }
    if (ok) ++summary_.jobs_done;
    else ++summary_.jobs_failed;
    Selection sel = select_best(catalog_, job.row.id, *job.target);
    out_ << "[" << now_hms() << "] " << (ok ? "done   " : "FAILED ") << job.label();
    if (sel.best)
      out_ << ": best " << fmt_ms(sel.best->value_ms) << " (" << sel.best->basis
           << (sel.best->basis == "measured" ? " on " + sel.best->device : "") << "), "
           << sel.correct << "/" << sel.evaluated << " correct";
    else
      out_ << ": " << message;
    out_ << std::endl;
    active_.erase(job.row.id);
  }

  void restart_slot(size_t i) {
    try {
      start_slot(i);
    } catch (const std::exception& e) {
      fail_run(std::string("could not restart a worker: ") + e.what());
    }
  }

  void maybe_finish() {
    if (stopping_) return;
    bool busy = false;
    for (const auto& s : slots_) busy = busy || s.busy;
    if (busy) return;
    if (!active_.empty() && !draining_) return;
    if (!queue_empty_ && !draining_) return;
    stop_io();
  }

  // --- timers, signals, shutdown --------------------------------------------

  void arm_lease_timer() {
    lease_timer_.expires_after(std::chrono::milliseconds(static_cast<long long>(opts_.lease_s * 1000 / 3)));
    lease_timer_.async_wait([this](auto ec) {
      if (ec || stopping_) return;
      try {
        catalog_.renew_leases(owner_, opts_.lease_s);
      } catch (const std::exception& e) {
        out_ << "[" << now_hms() << "] warning: lease renewal failed: " << e.what() << std::endl;
      }
      arm_lease_timer();
    });
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
    std::ostringstream line;
    line << "[" << now_hms() << "] " << (final_line ? "finished: " : "")
         << "jobs " << summary_.jobs_done << " done, " << summary_.jobs_failed << " failed, "
         << active_.size() << " running · candidates " << summary_.candidates << " evaluated, "
         << summary_.candidate_failures << " failed";
    if (final_line) line << " · " << std::fixed << std::setprecision(1) << summary_.wall_s << " s";
    else if (!last_best_.empty()) line << " · last best: " << last_best_;
    const std::string s = line.str();
    if (s != last_progress_ || final_line) out_ << s << std::endl;
    last_progress_ = s;
  }

  void on_signal(const boost::system::error_code& ec, int sig) {
    if (ec) return;
    out_ << "[" << now_hms() << "] signal " << sig << ": stopping; unfinished jobs go back to the queue"
         << std::endl;
    summary_.interrupted = true;
    draining_ = true;
    // In-flight candidates are abandoned unrecorded (they will be evaluated by
    // the next run, once), and their jobs are released at once: a drain must
    // finish well inside the warning a scheduler gives before the wall time.
    for (auto& s : slots_) s.worker->kill();
    for (auto& [id, job] : active_) {
      try {
        catalog_.release_job(id, owner_);
      } catch (const std::exception& e) {
        out_ << "warning: could not release job " << id << ": " << e.what() << std::endl;
      }
    }
    active_.clear();
    stop_io();
  }

  void fail_run(const std::string& why) {
    if (fatal_.empty()) fatal_ = why;
    for (auto& [id, job] : active_) {
      try {
        catalog_.release_job(id, owner_);
      } catch (...) {
      }
    }
    active_.clear();
    stop_io();
  }

  void stop_io() {
    if (stopping_) return;
    stopping_ = true;
    lease_timer_.cancel();
    progress_timer_.cancel();
    signals_.cancel();
    for (auto& s : slots_) s.worker->kill();
    io_.stop();
  }

  Catalog& catalog_;
  const Knowledge& knowledge_;
  RunOptions opts_;
  std::ostream& out_;
  std::string owner_;
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer lease_timer_, progress_timer_;
  std::vector<Slot> slots_;
  std::map<long long, ActiveJob> active_;
  std::filesystem::path artifact_dir_, triton_cache_;
  bool remove_scratch_ = false;
  std::string device_, device_kind_, triton_version_;
  json templates_;
  bool queue_empty_ = false, draining_ = false, stopping_ = false;
  int jobs_seen_ = 0;
  RunSummary summary_;
  std::string fatal_, last_best_, last_progress_;
};

}  // namespace

RunSummary run_explorer(Catalog& catalog, const Knowledge& knowledge, const RunOptions& options) {
  Explorer explorer(catalog, knowledge, options);
  return explorer.run();
}

}  // namespace kiln
