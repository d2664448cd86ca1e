#include "coordinator.h"

#include "evaluate/artifact_file.h"
#include "evaluate/protocol.h"

#include <sys/resource.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>


#include "checkpoint.h"
#include "evaluate/startup_steps.h"
#include "explore/explorer.h"
#include "explore/utilisation.h"
#include "explore/run_supervisor.h"
#include "protocol.h"

namespace kiln::mpi {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

json CoordinatorSummary::to_json() const {
  json j = {{"jobs_done", jobs_done},
            {"jobs_failed", jobs_failed},
            {"candidates", candidates},
            {"candidate_failures", candidate_failures},
            {"interrupted", interrupted},
            {"exit_code", exit_code},
            {"device", device},
            {"worker_ranks", worker_ranks},
            {"ranks_ready", ranks_ready},
            {"ranks_lost", ranks_lost},
            {"items_sent", items_sent},
            {"items_requeued", items_requeued},
            {"wall_s", wall_s},
            {"busy_s", busy_s},
            {"cpu_s", cpu_s},
            {"busy_cpu_s", busy_cpu_s},
            {"checkpoints", checkpoints}};
  if (!error.empty()) j["error"] = error;
  if (gpu_busy_fraction) {
    j["gpu_busy_fraction"] = *gpu_busy_fraction;
    j["gpu_ranks"] = gpu_ranks;
    j["gpu_busy_each_s"] = gpu_busy_each_s;
  }
  j["gpu_kernel_s"] = gpu_kernel_s;
  j["gpu_kernel_fraction"] = gpu_kernel_fraction ? json(*gpu_kernel_fraction) : json(nullptr);
  if (candidates > 0 && busy_s > 0) {
    j["ms_per_candidate"] = busy_s * 1000.0 / candidates;
    j["candidates_per_s"] = candidates / busy_s;
    j["cpu_ms_per_candidate"] = busy_cpu_s * 1000.0 / candidates;
  }
  return j;
}

Coordinator::Coordinator(boost::asio::io_context& io, Transport& transport, Catalog& catalog, const Knowledge& knowledge,
                         std::vector<int> peers, CoordinatorOptions options, std::ostream& log)
    : io_(io), transport_(transport), catalog_(catalog), opts_(std::move(options)), log_(log),
      heartbeat_timer_(io), checkpoint_timer_(io), grace_timer_(io), flush_timer_(io) {
  artifact_dir_ = opts_.scratch / ("run-" + path_tag(opts_.owner));
  fs::create_directories(artifact_dir_);
  SchedulerOptions so;
  so.owner = opts_.owner;
  so.scheduling = opts_.scheduling;
  so.batch = opts_.batch;
  so.artifact_dir = artifact_dir_ / "requests";
  // Evaluations are written in batches (one transaction per record_batch, or
  // per flush interval), and code objects come from the result messages.
  so.record_batch = opts_.record_batch;
  so.metrics = opts_.metrics;
  so.read_artifact = [this](const fs::path& path) {
    auto it = artifacts_.find(path.string());
    if (it == artifacts_.end()) {
      // The rank refused the file (evaluate/artifact_file.h) and said why.
      if (auto e = artifact_errors_.find(path.string()); e != artifact_errors_.end()) {
        const std::string why = e->second;
        artifact_errors_.erase(e);
        throw ArtifactRejected(why);
      }
      throw std::runtime_error("the worker rank sent no code object for " + path.string());
    }
    std::string bytes = std::move(it->second);
    artifacts_.erase(it);
    return bytes;
  };
  scheduler_ = std::make_unique<Scheduler>(catalog, knowledge, io, so, log);
  SupervisorOptions sup;
  sup.catalog = &catalog_;
  sup.owner = opts_.owner;
  sup.lease_s = opts_.scheduling.lease_s;
  sup.progress_interval_s = opts_.progress_interval_s;
  if (opts_.metrics) sup.metrics_interval_s = opts_.progress_interval_s;
  sup.label = "kiln-mpi: ";
  supervisor_ = std::make_unique<RunSupervisor>(io, sup, log);
  scheduler_->on_work_available([this] { pump(); });
  for (int r : peers) {
    Peer p;
    p.rank = r;
    peers_.emplace(r, std::move(p));
  }
  sum_.worker_ranks = static_cast<int>(peers_.size());
}

Coordinator::~Coordinator() { *alive_ = false; }

void Coordinator::start() {
  t0_ = Clock::now();
  t0_epoch_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& [r, p] : peers_) p.last_heard = t0_;
  if (opts_.metrics) opts_.metrics->run_started(t0_epoch_, 0);  // slots: known as the ranks get ready
  log_ << stamp() << "kiln-mpi: coordinator on rank 0, " << peers_.size()
       << " evaluating rank(s); waiting for their evaluators" << std::endl;
  RunSupervisor::Hooks hooks;
  hooks.progress = [this] { return progress_line(false); };
  if (opts_.metrics) hooks.metrics = [this] { publish_metrics(); };
  hooks.signal = [this](int sig) {
    log_ << stamp() << "kiln-mpi: signal " << sig << ": draining; unfinished jobs go back to the queue"
         << std::endl;
    sum_.interrupted = true;
    end(kExitInterrupted, "");
  };
  supervisor_->start(std::move(hooks));
  arm_heartbeat();
  arm_checkpoint();
  arm_flush();
}

