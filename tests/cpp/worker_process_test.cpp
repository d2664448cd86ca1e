// WorkerProcess against real child processes: python3 running
// tests/fixtures/fake_worker.py.
#include <utility>

#include "evaluate/worker_process.h"
#include "worker_testing.h"

#include <cerrno>
#include <csignal>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

namespace kiln {
namespace {

using json = nlohmann::json;
using namespace worker_testing;  // Kind, Clock, milliseconds, the fake worker, run_request ...

TEST(WorkerProcess, EchoRoundTrip) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  EXPECT_TRUE(w.alive());
  EXPECT_GT(w.pid(), 0);
  auto o = run_request(io, w, {{"method", "echo"}, {"payload", {{"a", 1}, {"s", "h\xC3\xA9llo"}}}});
  ASSERT_EQ(o.kind, Kind::kReply) << o.detail;
  EXPECT_EQ(o.reply["ok"], true);
  EXPECT_TRUE(o.reply["id"].is_number_integer());
  EXPECT_EQ(o.reply["result"]["id"], o.reply["id"]);
  EXPECT_EQ(o.reply["result"]["payload"]["a"], 1);
  EXPECT_EQ(o.reply["result"]["payload"]["s"], "h\xC3\xA9llo");
  EXPECT_FALSE(w.busy());
  EXPECT_TRUE(w.alive());
}

TEST(WorkerProcess, ChildRunsInItsOwnProcessGroupWithEnvAndCwd) {
  boost::asio::io_context io;
  WorkerOptions opt = fake_options();
  opt.argv = {"python3", "-c",
              "import json,os,sys\n"
              "req=json.loads(sys.stdin.readline())\n"
              "print(json.dumps({'id':req['id'],'ok':True,'result':{'pid':os.getpid(),"
              "'pgid':os.getpgrp(),'ppid':os.getppid(),'cwd':os.getcwd(),"
              "'env':os.environ.get('KILN_TEST_VAR'),'home':os.environ.get('HOME')}}),flush=True)\n"};
  opt.env["KILN_TEST_VAR"] = "value 42";
  opt.working_dir = "/tmp";
  WorkerProcess w(io, opt);
  w.start();
  auto o = run_request(io, w, {{"method", "info"}});
  ASSERT_EQ(o.kind, Kind::kReply) << o.detail;
  const json& r = o.reply["result"];
  EXPECT_EQ(r["pid"], w.pid());
  EXPECT_EQ(r["pgid"], w.pid());
  EXPECT_EQ(r["ppid"], ::getpid());
  EXPECT_EQ(r["cwd"], "/tmp");
  EXPECT_EQ(r["env"], "value 42");
  if (const char* home = std::getenv("HOME")) {
    EXPECT_EQ(r["home"], home);  // inherited
  }
}

TEST(WorkerProcess, ManySequentialRequests) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  const int kCount = 300;
  int answered = 0;
  std::vector<int64_t> ids;
  std::function<void()> next = [&] {
    w.request({{"method", "echo"}, {"n", answered}}, milliseconds(5000), [&](WorkerOutcome o) {
      ASSERT_EQ(o.kind, Kind::kReply) << o.detail;
      EXPECT_EQ(o.reply["result"]["n"], answered);
      ids.push_back(o.reply["id"].get<int64_t>());
      if (++answered < kCount) next();
      else io.stop();
    });
  };
  next();
  io.run_for(std::chrono::seconds(15));
  EXPECT_EQ(answered, kCount);
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_GT(ids[i], ids[i - 1]);
}

TEST(WorkerProcess, DoneIsNeverCalledInline) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  bool called = false;
  WorkerOutcome got;
  w.request({{"method", "echo"}}, milliseconds(1000), [&](WorkerOutcome o) {
    called = true;
    got = std::move(o);
  });  // not started: a kCrash, but posted
  EXPECT_FALSE(called);
  io.run();
  EXPECT_TRUE(called);
  EXPECT_EQ(got.kind, Kind::kCrash);
  EXPECT_NE(got.detail.find("not running"), std::string::npos) << got.detail;

  w.start();
  called = false;
  w.request({{"method", "echo"}}, milliseconds(5000), [&](WorkerOutcome) { called = true; });
  EXPECT_FALSE(called);
  EXPECT_TRUE(w.busy());
  EXPECT_THROW(w.request({{"method", "echo"}}, milliseconds(5000), [](WorkerOutcome) {}),
               std::logic_error);
  io.restart();
  while (!called) io.run_one_for(milliseconds(100));
}

