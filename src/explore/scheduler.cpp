#include "explore/scheduler.h"

#include "explore/run_supervisor.h"


#include <ctime>
#include <iomanip>
#include <sstream>

#include <boost/asio/post.hpp>

#include "catalog/evaluations.h"
#include "catalog/job_key.h"
#include "common/hash.h"
#include "evaluate/artifact_file.h"
#include "search/estimate.h"
#include "common/terminal_text.h"
#include "evaluate/reply.h"
#include "explore/confirm.h"
#include "explore/select.h"

namespace kiln {

using nlohmann::json;

namespace {

// The median of a worker result's latency, when it has one.
std::optional<double> latency_median(const EvaluationResult& r) {
  return r.latency ? r.latency->median_ms : std::nullopt;
}

// exploration.timeout_s from a job's spec, within the manifest's bounds
// (docs/manifest.md) whatever the catalog holds (a merged shard, an old row):
// a number in (0, 86400], else the default 300 s.
double bounded_timeout(const json& explore) {
  auto t = explore.find("timeout_s");
  if (t == explore.end() || !t->is_number()) return 300.0;
  const double v = t->get<double>();
  return v > 0 && v <= 86400 ? v : 300.0;
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

std::string candidate_key_of(const Proposal& p) {
  std::string k = p.generator + "\n" + p.template_name + "\n" + canonical_json(p.config);
  if (p.source) k += "\n" + *p.source;
  return sha256_hex(k);
}

}  // namespace

struct Scheduler::Job {
  JobContext ctx;
  json job;                          // what the worker gets
  std::unique_ptr<Generator> generator;
  bool space_requested = false, space_known = false, proposing = false;
  std::deque<CandidateRow> pending;
  int in_flight = 0;
  int rounds = 0;
  std::optional<double> best_ms;     // best measured median so far (bench cutoff)
  void improve_best(double ms) {
    if (!best_ms || ms < *best_ms) best_ms = ms;
  }
  std::string error;                 // the generator's "error: " note, if it gave up
  // The confirmation round: queued (not yet handed out), in flight, done.
  std::optional<WorkItem> confirm_item;
  std::vector<Finalist> finalists;
  bool confirm_sent = false, confirm_done = false;
  std::optional<double> shown_best_ms;  // the best-so-far published (metrics), either basis
  std::string label() const {
    return ctx.row.op + " " + shape_str(ctx.row.shape) + " " + ctx.row.dtype + " " + ctx.row.target;
  }
  metrics::JobLabels labels() const {
    return {ctx.row.id, ctx.row.op, shape_str(ctx.row.shape), ctx.row.dtype, ctx.row.target};
  }
};

Scheduler::Scheduler(Catalog& catalog, const Knowledge& knowledge, boost::asio::io_context& io,
                     SchedulerOptions options, std::ostream& log)
    : catalog_(catalog), knowledge_(knowledge), io_(io), opts_(std::move(options)), log_(log) {}

Scheduler::~Scheduler() { flush(); }

void Scheduler::set_device(const std::string& device_name) { device_ = device_name; }

size_t Scheduler::active_jobs() const { return active_.size(); }

size_t Scheduler::ready_candidates() const {
  size_t n = 0;
  for (const auto& [id, job] : active_) n += job->pending.size();
  return n;
}

bool Scheduler::finished() const {
  if (!fatal_.empty()) return true;
  return active_.empty() && (queue_empty_ || draining_);
}

std::optional<WorkItem> Scheduler::next(int slot) {
  if (!fatal_.empty()) return std::nullopt;
  for (;;) {
    for (auto& [id, job] : active_) {
      if (job->space_requested) continue;
      job->space_requested = true;
      WorkItem w;
      w.kind = WorkItem::Kind::kSpace;
      w.job_id = id;
      // A reference job has no template: the worker loads its module instead.
      w.request = {{"method", job->ctx.is_reference() ? "reference_info" : "space"}, {"job", job->job}};
      w.timeout_s = 120;
      w.label = job->label();
      return w;
    }
    // A job whose exploration is over waits for its confirmation round alone.
    for (auto& [id, job] : active_) {
      if (!job->confirm_item || job->confirm_sent) continue;
      job->confirm_sent = true;
      affinity_.took(slot, id);
      return *job->confirm_item;
    }
    // Claim ahead: when the candidates ready to hand out would not fill the
    // executor's slots, and no active job is still being planned, claim the
    // next job now, so its space request and plan overlap the evaluations in
    // flight instead of leaving slots idle when the current jobs run dry.
    if (opts_.lookahead > 0 && !draining_ && !queue_empty_) {
      size_t ready = 0;
      for (const auto& [jid, j] : active_) ready += j->pending.size();
      if (!planning() && ready < static_cast<size_t>(opts_.lookahead) && claim()) continue;
    }
    // The candidate's job: one this slot has set up, else the one with the
    // most ready candidates per evaluator already on it (dispatch.h).
    std::vector<JobLoad> loads;
    for (const auto& [id, job] : active_) loads.push_back({id, job->pending.size(), job->in_flight});
    std::optional<long long> pick = affinity_.pick(slot, loads, opts_.scheduling.min_ready_per_slot);
    if (!pick && opts_.scheduling.min_ready_per_slot > 0) {
      // No job has enough ready candidates for one more evaluator to be worth
      // its set-up: claim the next job (this slot then plans it), unless one is
      // being planned already or none is left; else join what has work.
      if (!planning() && !draining_ && !queue_empty_ && claim()) continue;
      pick = affinity_.pick(slot, loads);
    }
    if (pick) {
      const long long id = *pick;
      Job* job = active_.at(id).get();
      affinity_.took(slot, id);
      CandidateRow c = job->pending.front();
      job->pending.pop_front();
      ++job->in_flight;
      WorkItem w;
      w.kind = WorkItem::Kind::kEvaluate;
      w.job_id = id;
      w.candidate = c;
      // One artifact directory per slot: two candidates may compile to the
      // same bytes (same file name) and must not race on the file.
      const auto dir = opts_.artifact_dir / ("slot-" + std::to_string(slot));
      std::filesystem::create_directories(dir);
      w.request = {{"method", "evaluate"}, {"job", job->job}, {"config", c.config},
                   {"artifact_dir", dir.string()}};
      if (opts_.scheduling.bench_cutoff > 0 && job->best_ms && job->ctx.measured)
        w.request["job"]["benchmark"]["cutoff_ms"] = *job->best_ms * opts_.scheduling.bench_cutoff;
      if (c.source) w.request["source"] = *c.source;
      w.timeout_s = bounded_timeout(job->ctx.explore());
      w.label = job->label();
      return w;
    }
    if (draining_ || queue_empty_ || !claim()) return std::nullopt;
  }
}

bool Scheduler::planning() const {
  for (const auto& [id, job] : active_)
    if (!job->space_known || job->proposing) return true;
  return false;
}

bool Scheduler::claim() {
  std::optional<JobRow> row;
  try {
    row = catalog_.claim_job(opts_.owner, opts_.scheduling.lease_s, opts_.batch, opts_.shard, opts_.claim_order);
  } catch (const std::exception& e) {
    fail(std::string("catalog: ") + e.what());
    return false;
  }
  if (!row) {
    queue_empty_ = true;
    return false;
  }
  auto job = std::make_unique<Job>();
  job->ctx.row = *row;
  job->ctx.knowledge = &knowledge_;
  job->ctx.target = knowledge_.targets.find(row->target);
  job->ctx.device_name = device_;
  job->ctx.catalog = &catalog_;
  job->ctx.metrics = opts_.metrics;
  // A reference job's op names its module, not a library operator (module "").
  const OperatorSpec* op = job->ctx.is_reference() ? nullptr : knowledge_.operators.find(row->op);
  if (!job->ctx.target || (!op && !job->ctx.is_reference())) {
    catalog_.finish_job(row->id, opts_.owner, false,
                        job->ctx.target ? "unknown operator " + row->op : "unknown target " + row->target);
    ++stats_.jobs_failed;
    return true;
  }
  job->ctx.module = op ? op->module : "";
  job->ctx.measured = TargetRegistry::matches_device(*job->ctx.target, device_);
  for (const auto& c : row->spec.value("constraints", json::array()))
    if (const Principle* p = knowledge_.principles.find(c.get<std::string>())) job->ctx.principles.push_back(p);
  job->job = row->spec;
  // Benchmark only where the executing device is of the target's kind: an
  // H200's latency says nothing about an MI300X.
  if (!job->ctx.measured) job->job["benchmark"]["runs"] = 0;
  try {
    job->generator = make_generator(job->ctx, io_);
  } catch (const std::exception& e) {
    catalog_.finish_job(row->id, opts_.owner, false, e.what());
    ++stats_.jobs_failed;
    return true;
  }
  active_.emplace(row->id, std::move(job));
  return true;
}

void Scheduler::complete(const WorkItem& item, WorkerOutcome raw, const std::string& worker) {
  // The reply is untrusted: one that does not match the protocol becomes a
  // crash naming the fault (evaluate/reply.h), for this item alone.
  // (By the item's kind: under MPI the coordinator has sent the request away.)
  const char* method = item.kind == WorkItem::Kind::kEvaluate ? "evaluate"
                       : item.kind == WorkItem::Kind::kSpace  ? "space"
                                                              : "confirm";
  complete(item, check_answer(method, std::move(raw)), worker);
}

void Scheduler::complete(const WorkItem& item, const CheckedAnswer& a, const std::string& worker) {
  auto it = active_.find(item.job_id);
  if (it == active_.end()) return;  // released by a drain meanwhile
  Job& job = *it->second;
  const bool reply = a.outcome.kind == WorkerOutcome::Kind::kReply;
  if (item.kind == WorkItem::Kind::kSpace) {
    if (!reply || !a.envelope.ok) {
      const std::string why = reply ? a.envelope.error : a.outcome.detail;
      finish(job, false, (job.ctx.is_reference() ? "could not load the reference module: "
                                                 : "could not enumerate the config space: ") + why);
      return;
    }
    const json& r = a.typed.result.raw;
    if (job.ctx.is_reference()) job.ctx.reference_info = r;
    job.ctx.traffic = Traffic::from_json(r.value("traffic", json::object()));
    job.ctx.space = r.value("configs", json::array()).get<std::vector<json>>();
    // Optional, parallel to configs: launch grid and shared memory per config,
    // for the strategies' config model (src/search/strategy.h).
    if (auto h = r.find("hints"); h != r.end() && h->is_array() && h->size() == job.ctx.space.size())
      job.ctx.space_hints = h->get<std::vector<json>>();
    job.space_known = true;
    plan(job);
    return;
  }
  if (item.kind == WorkItem::Kind::kConfirm) {
    complete_confirmation(job, a);
    return;
  }
  --job.in_flight;
  record(item, a, worker);
  maybe_finish(item.job_id);
}

void Scheduler::requeue(const WorkItem& item) {
  auto it = active_.find(item.job_id);
  if (it == active_.end()) return;  // released by a drain meanwhile
  Job& job = *it->second;
  if (item.kind == WorkItem::Kind::kSpace) {
    if (!job.space_known) job.space_requested = false;
    return;
  }
  if (item.kind == WorkItem::Kind::kConfirm) {
    job.confirm_sent = false;  // handed out again by next()
    return;
  }
  job.pending.push_front(item.candidate);
  if (job.in_flight > 0) --job.in_flight;
}

void Scheduler::plan(Job& job) {
  job.proposing = true;
  ++job.rounds;
  const long long id = job.ctx.row.id;
  try {
    const std::vector<Outcome> past = history(job);
    // A resumed job's earlier measurements on this kind of device count for
    // the bench cutoff too (estimates and other devices' latencies do not);
    // after the first round record() keeps best_ms up to date.
    if (job.ctx.measured && job.rounds == 1)
      for (const auto& o : past) {
        const EvaluationResult r = read_evaluation_result(o.result);
        const auto ms = latency_median(r);
        if (o.status == "ok" && ms &&
            TargetRegistry::matches_device(*job.ctx.target, r.latency->device.value_or("")))
          job.improve_best(*ms);
      }
    job.generator->propose(job.ctx, past,
                           [this, id](std::vector<Proposal> p, std::vector<std::string> notes) {
                             // Always continue on the io_context, never inside propose().
                             boost::asio::post(io_, [this, id, p = std::move(p), notes = std::move(notes)]() mutable {
                               on_proposals(id, std::move(p), std::move(notes));
                             });
                           });
  } catch (const std::exception& e) {
    job.proposing = false;
    finish(job, false, std::string("generator: ") + e.what());
  }
}

void Scheduler::on_proposals(long long id, std::vector<Proposal> proposals, std::vector<std::string> notes) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Job& job = *it->second;
  job.proposing = false;
  // Notes: the first round's, and every round's llm/retrieval/reflection/error notes.
  for (const auto& n : notes)
    if (job.rounds == 1 || n.rfind("llm", 0) == 0 || n.rfind("retrieval", 0) == 0 || n.rfind("reflection", 0) == 0 ||
        n.rfind("error: ", 0) == 0 || n.rfind("fatal: ", 0) == 0 || n.rfind("llm-unavailable: ", 0) == 0)
      log_ << stamp() << "  " << job.label() << ": " << n << std::endl;
  int fresh = 0, resumed = 0;
  try {
    std::vector<CandidateRow> rows;
    for (const Proposal& p : proposals) {
      CandidateRow c;
      c.job_id = id;
      c.generator = p.generator;
      c.template_name = p.template_name;
      c.config = p.config;
      c.source = p.source;
      c.parent_id = p.parent_id;
      c.round = p.round;
      c.instance = p.instance;
      c.key = candidate_key_of(p);
      rows.push_back(std::move(c));
    }
    // Batching executors store a round's candidates in one transaction.
    if (opts_.record_batch > 1) rows = catalog_.add_candidates(rows);
    for (size_t i = 0; i < proposals.size(); ++i) {
      const Proposal& p = proposals[i];
      CandidateRow stored = opts_.record_batch > 1 ? rows[i] : catalog_.add_candidate(rows[i]);
      if (p.llm_call_id) catalog_.link_llm_call(*p.llm_call_id, stored.id);
      if (stored.evaluated) {
        ++resumed;
        continue;
      }
      ++fresh;
      job.pending.push_back(stored);
    }
  } catch (const std::exception& e) {
    fail(std::string("catalog: ") + e.what());
    return;
  }
  if (resumed > 0 && job.rounds == 1)
    log_ << stamp() << "  " << job.label() << ": resuming, " << resumed
         << " candidate(s) already evaluated" << std::endl;
  if (fresh == 0) {
    // A round with nothing new ends the search. A generator's "fatal: " note
    // fails the job and stops the run (its endpoint is unusable); an
    // "error: " note is the job's failure message if nothing was correct.
    for (const auto& n : notes)
      if (n.rfind("llm-unavailable: ", 0) == 0) {  // this job fails; the rest of the batch goes on
        ++stats_.jobs_need_llm;
        finish(job, false, n.substr(17));
        if (wake_) wake_();
        return;
      }
    for (const auto& n : notes)
      if (n.rfind("fatal: ", 0) == 0) {
        const std::string why = n.substr(7);
        finish(job, false, why);
        fail(why);
        if (wake_) wake_();
        return;
      }
    for (const auto& n : notes)
      if (n.rfind("error: ", 0) == 0 && job.error.empty()) job.error = n.substr(7);
    job.space_known = true;
    job.rounds = -1;
  }
  maybe_finish(id);
  if (wake_) wake_();
}

void Scheduler::maybe_finish(long long id) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Job& job = *it->second;
  if (job.proposing || !job.space_known || !job.pending.empty() || job.in_flight > 0) return;
  // Selection and the generator's history read evaluations: write buffered ones first.
  flush();
  if (!fatal_.empty()) return;
  if (job.rounds >= 0) {  // the generator may have more: ask it
    plan(job);
    return;
  }
  if (job.confirm_item) return;  // its confirmation round is queued or in flight
  // The executor asks next() after every completion: the queued round goes out then.
  if (!job.confirm_done && start_confirmation(job)) return;
  select_and_finish(job);
}

