#include "explore/slot_pool.h"

#include <algorithm>
#include <cmath>

#include <boost/asio/steady_timer.hpp>

#include "common/terminal_text.h"
#include "evaluate/reply.h"
#include "explore/run_supervisor.h"

namespace kiln {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct SlotPool::Slot {
  std::unique_ptr<WorkerProcess> worker;
  std::unique_ptr<boost::asio::steady_timer> retry;  // a start waiting out its backoff
  bool ready = false;       // hello answered
  bool busy = false;        // a request (or hello) is out
  bool dropped = false;     // given up: never started again
  bool noted = false;       // its first worker's hello reported (Hooks::ready first)
  int failures = 0;         // failed starts in a row
  Clock::time_point started;
};

SlotPool::SlotPool(boost::asio::io_context& io, SlotPoolOptions options, std::ostream& log)
    : io_(io), opts_(std::move(options)), log_(log) {
  const int n = std::max(1, opts_.slots);
  for (int i = 0; i < n; ++i) {
    WorkerOptions wo = opts_.worker;
    if (static_cast<size_t>(i) < opts_.slot_env.size())
      for (const auto& [k, v] : opts_.slot_env[static_cast<size_t>(i)]) wo.env[k] = v;
    auto s = std::make_unique<Slot>();
    s->worker = std::make_unique<WorkerProcess>(io_, std::move(wo));
    s->retry = std::make_unique<boost::asio::steady_timer>(io_);
    slots_.push_back(std::move(s));
  }
}

SlotPool::~SlotPool() {
  *alive_ = false;
  stop();
}

void SlotPool::start(Hooks hooks) {
  hooks_ = std::move(hooks);
  for (size_t i = 0; i < slots_.size(); ++i) start_slot(i);
}

void SlotPool::start_slot(size_t i) {
  Slot& s = *slots_[i];
  s.ready = false;
  s.busy = true;
  if (s.worker->alive()) s.worker->kill();
  try {
    s.worker->start();
  } catch (const std::exception& e) {
    // Handled on the loop, never inside the caller (start, a done).
    post_while_alive(io_, alive_, [this, i, why = std::string(e.what())] {
      if (!stopped_) failed_start(i, why, true);
    });
    return;
  }
  s.started = Clock::now();
  std::weak_ptr<bool> alive = alive_;
  s.worker->request({{"method", "hello"}}, opts_.hello_timeout, [this, alive, i](WorkerOutcome o) {
    if (alive.expired() || stopped_) return;
    on_hello(i, std::move(o));
  });
}

void SlotPool::on_hello(size_t i, WorkerOutcome o) {
  Slot& s = *slots_[i];
  s.busy = false;
  if (o.kind != WorkerOutcome::Kind::kReply || !o.reply.value("ok", false)) {
    std::string why = o.kind == WorkerOutcome::Kind::kReply ? o.reply.value("error", "") : o.detail;
    failed_start(i, "the evaluator worker did not start: " + why, true);
    return;
  }
  const json result = o.reply.value("result", json::object());
  if (hooks_.check_hello) {
    if (std::string why = hooks_.check_hello(i, result); !why.empty()) {
      failed_start(i, why, false);
      return;
    }
  }
  s.ready = true;
  s.failures = 0;
  const bool first = !s.noted;
  s.noted = true;
  if (hooks_.ready) hooks_.ready(i, result, std::chrono::duration<double>(Clock::now() - s.started).count(), first);
  if (!stopped_ && hooks_.idle) hooks_.idle();
}

void SlotPool::failed_start(size_t i, const std::string& why, bool retry) {
  Slot& s = *slots_[i];
  s.ready = false;
  s.busy = false;
  if (s.worker->alive()) s.worker->kill();
  ++s.failures;
  if (retry && s.failures < std::max(1, opts_.start_attempts)) {
    const double wait = opts_.retry_backoff_s * std::pow(2.0, s.failures - 1);
    log_ << stamp() << opts_.label << ": evaluator slot " << i << ": " << terminal_safe(why, true) << "; starting it again in "
         << wait << " s (attempt " << s.failures + 1 << " of " << opts_.start_attempts << ")" << std::endl;
    s.busy = true;  // its start is pending
    after_while_alive(*s.retry, std::chrono::milliseconds(static_cast<long long>(wait * 1000)), alive_, [this, i] {
      if (!stopped_) start_slot(i);
    });
    return;
  }
  s.dropped = true;
  log_ << stamp() << opts_.label << ": evaluator slot " << i << " dropped: " << terminal_safe(why, true) << std::endl;
  if (hooks_.dropped) hooks_.dropped(i, why);
  if (stopped_) return;
  if (dropped() == static_cast<int>(slots_.size())) {
    if (!exhausted_) {
      exhausted_ = true;
      if (hooks_.exhausted) hooks_.exhausted(why);
    }
    return;
  }
  if (hooks_.idle) hooks_.idle();  // the others may be waiting on the end of this start
}

void SlotPool::restart(size_t i, const char* reason) {
  if (hooks_.restarting) hooks_.restarting(reason);
  start_slot(i);
}

std::optional<size_t> SlotPool::idle_slot() {
  for (size_t i = 0; i < slots_.size() && !stopped_; ++i) {
    Slot& s = *slots_[i];
    if (s.dropped || !s.ready || s.busy) continue;
    // A worker that exited between requests (it exits 4 after a fault that
    // leaves its GPU context unusable) is replaced before it gets new work.
    if (!s.worker->alive()) {
      restart(i, "exited");
      continue;
    }
    return i;
  }
  return std::nullopt;
}

void SlotPool::submit(size_t i, json request, std::chrono::milliseconds timeout, Done done) {
  Slot& s = *slots_[i];
  s.busy = true;
  const std::string method = request.value("method", std::string());
  const int pid = s.worker->pid();  // the worker that gets it (a crashed one no longer has a pid)
  std::weak_ptr<bool> alive = alive_;
  s.worker->request(std::move(request), timeout,
                    [this, alive, i, pid, method, done = std::move(done)](WorkerOutcome raw) {
                      if (alive.expired() || stopped_) return;
                      Slot& slot = *slots_[i];
                      slot.busy = false;
                      // A reply that breaks the protocol fails this request alone
                      // and the worker is replaced (evaluate/reply.h).
                      CheckedAnswer a = check_answer(method, std::move(raw));
                      if (a.outcome.kind != WorkerOutcome::Kind::kReply)
                        restart(i, a.outcome.kind == WorkerOutcome::Kind::kTimeout ? "timeout" : "crash");
                      done(std::move(a), pid);
                      if (!stopped_ && hooks_.idle) hooks_.idle();
                    });
}

void SlotPool::stop() {
  stopped_ = true;
  std::vector<WorkerProcess*> all;
  for (auto& s : slots_) {
    s->retry->cancel();
    s->ready = false;
    all.push_back(s->worker.get());
  }
  kill_all(all, /*wait=*/false);
}

int SlotPool::ready() const {
  int n = 0;
  for (const auto& s : slots_) n += s->ready ? 1 : 0;
  return n;
}

int SlotPool::in_flight() const {
  int n = 0;
  for (const auto& s : slots_) n += (s->ready && s->busy) ? 1 : 0;
  return n;
}

int SlotPool::dropped() const {
  int n = 0;
  for (const auto& s : slots_) n += s->dropped ? 1 : 0;
  return n;
}

bool SlotPool::any_busy() const {
  for (const auto& s : slots_)
    if (s->busy && !s->dropped) return true;
  return false;
}

int SlotPool::pid(size_t slot) const { return slots_[slot]->worker->pid(); }

}  // namespace kiln
