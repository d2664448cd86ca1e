// Starting and reaping child processes: the fork/exec that evaluator workers
// (and their fork server) are started with. Linux.
//
// A spawned child runs in its own process group (kill(-pid) reaches all it
// started), gets SIGKILL when the engine dies (PR_SET_PDEATHSIG; it fires when
// the *thread* that spawned it exits, so spawn from a long-lived thread), has
// an empty signal mask and SIGPIPE at its default, and inherits no descriptor
// but its stdin, stdout and stderr.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace kiln {

// Our environment with `overrides` added or replacing.
std::map<std::string, std::string> child_environment(const std::map<std::string, std::string>& overrides);

// Forks and execs argv (argv[0] without '/' is searched in env's PATH) with
// in_r, out_w, err_w as its fds 0, 1, 2 (the caller keeps and closes its
// copies); env is the child's whole environment. Returns once the exec has
// worked. Throws std::runtime_error ("cannot start python3: No such file or
// directory — install Python 3 or set KILN_PYTHON").
pid_t spawn_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                    const std::string& working_dir, int in_r, int out_w, int err_w);

// "exited with code N" / "killed by signal 11 (SIGSEGV)" from a waitpid status.
std::string describe_status(int status);

// Our child `pid` has exited (or is not our child: gone for us). Does not reap.
bool has_exited(pid_t pid);

// Reaps our child `pid`, waiting at most `limit` (a child stuck in the kernel
// must not hang the engine). Its status, or nullopt if unavailable.
std::optional<int> reap_bounded(pid_t pid, std::chrono::milliseconds limit);

// Closes fd if it is open and sets it to -1.
void close_fd(int& fd);

// Sets SIGPIPE to SIG_IGN if it was SIG_DFL (once per process): a write to a
// dead child must be an error, not the engine's death.
void ignore_sigpipe_once();

}  // namespace kiln
