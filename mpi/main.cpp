// kiln-mpi: the MPI launcher. `kiln-mpi run` under mpirun/srun processes the
// catalog's queued jobs across ranks: rank 0 coordinates (and is the catalog's
// only writer), every other rank evaluates candidates on W evaluator slots,
// bound to one GPU of its node where there are GPUs. docs/cluster.md.
#include <utility>  // before Asio (Boost 1.74 under newer GCC)

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "common/home.h"
#include "coordinator.h"
#include "metrics/flags.h"
#include "explore/explorer.h"
#include "explore/run_supervisor.h"
#include "explore/scheduling_flags.h"
#include "evaluate/gpu_binding.h"
#include "manifest/manifest.h"
#include "transport.h"
#include "worker_rank.h"
#include "batch/workers.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace asio = boost::asio;
using nlohmann::json;
using namespace kiln;
using namespace kiln::mpi;

namespace {

constexpr const char* kUsage = R"(usage: kiln-mpi run [options]        (under mpirun / srun, one rank per GPU plus rank 0)

Processes queued jobs of the catalog across MPI ranks until none remain, like
`kiln run` on one machine. Rank 0 coordinates and is the catalog's only writer
(keep the catalog on its node-local disk); ranks 1.. evaluate candidates on
--workers slots each, bound to one GPU of their node (CPU slots on nodes
without GPUs). A rank that dies or stops answering has its work requeued.
SIGTERM / SIGUSR1 drain: jobs go back to the queue, exit 130; run again to resume.

  mpirun --enable-recovery -np 5 kiln-mpi run --catalog /local/kiln.db --workers 2 \
         --checkpoint-to /shared/kiln.db --checkpoint-every 600
  (or mpi/kiln-mpirun, which adds --enable-recovery and passes rank 0's exit code on)

exit codes: 0 done; 1 error; 2 usage; 4 no worker rank left; 130 drained by a signal.
Docs: docs/cluster.md.)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The launcher's rank before MPI_Init, for printing help or usage errors once.
bool launcher_rank_zero() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return std::string(v) == "0";
  return true;
}

