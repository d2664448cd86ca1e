#include "manifest/manifest.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <map>
#include <sstream>
#include <set>

#include "common/hash.h"
#include "common/terminal_text.h"
#include "knowledge/expr_grammar.h"
#include "knowledge/yaml_util.h"

namespace kiln {
namespace {

// Bounds on manifest numbers (docs/manifest.md): a value outside is a file:line error.
constexpr double kMaxTimeoutS = 86400;             // one day per candidate / LLM request
constexpr long long kMaxElements = 1LL << 40;       // elements of one shape

namespace yu = yamlu;
using nlohmann::json;

std::string format_error(const std::string& file, int line, int column, const std::string& msg) {
  if (line <= 0) return file + ": " + msg;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + msg;
}

// Key vocabularies. Operator entries and `defaults:` share most keys.
const std::vector<std::string> kTopKeys = {"name", "targets", "defaults", "operators", "llm"};
const std::vector<std::string> kEntryKeys = {
    "input_shape", "shape", "shapes", "dtype", "dtypes", "target", "targets", "params",
    "knowledge_constraints", "exploration", "validation", "benchmark", "llm"};
// Only in operator entries (not in defaults).
const std::vector<std::string> kEntryOnlyKeys = {"op", "reference", "name", "description"};
const std::vector<std::string> kLlmKeys = {
    "base_url", "model", "api_key_env", "temperature", "max_tokens", "timeout_s", "max_retries",
    "max_concurrent", "retrieval_threshold", "rounds", "instance_timeout_s"};
const std::vector<std::string> kExplorationKeys = {"generator", "strategy", "instances",
                                                   "max_candidates", "timeout_s", "seed", "halving",
                                                   "confirm_margin", "baselines"};
const std::vector<std::string> kBaselines = {"eager", "compile"};
const std::vector<std::string> kHalvingKeys = {"initial", "keep", "prune", "tiles", "priors", "budget_share"};
const std::vector<std::string> kValidationKeys = {"seeds", "atol", "rtol"};
const std::vector<std::string> kBenchmarkKeys = {"warmup", "runs"};
const std::vector<std::string> kStrategies = {"exhaustive", "random", "halving"};
const std::vector<std::string> kGenerators = {"template", "llm"};
const std::vector<std::string> kDtypes = {"fp32", "fp16", "bf16"};

// Accepted dtype spellings -> canonical name.
std::string canonical_dtype(const std::string& s) {
  const std::string l = yu::lower(s);
  if (l == "fp32" || l == "float32" || l == "f32" || l == "float") return "fp32";
  if (l == "fp16" || l == "float16" || l == "f16" || l == "half") return "fp16";
  if (l == "bf16" || l == "bfloat16") return "bf16";
  return "";
}

struct KV {
  YAML::Node key, val;
  std::string name() const { return key.Scalar(); }
};

template <class T>
struct At {
  T value;
  YAML::Mark mark;
};

// What one layer (`defaults:` or an operator entry) says; unset = not given.
struct Layer {
  std::optional<std::vector<At<std::vector<long long>>>> shapes;
  std::optional<std::vector<At<std::string>>> dtypes;       // canonical dtypes
  std::optional<std::vector<At<std::string>>> targets;      // canonical target names
  std::optional<std::vector<std::string>> constraints;
  std::vector<KV> params;
  // Settings sections, key by key.
  std::optional<std::string> generator, strategy;
  std::optional<int> instances, max_candidates;
  std::optional<double> timeout_s;
  std::optional<unsigned long long> seed;
  std::optional<int> seeds;
  std::optional<std::optional<double>> atol, rtol;
  std::optional<int> warmup, runs;
  nlohmann::json halving = nlohmann::json::object();  // the `exploration.halving:` keys given, typed
  std::optional<double> confirm_margin;
  std::optional<std::vector<std::string>> baselines;
  nlohmann::json llm = nlohmann::json::object();  // the `llm:` keys given, typed
  // Entry only.
  std::optional<KV> reference, name, description;
};

class Parser {
 public:
  Parser(const std::string& file, const Knowledge& k) : file_(file), k_(k) {}