TEST(WorkerProcess, TimeoutKillsTheWholeProcessGroup) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  pid_t worker_pid = w.pid();
  auto g = run_request(io, w, {{"method", "spawn_grandchild"}});
  ASSERT_EQ(g.kind, Kind::kReply) << g.detail;
  pid_t grandchild = g.reply["result"]["pid"].get<int>();
  ASSERT_FALSE(process_gone(grandchild));  // the check below can fail

  auto t0 = Clock::now();
  auto o = run_request(io, w, {{"method", "sleep"}, {"seconds", 30}}, milliseconds(500));
  auto elapsed = Clock::now() - t0;
  ASSERT_EQ(o.kind, Kind::kTimeout) << o.detail;
  EXPECT_GE(elapsed, milliseconds(450));
  EXPECT_LT(elapsed, milliseconds(1500));
  EXPECT_NE(o.detail.find("killed after 0.5 s"), std::string::npos) << o.detail;
  EXPECT_FALSE(w.alive());
  EXPECT_FALSE(w.busy());
  EXPECT_EQ(w.pid(), 0);
  // Reaped: not even a zombie.
  EXPECT_EQ(::kill(worker_pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(wait_gone(grandchild, milliseconds(1000))) << "grandchild " << grandchild;
}

TEST(WorkerProcess, CrashReportsSignalAndStderrTail) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  pid_t worker_pid = w.pid();
  auto o = run_request(io, w, {{"method", "crash"}});
  ASSERT_EQ(o.kind, Kind::kCrash) << o.detail;
  EXPECT_NE(o.detail.find("killed by signal 11 (SIGSEGV)"), std::string::npos) << o.detail;
  EXPECT_NE(o.detail.find("fake worker: about to crash"), std::string::npos) << o.detail;
  EXPECT_FALSE(w.alive());
  EXPECT_EQ(::kill(worker_pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(WorkerProcess, ExitCodeIsReported) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  auto o = run_request(io, w, {{"method", "exit"}, {"code", 3}});
  ASSERT_EQ(o.kind, Kind::kCrash) << o.detail;
  EXPECT_NE(o.detail.find("exited with code 3"), std::string::npos) << o.detail;
  EXPECT_NE(o.detail.find("fake worker: exiting with 3"), std::string::npos) << o.detail;
}

TEST(WorkerProcess, RestartAfterCrash) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  pid_t first = w.pid();
  auto o = run_request(io, w, {{"method", "crash"}});
  ASSERT_EQ(o.kind, Kind::kCrash) << o.detail;
  auto dead = run_request(io, w, {{"method", "echo"}});
  EXPECT_EQ(dead.kind, Kind::kCrash);  // not running until restarted
  w.restart();
  EXPECT_TRUE(w.alive());
  EXPECT_NE(w.pid(), first);
  EXPECT_EQ(w.stderr_tail(), "");  // a fresh child's tail
  auto again = run_request(io, w, {{"method", "echo"}, {"x", 7}});
  ASSERT_EQ(again.kind, Kind::kReply) << again.detail;
  EXPECT_EQ(again.reply["result"]["x"], 7);
  // restart() of a healthy worker works too.
  pid_t second = w.pid();
  w.restart();
  EXPECT_NE(w.pid(), second);
  EXPECT_EQ(::kill(second, 0), -1);
  auto third = run_request(io, w, {{"method", "echo"}});
  EXPECT_EQ(third.kind, Kind::kReply) << third.detail;
}

TEST(WorkerProcess, JunkAndWrongIdLinesAreIgnored) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  auto o = run_request(io, w, {{"method", "noise"}});
  ASSERT_EQ(o.kind, Kind::kReply) << o.detail;
  EXPECT_EQ(o.reply["result"], "the real answer");
  EXPECT_NE(w.stderr_tail().find("[stdout] this is not json"), std::string::npos) << w.stderr_tail();
  EXPECT_NE(w.stderr_tail().find("wrong id"), std::string::npos) << w.stderr_tail();
  auto next = run_request(io, w, {{"method", "echo"}, {"after", "noise"}});
  ASSERT_EQ(next.kind, Kind::kReply) << next.detail;
  EXPECT_EQ(next.reply["result"]["after"], "noise");
}

