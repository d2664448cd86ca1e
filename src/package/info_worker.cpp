#include "package/info_worker.h"

#include <optional>

#include <boost/asio/io_context.hpp>

namespace kiln {

using nlohmann::json;

struct InfoWorker::Impl {
  boost::asio::io_context io;
  WorkerProcess worker;
  std::chrono::milliseconds timeout;
  std::optional<json> hello;
  bool started = false;
  Impl(WorkerOptions o, std::chrono::milliseconds t) : worker(io, std::move(o)), timeout(t) {}
};

InfoWorker::InfoWorker(WorkerOptions options, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(std::move(options), timeout)) {}

InfoWorker::~InfoWorker() {
  if (impl_) impl_->worker.kill();
}

json InfoWorker::call(json req) {
  Impl& s = *impl_;
  if (!s.started || !s.worker.alive()) {
    if (s.started) s.worker.restart();
    else s.worker.start();
    s.started = true;
  }
  std::optional<WorkerOutcome> out;
  s.worker.request(std::move(req), s.timeout, [&](WorkerOutcome o) {
    out = std::move(o);
    s.io.stop();
  });
  s.io.restart();
  s.io.run();
  if (!out) throw std::runtime_error("worker: no answer");
  if (out->kind == WorkerOutcome::Kind::kTimeout) throw std::runtime_error("worker timed out: " + out->detail);
  if (out->kind == WorkerOutcome::Kind::kCrash) throw std::runtime_error("worker crashed: " + out->detail);
  const json& r = out->reply;
  if (!r.is_object() || !r.value("ok", false)) {
    std::string msg = "(no message)";
    if (r.is_object() && r.contains("error") && r["error"].is_string()) msg = r["error"].get<std::string>();
    throw WorkerRefused(msg);
  }
  if (!r.contains("result")) throw std::runtime_error("worker: a reply with no result");
  return r["result"];
}

const json& InfoWorker::hello() {
  if (!impl_->hello) impl_->hello = call({{"method", "hello"}});
  return *impl_->hello;
}

}  // namespace kiln
