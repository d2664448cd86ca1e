#include "worker_rank.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>


#include "common/hash.h"
#include "evaluate/artifact_file.h"
#include "evaluate/reply.h"
#include "explore/explorer.h"
#include "explore/run_supervisor.h"
#include "protocol.h"

namespace kiln::mpi {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How many worker ranks the launcher put on this node (their workers share
// its cores), 1 when it does not say. The coordinator (world rank 0, which
// runs no workers) is left out when it is on this node: with Open MPI's
// default mapping, when this node's local rank 0 is world rank 0.
int ranks_on_node() {
  auto number = [](const char* var) {
    const char* v = std::getenv(var);
    return v && *v ? std::atoi(v) : -1;
  };
  int n = number("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (n <= 0) return std::max(1, number("MPI_LOCALNRANKS"));
  const int rank = number("OMPI_COMM_WORLD_RANK"), local = number("OMPI_COMM_WORLD_LOCAL_RANK");
  if (n > 1 && rank >= 0 && local >= 0 && rank - local == 0) --n;
  return n;
}

std::string hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

WorkerRank::WorkerRank(boost::asio::io_context& io, Transport& transport, WorkerRankOptions options, std::ostream& log)
    : io_(io), transport_(transport), opts_(std::move(options)), log_(log),
      label_("rank " + std::to_string(transport.rank())), heartbeat_timer_(io) {}

WorkerRank::~WorkerRank() {
  *alive_ = false;
  pool_.reset();  // kills the evaluators
}

void WorkerRank::send(const json& m) { transport_.send(opts_.coordinator, m); }

void WorkerRank::start() {
  last_heard_ = Clock::now();
  const int n = std::max(1, opts_.slots);
  if (opts_.noop) {
    ready_sent_ = true;
    send({{"type", "ready"}, {"slots", n}, {"device", "noop (no evaluation)"},
          {"hello", {{"device", {{"kind", "cpu"}, {"name", "noop (no evaluation)"}}}}},
          {"host", hostname()}, {"pid", static_cast<long long>(getpid())}, {"gpu", nullptr}});
  } else {
    if (!opts_.triton_cache.empty()) fs::create_directories(opts_.triton_cache);
    SlotPoolOptions po;
    po.slots = n;
    po.label = label_;
    po.start_attempts = opts_.start_attempts;
    po.retry_backoff_s = opts_.retry_backoff_s;
    po.worker = evaluator_options(opts_.device, opts_.triton_cache, opts_.echo_stderr);
    for (const auto& [k, v] : opts_.env) po.worker.env[k] = v;
    po.worker.fork_server = start_fork_server(po.worker, n * ranks_on_node(), log_);
    pool_ = std::make_unique<SlotPool>(io_, std::move(po), log_);
    SlotPool::Hooks hooks;
    hooks.ready = [this](size_t, const json& hello, double, bool) { on_ready(hello); };
    hooks.idle = [this] { pump(); };
    hooks.exhausted = [this](const std::string& why) { leave("no evaluator worker is left: " + why); };
    pool_->start(std::move(hooks));
  }
  if (transport_.rank() != opts_.coordinator) arm_heartbeat();
}

void WorkerRank::on_ready(const json& r) {
  if (finished_ || ready_sent_) return;
  ready_sent_ = true;
  send({{"type", "ready"},
        {"slots", static_cast<int>(pool_->size() - static_cast<size_t>(pool_->dropped()))},
        {"device", r.value("device", json::object()).value("name", "unknown")},
        {"hello", r},
        {"host", hostname()},
        {"pid", static_cast<long long>(getpid())},
        {"gpu", opts_.gpu.empty() ? json(nullptr) : json(opts_.gpu)}});
}

void WorkerRank::handle(const json& m) {
  if (finished_) return;
  last_heard_ = Clock::now();
  const std::string type = m.value("type", "");
  if (type == "job") {
    jobs_[m.value("job_id", 0LL)] = m.value("job", json::object());
  } else if (type == "work") {
    Work w;
    w.item_id = m.value("item_id", 0LL);
    w.request = m.value("request", json::object());
    w.timeout_s = m.value("timeout_s", 300.0);
    w.job_id = m.value("job_id", 0LL);
    const json* job = nullptr;
    if (m.contains("job_id")) {
      auto it = jobs_.find(w.job_id);
      if (it == jobs_.end()) {
        WorkerOutcome o;
        o.reply = {{"id", 0}, {"ok", false}, {"error", "worker rank has no job " + std::to_string(w.job_id)}};
        send_result(w, check_answer(w.request.value("method", std::string()), std::move(o)), label_,
                    {});  // an error reply: no code object
        return;
      }
      job = &it->second;
    }
    if (opts_.noop) {
      run_noop(w, job ? *job : w.request.value("job", json::object()));
      return;
    }
    if (job) w.request["job"] = *job;
    queue_.push_back(std::move(w));
    pump();
  } else if (type == "stop") {
    leave("stopped by the coordinator");
  }
  // heartbeat: last_heard_ is all it updates
}

void WorkerRank::pump() {
  if (finished_ || !pool_) return;
  while (!queue_.empty()) {
    const std::optional<size_t> slot = pool_->idle_slot();
    if (!slot) break;
    const size_t i = *slot;
    Work w = std::move(queue_.front());
    queue_.pop_front();
    // Code objects go to this node's scratch, one directory per slot.
    const fs::path dir = opts_.scratch / ("slot-" + std::to_string(i));
    fs::create_directories(dir);
    if (w.request.contains("artifact_dir")) w.request["artifact_dir"] = dir.string();
    pool_->submit(i, w.request, to_ms(w.timeout_s), [this, w, dir](CheckedAnswer a, int pid) {
      if (finished_) return;
      send_result(w, a, label_ + " pid " + std::to_string(pid), dir);
    });
  }
}

void WorkerRank::send_result(const Work& w, const CheckedAnswer& a, const std::string& worker,
                             const fs::path& artifact_dir) {
  json m = {{"type", "result"}, {"item_id", w.item_id}, {"outcome", outcome_to_json(a.outcome)}, {"worker", worker}};
  // The code object travels in the message: the coordinator's node cannot
  // read this node's scratch. Only a file inside the slot's directory is read
  // (and deleted): evaluate/artifact_file.h.
  // The answer came checked and typed (evaluate/reply.h): the claim is read there.
  if (a.outcome.kind == WorkerOutcome::Kind::kReply && a.envelope.ok && a.typed.artifact) {
    try {
      m["artifact_b64"] = base64_encode(take_artifact(artifact_dir, *a.typed.artifact));
    } catch (const std::exception& e) {
      m["artifact_error"] = e.what();  // the coordinator's scheduler records it as an infrastructure fault
    }
  }
  send(m);
}

// Synthetic answers for the coordinator benchmark (--noop-evaluator): no
// Python, no compile; a plausible result with a tiny code object so the
// coordinator does its whole per-candidate work (catalog rows, blob,
// estimate, selection).
void WorkerRank::run_noop(const Work& w, const json& job) {
  const std::string method = w.request.value("method", "");
  double elems = 1;
  for (const auto& d : job.value("shape", json::array()))
    if (d.is_number()) elems *= d.get<double>();
  const json traffic = {{"bytes", 12.0 * elems}, {"flops", elems}};
  json reply = {{"id", 0}, {"ok", true}};
  json extra;
  if (method == "space" || method == "reference_info") {
    json configs = json::array();
    for (int i = 0; i < opts_.noop_space; ++i)
      configs.push_back({{"BLOCK_SIZE", 64 * (1 + i % 16)}, {"NOOP", i}, {"num_stages", 1},
                         {"num_warps", 1 << (i % 4)}});
    reply["result"] = {{"configs", configs}, {"traffic", traffic}};
  } else if (method == "evaluate") {
    const json target = job.value("target", json::object());
    const json config = w.request.value("config", json::object());
    const int warps = config.value("num_warps", 4);
    const int warp_size = target.value("warp_size", 32);
    const std::string backend = target.value("backend", "cuda");
    const std::string bytes = "KILN-NOOP\n" + config.dump();
    reply["result"] = {
        {"status", to_string(EvalStatus::kOk)},
        {"message", ""},
        {"exec_device", "noop (no evaluation)"},
        {"correctness", {{"seeds", 0}, {"max_abs_err", 0.0}, {"max_rel_err", 0.0}, {"passed", true}}},
        {"latency", nullptr},
        {"artifact",
         {{"target", target.value("name", "")}, {"arch", target.value("arch", "")},
          {"kind", backend == "hip" ? "hsaco" : "cubin"}, {"path", "noop.bin"}, {"sha256", sha256_hex(bytes)},
          {"kernel_name", "noop_kernel"},
          {"num_warps", warps}, {"num_stages", config.value("num_stages", 1)}, {"warp_size", warp_size},
          {"shared_bytes", 0}, {"registers", 32}, {"sgprs", 16}, {"spills", 0}, {"scratch_bytes", 0},
          {"occupancy", 8}, {"grid", {std::max(1LL, static_cast<long long>(elems / 1024)), 1, 1}}, {"block", {warps * warp_size, 1, 1}},
          {"args", json::array()}, {"metadata", json::object()}}},
        {"traffic", traffic},
        {"timings", {{"compile_s", 0.0}, {"check_s", 0.0}, {"bench_s", 0.0}}}};
    extra = base64_encode(bytes);
  } else {
    reply = {{"id", 0}, {"ok", false}, {"error", "noop evaluator: unknown method " + method}};
  }
  WorkerOutcome o;
  o.reply = std::move(reply);
  json m = {{"type", "result"}, {"item_id", w.item_id}, {"outcome", outcome_to_json(o)},
            {"worker", label_ + " pid " + std::to_string(getpid())}};
  if (!extra.is_null()) m["artifact_b64"] = extra;
  send(m);
}

void WorkerRank::arm_heartbeat() {
  after_while_alive(heartbeat_timer_, to_ms(opts_.heartbeat_interval_s), alive_, [this] {
    if (finished_) return;
    transport_.poll_now();
    if (finished_) return;
    const double silent = std::chrono::duration<double>(Clock::now() - last_heard_).count();
    if (opts_.heartbeat_timeout_s > 0 && silent > opts_.heartbeat_timeout_s) {
      log_ << stamp() << label_ << ": no word from the coordinator for " << static_cast<int>(silent)
           << " s; stopping" << std::endl;
      exit_code_ = 1;
      leave("coordinator lost");
      return;
    }
    send({{"type", "heartbeat"}});
    arm_heartbeat();
  });
}

void WorkerRank::leave(const std::string& reason) {
  if (finished_) return;
  finished_ = true;
  heartbeat_timer_.cancel();
  queue_.clear();
  const size_t slots = pool_ ? pool_->size() : 0;
  if (pool_) pool_->stop();  // results are sent; their exits need no waiting
  send({{"type", "bye"}, {"reason", reason}});
  std::error_code ec;
  for (size_t i = 0; i < slots; ++i) fs::remove_all(opts_.scratch / ("slot-" + std::to_string(i)), ec);
  if (on_finished_) post_while_alive(io_, alive_, on_finished_);
}

}  // namespace kiln::mpi