size_t Coordinator::live_peers() const {
  size_t n = 0;
  for (const auto& [r, p] : peers_) n += p.state != Peer::State::kGone;
  return n;
}

size_t Coordinator::outstanding() const {
  size_t n = 0;
  for (const auto& [r, p] : peers_) n += p.outstanding.size();
  return n;
}

bool Coordinator::all_ranks_said_bye() const {
  for (const auto& [r, p] : peers_)
    if (r != transport_.rank() && !p.said_bye) return false;
  return true;
}

void Coordinator::handle(int source, const json& m) {
  auto it = peers_.find(source);
  if (it == peers_.end()) return;
  Peer& p = it->second;
  p.last_heard = Clock::now();
  const std::string type = m.value("type", "");
  if (type == "result") on_result(p, m);
  else if (type == "ready") on_ready(p, m);
  else if (type == "bye") on_bye(p, m);
  // heartbeat: last_heard is all it updates
}

void Coordinator::on_ready(Peer& p, const json& m) {
  if (p.state != Peer::State::kStarting || ending_) return;
  p.state = Peer::State::kReady;
  p.slots = std::max(1, m.value("slots", 1));
  // Claim ahead of the ready ranks' slots (scheduler lookahead).
  int slots = 0;
  for (const auto& [r, q] : peers_)
    if (q.state == Peer::State::kReady) slots += q.slots;
  scheduler_->set_lookahead(slots);
  p.host = m.value("host", "");
  p.device = m.value("device", "unknown");
  ++sum_.ranks_ready;
  const json hello = m.value("hello", json::object());
  std::ostringstream line;
  line << stamp() << "kiln-mpi: rank " << p.rank << " ready on " << p.host << ": " << p.slots
       << " slot(s) on " << p.device;
  if (m.contains("gpu") && m["gpu"].is_string()) line << " (GPU " << m["gpu"].get<std::string>() << ")";
  if (hello.contains("triton")) line << ", Triton " << hello.value("triton", "") << ", torch " << hello.value("torch", "");
  // the rank's first evaluator to answer: how long each step of its start took
  if (const std::string steps = describe_startup(startup_steps(hello)); !steps.empty())
    line << "; its first evaluator started in " << steps;
  log_ << line.str() << std::endl;
  if (device_.empty()) {
    device_ = p.device;
    sum_.device = device_;
    scheduler_->set_device(device_);
  } else if (p.device != device_) {
    log_ << stamp() << "kiln-mpi: warning: rank " << p.rank << " runs on " << p.device
         << " but the run counts latencies as measured on " << device_
         << " (the first rank's device); use one device kind per run" << std::endl;
  }
  pump();
}

