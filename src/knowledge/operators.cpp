#include "knowledge/operators.h"

#include <algorithm>
#include <stdexcept>

#include "knowledge/expr_grammar.h"
#include "knowledge/yaml_util.h"

namespace kiln {
namespace {

const std::vector<std::string> kDtypes = {"fp32", "fp16", "bf16"};
const std::vector<std::string> kParamTypes = {"int", "float", "bool", "string"};

void check_keys(const yamlu::Checker& ck, const YAML::Node& map,
                const std::vector<std::string>& known, const std::string& where) {
  ck.no_duplicates(map);
  for (const auto& kv : map) {
    const std::string k = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), k) == known.end())
      ck.fail(kv.first, "unknown key '" + k + "' in " + where + yamlu::did_you_mean(k, known));
  }
}

// A value of the param's type, from YAML.
nlohmann::json param_value(const yamlu::Checker& ck, const ParamSpec& p, const YAML::Node& n,
                           const std::string& what) {
  if (p.type == "int") return ck.integer(n, what);
  if (p.type == "float") return ck.number(n, what);
  if (p.type == "bool") return ck.boolean(n, what);
  return ck.str(n, what);
}

ParamSpec parse_param(const yamlu::Checker& ck, const std::string& op, const YAML::Node& key,
                      const YAML::Node& n, const std::filesystem::path& dir) {
  ParamSpec p;
  p.name = key.Scalar();
  const std::string where = "operator '" + op + "' param '" + p.name + "'";
  ck.need_map(n, where);
  check_keys(ck, n, {"type", "enum", "default", "min", "required", "description", "grammar"}, where);
  if (!n["type"]) ck.fail(n, where + ": missing 'type'");
  p.type = ck.str(n["type"], "type");
  if (std::find(kParamTypes.begin(), kParamTypes.end(), p.type) == kParamTypes.end())
    ck.fail(n["type"], where + ": type must be one of " + yamlu::join(kParamTypes) + ", got '" +
                           p.type + "'");
  if (n["required"]) p.required = ck.boolean(n["required"], "required");
  if (n["min"]) {
    if (p.type != "int" && p.type != "float") ck.fail(n["min"], where + ": min needs a numeric type");
    p.min = ck.number(n["min"], "min");
  }
  if (n["grammar"]) {
    const std::string file = ck.str(n["grammar"], "grammar");
    if (p.type != "string" || file.empty() || file.find('/') != std::string::npos)
      ck.fail(n["grammar"], where + ": grammar needs a string param and a file name beside this registry");
    try {
      p.grammar = std::make_shared<const ExprGrammar>(ExprGrammar::load(dir / file));
    } catch (const std::runtime_error& e) {
      ck.fail(n["grammar"], where + ": " + e.what());
    }
  }
  if (n["enum"]) {
    if (!n["enum"].IsSequence() || n["enum"].size() == 0)
      ck.fail(n["enum"], where + ": enum must be a non-empty list");
    for (const auto& c : n["enum"]) p.choices.push_back(param_value(ck, p, c, where + " enum value"));
  }
  if (n["default"] && !yamlu::is_null(n["default"])) {
    if (p.required) ck.fail(n["default"], where + ": a required param has no default");
    p.default_value = param_value(ck, p, n["default"], where + " default");
  } else if (!p.required) {
    ck.fail(n, where + ": give a default or mark it required: true");
  }
  return p;
}

