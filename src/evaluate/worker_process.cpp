#include <utility>  // before Asio (Boost 1.74 under newer GCC)

#include "evaluate/worker_process.h"

#include "evaluate/fork_server.h"
#include "evaluate/spawn.h"

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/buffers_iterator.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

namespace kiln {
namespace {

namespace asio = boost::asio;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxLine = 64u << 20;              // longest stdout line we accept
constexpr milliseconds kPendingPoll{100};           // exit check while a request runs
constexpr milliseconds kReapPoll{5};                // while waiting for a dying child
constexpr milliseconds kEofGrace{2000};             // stdout closed, child still alive
constexpr milliseconds kKillGiveUp{10000};          // SIGKILLed child that never exits
constexpr milliseconds kForkWait{120000};           // the fork server's first answer waits
                                                    // for its imports

std::string seconds_text(milliseconds ms) {
  std::ostringstream o;
  o << static_cast<double>(ms.count()) / 1000.0 << " s";
  return o.str();
}

// Replaces invalid UTF-8 so the detail can go into JSON (nlohmann throws on it).
std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 2 && c < 0xC2) ok = false;  // overlong
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

int make_pipe(int fds[2]) { return ::pipe2(fds, O_CLOEXEC); }

void set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// One child's pipes. Handlers hold it by shared_ptr, so a stale handler of a
// previous child never touches the current child's buffers.
struct Channel {
  Channel(asio::io_context& io, int in_fd, int out_fd, int err_fd, pid_t p)
      : in(io, in_fd), out(io, out_fd), err(io, err_fd), out_buf(kMaxLine), pid(p) {}
  asio::posix::stream_descriptor in, out, err;
  asio::streambuf out_buf;
  pid_t pid;
  bool err_eof = false;
  void close() {
    boost::system::error_code ec;
    in.close(ec);
    out.close(ec);
    err.close(ec);
  }
};

}  // namespace

struct WorkerProcess::Impl : std::enable_shared_from_this<WorkerProcess::Impl> {
  enum class State { kIdle, kPending, kReaping };
  enum class Reason { kCrash, kTimeout };

  Impl(asio::io_context& io_, WorkerOptions o)
      : io(io_), opt(std::move(o)), deadline(io_), poll(io_) {}

  asio::io_context& io;
  WorkerOptions opt;
  asio::steady_timer deadline;
  asio::steady_timer poll;

  pid_t pid = 0;                    // running (not yet reaped) child, 0 if none
  std::shared_ptr<ForkServer> forked_by;  // the server that forked it, null if started here
  std::shared_ptr<Channel> ch;      // its pipes
  std::string tail;                 // stderr tail of the current child
  std::string err_line;             // partial stderr line, for echo

  State state = State::kIdle;
  Reason reason = Reason::kCrash;
  Done done;
  uint64_t req_gen = 0;             // bumped when a request starts and when it ends
  uint64_t poll_gen = 0;            // bumped each time the poll timer is re-armed
  int64_t next_id = 0;
  int64_t cur_id = 0;
  milliseconds cur_timeout{0};
  bool killed = false;              // we sent SIGKILL while reaping
  Clock::time_point reap_deadline;  // kReaping: when to SIGKILL / give up
  std::string note;                 // extra words for the crash detail
  bool destroyed = false;

  // ---- start ------------------------------------------------------------