TEST(WorkerProcess, ParallelWorkersOnOneIoContext) {
  boost::asio::io_context io;
  const int kWorkers = 4;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.push_back(std::make_unique<WorkerProcess>(io, fake_options()));
    workers.back()->start();
  }
  // Let the interpreters come up first so the timing measures the requests.
  for (auto& w : workers) ASSERT_EQ(run_request(io, *w, {{"method", "echo"}}).kind, Kind::kReply);
  int done = 0;
  std::vector<json> replies(kWorkers);
  auto t0 = Clock::now();
  for (int i = 0; i < kWorkers; ++i) {
    workers[i]->request({{"method", "sleep"}, {"seconds", 1.0}, {"worker", i}}, milliseconds(5000),
                        [&, i](WorkerOutcome o) {
                          EXPECT_EQ(o.kind, Kind::kReply) << o.detail;
                          replies[i] = o.reply;
                          ++done;
                        });
  }
  io.restart();
  while (done < kWorkers && Clock::now() - t0 < std::chrono::seconds(10))
    io.run_one_for(milliseconds(50));
  auto elapsed = Clock::now() - t0;
  EXPECT_EQ(done, kWorkers);
  EXPECT_LT(elapsed, milliseconds(2500));  // in parallel, not 4 x 1 s
  for (auto& r : replies) EXPECT_EQ(r["result"]["slept"], 1.0);
}

TEST(WorkerProcess, MissingExecutableThrowsAClearMessage) {
  boost::asio::io_context io;
  {
    WorkerOptions opt;
    opt.argv = {"kiln-no-such-program-xyz", "-m", "kiln_worker"};
    WorkerProcess w(io, opt);
    try {
      w.start();
      FAIL() << "start() did not throw";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot start kiln-no-such-program-xyz: No such file or directory"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(w.alive());
  }
  {
    WorkerOptions opt;
    opt.argv = {"/nonexistent/bin/python3", "-m", "kiln_worker"};
    WorkerProcess w(io, opt);
    try {
      w.start();
      FAIL() << "start() did not throw";
    } catch (const std::runtime_error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("cannot start /nonexistent/bin/python3: No such file or directory"), std::string::npos) << m;
      EXPECT_NE(m.find("install Python 3 or set KILN_PYTHON"), std::string::npos) << m;
    }
  }
  {
    WorkerOptions opt = fake_options();
    opt.working_dir = "/nonexistent/dir";
    WorkerProcess w(io, opt);
    try {
      w.start();
      FAIL() << "start() did not throw";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("/nonexistent/dir"), std::string::npos) << e.what();
    }
  }
  {
    WorkerOptions opt = fake_options();
    opt.env["PATH"] = "/nonexistent";  // argv[0] is searched in the child's PATH
    WorkerProcess w(io, opt);
    EXPECT_THROW(w.start(), std::runtime_error);
  }
}

TEST(WorkerProcess, WorkerDiesWithItsParent) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t engine = ::fork();
  ASSERT_GE(engine, 0);
  if (engine == 0) {
    // The "engine": starts a worker through the library, reports its pid, waits.
    ::close(fds[0]);
    try {
      boost::asio::io_context io;
      WorkerProcess w(io, fake_options());
      w.start();
      // Busy in a long request, so it is not reading stdin: stdin EOF cannot
      // be what ends it, only PR_SET_PDEATHSIG.
      w.request({{"method", "sleep"}, {"seconds", 60}}, milliseconds(120000), [](WorkerOutcome) {});
      io.run_for(milliseconds(100));
      int pid = w.pid();
      if (::write(fds[1], &pid, sizeof pid) != sizeof pid) ::_exit(2);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(3);
    }
  }
  ::close(fds[1]);
  int worker = 0;
  ssize_t n = ::read(fds[0], &worker, sizeof worker);
  ::close(fds[0]);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof worker));
  ASSERT_GT(worker, 0);
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_FALSE(process_gone(worker));  // alive while the engine lives

  ASSERT_EQ(::kill(engine, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(engine, &status, 0), engine);
  EXPECT_TRUE(wait_gone(worker, milliseconds(2000))) << "worker " << worker << " outlived its parent";
  if (!process_gone(worker)) ::kill(worker, SIGKILL);  // do not leak it on failure
}