std::string Coordinator::attach_artifact(Peer& p, long long item_id, const EvaluationResult& res, json& reply,
                                         const json& m, std::string* key_out) {
  // Read typed (evaluate/protocol.h); the path is then rewritten in the reply.
  if (!res.artifact || !res.artifact->object.contains("path") || !reply.contains("result")) return "";
  // Kept in memory under a path of rank 0's scratch (no file is written): the
  // scheduler reads it through SchedulerOptions::read_artifact.
  const std::string key =
      (artifact_dir_ / ("from-rank-" + std::to_string(p.rank)) / ("item-" + std::to_string(item_id) + ".bin"))
          .string();
  reply["result"]["artifact"]["path"] = key;
  *key_out = key;
  auto b = m.find("artifact_b64");
  if (b == m.end() || !b->is_string()) {  // the scheduler records the candidate as a crash
    auto e = m.find("artifact_error");
    if (e == m.end() || !e->is_string()) return "the worker rank sent no code object";
    artifact_errors_[key] = e->get<std::string>();
    return e->get<std::string>();
  }
  artifacts_[key] = base64_decode(b->get<std::string>());
  return "";
}

void Coordinator::on_result(Peer& p, const json& m) {
  if (p.state == Peer::State::kGone) return;  // its items were requeued
  const long long id = m.value("item_id", 0LL);
  auto it = p.outstanding.find(id);
  if (it == p.outstanding.end()) return;
  WorkItem item = std::move(it->second);
  p.outstanding.erase(it);
  t_last_ = Clock::now();
  if (ending_) return;  // drained: abandoned, the next run evaluates it
  WorkerOutcome o = outcome_from_json(m.value("outcome", json::object()));
  std::string artifact_key;  // where attach_artifact kept the code object
  if (o.kind == WorkerOutcome::Kind::kReply) {
    // Typed once for the GPU accounts (the two share it; the scheduler checks
    // the answer by the item's kind, evaluate/reply.h).
    const EvaluationResult res = read_evaluation_result(o.reply);
    append_gpu_spans(res, p.gpu_spans, &p.bench_spans);
    drop_util_samples(o.reply);  // the driver's utilisation: reported by kiln run only (explore/utilisation.h)
    const double kernel_s = device_kernel_seconds(res);
    sum_.gpu_kernel_s += kernel_s;
    p.gpu_kernel_s += kernel_s;
    try {
      const std::string why = attach_artifact(p, id, res, o.reply, m, &artifact_key);
      if (!why.empty())
        log_ << stamp() << "kiln-mpi: rank " << p.rank << ": code object of " << item.label
             << " lost: " << why << std::endl;
    } catch (const std::exception& e) {
      log_ << stamp() << "kiln-mpi: warning: code object from rank " << p.rank << ": " << e.what()
           << std::endl;
    }
  }
  if (item.kind == WorkItem::Kind::kEvaluate) ++p.evaluated;
  scheduler_->complete(item, std::move(o), m.value("worker", "rank " + std::to_string(p.rank)));
  if (!artifact_key.empty()) {  // a code object the scheduler did not take (its job was released meanwhile)
    artifacts_.erase(artifact_key);
    artifact_errors_.erase(artifact_key);
  }
  pump();
}

void Coordinator::on_bye(Peer& p, const json& m) {
  p.said_bye = true;
  if (p.state != Peer::State::kGone) {
    const std::string reason = m.value("reason", "");
    const size_t n = p.outstanding.size();
    for (const auto& [id, item] : p.outstanding) scheduler_->requeue(item);
    sum_.items_requeued += static_cast<long long>(n);
    p.outstanding.clear();
    p.state = Peer::State::kGone;
    if (!ending_) {
      log_ << stamp() << "kiln-mpi: rank " << p.rank << " left (" << reason << ")";
      if (n) log_ << "; " << n << " item(s) requeued";
      log_ << std::endl;
      if (live_peers() == 0) {
        end(kExitNoWorkers, "no worker ranks left (the last, rank " + std::to_string(p.rank) + ": " + reason + ")");
        return;
      }
      pump();
    }
  }
  check_byes();
}