  Manifest parse(const std::string& text) {
    Manifest m;
    m.text = text;
    std::vector<YAML::Node> docs;
    try {
      docs = yu::load_all(text);  // YAML::LoadAll can loop forever
    } catch (const YAML::ParserException& e) {
      fail(e.mark, "YAML syntax error: " + e.msg);
    }
    if (docs.size() > 1) fail(YAML::Mark::null_mark(), "expected one YAML document, found " +
                                                           std::to_string(docs.size()));
    if (docs.empty() || yu::is_null(docs[0]))
      fail(YAML::Mark::null_mark(), "empty manifest: it needs at least `operators:`");
    const YAML::Node root = docs[0];
    // What the file holds is not quoted: a path may name any file (a link to a secret).
    if (!root.IsMap()) fail(root, "a manifest must be a mapping (name:, targets:, defaults:, operators:), got " + yu::kind(root));

    std::optional<KV> operators;
    std::optional<std::vector<At<std::string>>> top_targets;
    Layer defaults;
    for (const KV& kv : entries(root, &kTopKeys, "the manifest")) {
      const std::string k = kv.name();
      if (k == "name") {
        m.name = string(kv, "name");
        if (m.name.empty()) fail(kv.val, "name must not be empty");
      } else if (k == "targets") {
        top_targets = targets(kv);
      } else if (k == "defaults") {
        if (!kv.val.IsMap()) fail(mark_of(kv), "defaults must be a mapping, got " + yu::describe(kv.val));
        defaults = layer(kv.val, "defaults");
      } else if (k == "operators") {
        operators = kv;
      } else if (k == "llm") {
        top_llm_ = llm_section(kv);
      }
    }
    if (m.name.empty()) m.name = std::filesystem::path(file_).stem().string();
    if (defaults.targets && top_targets)
      fail(defaults.targets->front().mark,
           "targets are given both at the top level and in defaults: keep one");
    if (!defaults.targets) defaults.targets = top_targets;
    // A param in defaults must be one some operator has.
    const std::vector<std::string> all_params = param_names_of_all();
    for (const KV& p : defaults.params)
      if (std::find(all_params.begin(), all_params.end(), p.name()) == all_params.end())
        fail(p.key, "unknown param '" + yu::excerpt(p.name()) + "' in defaults: no operator takes it" +
                        yu::did_you_mean(p.name(), all_params));

    if (!operators) fail(root, "missing 'operators': a manifest needs a list of operator entries");
    const YAML::Node ops = operators->val;
    if (!ops.IsSequence())
      fail(mark_of(*operators), "operators must be a list of operator entries, got " + yu::describe(ops));
    if (ops.size() == 0) fail(ops, "operators must not be empty");

    std::set<std::string> seen;
    for (const auto& entry : ops) expand(entry, defaults, m.jobs, seen);
    return m;
  }

 private:
  std::string file_;
  const Knowledge& k_;
  json top_llm_ = json::object();

  [[noreturn]] void fail(const YAML::Mark& m, const std::string& msg) const {
    if (m.line < 0) throw ManifestError(file_, 0, 0, msg);
    throw ManifestError(file_, m.line + 1, m.column + 1, msg);
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& msg) const { fail(n.Mark(), msg); }

  // A null value (`key:` with nothing after it) has no useful mark of its own.
  static YAML::Mark mark_of(const KV& kv) {
    return yu::is_null(kv.val) ? kv.key.Mark() : kv.val.Mark();
  }
  static YAML::Mark mark_of(const YAML::Node& n, const YAML::Mark& fallback) {
    return (!n.IsDefined() || yu::is_null(n) || n.Mark().line < 0) ? fallback : n.Mark();
  }

  // The entries of a mapping, rejecting duplicate and unknown keys.
  // known == nullptr: any key (checked later, as for an operator's params).
  std::vector<KV> entries(const YAML::Node& map, const std::vector<std::string>* known,
                          const std::string& context) const {
    std::vector<KV> out;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) fail(kv.first, "keys in " + context + " must be plain names");
      const std::string k = kv.first.Scalar();
      for (const KV& prev : out)
        if (prev.name() == k)
          fail(kv.first, "duplicate key " + yu::key_text(k) + " in " + context + " (first at line " +
                             std::to_string(prev.key.Mark().line + 1) + ")");
      if (known && std::find(known->begin(), known->end(), k) == known->end())
        fail(kv.first, "unknown key " + yu::key_text(k) + " in " + context + yu::did_you_mean(k, *known) +
                           "; known keys: " + yu::join(*known));
      out.push_back({kv.first, kv.second});
    }
    return out;
  }

  std::string string(const KV& kv, const std::string& what) const {
    if (!kv.val.IsScalar() || yu::is_null(kv.val))
      fail(mark_of(kv), what + " must be a string, got " + yu::describe(kv.val));
    return kv.val.Scalar();
  }

  long long integer(const YAML::Node& n, const YAML::Mark& fallback, const std::string& what) const {
    auto v = yu::parse_int(n);
    if (!v) fail(mark_of(n, fallback), what + " must be an integer, got " + yu::describe(n));
    return *v;
  }

  int bounded_int(const KV& kv, const std::string& what, long long min, long long max = INT_MAX) const {
    long long v = integer(kv.val, kv.key.Mark(), what);
    if (v < min)
      fail(kv.val, what + (min == 1 ? " must be positive" : " must be at least " + std::to_string(min)) +
                       ", got " + std::to_string(v));
    if (v > max) fail(kv.val, what + " is too large: " + std::to_string(v) + " (at most " + std::to_string(max) + ")");
    return static_cast<int>(v);
  }

  // A finite number in [lo, hi] (lo excluded when open_lo): a clear file:line error otherwise.
  double bounded_number(const KV& kv, const std::string& what, double lo, double hi, bool open_lo = false) const {
    const double v = number(kv.val, kv.key.Mark(), what);
    const bool ok = std::isfinite(v) && (open_lo ? v > lo : v >= lo) && v <= hi;
    if (!ok) {
      std::ostringstream range;
      range << (open_lo ? "(" : "[") << lo << ", " << hi << "]";
      std::string got = kv.val.Scalar();
      if (got.size() > 40) got = got.substr(0, 40) + "...";
      fail(kv.val, what + " must be in " + range.str() + ", got " + got);
    }
    return v;
  }

  double number(const YAML::Node& n, const YAML::Mark& fallback, const std::string& what) const {
    auto v = yu::parse_float(n);
    if (!v) fail(mark_of(n, fallback), what + " must be a number, got " + yu::describe(n));
    return *v;
  }

