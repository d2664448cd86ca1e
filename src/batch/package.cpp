#include "batch/package.h"

#include <chrono>
#include <stdexcept>

#include "explore/explorer.h"
#include "package/info_worker.h"

namespace kiln::batch {

using nlohmann::json;

namespace {

// The evaluator's package_info, with a clear message from an old evaluator.
PackageInfoFn info_from(InfoWorker& worker) {
  return [&worker](const json& req) {
    try {
      return worker.call(req);
    } catch (const WorkerRefused& e) {
      const std::string msg = e.what();
      if (msg.find("unknown method") != std::string::npos)
        throw std::runtime_error("this evaluator has no package_info method (" + msg +
                                 "): update worker/kiln_worker");
      throw;
    }
  };
}

}  // namespace

const char* kiln_version() { return KILN_VERSION; }

PackageResult package(const Catalog& catalog, const std::vector<const Target*>& targets, PackageOptions o,
                      const std::string& device) {
  InfoWorker worker(evaluator_options(device, {}, false), std::chrono::seconds(900));
  json hello;
  try {
    hello = worker.hello();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot start the Python evaluator: ") + e.what());
  }
  o.toolchain = {{"kiln", kiln_version()}, {"triton", hello.value("triton", "")}, {"torch", hello.value("torch", "")}};
  return write_package(catalog, targets, o, info_from(worker));
}

}  // namespace kiln::batch
