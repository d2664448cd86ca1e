#include "generate/llm_generator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "catalog/recent_bests.h"
#include "common/hash.h"
#include "common/home.h"
#include "generate/llm_client.h"
#include "generate/template_generator.h"
#include "reflect/reflect.h"

namespace kiln {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string fmt(double v, int precision = 3) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << v;
  return os.str();
}

std::string read_or_empty(const fs::path& p) {
  try {
    return read_file(p);
  } catch (const std::exception&) {
    return "";
  }
}

// The problem a library operator states: its module's docstring and reference().
std::string operator_problem(const std::string& op, const std::string& description, const std::string& module,
                             const fs::path& kernels_dir) {
  std::string text = "operator " + op + "\n" + description + "\n";
  if (!module.empty()) text += retrieval::module_problem_text(read_or_empty(kernels_dir / (module + ".py")));
  return text;
}

}  // namespace

LlmSettings resolve_llm_settings(const json& j, std::string* api_key) {
  LlmSettings s;
  if (j.is_object()) {
    s.base_url = j.value("base_url", s.base_url);
    s.model = j.value("model", s.model);
    s.api_key_env = j.value("api_key_env", s.api_key_env);
    s.temperature = j.value("temperature", s.temperature);
    s.max_tokens = j.value("max_tokens", s.max_tokens);
    s.timeout_s = j.value("timeout_s", s.timeout_s);
    s.max_retries = j.value("max_retries", s.max_retries);
    s.max_concurrent = j.value("max_concurrent", s.max_concurrent);
    s.retrieval_threshold = j.value("retrieval_threshold", s.retrieval_threshold);
    s.rounds = j.value("rounds", s.rounds);
    s.instance_timeout_s = j.value("instance_timeout_s", s.instance_timeout_s);
  }
  if (auto v = env("KILN_LLM_BASE_URL"); !v.empty()) s.base_url = v;
  while (!s.base_url.empty() && s.base_url.back() == '/') s.base_url.pop_back();
  if (auto v = env("KILN_LLM_MODEL"); !v.empty()) s.model = v;
  if (api_key) {
    *api_key = env("KILN_LLM_API_KEY");
    if (api_key->empty() && !s.api_key_env.empty()) *api_key = env(s.api_key_env.c_str());
  }
  return s;
}

std::vector<retrieval::Document> build_corpus(const fs::path& kernels_dir, const OperatorRegistry& operators,
                                              Catalog* catalog, long long exclude_job) {
  std::vector<retrieval::Document> docs;
  // 1. The template library.
  std::map<std::string, std::vector<const OperatorSpec*>> served;
  for (const auto& name : operators.names())
    if (const OperatorSpec* op = operators.find(name)) served[op->module].push_back(op);
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kernels_dir, ec))
    if (e.path().extension() == ".py") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string module = f.stem().string();
    if (!served.count(module)) continue;  // __init__, common, helpers
    const std::string src = read_or_empty(f);
    if (src.empty()) continue;
    retrieval::Document d;
    d.id = "kernels/" + f.filename().string();
    d.kind = "template";
    for (const OperatorSpec* op : served[module]) d.match_text += "operator " + op->name + "\n" + op->description + "\n";
    d.match_text += retrieval::module_problem_text(src);
    d.example = src;
    d.meta = {{"module", module}};
    docs.push_back(std::move(d));
  }
  // 2. The catalog's best kernels of other jobs (the most recent 200).
  if (!catalog) return docs;
  std::set<std::string> seen;
  for (const RecentBest& b : recent_bests(*catalog, exclude_job)) {
    const long long job_id = b.job_id;
    const std::string &op = b.op, &target = b.target, &dtype = b.dtype;
    const json& spec = b.spec;
    const long long cand = b.candidate_id;
    const std::string &generator = b.generator, &module = b.template_name;
    const std::string config = b.config.dump();
    const std::string& source = b.source;
    const double value_ms = b.value_ms;
    const std::string& basis = b.basis;
    retrieval::Document d;
    d.kind = "catalog";
    d.id = "catalog: best of job " + std::to_string(job_id) + " (" + op + " " + dtype + " " + target +
           ", candidate " + std::to_string(cand) + ")";
    const std::string description = spec.is_object() ? spec.value("description", std::string()) : "";
    if (spec.is_object() && spec.contains("reference") && spec["reference"].is_object())
      d.match_text = spec["reference"].value("source", std::string()) + "\n" + description;
    else {
      const OperatorSpec* o = operators.find(op);
      d.match_text = operator_problem(op, o ? o->description : description, o ? o->module : module, kernels_dir);
    }
    if (generator == "llm") {
      d.example = source;
    } else {
      d.example = read_or_empty(kernels_dir / (module + ".py"));
      d.meta["config"] = json::parse(config, nullptr, false);
    }
    if (d.example.empty()) continue;
    if (!seen.insert(sha256_hex(d.match_text + "\n--\n" + d.example + "\n--\n" + config)).second) continue;
    d.meta["job_id"] = job_id;
    d.meta["candidate_id"] = cand;
    d.meta["generator"] = generator;
    d.meta["value_ms"] = value_ms;
    d.meta["basis"] = basis;
    docs.push_back(std::move(d));
  }
  return docs;
}