  std::string choice(const KV& kv, const std::string& what, const std::vector<std::string>& known) const {
    std::string s = string(kv, what);
    if (std::find(known.begin(), known.end(), s) == known.end())
      fail(kv.val, "unknown " + what + " '" + yu::excerpt(s) + "'" + yu::did_you_mean(s, known) +
                       "; known: " + yu::join(known));
    return s;
  }

  // A list of scalars; a single scalar counts as a one-item list.
  std::vector<YAML::Node> scalar_list(const KV& kv, const std::string& what, bool allow_empty) const {
    std::vector<YAML::Node> items;
    if (kv.val.IsScalar() && !yu::is_null(kv.val)) {
      items.push_back(kv.val);
    } else if (kv.val.IsSequence()) {
      for (const auto& x : kv.val) {
        if (!x.IsScalar() || yu::is_null(x))
          fail(mark_of(x, kv.val.Mark()), what + " items must be names, got " + yu::describe(x));
        items.push_back(x);
      }
    } else {
      fail(mark_of(kv), what + " must be a list, got " + yu::describe(kv.val));
    }
    if (items.empty() && !allow_empty) fail(mark_of(kv), what + " must not be empty");
    return items;
  }

  std::vector<At<std::string>> targets(const KV& kv) const {
    std::vector<At<std::string>> out;
    for (const auto& n : scalar_list(kv, "targets", false)) {
      const Target* t = k_.targets.find(n.Scalar());
      if (!t)
        fail(n, "unknown target '" + yu::excerpt(n.Scalar()) + "'" + yu::did_you_mean(n.Scalar(), k_.targets.names()) +
                    "; known targets: " + yu::join(k_.targets.names()));
      if (!t->triton_supported)
        fail(n, "target '" + t->name + "' (" + t->arch + ") is not supported by this Triton (" +
                    t->file.string() + " says triton_supported: false)");
      out.push_back({t->name, n.Mark()});
    }
    return out;
  }

  std::vector<At<std::string>> dtypes(const KV& kv) const {
    std::vector<At<std::string>> out;
    for (const auto& n : scalar_list(kv, kv.name(), false)) {
      std::string d = canonical_dtype(n.Scalar());
      if (d.empty())
        fail(n, "unknown dtype '" + yu::excerpt(n.Scalar()) + "'" + yu::did_you_mean(n.Scalar(), kDtypes) +
                    "; known dtypes: " + yu::join(kDtypes));
      out.push_back({d, n.Mark()});
    }
    return out;
  }

  std::vector<long long> one_shape(const YAML::Node& n, const YAML::Mark& fallback,
                                   const std::string& hint) const {
    if (!n.IsSequence())
      fail(mark_of(n, fallback), "a shape must be a list of sizes like [64, 1024], got " +
                                     yu::describe(n) + hint);
    if (n.size() == 0) fail(n, "a shape must not be empty");
    std::vector<long long> dims;
    for (const auto& d : n) {
      if (d.IsSequence()) fail(d, "a shape's sizes must be integers, got a list" + hint);
      long long v = integer(d, n.Mark(), "a shape size");
      if (v <= 0) fail(d, "shape sizes must be positive, got " + std::to_string(v));
      if (v > kMaxElements) fail(d, "shape size " + std::to_string(v) + " is too large (at most 2^40 elements)");
      dims.push_back(v);
    }
    if (dims.size() > 8) fail(n, "a shape has at most 8 dimensions, got " + std::to_string(dims.size()));
    long long elems = 1;
    for (long long d : dims) {
      if (elems > kMaxElements / d)
        fail(n, "the shape's element count is too large (at most 2^40 elements)");
      elems *= d;
    }
    return dims;
  }

