#include "explore/run_supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <sstream>

#include "explore/scheduler.h"

namespace kiln {

namespace {

std::chrono::milliseconds ms(double s) {
  return std::chrono::milliseconds(static_cast<long long>(std::max(0.001, s) * 1000));
}

}  // namespace

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
  if (opts_.catalog && opts_.lease_s > 0) arm_lease();
  if (opts_.progress_interval_s > 0 && hooks_.progress) arm_progress();
  if (opts_.metrics_interval_s > 0 && hooks_.metrics) arm_metrics();
}

void RunSupervisor::arm_lease() {
  lease_timer_.expires_after(ms(opts_.lease_s / 3));
  std::weak_ptr<bool> alive = alive_;
  lease_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || stopped_) return;
    try {
      opts_.catalog->renew_leases(opts_.owner, opts_.lease_s);
    } catch (const std::exception& e) {
      log_ << stamp() << opts_.label << "warning: lease renewal failed: " << e.what() << std::endl;
    }
    arm_lease();
  });
}

void RunSupervisor::arm_progress() {
  progress_timer_.expires_after(ms(opts_.progress_interval_s));
  std::weak_ptr<bool> alive = alive_;
  progress_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || stopped_) return;
    print_progress(false);
    arm_progress();
  });
}

void RunSupervisor::arm_metrics() {
  metrics_timer_.expires_after(ms(opts_.metrics_interval_s));
  std::weak_ptr<bool> alive = alive_;
  metrics_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || stopped_) return;
    hooks_.metrics();
    arm_metrics();
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