void Coordinator::lose(Peer& p, const std::string& why) {
  const size_t n = p.outstanding.size();
  for (const auto& [id, item] : p.outstanding) scheduler_->requeue(item);
  sum_.items_requeued += static_cast<long long>(n);
  p.outstanding.clear();
  p.state = Peer::State::kGone;
  p.lost = true;
  ++sum_.ranks_lost;
  transport_.send(p.rank, {{"type", "stop"}});  // in case it is alive after all
  log_ << stamp() << "kiln-mpi: rank " << p.rank << " lost (" << why << "); " << n
       << " item(s) requeued" << std::endl;
  if (live_peers() == 0) {
    end(kExitNoWorkers, "no worker ranks left (rank " + std::to_string(p.rank) + " lost: " + why + ")");
    return;
  }
  pump();
}

bool Coordinator::send_one(Peer& p) {
  std::optional<WorkItem> item = scheduler_->next(p.rank);
  if (!item) return false;
  const long long id = next_item_++;
  json m = {{"type", "work"}, {"item_id", id}, {"timeout_s", item->timeout_s}};
  // The job document (1-2 KB) goes to a rank once, in a `job` message; work
  // items then name it by job_id.
  if (auto j = item->request.find("job"); j != item->request.end()) {
    if (p.jobs.insert(item->job_id).second)
      transport_.send(p.rank, {{"type", "job"}, {"job_id", item->job_id}, {"job", std::move(*j)}});
    item->request.erase("job");
    m["job_id"] = item->job_id;
  }
  m["request"] = std::move(item->request);  // the scheduler needs the rest of the item, not the request
  transport_.send(p.rank, m);
  p.outstanding.emplace(id, std::move(*item));
  ++sum_.items_sent;
  if (!any_dispatched_) {
    any_dispatched_ = true;
    t_first_ = Clock::now();
    cpu_first_ = process_cpu_seconds();
  }
  return true;
}

void Coordinator::pump() {
  if (ending_ || pumping_ || device_.empty()) return;
  pumping_ = true;
  std::vector<Peer*> ready;
  for (auto& [r, p] : peers_)
    if (p.state == Peer::State::kReady) ready.push_back(&p);
  if (!ready.empty()) {
    const size_t n = ready.size();
    const size_t start = static_cast<size_t>(rr_) % n;
    bool progress = true, more = true;
    while (progress && more) {
      progress = false;
      for (size_t k = 0; k < n && more; ++k) {
        Peer& p = *ready[(start + k) % n];
        if (static_cast<int>(p.outstanding.size()) >= p.slots + opts_.prefetch) continue;
        if (send_one(p)) progress = true;
        else more = false;
      }
    }
    rr_ = static_cast<int>((start + 1) % n);
  }
  pumping_ = false;
  if (!scheduler_->fatal().empty()) {
    end(kExitError, scheduler_->fatal());
    return;
  }
  if (outstanding() == 0 && scheduler_->finished()) end(kExitOk, "");
}

void Coordinator::end(int code, const std::string& why) {
  if (ending_) return;
  ending_ = true;
  sum_.exit_code = code;
  sum_.error = why;
  if (any_dispatched_) {
    sum_.busy_s = std::chrono::duration<double>((t_last_ > t_first_ ? t_last_ : Clock::now()) - t_first_).count();
    sum_.busy_cpu_s = process_cpu_seconds() - cpu_first_;
  }
  // Release what is still active (a drain, a lost batch, a fatal error).
  scheduler_->flush();
  if (code == kExitOk && !scheduler_->fatal().empty()) {  // the last write failed
    code = sum_.exit_code = kExitError;
    sum_.error = scheduler_->fatal();
  }
  if (!sum_.error.empty()) log_ << stamp() << "kiln-mpi: " << sum_.error << std::endl;
  if (code != kExitOk) scheduler_->drain();
  supervisor_->stop();
  heartbeat_timer_.cancel();
  checkpoint_timer_.cancel();
  flush_timer_.cancel();
  for (auto& [r, p] : peers_)
    if (!p.lost && !p.said_bye) transport_.send(r, {{"type", "stop"}});
  write_status();  // first: a SIGKILL during a long final copy still leaves the code
  checkpoint("final");
  log_ << stamp() << progress_line(true) << std::endl;
  check_byes();
  if (finished_) return;
  // Signals come shortly before a SIGKILL (mpirun gives its ranks 1 s after a
  // SIGTERM): wait only briefly for the ranks' goodbyes then.
  after_while_alive(grace_timer_,
                    code == kExitInterrupted ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000),
                    alive_, [this] { finish(); });
}