  void start() {
    if (pid > 0 && !child_exited())
      throw std::logic_error("WorkerProcess::start: a child is already running");
    kill_now("worker restarted");  // a dead, unreaped child: reap it, end its request
    if (opt.argv.empty() || opt.argv[0].empty())
      throw std::invalid_argument("WorkerProcess::start: empty argv");
    ignore_sigpipe_once();
    const std::string& program = opt.argv[0];
    const auto env = child_environment(opt.env);

    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    auto close_all = [&] {
      for (int* p : {in, out, err}) {
        close_fd(p[0]);
        close_fd(p[1]);
      }
    };
    if (make_pipe(in) || make_pipe(out) || make_pipe(err)) {
      int e = errno;
      close_all();
      throw std::runtime_error("cannot start " + program + ": pipe: " + std::strerror(e));
    }
    pid_t child = 0;
    forked_by.reset();
    if (opt.fork_server) {
      if (auto args = opt.fork_server->args_for(opt.argv)) {
        try {
          child = opt.fork_server->spawn(*args, env, opt.working_dir, in[0], out[1], err[1], kForkWait);
          forked_by = opt.fork_server;
        } catch (const std::exception& e) {
          // Start it here instead; say so once per server.
          if (opt.fork_server->tell_fallback_once())
            std::fprintf(stderr, "kiln: %s; starting evaluator workers directly\n", e.what());
        }
      }
    }
    try {
      if (!child) child = spawn_process(opt.argv, env, opt.working_dir, in[0], out[1], err[1]);
    } catch (...) {
      close_all();
      throw;
    }
    close_fd(in[0]);
    close_fd(out[1]);
    close_fd(err[1]);

    set_nonblocking(in[1]);
    set_nonblocking(out[0]);
    set_nonblocking(err[0]);
    try {
      ch = std::make_shared<Channel>(io, in[1], out[0], err[0], child);
    } catch (...) {
      close_all();
      ::kill(-child, SIGKILL);
      ::kill(child, SIGKILL);
      reap_child(child, kKillGiveUp);
      throw;
    }
    in[1] = out[0] = err[0] = -1;  // owned by the Channel now
    pid = child;
    tail.clear();
    err_line.clear();
    watch_stderr(ch);
  }

  // The child's exit, from waitpid or from the server that forked it.
  bool exited(pid_t p) const { return forked_by ? forked_by->has_exited(p) : has_exited(p); }
  bool child_exited() const { return exited(pid); }
  std::optional<int> reap_child(pid_t p, milliseconds limit) {
    return forked_by ? forked_by->reap(p, limit) : reap_bounded(p, limit);
  }

  // ---- stderr -----------------------------------------------------------

  // We wait for readability and read ourselves (instead of async_read_some),
  // so a final synchronous drain never reorders data.
  void watch_stderr(const std::shared_ptr<Channel>& c) {
    auto self = shared_from_this();
    c->err.async_wait(asio::posix::descriptor_base::wait_read,
                      [self, c](const boost::system::error_code& ec) {
                        if (ec || self->destroyed || c != self->ch) return;
                        self->drain_stderr(*c);
                        if (!c->err_eof) self->watch_stderr(c);
                      });
  }

  void drain_stderr(Channel& c) {
    if (c.err_eof || !c.err.is_open()) return;
    std::array<char, 8192> buf;
    for (;;) {
      ssize_t n = ::read(c.err.native_handle(), buf.data(), buf.size());
      if (n > 0) {
        on_stderr(c, buf.data(), static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) c.err_eof = true;
      break;  // EOF, EAGAIN or an error
    }
  }

  void add_tail(const char* data, size_t n) {
    size_t cap = opt.stderr_tail_bytes;
    if (cap == 0) return;
    if (n >= cap) {
      tail.assign(data + (n - cap), cap);
    } else {
      tail.append(data, n);
      if (tail.size() > cap) tail.erase(0, tail.size() - cap);
    }
    size_t skip = 0;  // do not start in the middle of a UTF-8 character
    while (skip < tail.size() && skip < 3 && (static_cast<unsigned char>(tail[skip]) & 0xC0) == 0x80)
      ++skip;
    if (skip) tail.erase(0, skip);
  }

  void echo_line(pid_t p, const std::string& line) {
    std::string s = "[worker " + std::to_string(p) + "] " + line + "\n";
    const char* d = s.data();
    size_t left = s.size();
    while (left > 0) {
      ssize_t w = ::write(2, d, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      d += w;
      left -= static_cast<size_t>(w);
    }
  }

  void on_stderr(Channel& c, const char* data, size_t n) {
    add_tail(data, n);
    if (!opt.echo_stderr) return;
    err_line.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = err_line.find('\n', start)) != std::string::npos; start = nl + 1)
      echo_line(c.pid, err_line.substr(start, nl - start));
    err_line.erase(0, start);
    if (err_line.size() > 65536) {
      echo_line(c.pid, err_line);
      err_line.clear();
    }
  }

