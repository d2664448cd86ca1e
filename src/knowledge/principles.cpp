#include "knowledge/principles.h"

#include <algorithm>
#include <stdexcept>

#include "knowledge/yaml_util.h"

namespace kiln {
namespace {

const std::vector<std::string> kOps = {"==", "!=", "<", "<=", ">", ">=", "in"};
const std::vector<std::string> kRuleKinds = {"prune", "bound", "order"};

// '*' matches any run of characters.
bool glob_match(const std::string& pat, const std::string& s) {
  size_t p = 0, i = 0, star = std::string::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (p < pat.size() && pat[p] == s[i]) {
      ++p, ++i;
    } else if (star != std::string::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

std::optional<double> as_number(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_number()) return v.get<double>();
  return std::nullopt;
}

// Product of the config values whose keys match q (exact key or glob).
std::optional<double> quantity_of(const std::string& q, const nlohmann::json& config) {
  if (!config.is_object()) return std::nullopt;
  if (q.find('*') == std::string::npos) {
    auto it = config.find(q);
    if (it == config.end()) return std::nullopt;
    return as_number(*it);
  }
  std::optional<double> product;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!glob_match(q, it.key())) continue;
    auto v = as_number(it.value());
    if (!v) continue;
    product = product.value_or(1.0) * *v;
  }
  return product;
}

Principle parse_principle(const yamlu::Checker& ck, const std::string& where, const YAML::Node& n) {
  Principle p;
  p.description = ck.str(ck.need(n, "description", where), "description");
  if (n["weight"]) {
    p.weight = ck.number(n["weight"], "weight");
    if (p.weight < 0) ck.fail(n["weight"], where + ": weight must not be negative");
  }
  p.prompt = ck.str(ck.need(n, "prompt", where), "prompt");
  if (n["backends"]) {
    p.backends = ck.strings(n["backends"], "backends");
    for (const auto& b : p.backends)
      if (b != "hip" && b != "cuda") ck.fail(n["backends"], where + ": backends are hip and cuda, got '" + b + "'");
  }

  p.rules = {{"prune", nlohmann::json::array()},
             {"bound", nlohmann::json::array()},
             {"order", nlohmann::json::array()}};
  YAML::Node rules = n["rules"];
  if (!rules || yamlu::is_null(rules)) return p;
  ck.need_map(rules, where + " rules");
  ck.no_duplicates(rules);
  for (const auto& kv : rules) {
    const std::string kind = kv.first.Scalar();
    if (std::find(kRuleKinds.begin(), kRuleKinds.end(), kind) == kRuleKinds.end())
      ck.fail(kv.first, "unknown rule kind '" + kind + "' (known: prune, bound, order)" +
                            yamlu::did_you_mean(kind, kRuleKinds));
    if (!kv.second.IsSequence()) ck.fail(kv.second, where + " rules." + kind + " must be a list");
    for (const auto& item : kv.second) {
      ck.need_map(item, where + " rules." + kind + " item");
      ck.no_duplicates(item);
      const bool is_order = kind == "order";
      const std::vector<std::string> item_keys =
          is_order ? std::vector<std::string>{"key", "dir", "per"}
                   : std::vector<std::string>{"key", "op", "value", "per"};
      for (const auto& f : item) {
        const std::string k = f.first.Scalar();
        if (std::find(item_keys.begin(), item_keys.end(), k) == item_keys.end())
          ck.fail(f.first, "unknown key '" + k + "' in a " + kind + " rule (known: " +
                               yamlu::join(item_keys) + ")");
      }
      nlohmann::json j = nlohmann::json::object();
      if (!item["key"]) ck.fail(item, kind + " rule needs 'key'");
      j["key"] = ck.str(item["key"], "key");
      if (j["key"].get<std::string>().empty()) ck.fail(item["key"], "key must not be empty");
      if (item["per"]) j["per"] = ck.str(item["per"], "per");
      if (is_order) {
        std::string dir = item["dir"] ? ck.str(item["dir"], "dir") : "asc";
        if (dir != "asc" && dir != "desc") ck.fail(item["dir"], "dir must be asc or desc, got '" + dir + "'");
        j["dir"] = dir;
      } else {
        if (!item["op"]) ck.fail(item, kind + " rule needs 'op'");
        const std::string op = ck.str(item["op"], "op");
        if (std::find(kOps.begin(), kOps.end(), op) == kOps.end())
          ck.fail(item["op"], "op must be one of " + yamlu::join(kOps, " ") + ", got '" + op + "'");
        j["op"] = op;
        if (!item["value"]) ck.fail(item, kind + " rule needs 'value'");
        nlohmann::json v = yamlu::to_json(item["value"]);
        if (op == "in" ? !v.is_array() : !(v.is_number() || v.is_boolean() || v.is_string()))
          ck.fail(item["value"], op == "in" ? "value of 'in' must be a list"
                                            : "value must be a number, boolean or string");
        if (op != "==" && op != "!=" && op != "in" && !v.is_number() && !v.is_boolean())
          ck.fail(item["value"], "op '" + op + "' needs a number");
        j["value"] = v;
      }
      p.rules[kind].push_back(j);
    }
  }
  return p;
}

bool values_equal(const nlohmann::json& a, const nlohmann::json& b) {
  auto x = as_number(a), y = as_number(b);
  if (x && y) return *x == *y;
  return a == b;
}

}  // namespace

