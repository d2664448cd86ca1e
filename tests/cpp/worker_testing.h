// Helpers of the tests that drive real worker processes
// (worker_process_test, fork_server_test): the fake worker, a request run to
// its end, a process seen gone.
#pragma once
#include <utility>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "evaluate/worker_process.h"

namespace kiln::worker_testing {

using Kind = WorkerOutcome::Kind;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline const std::string kFakeWorker = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/fake_worker.py";

// tests/fixtures/fake_worker.py, unbuffered.
inline WorkerOptions fake_options() {
  WorkerOptions o;
  o.argv = {"python3", "-u", kFakeWorker};
  o.env["PYTHONDONTWRITEBYTECODE"] = "1";
  return o;
}

// Runs one request to completion on `io` (which must have nothing else to do
// but this worker) and returns the outcome.
inline WorkerOutcome run_request(boost::asio::io_context& io, WorkerProcess& w, nlohmann::json req,
                                 std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  std::optional<WorkerOutcome> out;
  w.request(std::move(req), timeout, [&](WorkerOutcome o) {
    EXPECT_FALSE(out.has_value()) << "done called twice";
    out = std::move(o);
  });
  io.restart();
  const auto until = std::chrono::steady_clock::now() + timeout + std::chrono::milliseconds(5000);
  while (!out && std::chrono::steady_clock::now() < until) io.run_one_for(std::chrono::milliseconds(50));
  if (!out) {
    ADD_FAILURE() << "no outcome";
    return WorkerOutcome{WorkerOutcome::Kind::kCrash, nlohmann::json(), "<test: no outcome>"};
  }
  return *out;
}

// Dead: no such process, or a zombie waiting for init (whose reaping the
// test does not control).
inline bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z';
}

inline bool wait_gone(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return process_gone(pid);
}

}  // namespace kiln::worker_testing
