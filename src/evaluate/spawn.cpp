#include "evaluate/spawn.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "unknown signal";
  }
}

std::string start_error(const std::string& program, const std::string& what, int err) {
  std::string msg = "cannot start " + program + ": " + what + std::strerror(err);
  std::string base = program.substr(program.find_last_of('/') == std::string::npos
                                        ? 0 : program.find_last_of('/') + 1);
  if (base.rfind("python", 0) == 0) msg += " \xE2\x80\x94 install Python 3 or set KILN_PYTHON";
  return msg;
}

// argv[0] without a slash: searched in the PATH the child will get.
std::string resolve_executable(const std::string& name, const std::string& path_var) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = path_var.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_var;
  int last_err = ENOENT;
  size_t pos = 0;
  for (;;) {
    size_t colon = path.find(':', pos);
    std::string dir = path.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      last_err = EACCES;
    }
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  throw std::runtime_error(start_error(name, "", last_err));
}

struct ExecFailure {
  int stage;  // 1: chdir, 2: exec, 3: setup
  int err;
};

// In the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void child_exec(pid_t parent, int in_r, int out_w, int err_w, int report_w,
                             const char* exe, char* const* argv, char* const* envp,
                             const char* cwd) {
  auto fail = [&](int stage) {
    ExecFailure f{stage, errno};
    ssize_t ignored = ::write(report_w, &f, sizeof f);
    (void)ignored;
    ::_exit(127);
  };
  ::setpgid(0, 0);                       // own process group: kill(-pid) reaches all
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);    // die with the engine (even on kill -9)
  if (::getppid() != parent) ::_exit(127);  // the engine died before prctl
  // Move the pipe ends out of 0..2 first, so dup2 cannot clobber one another.
  int a = ::fcntl(in_r, F_DUPFD_CLOEXEC, 3);
  int b = ::fcntl(out_w, F_DUPFD_CLOEXEC, 3);
  int c = ::fcntl(err_w, F_DUPFD_CLOEXEC, 3);
  if (a < 0 || b < 0 || c < 0) fail(3);
  if (::dup2(a, 0) < 0 || ::dup2(b, 1) < 0 || ::dup2(c, 2) < 0) fail(3);
  // Anything else the engine has open stays out of the worker.
  ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &dfl, nullptr);
  if (cwd && ::chdir(cwd) != 0) fail(1);
  ::execve(exe, argv, envp);
  fail(2);
  ::_exit(127);
}

}  // namespace

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::map<std::string, std::string> child_environment(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const auto& [k, v] : overrides) env[k] = v;
  return env;
}

pid_t spawn_process(const std::vector<std::string>& argv_in, const std::map<std::string, std::string>& env,
                    const std::string& working_dir, int in_r, int out_w, int err_w) {
  if (argv_in.empty() || argv_in[0].empty()) throw std::invalid_argument("spawn_process: empty argv");
  const auto path_it = env.find("PATH");
  const std::string& program = argv_in[0];
  std::string exe = resolve_executable(program, path_it == env.end() ? std::string() : path_it->second);

  // Everything the child needs is built before fork (no allocation after).
  std::vector<std::string> env_strs;
  env_strs.reserve(env.size());
  for (const auto& [k, v] : env) env_strs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv_in;
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const char* cwd = working_dir.empty() ? nullptr : working_dir.c_str();

  int rep[2] = {-1, -1};
  if (::pipe2(rep, O_CLOEXEC)) throw std::runtime_error(start_error(program, "pipe: ", errno));
  pid_t parent = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    int e = errno;
    close_fd(rep[0]);
    close_fd(rep[1]);
    throw std::runtime_error(start_error(program, "fork: ", e));
  }
  if (child == 0) child_exec(parent, in_r, out_w, err_w, rep[1], exe.c_str(), argv.data(), envp.data(), cwd);
  close_fd(rep[1]);
  // The report pipe closes on exec (CLOEXEC): EOF means the exec worked.
  ExecFailure f{0, 0};
  ssize_t n;
  do n = ::read(rep[0], &f, sizeof f);
  while (n < 0 && errno == EINTR);
  close_fd(rep[0]);
  if (n > 0) {
    reap_bounded(child, milliseconds(5000));
    if (f.stage == 1)
      throw std::runtime_error(
          start_error(program, "cannot change to working directory '" + working_dir + "': ", f.err));
    if (f.stage == 3) throw std::runtime_error(start_error(program, "child setup: ", f.err));
    throw std::runtime_error(start_error(program, "", f.err));
  }
  return child;
}

// "exited with code N" / "killed by signal 11 (SIGSEGV)" from a waitpid status.
std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string s = "killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    if (WCOREDUMP(status)) s += " (core dumped)";
    return s;
  }
  return "ended with status " + std::to_string(status);
}

bool has_exited(pid_t pid) {
  if (pid <= 0) return true;
  siginfo_t si;
  std::memset(&si, 0, sizeof si);
  int r;
  do r = ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT);
  while (r < 0 && errno == EINTR);
  if (r < 0) return errno == ECHILD;  // reaped by someone else: gone for us
  return si.si_pid == pid;
}

// Reaps an exited (or SIGKILLed) child; bounded so a child stuck in the kernel
// cannot hang the engine. Returns the status, or nullopt if unavailable.
std::optional<int> reap_bounded(pid_t pid, milliseconds limit) {
  auto until = Clock::now() + limit;
  auto nap = std::chrono::microseconds(200);
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::nullopt;  // ECHILD: someone else reaped it
    if (Clock::now() >= until) return std::nullopt;
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::microseconds(10000));
  }
}

void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old;
    std::memset(&old, 0, sizeof old);
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL)
      ::signal(SIGPIPE, SIG_IGN);
  });
}


}  // namespace kiln