  Layer layer(const YAML::Node& map, const std::string& context, bool is_entry = false) const {
    Layer L;
    std::vector<std::string> known = kEntryKeys;
    if (is_entry) known.insert(known.begin(), kEntryOnlyKeys.begin(), kEntryOnlyKeys.end());
    std::optional<KV> single_shape, shape_list, dtype_one, dtype_many, target_one, target_many;
    // Keys checked below, together with the keys they exclude.
    const std::map<std::string, std::optional<KV>*> later = {{"shapes", &shape_list},  {"dtype", &dtype_one},
                                                             {"dtypes", &dtype_many},  {"target", &target_one},
                                                             {"targets", &target_many}};
    for (const KV& kv : entries(map, &known, context)) {
      const std::string k = kv.name();
      if (k == "op") {
        continue;  // read by expand()
      } else if (k == "reference") {
        L.reference = kv;
      } else if (k == "name") {
        string(kv, "name");
        L.name = kv;
      } else if (k == "description") {
        string(kv, "description");
        L.description = kv;
      } else if (k == "llm") {
        L.llm = llm_section(kv);
      } else if (k == "input_shape" || k == "shape") {
        if (single_shape) fail(kv.key, "give one of input_shape and shape, not both");
        single_shape = kv;
      } else if (auto slot = later.find(k); slot != later.end()) {
        *slot->second = kv;
      } else if (k == "params") {
        if (!kv.val.IsMap()) {
          if (yu::is_null(kv.val)) continue;
          fail(mark_of(kv), "params must be a mapping like {name: value}, got " + yu::describe(kv.val));
        }
        L.params = entries(kv.val, nullptr, "params");
      } else if (k == "knowledge_constraints") {
        std::vector<std::string> names;
        for (const auto& n : scalar_list(kv, "knowledge_constraints", true)) {
          if (!k_.principles.find(n.Scalar()))
            fail(n, "unknown knowledge constraint '" + yu::excerpt(n.Scalar()) + "'" +
                        yu::did_you_mean(n.Scalar(), k_.principles.names()) +
                        "; known: " + yu::join(k_.principles.names()));
          names.push_back(n.Scalar());
        }
        L.constraints = names;
      } else if (k == "exploration") {
        section(kv, kExplorationKeys, L);
      } else if (k == "validation") {
        section(kv, kValidationKeys, L);
      } else if (k == "benchmark") {
        section(kv, kBenchmarkKeys, L);
      }
    }
    if (single_shape && shape_list)
      fail(shape_list->key, "give either " + single_shape->name() + " (one shape) or shapes (a list), not both");
    if (single_shape) {
      const char* hint = "; for several shapes use shapes: [[...], ...]";
      L.shapes = std::vector<At<std::vector<long long>>>{
          {one_shape(single_shape->val, single_shape->key.Mark(), hint), mark_of(*single_shape)}};
    }
    if (shape_list) {
      const YAML::Node& v = shape_list->val;
      if (!v.IsSequence())
        fail(mark_of(*shape_list), "shapes must be a list of shapes like [[64, 1024]], got " + yu::describe(v));
      if (v.size() == 0) fail(v, "shapes must not be empty");
      std::vector<At<std::vector<long long>>> list;
      for (const auto& s : v) {
        if (!s.IsSequence())
          fail(mark_of(s, v.Mark()), "shapes must be a list of shapes like [[64, 1024]], got an item that is " +
                                         yu::describe(s) + "; for one shape use input_shape: [...]");
        list.push_back({one_shape(s, v.Mark(), ""), s.Mark()});
      }
      L.shapes = list;
    }
    L.dtypes = one_or_many(dtype_one, dtype_many, "dtype", [&](const KV& kv) { return dtypes(kv); });
    L.targets = one_or_many(target_one, target_many, "target", [&](const KV& kv) { return targets(kv); });
    return L;
  }

  // `name: x` or `names: [x, ...]`, not both: the names given, read by `read`.
  template <class Read>
  std::optional<std::vector<At<std::string>>> one_or_many(const std::optional<KV>& one, const std::optional<KV>& many,
                                                          const std::string& name, Read read) const {
    if (one && many) fail(many->key, "give either " + name + " or " + name + "s, not both");
    if (one && one->val.IsSequence())
      fail(one->val, name + " takes one name; use " + name + "s: [...] for a list");
    if (one) return read(*one);
    if (many) return read(*many);
    return std::nullopt;
  }

  // Every param name in the registry, for suggestions on unknown params.
  std::vector<std::string> param_names_of_all() const {
    std::vector<std::string> all;
    for (const auto& name : k_.operators.names())
      for (const auto& p : k_.operators.find(name)->params)
        if (std::find(all.begin(), all.end(), p.name) == all.end()) all.push_back(p.name);
    return all;
  }

  // The `llm:` section: the keys given, typed and checked.
  json llm_section(const KV& sec) const {
    json out = json::object();
    if (!sec.val.IsMap()) {
      if (yu::is_null(sec.val)) return out;
      fail(mark_of(sec), "llm must be a mapping, got " + yu::describe(sec.val));
    }
    for (const KV& kv : entries(sec.val, &kLlmKeys, "llm")) {
      const std::string k = kv.name();
      const std::string what = "llm." + k;
      if (k == "base_url") {
        std::string u = string(kv, what);
        if (u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0)
          fail(kv.val, what + " must start with http:// or https://, got '" + u + "'");
        while (!u.empty() && u.back() == '/') u.pop_back();
        out[k] = u;
      } else if (k == "model" || k == "api_key_env") {
        out[k] = string(kv, what);
      } else if (k == "temperature") {
        out[k] = bounded_number(kv, what, 0, 2);
      } else if (k == "retrieval_threshold") {
        out[k] = bounded_number(kv, what, 0, 1);
      } else if (k == "timeout_s" || k == "instance_timeout_s") {
        out[k] = bounded_number(kv, what, 0, kMaxTimeoutS, /*open_lo=*/true);
      } else if (k == "max_retries") {
        out[k] = bounded_int(kv, what, 0, 100);
      } else if (k == "max_tokens") {
        out[k] = bounded_int(kv, what, 1, 1000000);
      } else {  // max_concurrent, rounds
        out[k] = bounded_int(kv, what, 1, 1000);
      }
    }
    return out;
  }

  static void apply_llm(const json& given, LlmSettings& s) {
    for (const auto& [k, v] : given.items()) {
      if (k == "base_url") s.base_url = v.get<std::string>();
      else if (k == "model") s.model = v.get<std::string>();
      else if (k == "api_key_env") s.api_key_env = v.get<std::string>();
      else if (k == "temperature") s.temperature = v.get<double>();
      else if (k == "max_tokens") s.max_tokens = v.get<int>();
      else if (k == "timeout_s") s.timeout_s = v.get<double>();
      else if (k == "max_retries") s.max_retries = v.get<int>();
      else if (k == "max_concurrent") s.max_concurrent = v.get<int>();
      else if (k == "retrieval_threshold") s.retrieval_threshold = v.get<double>();
      else if (k == "rounds") s.rounds = v.get<int>();
      else if (k == "instance_timeout_s") s.instance_timeout_s = v.get<double>();
    }
  }