TEST(WorkerProcess, DestroyWithPendingRequestIsSafe) {
  boost::asio::io_context io;
  bool called = false;
  pid_t pid = 0;
  {
    WorkerProcess w(io, fake_options());
    w.start();
    pid = w.pid();
    w.request({{"method", "sleep"}, {"seconds", 30}}, milliseconds(20000),
              [&](WorkerOutcome) { called = true; });
    io.run_for(milliseconds(200));
    EXPECT_TRUE(w.busy());
  }  // destroyed with a read, a write, timers and the stderr watch pending
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  io.restart();
  io.run_for(milliseconds(200));  // the cancelled handlers run and do nothing
  EXPECT_FALSE(called);
  EXPECT_TRUE(io.stopped());      // nothing left behind on the io_context
}

TEST(WorkerProcess, IoContextDestroyedWithQueuedHandlersAfterTheWorker) {
  bool called = false;
  {
    boost::asio::io_context io;
    {
      WorkerProcess w(io, fake_options());
      w.start();
      w.request({{"method", "sleep"}, {"seconds", 30}}, milliseconds(20000),
                [&](WorkerOutcome) { called = true; });
      io.run_for(milliseconds(100));
    }
    // io is destroyed here without running the cancelled handlers, which
    // still hold the worker's internals.
  }
  EXPECT_FALSE(called);
}

TEST(WorkerProcess, KillWithPendingRequestCompletesItOnce) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  pid_t pid = w.pid();
  int calls = 0;
  WorkerOutcome got;
  w.request({{"method", "sleep"}, {"seconds", 30}}, milliseconds(20000), [&](WorkerOutcome o) {
    ++calls;
    got = std::move(o);
  });
  io.run_for(milliseconds(100));
  w.kill();
  EXPECT_FALSE(w.alive());
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(calls, 0);  // posted, not inline
  io.restart();
  io.run_for(milliseconds(300));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got.kind, Kind::kCrash);
  EXPECT_NE(got.detail.find("killed by the engine"), std::string::npos) << got.detail;
}

TEST(WorkerProcess, KillAllEndsEveryWorkerAndEachPendingRequestOnce) {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<WorkerProcess>> ws;
  std::vector<pid_t> pids;
  std::vector<int> calls(4, 0);
  std::vector<Kind> kinds(4, Kind::kReply);
  for (int i = 0; i < 4; ++i) {
    ws.push_back(std::make_unique<WorkerProcess>(io, fake_options()));
    ws.back()->start();
    pids.push_back(ws.back()->pid());
    ws.back()->request({{"method", "sleep"}, {"seconds", 30}}, milliseconds(20000), [&, i](WorkerOutcome o) {
      ++calls[i];
      kinds[i] = o.kind;
    });
  }
  io.run_for(milliseconds(100));
  std::vector<WorkerProcess*> all;
  for (auto& w : ws) all.push_back(w.get());
  all.push_back(nullptr);  // a slot without a worker is skipped
  kill_all(all);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(ws[i]->alive());
    EXPECT_EQ(::kill(pids[i], 0), -1) << "worker " << i << " not reaped";
  }
  io.restart();
  io.run_for(milliseconds(300));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(calls[i], 1) << "worker " << i;
    EXPECT_EQ(kinds[i], Kind::kCrash) << "worker " << i;
  }
}

TEST(WorkerProcess, KillAllWithoutWaitingEndsTheRequestsAndReapsInTheBackground) {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<WorkerProcess>> ws;
  std::vector<pid_t> pids;
  int calls = 0;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(std::make_unique<WorkerProcess>(io, fake_options()));
    ws.back()->start();
    pids.push_back(ws.back()->pid());
    ws.back()->request({{"method", "sleep"}, {"seconds", 30}}, milliseconds(20000), [&](WorkerOutcome o) {
      ++calls;
      EXPECT_EQ(o.kind, Kind::kCrash);
    });
  }
  io.run_for(milliseconds(100));
  std::vector<WorkerProcess*> all;
  for (auto& w : ws) all.push_back(w.get());
  kill_all(all, /*wait=*/false);
  for (auto& w : ws) {
    EXPECT_FALSE(w->alive());
    EXPECT_EQ(w->pid(), 0);
  }
  // kill(pid, 0) succeeds on a zombie: -1 means the background thread reaped it.
  for (pid_t p : pids) {
    auto until = Clock::now() + milliseconds(5000);
    while (::kill(p, 0) == 0 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(::kill(p, 0), -1) << "pid " << p << " not reaped";
  }
  io.restart();
  io.run_for(milliseconds(300));
  EXPECT_EQ(calls, 3);
}

