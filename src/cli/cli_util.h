// Helpers shared by the `kiln` subcommands (one file per subcommand group).
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "catalog/job_key.h"
#include "search/estimate.h"
#include "evaluate/worker_process.h"
#include "explore/explorer.h"
#include "explore/scheduling_flags.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/home.h"
#include "manifest/manifest.h"

namespace kiln::cli {

namespace po = boost::program_options;
using nlohmann::json;

// Thrown for usage errors; main prints it with the command's help.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --lease, --bench-cutoff and --ready-per-slot into a run's options (explore/scheduling_flags.h).
inline void set_scheduling_flags(RunOptions& o, const po::variables_map& vm) {
  const SchedulingFlags f = read_scheduling_flags(vm);
  if (auto e = scheduling_flags_error(f)) throw UsageError(*e);
  o.scheduling = f;
}

inline std::string default_catalog() {
  if (const char* env = std::getenv("KILN_CATALOG"); env && *env) return env;
  return "kiln.db";
}

inline void add_common(po::options_description& d, bool json_flag) {
  d.add_options()("help,h", "show this help")(
      "catalog", po::value<std::string>()->default_value(default_catalog()),
      "catalog file (default: $KILN_CATALOG, else ./kiln.db)");
  if (json_flag) d.add_options()("json", "machine-readable JSON on stdout");
}

// Parses args; returns nullopt (after printing help) when --help was given.
inline std::optional<po::variables_map> parse(const Args& args, const po::options_description& d,
                                       const po::positional_options_description* pos,
                                       const std::string& usage) {
  po::variables_map vm;
  try {
    auto parser = po::command_line_parser(args).options(d);
    if (pos) parser.positional(*pos);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << d << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\n\n" + usage + "\n\n" +
                     [&] { std::ostringstream os; os << d; return os.str(); }());
  }
  return vm;
}

inline Knowledge load_knowledge() {
  try {
    return Knowledge::load(kiln_home());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot load Kiln's knowledge base under ") +
                             kiln_home().string() + " (set KILN_HOME to the Kiln tree): " + e.what());
  }
}

inline Catalog open_catalog(const po::variables_map& vm, bool read_only) {
  return Catalog::open(vm["catalog"].as<std::string>(), read_only);
}

// Runs fn, mapping exceptions to exit codes and messages.
template <typename Fn>
inline int guarded(const char* cmd, Fn fn) {
  try {
    return fn();
  } catch (const UsageError& e) {
    std::cerr << "kiln " << cmd << ": " << e.what() << "\n";
    return 2;
  } catch (const ManifestError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kiln " << cmd << ": " << e.what() << "\n";
    return 1;
  }
}

inline std::string shape_text(const json& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : "x") + std::to_string(d.get<long long>());
  return s;
}

inline std::string config_text(const json& config) {
  std::string s;
  for (const auto& [k, v] : config.items()) s += (s.empty() ? "" : " ") + k + "=" + cell_text(v);
  return s;
}

// A nullable catalog value as JSON: null when unset.
template <class T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}


// The worker's hello on the CPU: Python, torch and Triton versions and the
// template versions that go into job keys. Throws when the evaluator cannot
// start (a missing package: the caller exits 3).
// Starts one evaluator: its hello (template versions, Triton version), with
// "job_traffic" added: the minimum traffic of each of m's jobs, in m.jobs'
// order (null where the library cannot size one), for the claim order.
inline json worker_hello(const Manifest& m, const Knowledge& knowledge) {
  json specs = json::array();
  for (const JobSpec& js : m.jobs) {
    const Target* t = knowledge.targets.find(js.target);
    specs.push_back(t ? js.to_json(*t) : json::object());
  }
  std::vector<json> replies =
      call_worker(evaluator_options("cpu", {}, false),
                  {{{"method", "hello"}}, {{"method", "traffic"}, {"jobs", specs}}}, std::chrono::seconds(180));
  if (!replies[0].value("ok", false))
    throw std::runtime_error("worker hello failed: " + replies[0].value("error", ""));
  json hello = replies[0]["result"];
  const bool sized = replies[1].value("ok", false);
  hello["job_traffic"] = sized ? replies[1]["result"].value("traffic", json::array()) : json::array();
  hello["job_space"] = sized ? replies[1]["result"].value("space", json::array()) : json::array();
  return hello;
}

// A validated manifest's jobs as catalog rows, keyed by content (spec,
// template version, Triton version); duplicate keys are kept once. The claim
// order: each job's compile estimate (compile_est_s: its candidates -- the
// space's size from the hello's job_space, at most max_candidates -- times the
// seconds one takes to compile: `compile_history` for the operator on the arch
// (Catalog::compile_seconds), else the operator's compile_s in
// kernels/operators.yaml), then its priority (its roofline time on its target,
// from the hello's job_traffic); 0 where unknown.
inline std::vector<NewJob> expand_jobs(
    const Manifest& m, const Knowledge& knowledge, const json& hello,
    const std::map<std::pair<std::string, std::string>, double>& compile_history = {}) {
  const json templates = hello.value("templates", json::object());
  const std::string triton = hello.value("triton", "");
  const json traffic = hello.value("job_traffic", json::array());
  const json space = hello.value("job_space", json::array());
  std::vector<NewJob> jobs;
  std::set<std::string> seen;
  for (size_t i = 0; i < m.jobs.size(); ++i) {
    const JobSpec& js = m.jobs[i];
    const Target* t = knowledge.targets.find(js.target);
    const OperatorSpec* op = knowledge.operators.find(js.op);
    NewJob j;
    j.op = js.op;
    j.dtype = js.dtype;
    j.target = t->name;
    j.arch = t->arch;
    j.shape = js.shape;
    j.params = js.params;
    j.spec = js.to_json(*t);
    j.key = job_key(j.spec, templates.value(op ? op->module : std::string(), ""), triton);
    if (i < traffic.size() && traffic[i].is_object()) {
      try {
        j.priority = roofline_ms(*t, js.dtype, Traffic::from_json(traffic[i]));
      } catch (const std::exception&) {
        j.priority = 0;  // a target without bandwidth / compute units: unsized
      }
    }
    if (op && i < space.size() && space[i].is_number_integer()) {
      const double candidates = std::min<double>(space[i].get<double>(), js.explore.max_candidates);
      const auto h = compile_history.find({j.op, j.arch});
      j.compile_est_s = candidates * (h != compile_history.end() ? h->second : op->compile_s);
    }
    if (seen.insert(j.key).second) jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace kiln::cli
