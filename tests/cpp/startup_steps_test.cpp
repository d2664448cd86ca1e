// The evaluator's start-up steps, as hello reports them and the engines log them.
#include "evaluate/startup_steps.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(StartupSteps, TakesTheNumbersOfHellosStartup) {
  const auto hello = nlohmann::json::parse(
      R"({"torch": "2.11", "startup": {"process_s": 0.2, "imports_s": 4, "context_s": null, "x": "y"}})");
  const auto steps = startup_steps(hello);
  EXPECT_EQ(steps, (std::map<std::string, double>{{"process_s", 0.2}, {"imports_s", 4.0}}));
  EXPECT_TRUE(startup_steps(nlohmann::json::parse(R"({"torch": "2.11"})")).empty());
  EXPECT_TRUE(startup_steps(nlohmann::json::parse(R"({"startup": [1, 2]})")).empty());
  EXPECT_TRUE(startup_steps(nlohmann::json()).empty());
}

TEST(StartupSteps, DescribesThemInTheOrderTheyHappen) {
  // not the map's (alphabetical) order: process, imports, context, compile, kernels, library, hello
  const std::map<std::string, double> steps = {{"compile_s", 1.234}, {"imports_s", 4.5}, {"kernels_s", 0.6},
                                               {"library_s", 0.03}, {"process_s", 0.07}, {"context_s", 0.5},
                                               {"hello_s", 0.12}, {"zz_s", 1}};
  EXPECT_EQ(describe_startup(steps),
            "process 0.07 s, imports 4.50 s, context 0.50 s, compile 1.23 s, kernels 0.60 s, "
            "library 0.03 s, hello 0.12 s, zz 1.00 s");
  EXPECT_EQ(describe_startup({}), "");
}

}  // namespace
}  // namespace kiln