bool Scheduler::start_confirmation(Job& job) {
  job.confirm_done = true;  // one round per job and run, whatever becomes of it
  const SchedulingSettings& s = opts_.scheduling;
  if (s.confirm_rounds <= 0 || job.ctx.is_reference()) return false;
  if (!job.ctx.measured && !s.confirm_cpu) return false;
  ConfirmSettings cs = confirm_settings(job.ctx.row.spec, s.confirm_rounds, s.confirm_reps);
  cs.throttle_threshold = s.confirm_throttle;
  cs.throttle_recovery_s = s.confirm_throttle_recovery_s;
  cs.preheat_s = s.confirm_preheat_s;
  try {
    job.finalists = pick_finalists(catalog_.evaluated_candidates(job.ctx.row.id), *job.ctx.target,
                                   job.ctx.measured, cs);
  } catch (const std::exception& e) {
    fail(std::string("catalog: ") + e.what());
    return false;
  }
  if (job.finalists.empty()) return false;
  WorkItem w;
  w.kind = WorkItem::Kind::kConfirm;
  w.job_id = job.ctx.row.id;
  w.request = confirm_request(job.job, job.finalists, cs);
  // Set-up (a compile per finalist, max-autotune's tuning when asked) and the
  // timed calls: each finalist's exploration median x every call, thrice.
  const size_t entries = job.finalists.size() + cs.baselines.size();
  const bool compile = std::find(cs.baselines.begin(), cs.baselines.end(), "compile") != cs.baselines.end();
  const double calls = static_cast<double>(entries) * cs.rounds * (cs.reps + 4);
  w.timeout_s = 120 + 60.0 * static_cast<double>(entries) + (compile ? 1800 : 0) +
                (job.ctx.measured ? 3 * calls * job.finalists.back().score_ms / 1000 : 2 * calls);
  w.label = job.label() + " (confirmation)";
  job.confirm_item = std::move(w);
  job.confirm_sent = false;
  log_ << stamp() << "  " << job.label() << ": confirming " << job.finalists.size()
       << " finalist(s) with " << cs.baselines.size() << " baseline(s), " << cs.rounds << " rounds x "
       << "up to " << cs.reps << " calls" << std::endl;
  return true;
}

