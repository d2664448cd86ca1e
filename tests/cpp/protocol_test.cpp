// The engine's mirror of the worker protocol (src/evaluate/protocol.h) agrees
// with its schema, src/evaluate/protocol.json: the same methods and statuses in
// the same order, and every member EvaluationResult reads is in the schema with
// the type it reads. tests/python/test_protocol_schema.py checks the worker's side.
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "evaluate/protocol.h"

using namespace kiln;
using nlohmann::json;

namespace {

json schema() {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/src/evaluate/protocol.json");
  EXPECT_TRUE(in) << "cannot read src/evaluate/protocol.json";
  return json::parse(in);
}

// Follows "$ref": "#/$defs/NAME" and an anyOf of [X, {"type": "null"}] to X.
const json& resolve(const json& root, const json& node) {
  if (auto r = node.find("$ref"); r != node.end()) {
    const std::string ref = r->get<std::string>();
    const std::string prefix = "#/$defs/";
    EXPECT_EQ(ref.rfind(prefix, 0), 0u) << ref;
    return resolve(root, root["$defs"].at(ref.substr(prefix.size())));
  }
  if (auto any = node.find("anyOf"); any != node.end())
    for (const auto& alt : *any)
      if (!(alt.contains("type") && alt["type"] == "null")) return resolve(root, alt);
  return node;
}

std::set<std::string> types_of(const json& node) {
  std::set<std::string> out;
  if (!node.contains("type")) return out;
  if (node["type"].is_string()) out.insert(node["type"].get<std::string>());
  else
    for (const auto& t : node["type"]) out.insert(t.get<std::string>());
  return out;
}

}  // namespace

TEST(Protocol, MethodsAreTheSchemas) {
  const json s = schema();
  EXPECT_EQ(s["$defs"]["method"]["enum"].get<std::vector<std::string>>(), method_names());
  // Every method has its request and result described.
  for (const auto& m : method_names()) {
    ASSERT_TRUE(s["methods"].contains(m)) << m;
    EXPECT_TRUE(s["methods"][m].contains("request")) << m;
    EXPECT_TRUE(s["methods"][m].contains("result")) << m;
  }
  EXPECT_EQ(s["methods"].size(), method_names().size());
  EXPECT_EQ(to_string(Method::kTraffic), "traffic");
  EXPECT_EQ(to_string(Method::kConfirm), "confirm");
}

TEST(Protocol, StatusesAreTheSchemas) {
  const json s = schema();
  EXPECT_EQ(s["$defs"]["status"]["enum"].get<std::vector<std::string>>(), status_names());
  for (const auto& n : status_names()) {
    auto st = parse_status(n);
    ASSERT_TRUE(st) << n;
    EXPECT_EQ(to_string(*st), n);
  }
  EXPECT_FALSE(parse_status("fine"));
  EXPECT_EQ(to_string(EvalStatus::kResourceError), "resource_error");
}

TEST(Protocol, EveryMemberReadIsInTheSchemaWithItsType) {
  const json s = schema();
  const json& result = resolve(s, s["methods"]["evaluate"]["result"]);
  const auto& fields = evaluation_result_fields();
  ASSERT_GT(fields.size(), 30u);
  for (const auto& [path, type] : fields) {
    const json* node = &result;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const json& obj = resolve(s, *node);
      ASSERT_TRUE(obj.contains("properties") && obj["properties"].contains(key))
          << path << ": '" << key << "' is not in protocol.json";
      node = &obj["properties"][key];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    const json& leaf = resolve(s, *node);
    const std::set<std::string> types = types_of(leaf);
    if (path == "status") {
      EXPECT_TRUE(leaf.contains("enum")) << path;
      continue;
    }
    // An integer the engine reads may be a JSON number the schema calls integer.
    const bool ok = types.count(type) || (type == "number" && types.count("integer")) ||
                    (type == "integer" && types.count("integer"));
    EXPECT_TRUE(ok) << path << ": read as " << type << ", the schema says " << leaf.dump();
  }
}

TEST(Protocol, ReadingIsTyped) {
  const json r = {{"status", "incorrect"},
                  {"message", "max error 3 at [1]"},
                  {"correctness", {{"seeds", 3}, {"max_abs_err", 3.0}, {"passed", false}}},
                  {"latency", nullptr},
                  {"artifact", {{"kind", "hsaco"}, {"registers", 40.0}, {"occupancy", 7.5}, {"grid", {4, 2, 1}}}},
                  {"timings", {{"compile_s", 0.5}, {"gpu_spans", {{1.0, 1.5, "check"}, "junk"}}}}};
  const EvaluationResult t = read_evaluation_result(r);
  EXPECT_EQ(t.status, EvalStatus::kIncorrect);
  EXPECT_EQ(t.message, "max error 3 at [1]");
  ASSERT_TRUE(t.correctness);
  EXPECT_EQ(t.correctness->seeds, 3);
  EXPECT_EQ(t.correctness->passed, false);
  EXPECT_FALSE(t.latency);
  ASSERT_TRUE(t.artifact);
  EXPECT_EQ(t.artifact->registers, 40);
  EXPECT_EQ(t.artifact->occupancy, 7.5);
  EXPECT_EQ(t.artifact->grid, (std::vector<long long>{4, 2, 1}));
  EXPECT_EQ(t.timings.compile_s, 0.5);
  ASSERT_EQ(t.timings.gpu_spans.size(), 1u);
  EXPECT_EQ(t.timings.gpu_spans[0].kind, "check");
  EXPECT_EQ(t.raw, r);
  // The whole answer is accepted too; a stored {} (a timeout) reads as crash.
  EXPECT_EQ(read_evaluation_result({{"id", 1}, {"ok", true}, {"result", r}}).status, EvalStatus::kIncorrect);
  EXPECT_EQ(read_evaluation_result(json::object()).status, EvalStatus::kCrash);
  EXPECT_EQ(read_evaluation_result(nullptr).raw, json::object());
}

TEST(Protocol, ReadsTheSetUpPhases) {
  const json r = {{"status", "ok"},
                  {"timings", {{"plan_s", 2.5}, {"worker_s", "slow"}, {"setup_wait_s", 1.0},
                               {"lock_wait_s", {{"setup", 0.25}, {"bench", 1}, {"check", "x"}}},
                               {"warm_up", {{"context_s", 1.5}, {"wait_s", 0.5}, {"kernels_s", nullptr}}},
                               {"plan_import", {{"import_s", 3.0}, {"error", "ImportError: no"}}}}}};
  const Timings t = read_evaluation_result(r).timings;
  EXPECT_EQ(t.plan_s, 2.5);
  EXPECT_FALSE(t.worker_s);  // not a number: left unset
  EXPECT_EQ(t.setup_wait_s, 1.0);
  EXPECT_FALSE(t.inputs_s);
  EXPECT_EQ(t.lock_wait_s, (std::map<std::string, double>{{"setup", 0.25}, {"bench", 1.0}}));
  ASSERT_TRUE(t.warm_up);
  EXPECT_EQ(t.warm_up->context_s, 1.5);
  EXPECT_EQ(t.warm_up->wait_s, 0.5);
  EXPECT_FALSE(t.warm_up->kernels_s);
  ASSERT_TRUE(t.plan_import);
  EXPECT_EQ(t.plan_import->import_s, 3.0);
  EXPECT_FALSE(t.plan_import->wait_s);
  EXPECT_FALSE(read_evaluation_result(json{{"status", "ok"}, {"timings", {{"warm_up", 1}}}}).timings.warm_up);
}