std::string default_catalog() {
  if (const char* env = std::getenv("KILN_CATALOG"); env && *env) return env;
  return "kiln.db";
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

struct Options {
  std::string catalog;
  int workers = 1;
  std::string device = "auto";
  std::optional<fs::path> scratch;
  bool json_out = false, verbose = false;
  int coordinator_slots = 0;
  bool noop = false;
  int noop_space = 1000;
  int poll_max_us = 0;  // 0: defaults (2 ms at rank 0, 5 ms at worker ranks)
  metrics::MetricsFlags metrics;  // --metrics, --metrics-file (rank 0)
  // What rank 0's coordinator takes from the flags (batch, prefetch,
  // scheduling, heartbeats, checkpoints, status file, progress interval).
  CoordinatorOptions run;
};

// nullopt: help was printed.
std::optional<Options> parse(const std::vector<std::string>& args) {
  po::options_description d("kiln-mpi run options");
  d.add_options()("help,h", "show this help")(
      "catalog", po::value<std::string>()->default_value(default_catalog()),
      "catalog file on rank 0's node-local disk (default: $KILN_CATALOG, else ./kiln.db)")(
      "batch", po::value<std::string>(), "only this batch's jobs")(
      "workers", po::value<int>()->default_value(1), "evaluator slots per worker rank")(
      "device", po::value<std::string>()->default_value("auto"),
      "auto | cpu | gpu: where candidates run (cpu = Triton interpreter)")(
      "scratch", po::value<std::string>(), "node-local scratch dir on every node (default: $TMPDIR/kiln)")(
      "json", "machine-readable summary on stdout (rank 0)")(
      "verbose,v", "copy the evaluators' stderr to ours")(
      "coordinator-slots", po::value<int>()->default_value(0), "evaluator slots on rank 0 too (default: none)")(
      "prefetch", po::value<int>()->default_value(2), "items kept at a rank beyond its slots")(
      "heartbeat-timeout", po::value<double>()->default_value(30),
      "seconds of silence after which a rank is lost and its work requeued (0: never)")(
      "heartbeat-interval", po::value<double>()->default_value(5), "seconds between heartbeats")(
      "checkpoint-to", po::value<std::string>(),
      "copy the catalog here (shared storage) periodically and at the end: PATH.tmp, then rename")(
      "checkpoint-every", po::value<double>()->default_value(300),
      "seconds between checkpoints (0: only at the end)")(
      "status-file", po::value<std::string>(),
      "rank 0 writes its exit code (line 1) and summary (line 2) here (default: $KILN_MPI_STATUS_FILE)");
  add_scheduling_flags(d);
  metrics::add_metrics_flags(d);
  po::options_description hidden("testing");
  hidden.add_options()("noop-evaluator", "answer every request at once without Python (benchmarks)")(
      "noop-space", po::value<int>()->default_value(env_int("KILN_NOOP_SPACE", 1000)),
      "configs in a noop space answer (default: $KILN_NOOP_SPACE, else 1000)")(
      "poll-max-us", po::value<int>()->default_value(0), "longest MPI polling interval")(
      "progress-interval", po::value<double>()->default_value(5), "seconds between progress lines");
  po::options_description all;
  all.add(d).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).run(), vm);
    if (vm.count("help")) {
      if (launcher_rank_zero()) std::cout << kUsage << "\n\n" << d << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::ostringstream os;
    os << e.what() << "\n\n" << kUsage << "\n\n" << d;
    throw UsageError(os.str());
  }
  Options o;
  o.catalog = vm["catalog"].as<std::string>();
  if (vm.count("batch")) o.run.batch = vm["batch"].as<std::string>();
  o.workers = vm["workers"].as<int>();
  o.device = vm["device"].as<std::string>();
  const SchedulingFlags flags = read_scheduling_flags(vm);
  o.run.scheduling = flags;
  if (vm.count("scratch")) o.scratch = fs::path(vm["scratch"].as<std::string>());
  o.json_out = vm.count("json") > 0;
  o.verbose = vm.count("verbose") > 0;
  o.coordinator_slots = vm["coordinator-slots"].as<int>();
  o.run.prefetch = vm["prefetch"].as<int>();
  o.run.heartbeat_timeout_s = vm["heartbeat-timeout"].as<double>();
  o.run.heartbeat_interval_s = vm["heartbeat-interval"].as<double>();
  if (vm.count("checkpoint-to")) o.run.checkpoint_to = fs::path(vm["checkpoint-to"].as<std::string>());
  o.run.checkpoint_every_s = vm["checkpoint-every"].as<double>();
  if (vm.count("status-file")) o.run.status_file = fs::path(vm["status-file"].as<std::string>());
  else if (const char* env = std::getenv("KILN_MPI_STATUS_FILE"); env && *env) o.run.status_file = fs::path(env);
  o.noop = vm.count("noop-evaluator") > 0;
  o.noop_space = vm["noop-space"].as<int>();
  o.poll_max_us = vm["poll-max-us"].as<int>();
  o.run.progress_interval_s = vm["progress-interval"].as<double>();
  try {
    o.metrics = metrics::read_metrics_flags(vm);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (o.workers < 1 || o.workers > batch::kMaxWorkers)
    throw UsageError("--workers must be 1.." + std::to_string(batch::kMaxWorkers));
  if (o.device != "auto" && o.device != "cpu" && o.device != "gpu")
    throw UsageError("--device must be auto, cpu or gpu");
  if (o.coordinator_slots < 0) throw UsageError("--coordinator-slots must be 0 or more");
  if (o.run.prefetch < 0) throw UsageError("--prefetch must be 0 or more");
  if (auto e = scheduling_flags_error(flags)) throw UsageError(*e);
  if (o.run.heartbeat_interval_s <= 0) throw UsageError("--heartbeat-interval must be positive");
  if (o.run.heartbeat_timeout_s < 0) throw UsageError("--heartbeat-timeout must be 0 (never) or positive");
  if (o.run.heartbeat_timeout_s > 0 && o.run.heartbeat_timeout_s < 2 * o.run.heartbeat_interval_s)
    throw UsageError("--heartbeat-timeout must be at least twice --heartbeat-interval");
  if (o.run.checkpoint_every_s < 0) throw UsageError("--checkpoint-every must be 0 or more");
  if (o.noop_space < 1) throw UsageError("--noop-space must be at least 1");
  return o;
}

// Where this rank sits among the GPU-using ranks of its node: {index, users}.
std::pair<int, int> node_gpu_slot(int rank, bool evaluates) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  const std::optional<int> local = launcher_local_rank();
  int mine[3] = {local.value_or(rank), rank, evaluates ? 1 : 0};
  std::vector<int> all(static_cast<size_t>(3 * n));
  MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, node);
  MPI_Comm_free(&node);
  int index = 0, users = 0;
  for (int i = 0; i < n; ++i) {
    const int key = all[3 * i], world = all[3 * i + 1], uses = all[3 * i + 2];
    if (!uses) continue;
    ++users;
    if (key < mine[0] || (key == mine[0] && world < rank)) ++index;
  }
  return {index, users};
}

std::string broadcast_string(std::string s, int root) {
  int len = static_cast<int>(s.size());
  MPI_Bcast(&len, 1, MPI_INT, root, MPI_COMM_WORLD);
  s.resize(static_cast<size_t>(len));
  MPI_Bcast(s.data(), len, MPI_CHAR, root, MPI_COMM_WORLD);
  return s;
}