TEST(WorkerProcess, DeathWhileIdleIsSeenByTheNextRequest) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  ASSERT_EQ(run_request(io, w, {{"method", "echo"}}).kind, Kind::kReply);
  ::kill(w.pid(), SIGTERM);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_FALSE(w.alive());
  auto o = run_request(io, w, {{"method", "echo"}});  // write hits EPIPE: no SIGPIPE death
  ASSERT_EQ(o.kind, Kind::kCrash) << o.detail;
  EXPECT_NE(o.detail.find("SIGTERM"), std::string::npos) << o.detail;
}

TEST(WorkerProcess, StartReplacesAChildThatDiedWhileIdle) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  EXPECT_THROW(w.start(), std::logic_error);  // a live child
  pid_t first = w.pid();
  ::kill(first, SIGKILL);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(w.alive());
  w.start();  // dead but not yet reaped: no throw, it is reaped
  EXPECT_NE(w.pid(), first);
  EXPECT_EQ(::kill(first, 0), -1);
  EXPECT_EQ(run_request(io, w, {{"method", "echo"}}).kind, Kind::kReply);
}

TEST(WorkerProcess, ClosedStdoutWithoutExitIsACrash) {
  boost::asio::io_context io;
  WorkerProcess w(io, fake_options());
  w.start();
  pid_t pid = w.pid();
  auto o = run_request(io, w, {{"method", "close_stdout"}}, milliseconds(10000));
  ASSERT_EQ(o.kind, Kind::kCrash) << o.detail;
  EXPECT_NE(o.detail.find("closed its stdout"), std::string::npos) << o.detail;
  EXPECT_EQ(::kill(pid, 0), -1);
}

TEST(WorkerProcess, StderrTailIsBoundedAndEchoed) {
  boost::asio::io_context io;
  WorkerOptions opt = fake_options();
  opt.stderr_tail_bytes = 100;
  opt.echo_stderr = true;
  WorkerProcess w(io, opt);
  w.start();
  std::string text;
  for (int i = 0; i < 50; ++i) text += "line " + std::to_string(i) + " of the worker's stderr\n";
  testing::internal::CaptureStderr();
  auto o = run_request(io, w, {{"method", "stderr"}, {"text", text}});
  // The stderr watch runs independently of the reply: give it a moment.
  auto until = Clock::now() + milliseconds(2000);
  while (w.stderr_tail().find("line 49") == std::string::npos && Clock::now() < until)
    io.run_one_for(milliseconds(20));
  std::string echoed = testing::internal::GetCapturedStderr();
  ASSERT_EQ(o.kind, Kind::kReply) << o.detail;
  EXPECT_LE(w.stderr_tail().size(), 100u);
  EXPECT_NE(w.stderr_tail().find("line 49 of the worker's stderr\n"), std::string::npos) << w.stderr_tail();
  EXPECT_EQ(w.stderr_tail().find("line 1 "), std::string::npos);
  std::string prefix = "[worker " + std::to_string(w.pid()) + "] ";
  EXPECT_NE(echoed.find(prefix + "line 0 of the worker's stderr\n"), std::string::npos) << echoed;
  EXPECT_NE(echoed.find(prefix + "line 49 of the worker's stderr\n"), std::string::npos) << echoed;
}

TEST(WorkerProcess, CallWorkerOnce) {
  auto reply = call_worker_once(fake_options(), {{"method", "echo"}, {"v", "once"}}, milliseconds(5000));
  EXPECT_EQ(reply["ok"], true);
  EXPECT_EQ(reply["result"]["v"], "once");
  try {
    call_worker_once(fake_options(), {{"method", "crash"}}, milliseconds(5000));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("SIGSEGV"), std::string::npos) << e.what();
  }
  try {
    call_worker_once(fake_options(), {{"method", "sleep"}, {"seconds", 10}}, milliseconds(300));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("killed after 0.3 s"), std::string::npos) << e.what();
  }
}

TEST(WorkerProcess, CallWorkerSendsRequestsInOrderToOneProcess) {
  auto replies = call_worker(fake_options(), {{{"method", "echo"}, {"v", 1}}, {{"method", "echo"}, {"v", 2}}},
                             milliseconds(5000));
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0]["result"]["v"], 1);
  EXPECT_EQ(replies[1]["result"]["v"], 2);
  EXPECT_EQ(replies[0]["result"]["pid"], replies[1]["result"]["pid"]);
  // A crash in the second request fails the whole call.
  EXPECT_THROW(call_worker(fake_options(), {{{"method", "echo"}}, {{"method", "crash"}}}, milliseconds(5000)),
               std::runtime_error);
}

}  // namespace
}  // namespace kiln