  void section(const KV& sec, const std::vector<std::string>& keys, Layer& L) const {
    const std::string s = sec.name();
    if (!sec.val.IsMap()) {
      if (yu::is_null(sec.val)) return;
      fail(mark_of(sec), s + " must be a mapping, got " + yu::describe(sec.val));
    }
    for (const KV& kv : entries(sec.val, &keys, s)) {
      const std::string k = kv.name();
      const std::string what = s + "." + k;
      if (k == "generator") L.generator = choice(kv, what, kGenerators);
      else if (k == "strategy") L.strategy = choice(kv, what, kStrategies);
      else if (k == "instances") L.instances = bounded_int(kv, what, 1, 1024);
      else if (k == "max_candidates") L.max_candidates = bounded_int(kv, what, 1, 1000000);
      else if (k == "timeout_s") {
        L.timeout_s = bounded_number(kv, what, 0, kMaxTimeoutS, /*open_lo=*/true);
      } else if (k == "seed") {
        long long v = integer(kv.val, kv.key.Mark(), what);
        if (v < 0) fail(kv.val, what + " must not be negative, got " + std::to_string(v));
        L.seed = static_cast<unsigned long long>(v);
      } else if (k == "halving") {
        L.halving = halving_section(kv, what);
      } else if (k == "confirm_margin") {
        const double v = number(kv.val, kv.key.Mark(), what);
        if (!(v >= 0 && v <= 10)) fail(kv.val, what + " must be in [0, 10], got " + kv.val.Scalar());
        L.confirm_margin = v;
      } else if (k == "baselines") {
        std::vector<std::string> names;
        for (const auto& n : scalar_list(kv, what, true)) {
          const std::string b = n.Scalar();
          if (std::find(kBaselines.begin(), kBaselines.end(), b) == kBaselines.end())
            fail(n, "unknown " + what + " item '" + yu::excerpt(b) + "'" + yu::did_you_mean(b, kBaselines) +
                        "; known: " + yu::join(kBaselines));
          if (std::find(names.begin(), names.end(), b) == names.end()) names.push_back(b);
        }
        if (std::find(names.begin(), names.end(), "eager") == names.end()) names.insert(names.begin(), "eager");
        std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
          return (a == "eager") > (b == "eager");  // eager first, always there
        });
        L.baselines = names;
      } else if (k == "seeds") L.seeds = bounded_int(kv, what, 1, 1000);
      else if (k == "atol" || k == "rtol") {
        std::optional<double> tol;
        if (!yu::is_null(kv.val)) tol = bounded_number(kv, what, 0, 1000);
        (k == "atol" ? L.atol : L.rtol) = tol;
      } else if (k == "warmup") L.warmup = bounded_int(kv, what, 0, 100000);
      else if (k == "runs") L.runs = bounded_int(kv, what, 1, 100000);
    }
  }

  // exploration.halving: the halving strategy's settings (src/search/strategy.h,
  // SearchSettings), each checked here so that a bad value names its line.
  json halving_section(const KV& sec, const std::string& s) const {
    json out = json::object();
    if (yu::is_null(sec.val)) return out;
    if (!sec.val.IsMap()) fail(mark_of(sec), s + " must be a mapping, got " + yu::describe(sec.val));
    for (const KV& kv : entries(sec.val, &kHalvingKeys, s)) {
      const std::string k = kv.name();
      const std::string what = s + "." + k;
      if (k == "initial") {
        out[k] = bounded_int(kv, what, 1, 1000000);
      } else if (k == "priors") {
        out[k] = bounded_int(kv, what, 0, 1000000);
      } else if (k == "keep") {
        out[k] = bounded_number(kv, what, 0, 1, /*open_lo=*/true);
      } else if (k == "prune") {
        out[k] = bounded_number(kv, what, 1, 1000);
      } else {
        out[k] = bounded_number(kv, what, 0, 1);
      }
    }
    return out;
  }

  // A param value checked against its spec.
  json param_value(const ParamSpec& spec, const KV& kv, const std::string& op) const {
    const std::string what = "param '" + spec.name + "' of " + op;
    json v;
    if (spec.type == "int") {
      v = integer(kv.val, kv.key.Mark(), what);
    } else if (spec.type == "float") {
      v = number(kv.val, kv.key.Mark(), what);
    } else if (spec.type == "bool") {
      auto b = yu::parse_bool(kv.val);
      if (!b) fail(mark_of(kv), what + " must be true or false, got " + yu::describe(kv.val));
      v = *b;
    } else {
      if (!kv.val.IsScalar() || yu::is_null(kv.val))
        fail(mark_of(kv), what + " must be a string, got " + yu::describe(kv.val));
      v = kv.val.Scalar();
      if (spec.grammar)  // the worker's grammar (knowledge/expr_grammar.h), checked now
        if (auto why = spec.grammar->check(kv.val.Scalar())) fail(kv.val, what + ": " + *why);
    }
    if (!spec.choices.empty()) {
      bool ok = std::any_of(spec.choices.begin(), spec.choices.end(), [&](const json& c) {
        return (c.is_number() && v.is_number()) ? c.get<double>() == v.get<double>() : c == v;
      });
      if (!ok) {
        std::vector<std::string> cs;
        for (const auto& c : spec.choices) cs.push_back(c.is_string() ? c.get<std::string>() : c.dump());
        fail(kv.val, what + " must be one of " + yu::join(cs) + ", got " + kv.val.Scalar());
      }
    }
    if (spec.min && v.is_number() && v.get<double>() < *spec.min) {
      json m = *spec.min;
      if (spec.type == "int") m = static_cast<long long>(*spec.min);
      fail(kv.val, what + " must be >= " + m.dump() + ", got " + kv.val.Scalar());
    }
    return v;
  }

  static std::string dims_text(const std::vector<long long>& d) {
    std::vector<std::string> parts;
    for (long long v : d) parts.push_back(std::to_string(v));
    return "[" + yu::join(parts) + "]";
  }

  void merge_settings(const Layer& defaults, const Layer& L, ExplorationSettings& ex,
                      ValidationSettings& va, BenchmarkSettings& be, LlmSettings& llm) const {
    for (const Layer* l : {&defaults, &L}) {
      if (l->generator) ex.generator = *l->generator;
      if (l->strategy) ex.strategy = *l->strategy;
      if (l->instances) ex.instances = *l->instances;
      if (l->max_candidates) ex.max_candidates = *l->max_candidates;
      if (l->timeout_s) ex.timeout_s = *l->timeout_s;
      if (l->seed) ex.seed = *l->seed;
      for (auto it = l->halving.begin(); it != l->halving.end(); ++it) ex.halving[it.key()] = *it;
      if (l->confirm_margin) ex.confirm_margin = *l->confirm_margin;
      if (l->baselines) ex.baselines = *l->baselines;
      if (l->seeds) va.seeds = *l->seeds;
      if (l->atol) va.atol = *l->atol;
      if (l->rtol) va.rtol = *l->rtol;
      if (l->warmup) be.warmup = *l->warmup;
      if (l->runs) be.runs = *l->runs;
    }
    apply_llm(top_llm_, llm);
    apply_llm(defaults.llm, llm);
    apply_llm(L.llm, llm);
  }

  // What every job of one entry shares: its constraints (the entry's list
  // replaces the defaults'; sorted, duplicates dropped), its settings
  // (built-in defaults, then `defaults:`, then the entry, key by key), where
  // it stands and its description.
  JobSpec entry_job(const Layer& defaults, const Layer& L, const std::string& where) const {
    JobSpec j;
    j.constraints = L.constraints ? *L.constraints : defaults.constraints.value_or(std::vector<std::string>{});
    std::sort(j.constraints.begin(), j.constraints.end());
    j.constraints.erase(std::unique(j.constraints.begin(), j.constraints.end()), j.constraints.end());
    merge_settings(defaults, L, j.explore, j.validate, j.bench, j.llm);
    j.where = where;
    if (L.description) j.description = L.description->val.Scalar();
    return j;
  }

  // Appends `j` unless a job with the same worker document is already there.
  void add_job(JobSpec j, std::vector<JobSpec>& jobs, std::set<std::string>& seen) const {
    const Target* target = k_.targets.find(j.target);
    if (seen.insert(j.to_json(*target).dump()).second) jobs.push_back(std::move(j));
  }

  // A `reference: path.py` entry: a PyTorch module in the KernelBench form
  // (class Model(nn.Module), get_inputs(), get_init_inputs()) instead of a
  // library operator. Shapes come from get_inputs(); only the llm generator
  // serves it.
  void expand_reference(const YAML::Node& entry, const Layer& L, const Layer& defaults,
                        std::vector<JobSpec>& jobs, std::set<std::string>& seen) const {
    const KV& ref = *L.reference;
    const std::string rel = string(ref, "reference");
    if (rel.empty()) fail(ref.val, "reference must be a path to a Python file");
    std::filesystem::path p = rel;
    if (p.is_relative()) p = std::filesystem::path(file_).parent_path() / p;
    std::error_code ec;
    std::filesystem::path abs = std::filesystem::weakly_canonical(std::filesystem::absolute(p), ec);
    if (ec) abs = std::filesystem::absolute(p);
    if (std::filesystem::exists(abs, ec) && !std::filesystem::is_regular_file(abs, ec))
      fail(ref.val, "reference '" + yu::excerpt(rel) + "' is not a regular file (a directory, FIFO or device); "
                    "give a Python file");
    if (!std::filesystem::is_regular_file(abs, ec))
      fail(ref.val, "reference file '" + rel + "' does not exist (looked for " + abs.string() +
                        "; a relative path is relative to the manifest's directory)");
    std::string source;
    try {
      source = yu::read_file(abs);
    } catch (const std::exception& e) {
      fail(ref.val, std::string("cannot read reference file ") + e.what());
    }
    if (source.find("class Model") == std::string::npos || source.find("def get_inputs") == std::string::npos)
      fail(ref.val, "reference " + abs.string() + " is not in the KernelBench form: it needs "
                    "class Model(nn.Module) and def get_inputs() (and get_init_inputs() when Model takes arguments)");

    std::string name = L.name ? L.name->val.Scalar() : abs.stem().string();
    const YAML::Mark name_mark = L.name ? L.name->val.Mark() : ref.val.Mark();
    if (name.empty()) fail(name_mark, "name must not be empty");
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        fail(name_mark, "name '" + name + "' may hold only letters, digits, '_', '-' and '.'" +
                            std::string(L.name ? "" : " (it defaults to the reference's file name: give name:)"));
    if (k_.operators.find(name))
      fail(name_mark, "name '" + name + "' is a library operator; give the reference entry another name:");

    if (L.shapes)
      fail(L.shapes->front().mark, "a reference entry takes its shapes from the module's get_inputs(); "
                                   "remove the shape");
    if (!L.params.empty())
      fail(L.params.front().key, "a reference entry takes no params: the module's get_init_inputs() gives "
                                 "Model's arguments");

    const auto& dts = L.dtypes ? L.dtypes : defaults.dtypes;
    std::vector<std::string> dtype_list;
    if (dts)
      for (const auto& d : *dts) dtype_list.push_back(d.value);
    else
      dtype_list.push_back("fp32");
    const auto& tgs = L.targets ? L.targets : defaults.targets;
    if (!tgs) fail(entry, "reference '" + name + "' has no target: give targets: [...] at the top level or here");

    JobSpec base = entry_job(defaults, L, file_ + ":" + std::to_string(entry.Mark().line + 1));
    // No generator given: "auto" until submit matches the module against the
    // template families (manifest/serve_plan.h): the template generator where
    // one serves it, else the llm generator. `template` requires a match,
    // `llm` always asks the LLM.
    if (!L.generator && !defaults.generator) base.explore.generator = "auto";
    base.op = name;
    base.params = json::object();
    base.reference = {{"path", abs.string()}, {"source", source}, {"sha256", sha256_hex(source)}};
    for (const auto& d : dtype_list)
      for (const auto& t : *tgs) {
        JobSpec j = base;
        j.dtype = d;
        j.target = t.value;
        add_job(std::move(j), jobs, seen);
      }
  }

  void expand(const YAML::Node& entry, const Layer& defaults, std::vector<JobSpec>& jobs,
              std::set<std::string>& seen) const {
    if (!entry.IsMap())
      fail(mark_of(entry, entry.Mark()), "an operator entry must be a mapping starting with op:, got " +
                                             yu::describe(entry));
    const YAML::Node op_node = entry["op"];
    if (!op_node.IsDefined() && !entry["reference"].IsDefined())
      fail(entry, "operator entry has no 'op' (the operator name, e.g. op: softmax) and no 'reference' "
                  "(a PyTorch module file, e.g. reference: my_op.py)");
    const Layer L = layer(entry, "an operator entry", true);
    if (L.reference) {
      if (op_node.IsDefined())
        fail(L.reference->key, "give either op (a library operator) or reference (a PyTorch module file), not both");
      expand_reference(entry, L, defaults, jobs, seen);
      return;
    }
    if (L.name)
      fail(L.name->key, "name is for reference entries (it names the job's operator); a library "
                        "operator's name is its op");
    if (!op_node.IsScalar() || yu::is_null(op_node))
      fail(mark_of(op_node, entry.Mark()), "op must be an operator name, got " + yu::describe(op_node));
    const std::string op_name = op_node.Scalar();
    const OperatorSpec* op = k_.operators.find(op_name);
    if (!op)
      fail(op_node, "unknown operator '" + yu::excerpt(op_name) + "'" + yu::did_you_mean(op_name, k_.operators.names()) +
                        "; known operators: " + yu::join(k_.operators.names()));
    const std::string opq = "operator '" + op->name + "'";

    // Shapes.
    const auto& shapes = L.shapes ? L.shapes : defaults.shapes;
    if (!shapes) fail(entry, opq + " has no shape: give input_shape: [...] or shapes: [[...], ...]");
    const std::string line = std::to_string(entry.Mark().line + 1);
    const std::string from_defaults_shape =
        L.shapes ? "" : " (the shape comes from defaults; the entry is at line " + line + ")";
    const std::string from_defaults_dtype =
        L.dtypes ? "" : " (dtypes come from defaults; the entry is at line " + line + ")";
    for (const auto& s : *shapes) {
      const int rank = static_cast<int>(s.value.size());
      if (rank < op->min_rank || rank > op->max_rank) {
        std::string want = op->min_rank == op->max_rank
                               ? "rank " + std::to_string(op->min_rank)
                               : "rank " + std::to_string(op->min_rank) + " to " + std::to_string(op->max_rank);
        if (!op->dim_names.empty()) want += " [" + yu::join(op->dim_names) + "]";
        fail(s.mark, "shape " + dims_text(s.value) + " has rank " + std::to_string(rank) + "; " +
                         op->name + " takes " + want + from_defaults_shape);
      }
    }

    // Dtypes.
    const auto& dts = L.dtypes ? L.dtypes : defaults.dtypes;
    if (!dts) fail(entry, opq + " has no dtype: give dtypes: [...] here or in defaults");
    for (const auto& d : *dts)
      if (std::find(op->dtypes.begin(), op->dtypes.end(), d.value) == op->dtypes.end())
        fail(d.mark, opq + " does not support dtype '" + d.value + "'; it supports " +
                         yu::join(op->dtypes) + from_defaults_dtype);

    // Targets.
    const auto& tgs = L.targets ? L.targets : defaults.targets;
    if (!tgs) fail(entry, opq + " has no target: give targets: [...] at the top level or here");

    // Params: registry defaults, then manifest defaults the op takes, then the entry's.
    json params = op->with_defaults(json::object());
    for (const KV& kv : defaults.params)
      for (const auto& spec : op->params)
        if (spec.name == kv.name()) params[spec.name] = param_value(spec, kv, op->name);
    for (const KV& kv : L.params) {
      const ParamSpec* spec = nullptr;
      std::vector<std::string> names;
      for (const auto& s : op->params) {
        names.push_back(s.name);
        if (s.name == kv.name()) spec = &s;
      }
      if (!spec)
        fail(kv.key, names.empty() ? opq + " takes no params, got '" + yu::excerpt(kv.name()) + "'"
                                   : "unknown param '" + yu::excerpt(kv.name()) + "' for " + opq +
                                         yu::did_you_mean(kv.name(), names) + "; it takes " + yu::join(names));
      params[spec->name] = param_value(*spec, kv, op->name);
    }
    for (const auto& spec : op->params)
      if (spec.required && !params.contains(spec.name))
        fail(entry, opq + " needs param '" + spec.name + "' (" + spec.type + ")");

    JobSpec base = entry_job(defaults, L, file_ + ":" + line);
    base.op = op->name;
    base.params = params;
    for (const auto& s : *shapes)
      for (const auto& d : *dts)
        for (const auto& t : *tgs) {
          JobSpec j = base;
          j.shape = s.value;
          j.dtype = d.value;
          j.target = t.value;
          add_job(std::move(j), jobs, seen);
        }
  }
};

}  // namespace