void Coordinator::check_byes() {
  if (!ending_ || finished_) return;
  // Lost ranks are not waited for: they may never answer again.
  for (const auto& [r, p] : peers_)
    if (!p.said_bye && !p.lost) return;
  finish();
}

void Coordinator::finish() {
  if (finished_) return;
  finished_ = true;
  if (opts_.metrics) {  // the final values: what --metrics-file keeps
    publish_metrics();
    opts_.metrics->run_finished(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
  grace_timer_.cancel();
  std::error_code ec;
  fs::remove_all(artifact_dir_, ec);
  if (on_finished_) post_while_alive(io_, alive_, on_finished_);
}

CoordinatorSummary Coordinator::summary() const {
  CoordinatorSummary s = sum_;
  const double end_epoch =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double busy = 0;
  for (const auto& [rank, p] : peers_) {
    if (p.gpu_spans.empty()) continue;
    s.gpu_ranks.push_back("rank " + std::to_string(p.rank) + " on " + p.host + " (" + p.device + ")");
    s.gpu_busy_each_s.push_back(union_seconds(p.gpu_spans, t0_epoch_, end_epoch));
    busy += s.gpu_busy_each_s.back();
  }
  const SchedulerStats& st = scheduler_->stats();
  s.jobs_done = st.jobs_done;
  s.jobs_failed = st.jobs_failed;
  s.candidates = st.candidates;
  s.candidate_failures = st.candidate_failures;
  s.wall_s = seconds_since(t0_);
  s.cpu_s = process_cpu_seconds();
  if (!s.gpu_busy_each_s.empty() && s.wall_s > 0)
    s.gpu_busy_fraction = std::min(1.0, busy / (s.wall_s * static_cast<double>(s.gpu_busy_each_s.size())));
  if (!s.gpu_busy_each_s.empty() && s.wall_s > 0 && s.gpu_kernel_s > 0)
    s.gpu_kernel_fraction =
        std::min(1.0, s.gpu_kernel_s / (s.wall_s * static_cast<double>(s.gpu_busy_each_s.size())));
  return s;
}

void Coordinator::write_status() const {
  if (!opts_.status_file) return;
  const fs::path path = *opts_.status_file;
  const fs::path tmp = path.string() + ".tmp";
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << sum_.exit_code << "\n" << summary().to_json().dump() << "\n";
  }
  fs::rename(tmp, path, ec);
}

void Coordinator::checkpoint(const char* when) {
  if (!opts_.checkpoint_to) return;
  copy_.reset();  // a periodic copy in progress is superseded
  try {
    CheckpointResult r = checkpoint_catalog(catalog_, *opts_.checkpoint_to);
    ++sum_.checkpoints;
    log_ << stamp() << "kiln-mpi: " << when << " checkpoint: catalog copied to "
         << opts_.checkpoint_to->string() << " (" << r.bytes / 1024 << " KiB, " << std::fixed
         << std::setprecision(2) << r.seconds << " s)" << std::defaultfloat << std::endl;
  } catch (const std::exception& e) {
    log_ << stamp() << "kiln-mpi: warning: " << e.what() << std::endl;
  }
}

void Coordinator::arm_checkpoint() {
  if (!opts_.checkpoint_to || opts_.checkpoint_every_s <= 0) return;
  after_while_alive(checkpoint_timer_, to_ms(opts_.checkpoint_every_s), alive_, [this] {
    if (ending_) return;
    try {
      copy_ = std::make_unique<CatalogCopy>(catalog_, *opts_.checkpoint_to);
    } catch (const std::exception& e) {
      log_ << stamp() << "kiln-mpi: warning: " << e.what() << std::endl;
      arm_checkpoint();
      return;
    }
    step_checkpoint();
  });
}

// A periodic copy goes in steps of 1024 pages (4 MiB) between the loop's other
// work, so a large catalog never stalls results or heartbeats; results written
// meanwhile are carried into the copy by SQLite.
void Coordinator::step_checkpoint() {
  post_while_alive(io_, alive_, [this] {
    if (!copy_ || ending_) return;
    try {
      if (!copy_->step(1024)) {
        step_checkpoint();
        return;
      }
      CheckpointResult r = copy_->commit();
      ++sum_.checkpoints;
      log_ << stamp() << "kiln-mpi: checkpoint: catalog copied to " << opts_.checkpoint_to->string()
           << " (" << r.bytes / 1024 << " KiB, " << std::fixed << std::setprecision(2) << r.seconds << " s)"
           << std::defaultfloat << std::endl;
    } catch (const std::exception& e) {
      log_ << stamp() << "kiln-mpi: warning: " << e.what() << std::endl;
    }
    copy_.reset();
    arm_checkpoint();
  });
}

void Coordinator::arm_flush() {
  after_while_alive(flush_timer_, std::chrono::milliseconds(200), alive_, [this] {
    if (ending_) return;
    scheduler_->flush();
    if (!scheduler_->fatal().empty()) {
      end(kExitError, scheduler_->fatal());
      return;
    }
    arm_flush();
  });
}

void Coordinator::arm_heartbeat() {
  after_while_alive(heartbeat_timer_, to_ms(opts_.heartbeat_interval_s), alive_, [this] {
    if (ending_) return;
    transport_.poll_now();
    if (ending_) return;
    const auto now = Clock::now();
    for (auto& [r, p] : peers_) {
      if (r == transport_.rank() || p.state == Peer::State::kGone) continue;
      const double silent = std::chrono::duration<double>(now - p.last_heard).count();
      if (opts_.heartbeat_timeout_s > 0 && silent > opts_.heartbeat_timeout_s) {
        std::ostringstream why;
        why << "no message for " << std::fixed << std::setprecision(0) << silent << " s";
        lose(p, why.str());
        if (ending_) return;
      } else {
        transport_.send(r, {{"type", "heartbeat"}});
      }
    }
    arm_heartbeat();
  });
}

std::string Coordinator::progress_line(bool final_line) const {
  std::ostringstream line;
  line << (final_line ? "finished: " : "") << progress_counts(scheduler_->stats(), scheduler_->active_jobs())
       << " · ranks " << live_peers() << "/" << peers_.size();
  if (sum_.items_requeued) line << " · " << sum_.items_requeued << " requeued";
  if (final_line) {
    line << " · " << std::fixed << std::setprecision(1) << seconds_since(t0_) << " s";
    const CoordinatorSummary now = summary();
    if (now.gpu_busy_fraction)
      line << " · GPUs busy " << std::setprecision(0) << *now.gpu_busy_fraction * 100 << "% ("
           << now.gpu_busy_each_s.size() << " rank" << (now.gpu_busy_each_s.size() > 1 ? "s" : "") << ")";
  } else if (!scheduler_->stats().last_best.empty()) {
    line << " · last best: " << scheduler_->stats().last_best;
  }
  return line.str();
}

// The sampled metrics: jobs by state, the queue, and each evaluating rank's
// GPU (one per rank) once it has done GPU work, labelled "HOST/rank R".
void Coordinator::publish_metrics() {
  metrics::RunMetrics& m = *opts_.metrics;
  const double now = epoch_now();
  m.heartbeat(now);
  try {
    m.jobs_by_state(catalog_.job_state_counts(opts_.batch));
  } catch (const std::exception& e) {
    log_ << stamp() << "kiln-mpi: warning: metrics: " << e.what() << std::endl;
  }
  m.queue(static_cast<long long>(scheduler_->ready_candidates()), static_cast<long long>(outstanding()));
  int ready = 0;
  for (const auto& [rank, p] : peers_) {
    if (p.state == Peer::State::kReady) ready += p.slots;
    if (p.gpu_spans.empty() && p.gpu_kernel_s <= 0) continue;
    m.gpu(p.host + "/rank " + std::to_string(p.rank), union_seconds(p.gpu_spans, t0_epoch_, now),
          union_seconds(p.bench_spans, t0_epoch_, now), p.gpu_kernel_s, now - t0_epoch_);
  }
  m.workers(ready, ready);  // a rank's slots count once it is ready; a lost rank's no more
}

}  // namespace kiln::mpi
