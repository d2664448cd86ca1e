// What watches over a run, apart from its evaluators: the lease renewal of
// the jobs it holds, the progress lines, the sampled metrics and the stop
// signals. Both executors use it: `kiln run` (explore/explorer.h) and
// kiln-mpi's coordinator (its leases, progress and signals) and worker ranks
// (their signals).
//
// Signals: SIGINT, SIGTERM and SIGUSR1 call Hooks::signal once (the owner
// drains: no new work, its active jobs go back to the queue); later ones are
// absorbed until stop(), which gives the signals back to their default action.
// Leases: every lease_s / 3 the catalog renews the owner's leases; a failed
// renewal is a warning on the log, not the end of the run (a lease expires
// only after lease_s).
// Progress: every progress_interval_s the line Hooks::progress gives is
// printed, with its time stamp, when it differs from the last one printed.
//
// Threading: single-threaded; construct, call and destroy it on the thread
// that runs its io_context. Hooks run there. Ownership: the catalog, the
// io_context and the log outlive it.
#pragma once
#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "catalog/catalog.h"

namespace kiln {

struct SchedulerStats;  // explore/scheduler.h

struct SupervisorOptions {
  Catalog* catalog = nullptr;       // leases renewed here; null: no lease renewal
  std::string owner;                // the lease owner ("host:pid", this_owner())
  double lease_s = 0;               // 0: no lease renewal
  double progress_interval_s = 5;   // 0: no periodic progress lines
  double metrics_interval_s = 0;    // 0: no periodic metrics hook
  bool signals = true;              // take SIGINT / SIGTERM / SIGUSR1
  std::string label;                // prefix of warnings ("kiln-mpi: "), may be empty
};

class RunSupervisor {
 public:
  struct Hooks {
    std::function<std::string()> progress;  // the current progress line (without the time stamp)
    std::function<void()> metrics;          // refresh the sampled metrics
    std::function<void(int signal)> signal; // a stop signal arrived (once)
  };
  RunSupervisor(boost::asio::io_context& io, SupervisorOptions options, std::ostream& log);
  ~RunSupervisor();

  void start(Hooks hooks);
  // Prints the progress line now (time-stamped): when it differs from the
  // last one printed, or always with `force`.
  void print_progress(bool force);
  // Cancels the timers and releases the signals. Idempotent.
  void stop();

 private:
  // Runs fn every `seconds` on `timer` until stop().
  void every(boost::asio::steady_timer& timer, double seconds, std::function<void()> fn);

  boost::asio::io_context& io_;
  SupervisorOptions opts_;
  std::ostream& log_;
  Hooks hooks_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer lease_timer_, progress_timer_, metrics_timer_;
  std::string last_progress_;
  bool stopped_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// "[HH:MM:SS] " in local time: the start of every line a run logs.
std::string stamp();

// `owner` as a file name ("host:pid" -> "host-pid").
std::string path_tag(std::string owner);

// The counts every progress line starts with: "jobs D done, F failed, R
// running · candidates C evaluated, X failed".
std::string progress_counts(const SchedulerStats& stats, size_t active_jobs);

// "host:pid" of this process: the lease owner.
std::string this_owner();

// Seconds since the Unix epoch (the evaluators' span clock).
double epoch_now();

// Runs fn on io later (never inside this call), unless `alive` has expired by then.
void post_while_alive(boost::asio::io_context& io, std::weak_ptr<bool> alive, std::function<void()> fn);

// Runs fn on the timer's io_context once `delay` has passed, unless the wait
// is cancelled (timer.cancel(), a new expiry) or `alive` has expired by then.
void after_while_alive(boost::asio::steady_timer& timer, std::chrono::steady_clock::duration delay,
                       std::weak_ptr<bool> alive, std::function<void()> fn);

// `seconds` as a timer's duration (at least 1 ms).
std::chrono::milliseconds to_ms(double seconds);

}  // namespace kiln
