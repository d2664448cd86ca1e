#include "evaluate/fork_server.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "evaluate/spawn.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using json = nlohmann::json;

constexpr size_t kMaxMessage = 1u << 16;  // the server's answers are a few dozen bytes
constexpr milliseconds kGreeting{10000};  // from its start to its first message (before its imports)

// The interpreter and its flags: argv up to "-m" or the first argument that
// is not an option (a script). nullopt for "-c" or nothing to run.
std::optional<size_t> prefix_length(const std::vector<std::string>& argv) {
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-m") return i + 1 < argv.size() ? std::optional<size_t>(i) : std::nullopt;
    if (a == "-c" || a == "-" || a == "--") return std::nullopt;
    if (a.empty() || a[0] != '-') return i;
    if (a == "-W" || a == "-X" || a == "--check-hash-based-pycs") ++i;  // takes the next argument
  }
  return std::nullopt;
}

std::string seconds(milliseconds ms) { return std::to_string(ms.count() / 1000.0).substr(0, 5) + " s"; }

}  // namespace

bool want_fork_server(int workers, unsigned cores) {
  const char* v = std::getenv("KILN_FORK_SERVER");
  const std::string mode = v ? v : "";
  if (mode == "0") return false;
  if (mode == "1") return true;
  return workers > static_cast<int>(cores);
}

std::shared_ptr<ForkServer> ForkServer::start(const std::vector<std::string>& worker_argv,
                                              const std::map<std::string, std::string>& env,
                                              std::optional<std::vector<std::string>> preload) {
  const auto n = prefix_length(worker_argv);
  if (!n) throw std::invalid_argument("ForkServer: the workers' command runs no module or script");
  std::vector<std::string> prefix(worker_argv.begin(), worker_argv.begin() + static_cast<std::ptrdiff_t>(*n));
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {"-m", "kiln_worker.processes.forkserver"});
  if (preload) {
    std::string list;
    for (const auto& m : *preload) list += (list.empty() ? "" : ",") + m;
    argv.insert(argv.end(), {"--preload", list});
  }
  ignore_sigpipe_once();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::runtime_error(std::string("cannot start the fork server: socketpair: ") + std::strerror(errno));
  pid_t pid = 0;
  try {
    pid = spawn_process(argv, child_environment(env), "", sv[1], sv[1], 2);
  } catch (...) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw;
  }
  ::close(sv[1]);
  return std::shared_ptr<ForkServer>(new ForkServer(pid, sv[0], std::move(prefix)));
}

ForkServer::ForkServer(pid_t pid, int sock, std::vector<std::string> prefix)
    : pid_(pid), sock_(sock), prefix_(std::move(prefix)), started_(Clock::now()) {}

ForkServer::~ForkServer() {
  std::lock_guard<std::mutex> lock(mu_);
  fail("stopped by the engine");
}

void ForkServer::fail(const std::string& why) {
  if (failure_.empty()) failure_ = why;
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);  // nothing of its own to save; its workers die with it
    reap_bounded(pid_, milliseconds(5000));
  }
  pid_ = 0;
}

std::optional<std::vector<std::string>> ForkServer::args_for(const std::vector<std::string>& argv) const {
  const auto n = prefix_length(argv);
  if (!n || *n != prefix_.size() || !std::equal(prefix_.begin(), prefix_.end(), argv.begin())) return std::nullopt;
  return std::vector<std::string>(argv.begin() + static_cast<std::ptrdiff_t>(*n), argv.end());
}

