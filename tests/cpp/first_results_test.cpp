// FirstResults: the line on a run's first results, from the slots' first
// evaluations and the phases their workers reported (explore/first_results.h).
#include "explore/first_results.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "evaluate/reply.h"
#include "explore/explorer.h"
#include "explore/utilisation.h"

using kiln::FirstResults;
using kiln::read_evaluation_result;
using kiln::Timings;
using nlohmann::json;

namespace {

// Timings as a worker sends them, read by the engine's own reader.
Timings timings(json t) { return read_evaluation_result(json{{"status", "ok"}, {"timings", std::move(t)}}).timings; }

}  // namespace

TEST(FirstResults, NothingUntilASlotHasItsFirstAnswer) {
  FirstResults f(2);
  f.ready(0, 3.0);
  f.sent(0, 4.0);
  EXPECT_EQ(f.line(), "");
  EXPECT_FALSE(f.all_answered());
  EXPECT_FALSE(f.awaits_answer(1));
  f.answered(1, 5.0, nullptr);  // never sent: not a first answer
  EXPECT_EQ(f.line(), "");
}

TEST(FirstResults, WaitsForEverySlotThatIsNotDropped) {
  FirstResults f(3);
  for (size_t i = 0; i < 3; ++i) f.sent(i, 1.0);
  const Timings t = timings({{"compile_s", 0.1}});
  f.answered(0, 2.0, &t);
  EXPECT_FALSE(f.all_answered());
  f.dropped(1);
  EXPECT_FALSE(f.all_answered());
  EXPECT_TRUE(f.awaits_answer(2));
  EXPECT_FALSE(f.awaits_answer(0));  // answered already
  f.answered(2, 3.0, nullptr);  // a timeout or crash is the slot's first answer too
  EXPECT_FALSE(f.awaits_answer(2));
  EXPECT_TRUE(f.all_answered());
  EXPECT_NE(f.line().find("(2 of 3 workers)"), std::string::npos) << f.line();
}

TEST(FirstResults, MediansAndLargestOfEachPhase) {
  FirstResults f(3);
  f.space(4.0, 4.25);
  f.space(9.0, 9.5);  // only the first space request counts
  const double ready[] = {3.0, 3.5, 5.0}, sent[] = {4.5, 4.6, 5.1}, answered[] = {9.0, 8.0, 10.0};
  const json each[] = {
      {{"worker_s", 4.0}, {"module_s", 0.1}, {"compile_s", 0.5}, {"check_s", 3.0}, {"bench_s", 0.3},
       {"setup_wait_s", 2.5}, {"plan_s", 2.0}, {"inputs_s", 0.2}, {"reference_s", 0.1},
       {"lock_wait_s", {{"setup", 0.05}, {"bench", 0.2}}},
       {"warm_up", {{"context_s", 1.5}, {"compile_s", 0.4}, {"compile_wait_s", 0.3}, {"kernels_s", 0.2}, {"wait_s", 0.0}}},
       {"plan_import", {{"import_s", 3.0}, {"wait_s", 1.5}}}},
      {{"worker_s", 3.0}, {"module_s", 0.1}, {"compile_s", 0.5}, {"check_s", 2.0}, {"bench_s", 0.2},
       {"plan_s", 1.0}, {"lock_wait_s", {{"bench", 0.1}}},
       {"warm_up", {{"context_s", 1.0}, {"compile_s", 0.2}, {"compile_wait_s", 0.0}, {"kernels_s", 0.1}, {"wait_s", 0.1}}}},
      {{"worker_s", 5.0}, {"module_s", 0.2}, {"compile_s", 1.0}, {"check_s", 3.0}, {"bench_s", 0.5}, {"util_s", 0.1},
       {"plan_s", 2.5}, {"lock_wait_s", {{"setup", 0.1}, {"check", 0.01}, {"bench", 0.5}}},
       {"warm_up", {{"context_s", 2.0}, {"compile_s", 0.3}, {"kernels_s", 0.3}, {"wait_s", 0.2}}},
       {"plan_import", {{"import_s", 4.0}, {"wait_s", 2.0}}}}};
  for (size_t i = 0; i < 3; ++i) {
    f.ready(i, ready[i]);
    f.sent(i, sent[i]);
    f.sent(i, 100.0);  // a later evaluation of the slot is not its first
    const Timings t = timings(each[i]);
    f.answered(i, answered[i], &t);
    f.answered(i, 200.0, nullptr);
  }
  ASSERT_TRUE(f.all_answered());
  const std::string line = f.line();
  auto has = [&line](const std::string& part) {
    EXPECT_NE(line.find(part), std::string::npos) << "'" << part << "' not in: " << line;
  };
  has("first results: the first after 8.0 s, the last worker's first after 10.0 s (3 of 3 workers)");
  has("the first space answer at 4.2 s (0.25 s)");
  has("hello at 3.50 (5.00), sent at 4.60 (5.10), answered at 9.00 (10.00)");
  has("in the worker 4.00 (5.00): module 0.10 (0.20), compile 0.50 (1.00), warm-up wait 0.10 (0.20), "
      "check 3.00 (3.00) [waiting for the set-up 0.00 (2.50)], bench 0.30 (0.50), utilisation read 0.00 (0.10)");
  has("the job's set-up (beside the compile, else in the check): plan 2.00 (2.50), inputs 0.00 (0.20), "
      "reference 0.00 (0.10)");
  // the rest: worker_s less module, compile, warm-up wait, check, bench and the utilisation read: 0.1, 0.1, 0.0
  has("rest 0.10 (0.10)");
  // lock waits a slot did not report count as none
  has("GPU lock waits setup 0.05 (0.10), check 0.00 (0.01), bench 0.20 (0.50)");
  // the third worker reported no compile wait: it counts as none
  has("GPU warm-up context 1.50 (2.00), compile 0.30 (0.40), of which waiting for another worker's 0.00 (0.30), "
      "kernels 0.20 (0.30)");
  has("fake-tensor import 3.00 (4.00), its wait 1.50 (2.00)");
  EXPECT_EQ(line.find("memory wait"), std::string::npos) << "no slot waited for memory: " << line;
}

