// The slot pool's failure policy (explore/slot_pool.h), with real worker
// processes: the scripted evaluator (tests/data/fake_evaluator), whose hello
// can be made to fail ($FAKE_HELLO_FAIL) and whose evaluate can crash
// ($FAKE_MALFORMED=crash).
#include <utility>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "explore/slot_pool.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFakeEvaluator = std::string(KILN_SOURCE_DIR) + "/tests/data/fake_evaluator/fake_worker.py";

struct SlotPoolTest : ::testing::Test {
  fs::path dir;
  boost::asio::io_context io;
  std::ostringstream log;

  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("kiln-slot-pool-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  SlotPoolOptions options(int slots, std::map<std::string, std::string> env) {
    SlotPoolOptions o;
    o.slots = slots;
    o.worker.argv = {"python3", "-u", kFakeEvaluator};
    o.worker.env = std::move(env);
    o.worker.env["FAKE_EVALUATOR_LOG"] = (dir / "log.jsonl").string();
    o.worker.env["FAKE_HELLO_COUNTER"] = counter().string();
    o.hello_timeout = std::chrono::seconds(20);
    o.start_attempts = 3;
    o.retry_backoff_s = 0.05;
    o.label = "test";
    return o;
  }
  fs::path counter() const { return dir / "hellos"; }
  // Hellos answered so far (each appends one byte to the counter file).
  size_t hellos() const {
    std::error_code ec;
    const auto n = fs::file_size(counter(), ec);
    return ec ? 0 : static_cast<size_t>(n);
  }
  // Runs the loop until `done` or 30 s.
  template <class Pred>
  void run_until(Pred done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_one_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(done()) << log.str();
  }
};

json evaluate(int block) { return {{"method", "evaluate"}, {"config", {{"BLOCK", block}}}, {"job", json::object()}}; }