  void flush_echo(pid_t p) {
    if (opt.echo_stderr && !err_line.empty()) echo_line(p, err_line);
    err_line.clear();
  }

  // ---- request ----------------------------------------------------------

  void request(json req, milliseconds timeout, Done d) {
    if (state != State::kIdle)
      throw std::logic_error("WorkerProcess::request: a request is already pending");
    if (!d) throw std::invalid_argument("WorkerProcess::request: no completion handler");
    if (pid == 0 || !ch) {
      WorkerOutcome o;
      o.kind = WorkerOutcome::Kind::kCrash;
      o.detail = "worker is not running";
      post_done(std::move(d), std::move(o));
      return;
    }
    int64_t id = ++next_id;
    req["id"] = id;
    auto line = std::make_shared<std::string>(
        req.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");

    done = std::move(d);
    cur_id = id;
    cur_timeout = timeout;
    state = State::kPending;
    killed = false;
    note.clear();
    uint64_t g = ++req_gen;
    auto self = shared_from_this();
    auto c = ch;

    deadline.expires_after(timeout);
    deadline.async_wait([self, g](const boost::system::error_code& ec) {
      if (ec || !self->current(g, State::kPending)) return;
      self->on_timeout();
    });
    asio::async_write(c->in, asio::buffer(*line),
                      [self, g, c, line](const boost::system::error_code& ec, size_t) {
                        if (!ec || !self->current(g, State::kPending) || c != self->ch) return;
                        self->begin_crash("could not write the request (" + ec.message() + ")");
                      });
    read_stdout(c, g);
    arm_poll(kPendingPoll);
  }

  bool current(uint64_t g, State s) const { return !destroyed && g == req_gen && state == s; }

  void read_stdout(const std::shared_ptr<Channel>& c, uint64_t g) {
    auto self = shared_from_this();
    asio::async_read_until(
        c->out, c->out_buf, '\n',
        [self, c, g](const boost::system::error_code& ec, size_t n) {
          if (!self->current(g, State::kPending) || c != self->ch) return;
          if (ec) {
            if (ec == asio::error::operation_aborted) return;
            if (ec == asio::error::eof) self->begin_crash("");
            else if (ec == asio::error::not_found)
              self->begin_crash("sent a stdout line longer than " + std::to_string(kMaxLine) +
                                " bytes; killed", /*kill=*/true);
            else self->begin_crash("stdout read failed (" + ec.message() + ")");
            return;
          }
          auto begin = asio::buffers_begin(c->out_buf.data());
          std::string line(begin, begin + static_cast<std::ptrdiff_t>(n));
          c->out_buf.consume(n);
          if (self->on_line(*c, line)) return;
          self->read_stdout(c, g);
        });
  }

  // True when `line` was the answer (the request is finished).
  bool on_line(Channel& c, std::string line) {
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) return false;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      auto it = j.find("id");
      if (it != j.end() && it->is_number_integer() && it->get<int64_t>() == cur_id) {
        WorkerOutcome o;
        o.kind = WorkerOutcome::Kind::kReply;
        o.reply = std::move(j);
        finish(std::move(o));
        return true;
      }
    }
    // Not ours: keep it where a crash report will show it.
    std::string shown = line.size() > 2000 ? line.substr(0, 2000) + "..." : line;
    std::string entry = "[stdout] " + shown + "\n";
    add_tail(entry.data(), entry.size());
    if (opt.echo_stderr) echo_line(c.pid, "[stdout] " + shown);
    return false;
  }

  void arm_poll(milliseconds after) {
    uint64_t pg = ++poll_gen;
    auto self = shared_from_this();
    poll.expires_after(after);
    poll.async_wait([self, pg](const boost::system::error_code& ec) {
      if (ec || self->destroyed || pg != self->poll_gen) return;
      self->on_poll();
    });
  }

  void on_poll() {
    if (state == State::kPending) {
      if (child_exited()) begin_crash("");
      else arm_poll(kPendingPoll);
      return;
    }
    if (state != State::kReaping) return;
    if (child_exited()) {
      finish_dead();
      return;
    }
    auto now = Clock::now();
    if (!killed && now >= reap_deadline) {
      kill_group();
      note = note.empty() ? "closed its stdout but did not exit; killed" : note;
      reap_deadline = now + kKillGiveUp;
    } else if (killed && now >= reap_deadline) {
      // Stuck in the kernel (a GPU driver, say): give up on it.
      note += note.empty() ? "" : "; ";
      note += "did not exit " + seconds_text(kKillGiveUp) + " after SIGKILL; abandoned";
      pid = 0;
      finish_dead();
      return;
    }
    arm_poll(kReapPoll);
  }

  void kill_group() {
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);  // should setpgid ever have failed
    }
    killed = true;
  }

  void on_timeout() {
    reason = Reason::kTimeout;
    state = State::kReaping;
    kill_group();
    reap_deadline = Clock::now() + kKillGiveUp;
    arm_poll(milliseconds(0));
  }

  void begin_crash(std::string why, bool kill = false) {
    reason = Reason::kCrash;
    state = State::kReaping;
    note = std::move(why);
    if (kill) {
      kill_group();  // we decided to kill it (protocol violation)
      reap_deadline = Clock::now() + kKillGiveUp;
    } else {
      reap_deadline = Clock::now() + kEofGrace;  // let it finish exiting on its own
    }
    arm_poll(milliseconds(0));
  }

  // The child has exited (or was abandoned): kill what is left of its group,
  // reap it, collect stderr, report.
  void finish_dead() {
    std::optional<int> status;
    pid_t p = ch ? ch->pid : pid;
    if (pid > 0) {
      ::kill(-pid, SIGKILL);  // grandchildren; the group id is still ours (zombie leader)
      status = reap_child(pid, kKillGiveUp);
      pid = 0;
    }
    close_channel(p);
    WorkerOutcome o;
    std::string what;
    if (reason == Reason::kTimeout) {
      o.kind = WorkerOutcome::Kind::kTimeout;
      what = "killed after " + seconds_text(cur_timeout);
    } else {
      o.kind = WorkerOutcome::Kind::kCrash;
      what = status ? describe_status(*status) : std::string("exited (status unavailable)");
    }
    if (!note.empty()) what += " (" + note + ")";
    o.detail = with_tail(what);
    finish(std::move(o));
  }

  std::string with_tail(const std::string& what) const {
    if (tail.empty()) return sanitize_utf8(what);
    return sanitize_utf8(what + "; stderr:\n" + tail);
  }

  void close_channel(pid_t p) {
    if (!ch) return;
    drain_stderr(*ch);
    flush_echo(p);
    ch->close();
    ch.reset();
  }

  void finish(WorkerOutcome o) {
    state = State::kIdle;
    ++req_gen;
    ++poll_gen;
    deadline.cancel();
    poll.cancel();
    Done d = std::move(done);
    done = nullptr;
    if (d) post_done(std::move(d), std::move(o));
  }

  void post_done(Done d, WorkerOutcome o) {
    if (destroyed) return;
    auto self = shared_from_this();
    asio::post(io, [self, d = std::move(d), o = std::move(o)]() mutable {
      if (!self->destroyed) d(std::move(o));
    });
  }

  // ---- kill / stop ------------------------------------------------------

  // abandon(), then reap the child.
  void kill_now(const std::string& why) {
    const pid_t child = abandon(why);
    if (child > 0 && !reap_child(child, kKillGiveUp) && !exited(child))
      std::fprintf(stderr, "[worker %d] did not exit after SIGKILL; abandoned\n", child);
  }

  void signal_kill() {
    if (pid > 0) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
    }
  }

  // SIGKILL, close the channel, end a pending request; the child is not
  // reaped here. Returns its pid (0 if none was running).
  pid_t abandon(const std::string& why) {
    const pid_t p = ch ? ch->pid : pid;
    const pid_t child = pid;
    signal_kill();
    pid = 0;
    close_channel(p);
    end_pending(why);
    return child;
  }

  void end_pending(const std::string& why) {
    if (state != State::kIdle) {
      WorkerOutcome o;
      o.kind = WorkerOutcome::Kind::kCrash;
      o.detail = with_tail(why);
      finish(std::move(o));
    } else {
      ++poll_gen;
      deadline.cancel();
      poll.cancel();
    }
  }

  void stop(milliseconds grace) {
    if (pid > 0 && ch) {
      boost::system::error_code ec;
      ch->in.close(ec);  // EOF on the worker's stdin: it exits by itself
      auto until = Clock::now() + grace;
      while (!child_exited() && Clock::now() < until)
        std::this_thread::sleep_for(milliseconds(2));
    }
    kill_now("worker stopped by the engine");
  }
};