TEST(FirstResults, ACpuRunHasNoGpuFigures) {
  FirstResults f(1);
  f.ready(0, 1.0);
  f.sent(0, 1.5);
  const Timings t = timings({{"worker_s", 0.5}, {"compile_s", 0.3}, {"check_s", 0.2}, {"bench_s", 0.0}});
  f.answered(0, 2.0, &t);
  const std::string line = f.line();
  EXPECT_EQ(line.find("warm-up"), std::string::npos) << line;
  EXPECT_EQ(line.find("GPU lock"), std::string::npos) << line;
  EXPECT_NE(line.find("in the worker 0.50 (0.50): compile 0.30 (0.30), check 0.20 (0.20), bench 0.00 (0.00), "
                      "rest 0.00 (0.00)"),
            std::string::npos)
      << line;
}

// One evaluate answer, checked and typed once (evaluate/reply.h), handed to
// every consumer as the explorer hands it (explorer.cpp, pump): the driver's
// utilisation, the GPU spans and kernel seconds, the first-results line, and
// what the scheduler records (Scheduler::record: the typed result's `raw`
// object). Read back as the catalog reads a stored result, the recorded view
// gives the same line, and the GPU's samples are in none of the candidate's views.
TEST(FirstResults, EveryConsumerOfAnAnswerSeesTheSameAnswer) {
  const json sent_result = {
      {"status", "ok"},
      {"latency", {{"median_ms", 2.0}, {"mean_ms", 2.0}, {"runs", 10}}},
      {"timings",
       {{"compile_s", 0.5}, {"check_s", 0.75}, {"bench_s", 0.25}, {"worker_s", 2.0},
        {"gpu_spans", {{100.0, 100.5, "check"}, {100.5, 101.0, "bench"}}},
        {"util_samples", {{100.0, 50}, {100.5, 100}}}}}};
  kiln::WorkerOutcome o;
  o.reply = {{"id", 7}, {"ok", true}, {"result", sent_result}};
  kiln::CheckedAnswer a = kiln::check_answer("evaluate", std::move(o));
  ASSERT_EQ(a.outcome.kind, kiln::WorkerOutcome::Kind::kReply) << a.outcome.detail;

  kiln::DriverUtilisation util(1);
  util.take(0, a);
  std::vector<std::pair<double, double>> all, bench;
  kiln::append_gpu_spans(a.typed.result, all, &bench);
  const double kernel_s = kiln::device_kernel_seconds(a.typed.result);
  FirstResults seen(1);
  seen.sent(0, 1.0);
  seen.answered(0, 3.0, &a.typed.result.timings);

  const kiln::EvaluationResult recorded = read_evaluation_result(a.typed.result.raw);
  FirstResults from_record(1);
  from_record.sent(0, 1.0);
  from_record.answered(0, 3.0, &recorded.timings);
  EXPECT_EQ(seen.line(), from_record.line());
  EXPECT_NE(seen.line().find("check 0.75 (0.75)"), std::string::npos) << seen.line();
  EXPECT_EQ(kiln::to_string(recorded.status), sent_result["status"].get<std::string>());

  EXPECT_EQ(all, (std::vector<std::pair<double, double>>{{100.0, 100.5}, {100.5, 101.0}}));
  EXPECT_EQ(bench, (std::vector<std::pair<double, double>>{{100.5, 101.0}}));
  EXPECT_DOUBLE_EQ(kernel_s, 2.0 * 10 / 1000);  // mean_ms x runs

  // The samples describe the GPU: its figure has them, the candidate's record not.
  ASSERT_TRUE(util.figure(0, 99, 102));
  EXPECT_EQ(util.figure(0, 99, 102)->samples, 2u);
  EXPECT_TRUE(recorded.timings.util_samples.empty());
  json without_samples = sent_result;
  without_samples["timings"].erase("util_samples");
  EXPECT_EQ(a.typed.result.raw, without_samples);
  EXPECT_EQ(a.outcome.reply["result"], without_samples);
}
