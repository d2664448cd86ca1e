// The evaluator worker `kiln package` asks for each variant's launch and
// verification data (its `package_info` method: docs/package-format.md,
// docs/architecture.md). One child process, started on first use, asked one
// request at a time; killed on destruction. Not thread-safe: use from one
// thread, which must outlive the worker (PR_SET_PDEATHSIG; worker_process.h).
#pragma once
#include <chrono>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "evaluate/worker_process.h"

namespace kiln {

// The worker answered ok:false (message as it said it).
struct WorkerRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class InfoWorker {
 public:
  InfoWorker(WorkerOptions options, std::chrono::milliseconds timeout);
  ~InfoWorker();
  InfoWorker(const InfoWorker&) = delete;
  InfoWorker& operator=(const InfoWorker&) = delete;

  // The worker's hello result (versions, device, methods). Throws
  // std::runtime_error when it cannot start, WorkerRefused when it refuses.
  const nlohmann::json& hello();
  // Sends `req` (its "method" set by the caller) and returns the "result".
  // Throws WorkerRefused for ok:false, std::runtime_error on a timeout or a
  // crash (the worker is restarted for the next call).
  nlohmann::json call(nlohmann::json req);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