ManifestError::ManifestError(std::string file, int line, int column, const std::string& message)
    // Escaped here (a NUL would cut what() short; ESC would reach the terminal).
    : std::runtime_error(terminal_safe(format_error(file, line, column, message), true)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(message) {}

nlohmann::json JobSpec::to_json(const Target& t) const {
  if (t.name != target)
    throw std::invalid_argument("JobSpec::to_json: job is for target " + target + ", got " + t.name);
  json tj = t.raw.is_object() ? t.raw : json::object();
  tj["name"] = t.name;
  tj["backend"] = t.backend;
  tj["arch"] = t.arch;
  tj["warp_size"] = t.warp_size;
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json j = json{
      {"op", op},
      {"shape", shape},
      {"dtype", dtype},
      {"params", params.is_object() ? params : json::object()},
      {"target", tj},
      {"constraints", constraints},
      {"validation", {{"seeds", validate.seeds}, {"atol", opt(validate.atol)}, {"rtol", opt(validate.rtol)}}},
      {"benchmark", {{"warmup", bench.warmup}, {"runs", bench.runs}}},
      {"explore",
       {{"generator", explore.generator},
        {"strategy", explore.strategy},
        {"instances", explore.instances},
        {"max_candidates", explore.max_candidates},
        {"timeout_s", explore.timeout_s},
        {"seed", explore.seed}}},
  };
  // Only when given, so that the jobs of manifests without it keep their keys.
  if (!explore.halving.empty()) j["explore"]["halving"] = explore.halving;
  if (explore.confirm_margin) j["explore"]["confirm_margin"] = *explore.confirm_margin;
  if (explore.baselines) j["explore"]["baselines"] = *explore.baselines;
  if (!reference.is_null()) j["reference"] = reference;
  if (!oracle.is_null()) j["oracle"] = oracle;
  // "auto" (a reference entry not yet planned) carries the llm section too: the
  // match reads its retrieval_threshold, and it becomes an llm job unless served.
  if (explore.generator == "llm" || explore.generator == "auto") j["llm"] = llm.to_json();
  if (!description.empty()) j["description"] = description;
  return j;
}

nlohmann::json LlmSettings::to_json() const {
  return json{{"base_url", base_url},
              {"model", model},
              {"api_key_env", api_key_env},
              {"temperature", temperature},
              {"max_tokens", max_tokens},
              {"timeout_s", timeout_s},
              {"max_retries", max_retries},
              {"max_concurrent", max_concurrent},
              {"retrieval_threshold", retrieval_threshold},
              {"rounds", rounds},
              {"instance_timeout_s", instance_timeout_s}};
}

Manifest parse_manifest(const std::string& text, const std::string& filename,
                        const Knowledge& knowledge) {
  Manifest m = Parser(filename, knowledge).parse(text);
  m.path = filename;
  return m;
}

Manifest load_manifest(const std::filesystem::path& path, const Knowledge& knowledge) {
  std::string text;
  try {
    text = yamlu::read_file(path);
  } catch (const std::runtime_error& e) {
    // e: "PATH: why" (not a regular file, over the size bound, unreadable)
    std::string why = e.what();
    if (why.rfind(path.string() + ": ", 0) == 0) why = why.substr(path.string().size() + 2);
    throw ManifestError(path.string(), 0, 0, "cannot read the manifest file: " + why);
  }
  return parse_manifest(text, path.string(), knowledge);
}

}  // namespace kiln