std::optional<double> rule_quantity(const nlohmann::json& item, const nlohmann::json& config) {
  auto q = quantity_of(item.at("key").get<std::string>(), config);
  if (!q) return std::nullopt;
  if (auto per = item.find("per"); per != item.end()) {
    auto d = quantity_of(per->get<std::string>(), config);
    if (!d || *d == 0) return std::nullopt;
    return *q / *d;
  }
  return q;
}

std::optional<bool> rule_condition_holds(const nlohmann::json& cond, const nlohmann::json& config) {
  const std::string op = cond.at("op").get<std::string>();
  const nlohmann::json& value = cond.at("value");
  const std::string key = cond.at("key").get<std::string>();
  // A plain key with a non-numeric value (a string knob) compares as is.
  if (key.find('*') == std::string::npos && !cond.contains("per") && config.is_object()) {
    auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    if (!as_number(*it)) {
      if (op == "==") return values_equal(*it, value);
      if (op == "!=") return !values_equal(*it, value);
      if (op == "in")
        return std::any_of(value.begin(), value.end(),
                           [&](const nlohmann::json& c) { return values_equal(*it, c); });
      return std::nullopt;
    }
  }
  auto q = rule_quantity(cond, config);
  if (!q) return std::nullopt;
  if (op == "in")
    return std::any_of(value.begin(), value.end(),
                       [&](const nlohmann::json& c) { return values_equal(*q, c); });
  auto v = as_number(value);
  if (!v) return op == "!=";  // a number never equals a string
  if (op == "==") return *q == *v;
  if (op == "!=") return *q != *v;
  if (op == "<") return *q < *v;
  if (op == "<=") return *q <= *v;
  if (op == ">") return *q > *v;
  if (op == ">=") return *q >= *v;
  return std::nullopt;
}

RuleResult apply_principles(std::vector<nlohmann::json> configs,
                            const std::vector<const Principle*>& selected,
                            const std::string& backend) {
  RuleResult r;
  std::vector<const Principle*> principles;
  for (const Principle* p : selected)
    if (backend.empty() || p->backends.empty() ||
        std::find(p->backends.begin(), p->backends.end(), backend) != p->backends.end())
      principles.push_back(p);
  auto rejected = [&](const nlohmann::json& c) {
    for (const Principle* p : principles) {
      for (const auto& cond : p->rules.at("prune"))
        if (rule_condition_holds(cond, c).value_or(false)) return true;
      for (const auto& cond : p->rules.at("bound"))
        if (!rule_condition_holds(cond, c).value_or(true)) return true;
    }
    return false;
  };
  std::vector<nlohmann::json> kept;
  for (const auto& c : configs)
    if (!rejected(c)) kept.push_back(c);
  if (kept.empty() && !configs.empty()) {
    r.relaxed = true;
    kept = std::move(configs);
  } else {
    r.removed = configs.size() - kept.size();
  }

  // Order items, heaviest principle first (stable among equal weights).
  std::vector<const Principle*> by_weight(principles.begin(), principles.end());
  std::stable_sort(by_weight.begin(), by_weight.end(),
                   [](const Principle* a, const Principle* b) { return a->weight > b->weight; });
  std::vector<nlohmann::json> order;
  for (const Principle* p : by_weight)
    for (const auto& o : p->rules.at("order")) order.push_back(o);
  if (!order.empty()) {
    std::stable_sort(kept.begin(), kept.end(), [&](const nlohmann::json& a, const nlohmann::json& b) {
      for (const auto& o : order) {
        auto qa = rule_quantity(o, a), qb = rule_quantity(o, b);
        if (!qa && !qb) continue;
        if (!qb) return true;   // configs without the quantity go last
        if (!qa) return false;
        if (*qa == *qb) continue;
        return o.at("dir") == "desc" ? *qa > *qb : *qa < *qb;
      }
      return false;
    });
  }
  r.configs = std::move(kept);
  return r;
}

PrincipleRegistry PrincipleRegistry::load(const std::filesystem::path& yaml_file) {
  PrincipleRegistry reg;
  reg.entries_ = yamlu::load_registry(yaml_file, "principles", "the principles file", "principles", "principle",
                                      {"description", "weight", "prompt", "backends", "rules"}, parse_principle);
  return reg;
}

}  // namespace kiln