std::string retrieval_query(const JobContext& job, const fs::path& kernels_dir) {
  const json& spec = job.row.spec;
  const std::string description = spec.value("description", std::string());
  if (job.is_reference()) return spec["reference"].value("source", std::string()) + "\n" + description;
  const OperatorSpec* op = job.knowledge ? job.knowledge->operators.find(job.row.op) : nullptr;
  return operator_problem(job.row.op, op ? op->description + "\n" + description : description, job.module,
                          kernels_dir);
}

// ---- the generator ----------------------------------------------------------------

struct LlmGenerator::State {
  explicit State(boost::asio::io_context& i) : io(i) {}
  boost::asio::io_context& io;
  LlmSettings settings;
  std::string api_key;
  std::shared_ptr<llm::Client> client;
  Catalog* catalog = nullptr;
  metrics::RunMetrics* metrics = nullptr;
  long long job_id = 0;
  std::optional<prompt::Example> example;
  json retrieval;                                  // what retrieval found (stored with each call)
  std::map<int, Clock::time_point> started;        // per instance, in this process
  std::set<int> stopped;                           // instances that failed a call
};

LlmGenerator::LlmGenerator(const JobContext& job, boost::asio::io_context& io)
    : state_(std::make_shared<State>(io)) {
  State& s = *state_;
  s.settings = resolve_llm_settings(job.row.spec.value("llm", json::object()), &s.api_key);
  s.catalog = job.catalog;
  s.metrics = job.metrics;
  s.job_id = job.row.id;
  llm::ClientSettings cs;
  cs.base_url = s.settings.base_url;
  cs.api_key = s.api_key;
  cs.timeout_s = s.settings.timeout_s;
  cs.max_retries = s.settings.max_retries;
  cs.max_concurrent = s.settings.max_concurrent;
  s.client = llm::Client::create(io, cs);
}

LlmGenerator::~LlmGenerator() = default;

void LlmGenerator::retrieve(const JobContext& job, std::vector<std::string>& notes) {
  State& s = *state_;
  const fs::path kernels = kiln_home() / "kernels";
  static const OperatorRegistry no_operators;
  std::vector<retrieval::Document> docs =
      build_corpus(kernels, job.knowledge ? job.knowledge->operators : no_operators, job.catalog, job.row.id);
  if (docs.empty()) {
    s.retrieval = {{"documents", 0}, {"threshold", s.settings.retrieval_threshold}, {"used", false}};
    return;
  }
  retrieval::Bm25Index index(std::move(docs));
  const auto ranked = index.rank(retrieval_query(job, kernels));
  const retrieval::Match best = ranked.front();
  const retrieval::Document& d = index.docs()[best.index];
  const bool used = retrieval::above(best.score, s.settings.retrieval_threshold);
  s.retrieval = {{"best", d.id}, {"kind", d.kind}, {"score", best.score},
                 {"threshold", s.settings.retrieval_threshold}, {"used", used},
                 {"documents", index.docs().size()}};
  if (!used) {
    notes.push_back("retrieval: best match " + d.id + " at " + fmt(best.score) + " < " +
                    fmt(s.settings.retrieval_threshold, 2) + ": no 1-shot example");
    return;
  }
  // The job's own library template: it serves the job, no LLM needed.
  if (d.kind == "template" && !job.is_reference() && !job.module.empty() &&
      d.meta.value("module", std::string()) == job.module && !job.space.empty()) {
    const std::string why = "served by the template generator: " + d.id + " matches at " + fmt(best.score) +
                            " >= " + fmt(s.settings.retrieval_threshold, 2);
    notes.push_back("retrieval: " + why + " (no LLM calls)");
    s.retrieval["served_by_template"] = d.meta.value("module", std::string());
    if (s.catalog) {
      try {
        LlmCallIn c;
        c.job_id = s.job_id;
        c.model = s.settings.model;
        c.url = s.client->url();
        c.prompt = "";
        c.status = "skipped";
        c.error = why;
        c.attempts = 0;
        c.retrieval = s.retrieval;
        s.catalog->record_llm_call(c);
      } catch (const std::exception& e) {
        notes.push_back("error: catalog: " + std::string(e.what()));
      }
    }
    template_ = std::make_unique<TemplateGenerator>();
    return;
  }
  prompt::Example ex;
  ex.id = d.id;
  ex.score = best.score;
  ex.code = d.example;
  if (d.meta.contains("config") && !d.meta["config"].is_null()) ex.note = "It ran with config " + d.meta["config"].dump() + ".";
  if (d.meta.contains("value_ms"))
    ex.note += (ex.note.empty() ? "" : " ") + std::string("Its latency: ") + fmt(d.meta["value_ms"].get<double>(), 4) +
               " ms (" + d.meta.value("basis", std::string()) + ").";
  s.example = ex;
  notes.push_back("retrieval: 1-shot example " + d.id + " (similarity " + fmt(best.score) + ")");
}