TEST_F(SlotPoolTest, HelloFailuresAreRetriedWithBackoffThenTheSlotRuns) {
  // The first two hellos fail (of one slot: the third start succeeds).
  SlotPool pool(io, options(1, {{"FAKE_HELLO_FAIL", "2"}}), log);
  int ready = 0;
  bool exhausted = false;
  SlotPool::Hooks h;
  h.ready = [&](size_t, const json& hello, double, bool first) {
    ++ready;
    EXPECT_TRUE(first);
    EXPECT_EQ(hello["device"]["name"], "NVIDIA H200");
  };
  h.exhausted = [&](const std::string&) { exhausted = true; };
  pool.start(h);
  run_until([&] { return ready > 0 || exhausted; });
  EXPECT_FALSE(exhausted) << log.str();
  EXPECT_EQ(pool.ready(), 1);
  EXPECT_EQ(pool.dropped(), 0);
  EXPECT_EQ(hellos(), 3u);
  EXPECT_NE(log.str().find("starting it again"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("attempt 3 of 3"), std::string::npos) << log.str();
}

TEST_F(SlotPoolTest, ASlotThatNeverStartsIsDroppedAndTheOthersRun) {
  // Hellos 1..3 fail: with two slots starting together, one slot may take
  // all three failures (dropped) or both share them (both run on their
  // retries). Either way the pool keeps running with what it has.
  SlotPool pool(io, options(2, {{"FAKE_HELLO_FAIL", "3"}}), log);
  bool exhausted = false;
  SlotPool::Hooks h;
  h.exhausted = [&](const std::string&) { exhausted = true; };
  pool.start(h);
  run_until([&] { return pool.ready() + pool.dropped() == 2 && !pool.any_busy(); });
  EXPECT_FALSE(exhausted);
  EXPECT_GE(pool.ready(), 1);
  EXPECT_EQ(hellos(), 3u + static_cast<size_t>(pool.ready()));
}

TEST_F(SlotPoolTest, NoSlotLeftIsExhaustedOnceAfterEveryAttempt) {
  SlotPool pool(io, options(2, {{"FAKE_HELLO_FAIL", "1000"}}), log);
  std::vector<std::string> exhausted;
  std::vector<size_t> dropped;
  SlotPool::Hooks h;
  h.ready = [&](size_t, const json&, double, bool) { ADD_FAILURE() << "no hello may succeed"; };
  h.dropped = [&](size_t i, const std::string&) { dropped.push_back(i); };
  h.exhausted = [&](const std::string& why) { exhausted.push_back(why); };
  pool.start(h);
  run_until([&] { return !exhausted.empty(); });
  EXPECT_EQ(exhausted.size(), 1u);
  EXPECT_NE(exhausted[0].find("hello refused"), std::string::npos) << exhausted[0];
  EXPECT_EQ(dropped.size(), 2u);
  EXPECT_EQ(pool.dropped(), 2);
  EXPECT_EQ(hellos(), 6u);  // three starts per slot, no more
  EXPECT_FALSE(pool.idle_slot());
}

TEST_F(SlotPoolTest, ARejectedHelloDropsTheSlotWithoutRetrying) {
  SlotPool pool(io, options(1, {{"FAKE_HELLO_FAIL", "0"}}), log);
  std::string why;
  SlotPool::Hooks h;
  h.check_hello = [](size_t, const json&) { return std::string("bound to GPU 3 but reports (unset)"); };
  h.exhausted = [&](const std::string& w) { why = w; };
  pool.start(h);
  run_until([&] { return !why.empty(); });
  EXPECT_EQ(why, "bound to GPU 3 but reports (unset)");
  EXPECT_EQ(hellos(), 1u);
}

TEST_F(SlotPoolTest, ACrashMidCandidateIsReportedAndTheSlotRestarts) {
  // BLOCK 128 takes the first FAKE_MALFORMED mode: the worker SIGSEGVs.
  SlotPool pool(io, options(1, {{"FAKE_MALFORMED", "crash"}, {"FAKE_HELLO_FAIL", "0"}}), log);
  std::vector<std::string> restarts;
  int readies = 0;
  SlotPool::Hooks h;
  h.ready = [&](size_t, const json&, double, bool first) {
    EXPECT_EQ(first, readies == 0);
    ++readies;
  };
  h.restarting = [&](const char* why) { restarts.emplace_back(why); };
  pool.start(h);
  run_until([&] { return readies == 1; });
  const auto slot = pool.idle_slot();
  ASSERT_TRUE(slot);
  const int first_pid = pool.pid(*slot);
  std::optional<WorkerOutcome> crashed;
  int crashed_pid = 0;
  pool.submit(*slot, evaluate(128), std::chrono::seconds(20), [&](CheckedAnswer a, int pid) {
    crashed = std::move(a.outcome);
    crashed_pid = pid;
  });
  EXPECT_FALSE(pool.idle_slot());  // busy while the request is out
  run_until([&] { return crashed.has_value() && readies == 2; });
  EXPECT_EQ(crashed->kind, WorkerOutcome::Kind::kCrash);
  EXPECT_NE(crashed->detail.find("SIGSEGV"), std::string::npos) << crashed->detail;
  EXPECT_EQ(crashed_pid, first_pid);
  EXPECT_EQ(restarts, std::vector<std::string>{"crash"});
  // The fresh worker evaluates the next candidate.
  const auto again = pool.idle_slot();
  ASSERT_TRUE(again);
  EXPECT_NE(pool.pid(*again), first_pid);
  std::optional<CheckedAnswer> ok;
  pool.submit(*again, evaluate(64), std::chrono::seconds(20), [&](CheckedAnswer a, int) { ok = std::move(a); });
  run_until([&] { return ok.has_value(); });
  ASSERT_EQ(ok->outcome.kind, WorkerOutcome::Kind::kReply) << ok->outcome.detail;
  const json& reply = ok->outcome.reply;
  EXPECT_TRUE(reply.value("ok", false)) << reply.dump();
  // The answer comes typed once: the typed result is the worker's result.
  EXPECT_TRUE(ok->envelope.ok);
  EXPECT_EQ(ok->typed.result.raw, reply["result"]);
  EXPECT_EQ(to_string(ok->typed.result.status), reply["result"].value("status", ""));
}

TEST_F(SlotPoolTest, AfterStopNoCallbackRuns) {
  SlotPool pool(io, options(2, {{"FAKE_EVALUATOR_DELAY_S", "5"}, {"FAKE_HELLO_FAIL", "0"}}), log);
  int ready = 0;
  SlotPool::Hooks h;
  h.ready = [&](size_t, const json&, double, bool) { ++ready; };
  pool.start(h);
  run_until([&] { return ready == 2; });
  bool called = false;
  pool.submit(*pool.idle_slot(), evaluate(64), std::chrono::seconds(20), [&](CheckedAnswer, int) { called = true; });
  pool.stop();
  EXPECT_EQ(pool.ready(), 0);
  EXPECT_FALSE(pool.idle_slot());
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_one_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace kiln
