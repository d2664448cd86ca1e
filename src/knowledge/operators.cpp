#include "knowledge/operators.h"

#include <algorithm>
#include <stdexcept>

#include "knowledge/expr_grammar.h"
#include "knowledge/yaml_util.h"

namespace kiln {
namespace {

const std::vector<std::string> kDtypes = {"fp32", "fp16", "bf16"};
const std::vector<std::string> kParamTypes = {"int", "float", "bool", "string"};

// A value of the param's type, from YAML.
nlohmann::json param_value(const yamlu::Checker& ck, const ParamSpec& p, const YAML::Node& n,
                           const std::string& what) {
  if (p.type == "int") return ck.integer(n, what);
  if (p.type == "float") return ck.number(n, what);
  if (p.type == "bool") return ck.boolean(n, what);
  return ck.str(n, what);
}

// `op_where`: "operator 'name'", the operator's part of messages.
ParamSpec parse_param(const yamlu::Checker& ck, const std::string& op_where, const YAML::Node& key,
                      const YAML::Node& n, const std::filesystem::path& dir) {
  ParamSpec p;
  p.name = key.Scalar();
  const std::string where = op_where + " param '" + p.name + "'";
  ck.need_map(n, where);
  ck.known_keys(n, {"type", "enum", "default", "min", "required", "description", "grammar"}, where);
  p.type = ck.str(ck.need(n, "type", where), "type");
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

OperatorSpec parse_operator(const yamlu::Checker& ck, const std::string& where, const YAML::Node& n,
                            const std::filesystem::path& dir) {
  OperatorSpec op;
  op.module = ck.str(ck.need(n, "module", where), "module");
  if (n["description"]) op.description = ck.str(n["description"], "description");
  if (n["compile_s"]) {
    op.compile_s = ck.number(n["compile_s"], where + " compile_s");
    if (!(op.compile_s >= 0)) ck.fail(n["compile_s"], where + ": compile_s must be >= 0");
  }

  YAML::Node shape = ck.need(n, "shape", where);
  ck.need_map(shape, where + " shape");
  ck.known_keys(shape, {"rank", "min_rank", "max_rank", "names"}, where + " shape");
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

  op.dtypes = ck.strings(ck.need(n, "dtypes", where), "dtypes");
  if (op.dtypes.empty()) ck.fail(n["dtypes"], where + ": dtypes must not be empty");
  for (const auto& d : op.dtypes)
    if (std::find(kDtypes.begin(), kDtypes.end(), d) == kDtypes.end())
      ck.fail(n["dtypes"], where + ": unknown dtype '" + d + "' (known: " + yamlu::join(kDtypes) + ")");

  if (YAML::Node params = n["params"]; params && !yamlu::is_null(params)) {
    ck.need_map(params, where + " params");
    ck.no_duplicates(params);
    for (const auto& kv : params) op.params.push_back(parse_param(ck, where, kv.first, kv.second, dir));
  }
  return op;
}

}  // namespace

OperatorRegistry OperatorRegistry::load(const std::filesystem::path& yaml_file) {
  const std::filesystem::path dir = yaml_file.parent_path();
  OperatorRegistry reg;
  reg.entries_ = yamlu::load_registry(yaml_file, "operators", "the operator registry", "operator registry",
                                      "operator", {"module", "description", "shape", "dtypes", "params", "compile_s"},
                                      [&dir](const yamlu::Checker& ck, const std::string& where,
                                             const YAML::Node& n) { return parse_operator(ck, where, n, dir); });
  return reg;
}

nlohmann::json OperatorSpec::with_defaults(const nlohmann::json& given) const {
  nlohmann::json out = nlohmann::json::object();
  for (const ParamSpec& p : params)
    if (!p.required) out[p.name] = p.default_value;
  if (given.is_object())
    for (const auto& [k, v] : given.items()) out[k] = v;
  return out;
}

}  // namespace kiln