void LlmGenerator::propose(const JobContext& job, const std::vector<Outcome>& history, Done done) {
  if (template_) return template_->propose(job, history, std::move(done));
  std::vector<std::string> notes;
  if (!retrieved_) {
    retrieved_ = true;
    retrieve(job, notes);
    if (template_) {
      template_->propose(job, history, [done = std::move(done), notes](std::vector<Proposal> p,
                                                                       std::vector<std::string> n) {
        n.insert(n.begin(), notes.begin(), notes.end());
        done(std::move(p), std::move(n));
      });
      return;
    }
  }
  auto st = state_;
  State& s = *st;
  if (s.settings.model.empty()) {
    notes.push_back("llm-unavailable: this job needs an LLM and none is configured: no LLM model: set "
                    "KILN_LLM_BASE_URL and KILN_LLM_MODEL (or llm.base_url / llm.model in the manifest) (" +
                    s.client->url() + ")");
    done({}, notes);
    return;
  }

  // The knowledge and the task, common to every request of this round.
  prompt::Inputs base;
  const json& spec = job.row.spec;
  base.op = job.row.op;
  base.description = spec.value("description", std::string());
  base.is_reference = job.is_reference();
  if (base.is_reference) {
    base.reference_source = spec["reference"].value("source", std::string());
    base.reference_path = spec["reference"].value("path", std::string());
  } else {
    const OperatorSpec* op = job.knowledge ? job.knowledge->operators.find(job.row.op) : nullptr;
    base.reference_source = operator_problem(job.row.op, op ? op->description : "", job.module, kiln_home() / "kernels");
  }
  base.shape = job.row.shape;
  base.dtype = job.row.dtype;
  base.params = job.row.params;
  base.reference_info = job.reference_info;
  base.target = job.target;
  std::vector<std::string> asked;
  for (const auto& c : spec.value("constraints", json::array())) asked.push_back(c.get<std::string>());
  if (job.knowledge)
    base.principles = prompt::select_principles(job.knowledge->principles, asked, job.target ? job.target->backend : "");
  base.example = s.example;

  std::optional<double> best_so_far, reference_ms;
  for (const Outcome& o : history)
    if (o.status == "ok" && o.score_ms && (!best_so_far || *o.score_ms < *best_so_far)) best_so_far = o.score_ms;
  if (job.measured && job.reference_info.is_object()) {
    for (const char* k : {"eager_ms", "reference_ms"})
      if (job.reference_info.contains(k) && job.reference_info[k].is_number()) reference_ms = job.reference_info[k].get<double>();
    // The worker's eager benchmark (evaluate/protocol.h).
    const std::optional<Latency> lat = read_latency(job.reference_info.value("latency", json()));
    if (!reference_ms && lat && lat->median_ms) reference_ms = lat->median_ms;
  }
  base.best_so_far_ms = best_so_far;

  // Which instances ask, for which round.
  const int instances = std::max(1, job.explore().value("instances", 1));
  const unsigned long long seed = job.explore().value("seed", 0ULL);
  struct Ask {
    prompt::Inputs in;
    std::optional<long long> parent;
  };
  std::vector<Ask> asks;
  for (int i = 0; i < instances; ++i) {
    if (s.stopped.count(i)) continue;
    std::vector<const Outcome*> mine;
    for (const Outcome& o : history)
      if (o.candidate.generator == "llm" && o.candidate.instance == i) mine.push_back(&o);
    std::stable_sort(mine.begin(), mine.end(),
                     [](const Outcome* a, const Outcome* b) { return a->candidate.round < b->candidate.round; });
    Ask a;
    a.in = base;
    a.in.instance = i;
    if (!mine.empty()) {
      const Outcome& last = *mine.back();
      if (last.candidate.round + 1 >= s.settings.rounds) continue;  // rounds spent
      auto t0 = s.started.find(i);
      if (t0 != s.started.end() &&
          std::chrono::duration<double>(Clock::now() - t0->second).count() >= s.settings.instance_timeout_s) {
        notes.push_back("llm: instance " + std::to_string(i) + " stops: its " + fmt(s.settings.instance_timeout_s, 0) +
                        " s are spent");
        s.stopped.insert(i);
        continue;
      }
      const reflect::Diagnosis d = reflect::diagnose(last, best_so_far, reference_ms);
      if (d.kind == "ok") continue;  // correct and nothing to improve on
      for (const Outcome* o : mine) {
        const std::string c = reflect::diagnose(*o, best_so_far, reference_ms).constraint;
        if (!c.empty() && std::find(a.in.constraints.begin(), a.in.constraints.end(), c) == a.in.constraints.end())
          a.in.constraints.push_back(c);
      }
      a.in.round = last.candidate.round + 1;
      a.in.previous = prompt::Attempt{last.candidate.round, last.candidate.source.value_or(""), d};
      a.parent = last.candidate.id;
    }
    asks.push_back(std::move(a));
  }
  if (asks.empty()) {
    done({}, notes);
    return;
  }

  struct Gather {
    int pending = 0;
    std::vector<Proposal> proposals;
    std::vector<std::string> notes;
    std::string fatal;
    Done done;
  };
  auto g = std::make_shared<Gather>();
  g->pending = static_cast<int>(asks.size());
  g->notes = notes;
  g->done = std::move(done);
  for (Ask& a : asks) {
    const int i = a.in.instance, round = a.in.round;
    if (!s.started.count(i)) s.started[i] = Clock::now();
    const double left =
        s.settings.instance_timeout_s - std::chrono::duration<double>(Clock::now() - s.started[i]).count();
    llm::ChatRequest req;
    req.model = s.settings.model;
    req.messages = prompt::render_messages(a.in);
    req.temperature = std::min(2.0, s.settings.temperature + 0.1 * i);
    req.max_tokens = s.settings.max_tokens;
    req.seed = static_cast<long long>(seed + static_cast<unsigned long long>(i));
    g->notes.push_back("llm: instance " + std::to_string(i) + " round " + std::to_string(round) + ": asking " +
                       s.settings.model + " at " + s.client->url() +
                       (a.in.previous ? " to repair candidate " + std::to_string(*a.parent) + " (" +
                                            a.in.previous->diagnosis.kind + ")"
                                      : std::string()));
    const std::optional<long long> parent = a.parent;
    s.client->chat(req, std::max(0.1, left), [st, g, req, i, round, parent](llm::ChatResult r) {
      State& s = *st;
      if (s.metrics) s.metrics->llm_call(req.model, r.ok ? "ok" : "error", r.prompt_tokens, r.completion_tokens, r.latency_s);
      std::optional<long long> call_id;
      if (s.catalog) {
        try {
          LlmCallIn c;
          c.job_id = s.job_id;
          c.instance = i;
          c.round = round;
          c.parent_id = parent;
          c.model = req.model;
          c.url = s.client->url();
          c.temperature = req.temperature;
          c.seed = req.seed;
          c.prompt = req.messages.dump();
          if (r.ok) c.response = r.content;
          c.prompt_tokens = r.prompt_tokens;
          c.completion_tokens = r.completion_tokens;
          c.latency_s = r.latency_s;
          c.attempts = r.attempts;
          c.status = r.ok ? "ok" : "error";
          c.error = r.error;
          c.retrieval = s.retrieval;
          call_id = s.catalog->record_llm_call(c);
        } catch (const std::exception& e) {
          g->notes.push_back("error: catalog: " + std::string(e.what()));
        }
      }
      std::string code = r.ok ? prompt::extract_code(r.content) : "";
      if (r.ok && code.empty()) r.error = "the LLM's reply was empty";
      if (!code.empty()) {
        Proposal p;
        p.generator = "llm";
        p.config = json::object();
        p.source = code;
        p.parent_id = parent;
        p.round = round;
        p.instance = i;
        p.llm_call_id = call_id;
        g->proposals.push_back(std::move(p));
      } else {
        s.stopped.insert(i);
        if (r.endpoint_error && g->fatal.empty()) g->fatal = r.error;
        g->notes.push_back("error: instance " + std::to_string(i) + " round " + std::to_string(round) + ": " + r.error);
      }
      if (--g->pending > 0) return;
      if (g->proposals.empty() && !g->fatal.empty())  // this job fails, not the run
        g->notes.push_back("llm-unavailable: this job needs an LLM: " + g->fatal +
                           (g->fatal.find("KILN_LLM_MODEL") == std::string::npos ? " (KILN_LLM_BASE_URL, KILN_LLM_MODEL)" : ""));
      auto done = std::move(g->done);
      done(std::move(g->proposals), std::move(g->notes));
    });
  }
}

}  // namespace kiln
