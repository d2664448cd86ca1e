// WorkerProcess with a ForkServer: worker/kiln_worker/processes/forkserver.py forking
// tests/fixtures/fake_worker.py (preloading only `json`, so the tests stay
// fast; the real preload is exercised by the end-to-end tests).
#include <utility>

#include "evaluate/fork_server.h"
#include "evaluate/worker_process.h"
#include "worker_testing.h"

#include <cerrno>
#include <cstdlib>
#include <csignal>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

namespace kiln {
namespace {

using json = nlohmann::json;
using namespace worker_testing;  // Kind, Clock, milliseconds, the fake worker, run_request ...

// The fake worker, with kiln_worker (the fork server) importable.
WorkerOptions fake_options() {
  WorkerOptions o = worker_testing::fake_options();
  o.env["PYTHONPATH"] = std::string(KILN_SOURCE_DIR) + "/worker";
  return o;
}

// Fake workers forked by a fresh server.
WorkerOptions forked_options() {
  WorkerOptions o = fake_options();
  o.fork_server = ForkServer::start(o.argv, o.env, std::vector<std::string>{"json"});
  return o;
}

TEST(ForkServer, UsedWhenTheWorkersOutnumberTheCoresUnlessTheEnvironmentSays) {
  const char* old = std::getenv("KILN_FORK_SERVER");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::unsetenv("KILN_FORK_SERVER");
  EXPECT_FALSE(want_fork_server(12, 16));
  EXPECT_FALSE(want_fork_server(16, 16));
  EXPECT_TRUE(want_fork_server(17, 16));
  ::setenv("KILN_FORK_SERVER", "1", 1);
  EXPECT_TRUE(want_fork_server(1, 16));
  ::setenv("KILN_FORK_SERVER", "0", 1);
  EXPECT_FALSE(want_fork_server(64, 2));
  if (saved) ::setenv("KILN_FORK_SERVER", saved->c_str(), 1);
  else ::unsetenv("KILN_FORK_SERVER");
}

TEST(ForkServer, ArgsForTheSameInterpreterAndFlagsOnly) {
  auto server = ForkServer::start({"python3", "-u", kFakeWorker}, fake_options().env, std::vector<std::string>{});
  EXPECT_EQ(server->args_for({"python3", "-u", "x.py", "--a"}), (std::vector<std::string>{"x.py", "--a"}));
  EXPECT_EQ(server->args_for({"python3", "-u", "-m", "kiln_worker"}),
            (std::vector<std::string>{"-m", "kiln_worker"}));
  EXPECT_FALSE(server->args_for({"python3", "x.py"}));          // other flags
  EXPECT_FALSE(server->args_for({"python3.99", "-u", "x.py"}));  // another interpreter
  EXPECT_FALSE(server->args_for({"python3", "-u", "-c", "pass"}));
  EXPECT_FALSE(server->args_for({"python3", "-u"}));
  EXPECT_THROW(ForkServer::start({"python3", "-c", "pass"}, {}, std::nullopt), std::invalid_argument);
}

TEST(ForkServer, ForksTheWorkerWithItsEnvironmentAndGroup) {
  boost::asio::io_context io;
  WorkerOptions opt = forked_options();
  opt.env["KILN_TEST_VAR"] = "slot 3";  // differs per worker, as a GPU binding does
  opt.working_dir = "/tmp";
  WorkerProcess w(io, opt);
  w.start();
  auto info = run_request(io, w, {{"method", "info"}});
  ASSERT_EQ(info.kind, Kind::kReply) << info.detail;
  EXPECT_EQ(info.reply["result"]["pid"], w.pid());
  EXPECT_EQ(info.reply["result"]["pgid"], w.pid());
  EXPECT_EQ(info.reply["result"]["ppid"], opt.fork_server->pid());  // forked, not started here
  auto env = run_request(io, w, {{"method", "env"}, {"name", "KILN_TEST_VAR"}});
  ASSERT_EQ(env.kind, Kind::kReply) << env.detail;
  EXPECT_EQ(env.reply["result"]["value"], "slot 3");
  EXPECT_EQ(env.reply["result"]["cwd"], "/tmp");
  for (int i = 0; i < 20; ++i) {
    auto o = run_request(io, w, {{"method", "echo"}, {"n", i}});
    ASSERT_EQ(o.kind, Kind::kReply) << o.detail;
    EXPECT_EQ(o.reply["result"]["n"], i);
  }
}

TEST(ForkServer, CrashAndExitStatusComeFromTheServer) {
  boost::asio::io_context io;
  WorkerProcess w(io, forked_options());
  w.start();
  const pid_t first = w.pid();
  auto crash = run_request(io, w, {{"method", "crash"}});
  ASSERT_EQ(crash.kind, Kind::kCrash);
  EXPECT_NE(crash.detail.find("killed by signal 11 (SIGSEGV)"), std::string::npos) << crash.detail;
  EXPECT_NE(crash.detail.find("about to crash"), std::string::npos) << crash.detail;
  EXPECT_FALSE(w.alive());
  EXPECT_TRUE(process_gone(first));  // reaped by the server

  w.restart();
  EXPECT_NE(w.pid(), first);
  auto exit = run_request(io, w, {{"method", "exit"}, {"code", 3}});
  ASSERT_EQ(exit.kind, Kind::kCrash);
  EXPECT_NE(exit.detail.find("exited with code 3"), std::string::npos) << exit.detail;
}

TEST(ForkServer, TimeoutKillsTheForkedWorkersGroup) {
  boost::asio::io_context io;
  WorkerProcess w(io, forked_options());
  w.start();
  const pid_t worker = w.pid();
  auto g = run_request(io, w, {{"method", "spawn_grandchild"}});
  ASSERT_EQ(g.kind, Kind::kReply) << g.detail;
  const pid_t grandchild = g.reply["result"]["pid"].get<int>();
  ASSERT_FALSE(process_gone(grandchild));
  auto o = run_request(io, w, {{"method", "sleep"}, {"seconds", 30}}, milliseconds(500));
  ASSERT_EQ(o.kind, Kind::kTimeout) << o.detail;
  EXPECT_NE(o.detail.find("killed after 0.5 s"), std::string::npos) << o.detail;
  EXPECT_FALSE(w.alive());
  EXPECT_TRUE(wait_gone(worker, milliseconds(2000)));
  EXPECT_TRUE(wait_gone(grandchild, milliseconds(2000))) << "grandchild " << grandchild;
}

TEST(ForkServer, WorkersDieWithTheServerAndLaterOnesStartDirectly) {
  boost::asio::io_context io;
  WorkerOptions opt = forked_options();
  WorkerProcess w(io, opt);
  w.start();
  const pid_t worker = w.pid();
  ASSERT_EQ(run_request(io, w, {{"method", "echo"}}).kind, Kind::kReply);
  ASSERT_EQ(::kill(opt.fork_server->pid(), SIGKILL), 0);
  auto o = run_request(io, w, {{"method", "sleep"}, {"seconds", 30}});
  EXPECT_EQ(o.kind, Kind::kCrash) << o.detail;  // PR_SET_PDEATHSIG: no orphans
  EXPECT_TRUE(wait_gone(worker, milliseconds(2000)));
  EXPECT_FALSE(opt.fork_server->alive());
  EXPECT_NE(opt.fork_server->failure().find("exited"), std::string::npos) << opt.fork_server->failure();

  w.restart();  // the server is gone: started here instead
  auto info = run_request(io, w, {{"method", "info"}});
  ASSERT_EQ(info.kind, Kind::kReply) << info.detail;
  EXPECT_EQ(info.reply["result"]["ppid"], ::getpid());
}

TEST(ForkServer, ADifferentPythonpathIsStartedDirectly) {
  boost::asio::io_context io;
  WorkerOptions opt = forked_options();
  opt.env["PYTHONPATH"] = std::string(KILN_SOURCE_DIR) + "/worker:/nonexistent";  // the server's sys.path would be wrong
  WorkerProcess w(io, opt);
  w.start();
  auto info = run_request(io, w, {{"method", "info"}});
  ASSERT_EQ(info.kind, Kind::kReply) << info.detail;
  EXPECT_EQ(info.reply["result"]["ppid"], ::getpid());
  EXPECT_TRUE(opt.fork_server->alive());  // a refusal does not stop the server
}

TEST(ForkServer, ManyWorkersAtOnce) {
  boost::asio::io_context io;
  WorkerOptions opt = forked_options();
  std::vector<std::unique_ptr<WorkerProcess>> ws;
  for (int i = 0; i < 8; ++i) {
    ws.push_back(std::make_unique<WorkerProcess>(io, opt));
    ws.back()->start();
  }
  int answered = 0;
  for (auto& w : ws)
    w->request({{"method", "info"}}, milliseconds(10000), [&](WorkerOutcome o) {
      EXPECT_EQ(o.kind, Kind::kReply) << o.detail;
      if (o.kind == Kind::kReply) EXPECT_EQ(o.reply["result"]["ppid"], opt.fork_server->pid());
      ++answered;
    });
  auto until = Clock::now() + milliseconds(15000);
  while (answered < 8 && Clock::now() < until) io.run_one_for(milliseconds(50));
  EXPECT_EQ(answered, 8);
  std::vector<WorkerProcess*> raw;
  for (auto& w : ws) raw.push_back(w.get());
  kill_all(raw);
  for (auto& w : ws) EXPECT_FALSE(w->alive());
}

TEST(ForkServer, AProgramThatIsNoForkServerIsGivenUpSoon) {
  // An "interpreter" that neither greets nor exits (a stand-in for python3).
  const std::string silent = ::testing::TempDir() + "kiln_silent_python.sh";
  {
    std::ofstream f(silent);
    f << "#!/bin/sh\nexec sleep 60\n";
  }
  ASSERT_EQ(::chmod(silent.c_str(), 0755), 0);
  boost::asio::io_context io;
  WorkerOptions opt = fake_options();
  opt.fork_server = ForkServer::start({silent, kFakeWorker}, opt.env, std::nullopt);
  opt.argv = {silent, kFakeWorker};
  const auto t0 = Clock::now();
  WorkerProcess w(io, opt);
  w.start();  // not forked: started here, after the server's 10 s of grace
  EXPECT_LT(Clock::now() - t0, milliseconds(15000));
  EXPECT_FALSE(opt.fork_server->alive());
  EXPECT_NE(opt.fork_server->failure().find("did not greet"), std::string::npos) << opt.fork_server->failure();
}

TEST(ForkServer, DestroyingTheServerEndsItsWorkers) {
  pid_t worker = 0, server = 0;
  {
    boost::asio::io_context io;
    WorkerOptions opt = forked_options();
    server = opt.fork_server->pid();
    WorkerProcess w(io, opt);
    w.start();
    worker = w.pid();
    ASSERT_EQ(run_request(io, w, {{"method", "echo"}}).kind, Kind::kReply);
  }  // the worker, then the last owner of the server (handlers on io hold it too)
  EXPECT_TRUE(wait_gone(worker, milliseconds(2000)));
  EXPECT_EQ(::kill(server, 0), -1);  // killed and reaped, not a zombie
}

}  // namespace
}  // namespace kiln