std::string hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// Stops `io` once the transport's sends have gone out (bounded).
void linger_then_stop(asio::io_context& io, Transport& transport, std::shared_ptr<asio::steady_timer> timer,
                      std::chrono::steady_clock::time_point deadline) {
  if (transport.pending_sends() == 0 || std::chrono::steady_clock::now() > deadline) {
    io.stop();
    return;
  }
  timer->expires_after(std::chrono::milliseconds(5));
  timer->async_wait([&io, &transport, timer, deadline](const boost::system::error_code& ec) {
    if (!ec) linger_then_stop(io, transport, timer, deadline);
  });
}

// Rank 0's exit status for kiln-mpirun (under --enable-recovery mpirun itself exits 0).
void write_status_file(const std::optional<fs::path>& path, int code, const std::string& error) {
  if (!path) return;
  std::error_code ec;
  if (path->has_parent_path()) fs::create_directories(path->parent_path(), ec);
  std::ofstream out(*path, std::ios::trunc);
  out << code << "\n" << json{{"exit_code", code}, {"error", error}}.dump() << "\n";
}

[[noreturn]] void exit_without_finalize(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

int run(Options o, int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 && o.coordinator_slots == 0) {
    const std::string why =
        "one rank and no --coordinator-slots: nothing would evaluate. Start at least 2 ranks (rank 0 "
        "coordinates), or give rank 0 slots with --coordinator-slots N";
    std::cerr << "kiln-mpi run: " << why << "\n";
    write_status_file(o.run.status_file, kExitUsage, why);
    MPI_Finalize();
    return kExitUsage;
  }
  const bool evaluates = rank != 0 || o.coordinator_slots > 0;
  const std::string owner = broadcast_string(this_owner(), 0);  // rank 0's host:pid: the lease owner
  const auto [gpu_index, gpu_users] = node_gpu_slot(rank, evaluates);

  // Node-local scratch: <base>/rank-R/{rank.json, triton-cache/, run-<owner>/slot-N/}.
  const fs::path base = o.scratch ? *o.scratch : fs::temp_directory_path() / "kiln";
  const fs::path rank_dir = base / ("rank-" + std::to_string(rank));
  const fs::path run_dir = rank_dir / ("run-" + path_tag(owner));
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  {
    std::ofstream pidf(rank_dir / "rank.json", std::ios::trunc);
    pidf << json{{"rank", rank}, {"pid", static_cast<long long>(getpid())}, {"host", hostname()},
                 {"run", owner}, {"size", size}}.dump()
         << "\n";
  }

  asio::io_context io;
  TransportOptions topts;
  // Rank 0 polls again 20 us after traffic and backs off to 2 ms when
  // idle; worker ranks (next items prefetched) from 50 us to 5 ms.
  topts.min_interval = std::chrono::microseconds(rank == 0 ? 20 : 50);
  topts.max_interval = std::chrono::microseconds(o.poll_max_us > 0 ? o.poll_max_us : rank == 0 ? 2000 : 5000);
  Transport transport(io, rank, size, topts);
  auto linger_timer = std::make_shared<asio::steady_timer>(io);
  auto stop_soon = [&] {
    linger_then_stop(io, transport, linger_timer, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  };

  std::optional<Knowledge> knowledge;
  std::optional<Catalog> catalog;
  std::unique_ptr<Coordinator> coord;
  std::unique_ptr<WorkerRank> worker;
  CoordinatorOptions copts;
  metrics::MetricsSetup metrics_setup;  // rank 0: outlives the coordinator, which publishes into it
  if (rank == 0) {
    copts = o.run;
    copts.scratch = run_dir;
    copts.owner = owner;
    try {
      knowledge = Knowledge::load(kiln_home());
      catalog.emplace(Catalog::open(o.catalog, false));
      if (const std::string w = network_filesystem_warning(o.catalog); !w.empty())
        std::cerr << "kiln-mpi: warning: " << w << "\n";
      metrics_setup = metrics::start_metrics(o.metrics, std::cerr, "kiln-mpi run");
      copts.metrics = metrics_setup.run.get();
    } catch (const std::exception& e) {
      std::cerr << "kiln-mpi run: " << e.what() << "\n";
      write_status_file(o.run.status_file, kExitError, e.what());
      std::cerr.flush();
      MPI_Abort(MPI_COMM_WORLD, kExitError);
      return kExitError;
    }
    std::vector<int> peers;
    if (o.coordinator_slots > 0) peers.push_back(0);
    for (int r = 1; r < size; ++r) peers.push_back(r);
    coord = std::make_unique<Coordinator>(io, transport, *catalog, *knowledge, peers, copts, std::cerr);
    coord->on_finished(stop_soon);
  }
  std::unique_ptr<RunSupervisor> worker_signals;
  if (evaluates) {
    WorkerRankOptions w;
    w.slots = rank == 0 ? o.coordinator_slots : o.workers;
    w.device = o.device;
    w.scratch = run_dir;
    w.triton_cache = rank_dir / "triton-cache";
    w.echo_stderr = o.verbose;
    w.heartbeat_interval_s = o.run.heartbeat_interval_s;
    w.heartbeat_timeout_s = o.run.heartbeat_timeout_s;
    w.noop = o.noop;
    w.noop_space = o.noop_space;
    if (!o.noop) {
      const NodeGpus gpus = detect_node_gpus();
      const GpuBinding b = bind_gpu(gpus, gpu_index, gpu_users, o.device);
      w.env = b.env;
      w.gpu = b.gpu;
      if (!b.note.empty()) std::cerr << "kiln-mpi: rank " << rank << ": warning: " << b.note << "\n";
    }
    worker = std::make_unique<WorkerRank>(io, transport, w, std::cerr);
    if (rank != 0) {
      worker->on_finished(stop_soon);
      // Worker ranks stop their evaluators and leave cleanly on a signal
      // (mpirun forwards SIGUSR1; Slurm signals every task).
      SupervisorOptions sup;
      sup.progress_interval_s = 0;  // rank 0 prints the progress; the coordinator holds the leases
      worker_signals = std::make_unique<RunSupervisor>(io, sup, std::cerr);
      RunSupervisor::Hooks hooks;
      hooks.signal = [&worker](int sig) {
        if (worker) worker->leave("signal " + std::to_string(sig));
      };
      worker_signals->start(std::move(hooks));
    }
  }

  transport.on_message([&](int source, json m) {
    const std::string type = m.value("type", "");
    if (rank == 0 && coord) {
      if (source != 0) {
        coord->handle(source, m);
        return;
      }
      // Loopback on rank 0: coordinator <-> its own slots.
      if (type == "job" || type == "work" || type == "stop") {
        if (worker) worker->handle(m);
      } else if (type != "heartbeat") {
        coord->handle(source, m);
      }
      return;
    }
    if (worker && source == 0) worker->handle(m);
  });
  transport.start();
  if (coord) coord->start();
  if (worker) worker->start();
  io.run();

  int code = kExitOk;
  bool finalize = true;
  if (rank == 0) {
    const CoordinatorSummary s = coord->summary();
    code = s.exit_code;
    try {
      metrics_setup.finish();  // the final values into --metrics-file
    } catch (const std::exception& e) {
      std::cerr << "kiln-mpi run: " << e.what() << "\n";
    }
    coord->write_status();
    if (o.json_out) std::cout << s.to_json().dump() << std::endl;
    finalize = coord->all_ranks_said_bye();
  } else if (worker) {
    code = worker->exit_code();
    finalize = code == 0;
  }
  if (worker_signals) worker_signals->stop();
  transport.stop();
  worker.reset();
  coord.reset();
  catalog.reset();
  fs::remove_all(run_dir, ec);
  // MPI_Finalize synchronises with every live rank: skipped when a rank was
  // lost (it may hang there) or when rank 0 is gone (a worker that gave up).
  if (!finalize) exit_without_finalize(code);
  // MPI_Finalize waits for every rank MPI still counts as alive: one that died
  // after saying bye (or inside MPI_Finalize) would hold this rank forever.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(15));
    exit_without_finalize(code);
  }).detach();
  MPI_Finalize();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc >= 2 ? argv[1] : "";
  if (cmd == "-h" || cmd == "--help" || cmd == "help" || cmd.empty()) {
    if (launcher_rank_zero()) (cmd.empty() ? std::cerr : std::cout) << kUsage << "\n";
    return cmd.empty() ? kExitUsage : kExitOk;
  }
  if (cmd == "--version" || cmd == "version") {
    std::cout << "kiln-mpi " << KILN_VERSION << "\n";
    return 0;
  }
  if (cmd != "run") {
    if (launcher_rank_zero()) std::cerr << "kiln-mpi: unknown command '" << cmd << "'\n\n" << kUsage << "\n";
    return kExitUsage;
  }
  std::optional<Options> o;
  try {
    o = parse(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const UsageError& e) {
    if (launcher_rank_zero()) std::cerr << "kiln-mpi run: " << e.what() << "\n";
    return kExitUsage;
  }
  if (!o) return kExitOk;
  try {
    return run(*o, &argc, &argv);
  } catch (const std::exception& e) {
    std::cerr << "kiln-mpi run: " << e.what() << "\n";
    int init = 0, rank = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) write_status_file(o->run.status_file, kExitError, e.what());
    if (init) MPI_Abort(MPI_COMM_WORLD, kExitError);
    return kExitError;
  }
}