OperatorSpec parse_operator(const yamlu::Checker& ck, const YAML::Node& key, const YAML::Node& n,
                            const std::filesystem::path& dir) {
  OperatorSpec op;
  op.name = key.Scalar();
  const std::string where = "operator '" + op.name + "'";
  ck.need_map(n, where);
  check_keys(ck, n, {"module", "description", "shape", "dtypes", "params", "compile_s"}, where);
  if (!n["module"]) ck.fail(n, where + ": missing 'module'");
  op.module = ck.str(n["module"], "module");
  if (n["description"]) op.description = ck.str(n["description"], "description");
  if (n["compile_s"]) {
    op.compile_s = ck.number(n["compile_s"], where + " compile_s");
    if (!(op.compile_s >= 0)) ck.fail(n["compile_s"], where + ": compile_s must be >= 0");
  }

  YAML::Node shape = n["shape"];
  if (!shape) ck.fail(n, where + ": missing 'shape'");
  ck.need_map(shape, where + " shape");
  check_keys(ck, shape, {"rank", "min_rank", "max_rank", "names"}, where + " shape");
  if (shape["rank"]) {
    if (shape["min_rank"] || shape["max_rank"])
      ck.fail(shape, where + ": give either rank or min_rank/max_rank");
    op.min_rank = op.max_rank = static_cast<int>(ck.integer(shape["rank"], "rank"));
  } else {
    if (!shape["min_rank"] || !shape["max_rank"])
      ck.fail(shape, where + ": shape needs rank, or min_rank and max_rank");
    op.min_rank = static_cast<int>(ck.integer(shape["min_rank"], "min_rank"));
    op.max_rank = static_cast<int>(ck.integer(shape["max_rank"], "max_rank"));
  }
  if (op.min_rank < 1 || op.max_rank < op.min_rank)
    ck.fail(shape, where + ": ranks must satisfy 1 <= min_rank <= max_rank");
  if (shape["names"]) {
    op.dim_names = ck.strings(shape["names"], "names");
    if (static_cast<int>(op.dim_names.size()) != op.max_rank || op.min_rank != op.max_rank)
      ck.fail(shape["names"], where + ": names need a fixed rank and one name per dimension");
  }

  if (!n["dtypes"]) ck.fail(n, where + ": missing 'dtypes'");
  op.dtypes = ck.strings(n["dtypes"], "dtypes");
  if (op.dtypes.empty()) ck.fail(n["dtypes"], where + ": dtypes must not be empty");
  for (const auto& d : op.dtypes)
    if (std::find(kDtypes.begin(), kDtypes.end(), d) == kDtypes.end())
      ck.fail(n["dtypes"], where + ": unknown dtype '" + d + "' (known: " + yamlu::join(kDtypes) + ")");

  if (YAML::Node params = n["params"]; params && !yamlu::is_null(params)) {
    ck.need_map(params, where + " params");
    ck.no_duplicates(params);
    for (const auto& kv : params) op.params.push_back(parse_param(ck, op.name, kv.first, kv.second, dir));
  }
  return op;
}

}  // namespace

OperatorRegistry OperatorRegistry::load(const std::filesystem::path& yaml_file) {
  yamlu::Checker ck{yaml_file.string()};
  YAML::Node doc = yamlu::load_document(yamlu::read_file(yaml_file), yaml_file.string());
  ck.need_map(doc, "the operator registry");
  check_keys(ck, doc, {"version", "operators"}, "the operator registry");
  if (doc["version"] && ck.integer(doc["version"], "version") != 1)
    ck.fail(doc["version"], "unsupported operator registry version (this build reads version 1)");
  YAML::Node ops = doc["operators"];
  if (!ops) ck.fail(doc, "missing 'operators'");
  ck.need_map(ops, "operators");
  ck.no_duplicates(ops);
  OperatorRegistry reg;
  for (const auto& kv : ops) reg.ops_.push_back(parse_operator(ck, kv.first, kv.second, yaml_file.parent_path()));
  if (reg.ops_.empty()) ck.fail(ops, "no operators");
  return reg;
}

const OperatorSpec* OperatorRegistry::find(const std::string& name) const {
  for (const auto& op : ops_)
    if (op.name == name) return &op;
  return nullptr;
}

nlohmann::json OperatorSpec::with_defaults(const nlohmann::json& given) const {
  nlohmann::json out = nlohmann::json::object();
  for (const ParamSpec& p : params)
    if (!p.required) out[p.name] = p.default_value;
  if (given.is_object())
    for (const auto& [k, v] : given.items()) out[k] = v;
  return out;
}

std::vector<std::string> OperatorRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& op : ops_) out.push_back(op.name);
  return out;
}

}  // namespace kiln
