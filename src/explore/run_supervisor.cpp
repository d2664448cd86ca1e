#include "explore/run_supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <sstream>

#include <boost/asio/post.hpp>

#include "explore/scheduler.h"

namespace kiln {

void post_while_alive(boost::asio::io_context& io, std::weak_ptr<bool> alive, std::function<void()> fn) {
  boost::asio::post(io, [alive = std::move(alive), fn = std::move(fn)] {
    if (!alive.expired()) fn();
  });
}

void after_while_alive(boost::asio::steady_timer& timer, std::chrono::steady_clock::duration delay,
                       std::weak_ptr<bool> alive, std::function<void()> fn) {
  timer.expires_after(delay);
  timer.async_wait([alive = std::move(alive), fn = std::move(fn)](const boost::system::error_code& ec) {
    if (!ec && !alive.expired()) fn();
  });
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::max(0.001, seconds) * 1000));
}

std::string stamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "[%H:%M:%S] ", std::localtime(&t));
  return buf;
}

std::string path_tag(std::string owner) {
  for (char& c : owner)
    if (c == ':' || c == '/') c = '-';
  return owner;
}

std::string progress_counts(const SchedulerStats& st, size_t active_jobs) {
  std::ostringstream line;
  line << "jobs " << st.jobs_done << " done, " << st.jobs_failed << " failed, " << active_jobs
       << " running · candidates " << st.candidates << " evaluated, " << st.candidate_failures << " failed";
  return line.str();
}

std::string this_owner() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

RunSupervisor::RunSupervisor(boost::asio::io_context& io, SupervisorOptions options, std::ostream& log)
    : io_(io), opts_(std::move(options)), log_(log), signals_(io), lease_timer_(io), progress_timer_(io),
      metrics_timer_(io) {}

RunSupervisor::~RunSupervisor() {
  *alive_ = false;
  stop();
}

void RunSupervisor::start(Hooks hooks) {
  hooks_ = std::move(hooks);
  std::weak_ptr<bool> alive = alive_;
  if (opts_.signals) {
    for (int sig : {SIGINT, SIGTERM, SIGUSR1}) signals_.add(sig);
    signals_.async_wait([this, alive](const boost::system::error_code& ec, int sig) {
      if (ec || alive.expired() || stopped_) return;
      if (hooks_.signal) hooks_.signal(sig);
    });
  }
  if (opts_.catalog && opts_.lease_s > 0)
    every(lease_timer_, opts_.lease_s / 3, [this] {
      try {
        opts_.catalog->renew_leases(opts_.owner, opts_.lease_s);
      } catch (const std::exception& e) {
        log_ << stamp() << opts_.label << "warning: lease renewal failed: " << e.what() << std::endl;
      }
    });
  if (opts_.progress_interval_s > 0 && hooks_.progress)
    every(progress_timer_, opts_.progress_interval_s, [this] { print_progress(false); });
  if (opts_.metrics_interval_s > 0 && hooks_.metrics) every(metrics_timer_, opts_.metrics_interval_s, hooks_.metrics);
}

void RunSupervisor::every(boost::asio::steady_timer& timer, double seconds, std::function<void()> fn) {
  after_while_alive(timer, to_ms(seconds), alive_, [this, &timer, seconds, fn = std::move(fn)] {
    if (stopped_) return;
    fn();
    if (!stopped_) every(timer, seconds, fn);
  });
}

void RunSupervisor::print_progress(bool force) {
  if (!hooks_.progress) return;
  const std::string line = stamp() + hooks_.progress();
  if (line != last_progress_ || force) log_ << line << std::endl;
  last_progress_ = line;
}

void RunSupervisor::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  signals_.cancel(ec);
  signals_.clear(ec);
  lease_timer_.cancel();
  progress_timer_.cancel();
  metrics_timer_.cancel();
}

}  // namespace kiln