bool ForkServer::read_one(milliseconds wait) {
  if (sock_ < 0) return false;
  struct pollfd p{sock_, POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(wait.count()));
  while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  std::string buf(kMaxMessage, '\0');
  ssize_t got;
  do got = ::recv(sock_, buf.data(), buf.size(), MSG_DONTWAIT);
  while (got < 0 && errno == EINTR);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (got <= 0) {
    std::optional<int> status;
    if (pid_ > 0 && (status = reap_bounded(pid_, milliseconds(2000)))) pid_ = 0;
    fail(got == 0 ? "it exited" + (status ? " (" + describe_status(*status) + ")" : std::string())
                  : std::string("reading its socket failed: ") + std::strerror(errno));
    return false;
  }
  buf.resize(static_cast<size_t>(got));
  const json m = json::parse(buf, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) return true;
  if (m.value("hello", std::string()) == "kiln_worker.processes.forkserver") {
    greeted_ = true;
  } else if (m.contains("exited") && m["exited"].is_number_integer()) {
    exits_[m["exited"].get<pid_t>()] = m.value("status", 0);
  } else if (m.contains("seq") && m["seq"].is_number_integer()) {
    replies_[m["seq"].get<long long>()] = {m.value("pid", 0), m.value("error", std::string())};
  }
  return true;
}

void ForkServer::drain() {
  while (read_one(milliseconds(0))) {
  }
}

pid_t ForkServer::spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                        const std::string& working_dir, int in_r, int out_w, int err_w, milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty()) throw std::runtime_error("the fork server is gone: " + failure_);
  // A program that is not a fork server (KILN_PYTHON a stand-in, say) would
  // never answer: it must greet us first, within seconds of its start.
  while (!greeted_ && failure_.empty()) {
    const auto left = std::chrono::duration_cast<milliseconds>(started_ + kGreeting - Clock::now());
    if (left.count() <= 0) {
      fail("it did not greet the engine within " + seconds(kGreeting) + " (" + prefix_.front() +
           " -m kiln_worker.processes.forkserver is not a fork server); killed");
      break;
    }
    read_one(left);
  }
  if (!failure_.empty()) throw std::runtime_error("the fork server is gone: " + failure_);
  const long long seq = ++next_seq_;
  const std::string body = json{{"seq", seq}, {"args", args}, {"env", env}, {"cwd", working_dir}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  const int fds[3] = {in_r, out_w, err_w};
  struct iovec iov{const_cast<char*>(body.data()), body.size()};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof fds)];
  std::memset(control, 0, sizeof control);
  struct msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t sent;
  do sent = ::sendmsg(sock_, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    const int e = errno;
    if (e == EMSGSIZE) throw std::runtime_error("the fork server cannot take a request this large (the environment)");
    fail(std::string("writing to it failed: ") + std::strerror(e));
    throw std::runtime_error("the fork server is gone: " + failure_);
  }
  const auto until = Clock::now() + timeout;
  for (;;) {
    if (auto it = replies_.find(seq); it != replies_.end()) {
      const auto [pid, error] = it->second;
      replies_.erase(it);
      if (pid <= 0) throw std::runtime_error("the fork server refused the worker: " + (error.empty() ? "no pid" : error));
      return pid;
    }
    if (!failure_.empty()) throw std::runtime_error("the fork server is gone: " + failure_);
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      fail("it did not answer within " + seconds(timeout) + "; killed");
      throw std::runtime_error("the fork server is gone: " + failure_);
    }
    read_one(left);
  }
}

bool ForkServer::has_exited(pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  drain();
  return exits_.count(pid) > 0 || !failure_.empty();
}

std::optional<int> ForkServer::reap(pid_t pid, milliseconds limit) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto until = Clock::now() + limit;
  for (;;) {
    drain();
    if (auto it = exits_.find(pid); it != exits_.end()) {
      const int status = it->second;
      exits_.erase(it);
      return status;
    }
    if (!failure_.empty()) return std::nullopt;
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    read_one(left);
  }
}

bool ForkServer::alive() {
  std::lock_guard<std::mutex> lock(mu_);
  drain();
  return failure_.empty();
}

std::string ForkServer::failure() {
  std::lock_guard<std::mutex> lock(mu_);
  drain();
  return failure_;
}

}  // namespace kiln