// ---- WorkerProcess -------------------------------------------------------

WorkerProcess::WorkerProcess(asio::io_context& io, WorkerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

WorkerProcess::~WorkerProcess() {
  if (!impl_) return;
  try {
    impl_->destroyed = true;
    impl_->done = nullptr;
    impl_->kill_now("worker destroyed");
  } catch (...) {
  }
}

void WorkerProcess::start() { impl_->start(); }

void WorkerProcess::request(json req, milliseconds timeout, Done done) {
  impl_->request(std::move(req), timeout, std::move(done));
}

void WorkerProcess::kill() { impl_->kill_now("killed by the engine"); }

void WorkerProcess::signal_kill() { impl_->signal_kill(); }

int WorkerProcess::abandon() { return impl_->abandon("killed by the engine"); }

void kill_all(const std::vector<WorkerProcess*>& workers, bool wait) {
  for (WorkerProcess* w : workers)
    if (w) w->signal_kill();
  if (wait) {
    for (WorkerProcess* w : workers)
      if (w) w->kill();
    return;
  }
  std::vector<pid_t> pids;
  for (WorkerProcess* w : workers)
    if (w)
      if (const pid_t p = w->abandon(); p > 0) pids.push_back(p);
  if (pids.empty()) return;
  std::thread([pids] {
    for (pid_t p : pids) {
      int status = 0;
      while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }).detach();
}

void WorkerProcess::restart() {
  impl_->kill_now("killed by the engine (restart)");
  impl_->start();
}

void WorkerProcess::stop(milliseconds grace) { impl_->stop(grace); }

bool WorkerProcess::alive() const { return impl_->pid > 0 && !impl_->child_exited(); }
int WorkerProcess::pid() const { return impl_->pid; }
bool WorkerProcess::busy() const { return impl_->state != Impl::State::kIdle; }
const std::string& WorkerProcess::stderr_tail() const { return impl_->tail; }

std::vector<json> call_worker(const WorkerOptions& options, std::vector<json> reqs, milliseconds timeout) {
  asio::io_context io;
  WorkerProcess worker(io, options);
  worker.start();
  std::vector<json> replies;
  std::optional<WorkerOutcome> failure;
  // Each answer sends the next request; the last (or a failure) stops the loop
  // (the stderr watch would keep run() going).
  std::function<void(size_t)> send = [&](size_t i) {
    worker.request(std::move(reqs[i]), timeout, [&, i](WorkerOutcome o) {
      if (o.kind != WorkerOutcome::Kind::kReply) {
        failure = std::move(o);
        io.stop();
        return;
      }
      replies.push_back(std::move(o.reply));
      if (i + 1 < reqs.size()) send(i + 1);
      else io.stop();
    });
  };
  if (!reqs.empty()) {
    send(0);
    io.run();
  }
  worker.kill();
  if (failure) {
    if (failure->kind == WorkerOutcome::Kind::kTimeout)
      throw std::runtime_error("worker timed out: " + failure->detail);
    throw std::runtime_error("worker crashed: " + failure->detail);
  }
  if (replies.size() != reqs.size()) throw std::runtime_error("worker: no answer (io_context stopped)");
  return replies;
}

json call_worker_once(const WorkerOptions& options, json req, milliseconds timeout) {
  std::vector<json> reqs;
  reqs.push_back(std::move(req));
  return std::move(call_worker(options, std::move(reqs), timeout).front());
}

}  // namespace kiln