void Scheduler::complete_confirmation(Job& job, const CheckedAnswer& a) {
  job.confirm_item.reset();
  job.confirm_sent = false;
  std::string why;
  if (a.outcome.kind != WorkerOutcome::Kind::kReply) why = a.outcome.detail.empty() ? "no answer" : a.outcome.detail;
  else if (!a.envelope.ok)
    why = a.envelope.error.empty() ? "worker error" : a.envelope.error;
  if (why.empty()) {
    try {
      const std::string run_id =
          sha256_hex(opts_.owner + "\n" + std::to_string(job.ctx.row.id) + "\n" + std::to_string(std::time(nullptr)) +
                     "\n" + std::to_string(stats_.jobs_confirmed + stats_.confirm_failures))
              .substr(0, 16);
      const auto rows = confirmation_rows(job.ctx.row.id, run_id, job.finalists, a.typed.result.raw);
      catalog_.record_confirmations(rows);
      const auto stored = catalog_.confirmations(job.ctx.row.id, run_id);
      if (auto best = select_confirmed(stored, catalog_.evaluated_candidates(job.ctx.row.id))) {
        catalog_.set_best(*best);
        ++stats_.jobs_confirmed;
        if (opts_.metrics) opts_.metrics->confirmation(true);
        finish(job, true, "");
        return;
      }
      bool any_passed = false;
      for (const auto& r : stored)
        if (r.candidate_id && r.conditions.value("check", json()).is_object() &&
            r.conditions["check"].value("passed", false))
          any_passed = true;
      if (!any_passed) {
        // Every finalist computed something wrong while it was timed: none of
        // them may stand as the best on the exploration's numbers either.
        ++stats_.confirm_failures;
        if (opts_.metrics) opts_.metrics->confirmation(false);
        finish(job, false, "confirmation round: no finalist's outputs passed the re-check after timing");
        return;
      }
      why = "the confirmed best has no value on the job's basis (no estimate for the target)";
    } catch (const CatalogError& e) {
      fail(std::string("catalog: ") + e.what());
      return;
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  ++stats_.confirm_failures;
  if (opts_.metrics) opts_.metrics->confirmation(false);
  log_ << stamp() << "warning: " << job.label() << ": confirmation round failed (" << why
       << "); the best stands on the exploration's numbers" << std::endl;
  select_and_finish(job);
}

void Scheduler::select_and_finish(Job& job) {
  const long long id = job.ctx.row.id;
  Selection sel = select_best(catalog_, id, *job.ctx.target);
  if (sel.best) {
    catalog_.set_best(*sel.best);
    finish(job, true, "");
  } else {
    finish(job, false, (job.error.empty() ? "" : job.error + "; ") + "no correct candidate among " +
                           std::to_string(sel.evaluated) +
                           (sel.failure_summary.empty() ? "" : " (" + sel.failure_summary + ")"));
  }
}

void Scheduler::finish(Job& job, bool ok, const std::string& message) {
  const long long id = job.ctx.row.id;
  try {
    catalog_.finish_job(id, opts_.owner, ok, message);
  } catch (const std::exception& e) {
    fail(std::string("catalog: ") + e.what());
    return;
  }
  if (ok) ++stats_.jobs_done;
  else ++stats_.jobs_failed;
  if (opts_.metrics) opts_.metrics->job_finished(job.labels(), ok);
  Selection sel = select_best(catalog_, id, *job.ctx.target);
  if (ok)  // the row just stored (a confirmed best differs from the exploration's)
    if (auto stored = catalog_.best(id)) sel.best = stored;
  log_ << stamp() << (ok ? "done   " : "FAILED ") << job.label();
  if (sel.best) {
    log_ << ": best " << fmt_ms(sel.best->value_ms) << " (" << sel.best->basis
         << (sel.best->basis == "measured" ? " on " + sel.best->device : "")
         << (sel.best->confirmed_run ? ", confirmed" : "") << "), " << sel.correct
         << "/" << sel.evaluated << " correct";
    // A search that stopped short of the template's space says how short.
    if (!job.ctx.space.empty() && static_cast<size_t>(sel.evaluated) < job.ctx.space.size())
      log_ << ", " << sel.evaluated << " of " << job.ctx.space.size() << " configs evaluated";
  } else {
    log_ << ": " << terminal_safe(message);
  }
  log_ << std::endl;
  affinity_.forget(id);
  active_.erase(id);
}

void Scheduler::record(const WorkItem& item, const CheckedAnswer& a, const std::string& worker) {
  Job& job = *active_.at(item.job_id);
  const WorkerOutcome& o = a.outcome;
  EvaluationIn e;
  e.worker = worker;
  e.result = json::object();
  const EvaluateReply* reply = nullptr;
  if (o.kind == WorkerOutcome::Kind::kTimeout) {
    e.status = "timeout";
    std::ostringstream within;
    within << item.timeout_s;
    e.message = "no answer within " + within.str() + " s; " + o.detail;
  } else if (o.kind == WorkerOutcome::Kind::kCrash) {
    e.status = "crash";
    e.message = o.detail;
  } else if (!a.envelope.ok) {  // the worker's own error (a reply that broke the protocol is a kCrash: check_answer)
    e.status = "crash";
    e.message = "worker error: " + a.envelope.error;
  } else {
    reply = &a.typed;
    e.result = reply->result.raw;
    e.status = to_string(reply->result.status);
    e.message = reply->result.message;
  }
  // The code object the worker wrote (checked: evaluate/artifact_file.h), and
  // the static estimate for the target.
  if (reply && reply->artifact) {
    const ArtifactClaim& claim = *reply->artifact;
    try {
      ArtifactIn art;
      art.target = job.ctx.row.target;
      art.arch = job.ctx.row.arch;
      art.kind = claim.kind;
      art.kernel_name = claim.kernel_name;
      if (opts_.read_artifact) {  // bytes that came another way (MPI): the sender checked the file
        art.bytes = opts_.read_artifact(claim.path);
        check_artifact_bytes(art.bytes, claim);
      } else {
        const auto dir = item.request.is_object() ? item.request.find("artifact_dir") : item.request.end();
        art.bytes = take_artifact(dir != item.request.end() && dir->is_string() ? dir->get<std::string>() : "",
                                  claim);
      }
      art.metadata = claim.metadata;
      e.artifact = std::move(art);
    } catch (const ArtifactRejected& ex) {
      e.status = "crash";
      e.message = std::string("infrastructure fault: code object rejected: ") + ex.what();
    } catch (const std::exception& ex) {
      e.status = "crash";
      e.message = std::string("code object missing: ") + ex.what();
    }
    if (e.status == "ok") {
      try {
        Traffic tr = reply->result.traffic.value_or(Traffic{});
        if (tr.bytes <= 0) tr = job.ctx.traffic;
        Estimate est = estimate_latency(*job.ctx.target, job.ctx.row.dtype, tr,
                                        KernelResources::from_artifact(*reply->result.artifact), item.candidate.config);
        e.estimate_ms = est.ms;
        e.result["estimate"] = est.to_json();
      } catch (const std::exception&) {
        // A target without bandwidth figures: no estimate; selection uses measurements only.
      }
    }
  }
  try {
    if (opts_.record_batch > 1) {
      unflushed_.emplace_back(item.candidate.id, e);
      if (static_cast<int>(unflushed_.size()) >= opts_.record_batch) flush();
      if (!fatal_.empty()) return;
    } else {
      catalog_.record_evaluation(item.candidate.id, e);
    }
  } catch (const std::exception& ex) {
    fail(std::string("catalog: ") + ex.what());
    return;
  }
  ++stats_.candidates;
  static const EvaluationResult none;
  const EvaluationResult& typed = reply ? reply->result : none;
  if (opts_.metrics) publish_evaluation(job, e, typed);
  if (e.status != "ok") {
    ++stats_.candidate_failures;
    return;
  }
  const auto ms = latency_median(typed);
  if (job.ctx.measured && ms) {
    job.improve_best(*ms);
    stats_.last_best = job.label() + " " + fmt_ms(*ms) + " (measured)";
  }
  else if (e.estimate_ms)
    stats_.last_best = job.label() + " " + fmt_ms(*e.estimate_ms) + " (estimated)";
}

void Scheduler::publish_evaluation(Job& job, const EvaluationIn& e, const EvaluationResult& r) {
  opts_.metrics->evaluation(e.status, r.timings.compile_s.value_or(0), r.timings.check_s.value_or(0),
                            r.timings.bench_s.value_or(0));
  if (e.status != "ok") return;
  // The job's best so far on the basis its best is selected on: measured
  // where the device is of the target's kind, else the static estimate.
  const auto ms = latency_median(r);
  std::optional<double> v = job.ctx.measured ? ms : e.estimate_ms;
  if (!v || (job.shown_best_ms && *job.shown_best_ms <= *v)) return;
  job.shown_best_ms = v;
  opts_.metrics->best_so_far(job.labels(), job.ctx.measured ? "measured" : "estimated", *v / 1000);
}

std::vector<Outcome> Scheduler::history(const Job& job) const {
  std::vector<Outcome> out;
  for (JobEvaluation& e : evaluations(catalog_, job.ctx.row.id)) {
    Outcome o;
    o.candidate = std::move(e.candidate);
    o.status = std::move(e.status);
    o.message = std::move(e.message);
    o.result = std::move(e.result);
    if (o.status == "ok") {
      if (job.ctx.measured && e.median_ms)
        o.score_ms = e.median_ms;
      else if (e.estimate_ms)
        o.score_ms = e.estimate_ms;
    }
    out.push_back(std::move(o));
  }
  return out;
}

void Scheduler::flush() {
  if (unflushed_.empty()) return;
  auto batch = std::move(unflushed_);
  unflushed_.clear();
  try {
    catalog_.record_evaluations(batch);
  } catch (const std::exception& e) {
    fail(std::string("catalog: ") + e.what());
  }
}

void Scheduler::drain() {
  flush();  // results already in hand are kept
  draining_ = true;
  for (auto& [id, job] : active_) {
    if (opts_.metrics) opts_.metrics->job_released(job->labels());
    try {
      catalog_.release_job(id, opts_.owner);
    } catch (const std::exception& e) {
      log_ << "warning: could not release job " << id << ": " << e.what() << std::endl;
    }
  }
  active_.clear();
}

void Scheduler::fail(const std::string& why) {
  if (fatal_.empty()) fatal_ = why;
  drain();
}

}  // namespace kiln
