// The operator registry: kernels/operators.yaml.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "knowledge/registry.h"

namespace kiln {

class ExprGrammar;  // knowledge/expr_grammar.h

struct ParamSpec {
  std::string name;
  std::string type;                  // int | float | bool | string
  bool required = false;
  nlohmann::json default_value;      // null when required
  std::vector<nlohmann::json> choices;  // enum, empty if any
  std::optional<double> min;
  // A string param whose values must be in a grammar (`grammar: FILE`, a JSON
  // file beside operators.yaml that the worker reads too); null if none.
  std::shared_ptr<const ExprGrammar> grammar;
};

struct OperatorSpec {
  std::string name;
  std::string module;                // kernels/<module>.py
  std::string description;
  int min_rank = 1, max_rank = 1;
  std::vector<std::string> dim_names;
  std::vector<std::string> dtypes;
  std::vector<ParamSpec> params;
  // Typical seconds to compile one candidate of this template (Triton front
  // end + ptxas/ld.lld) on a GPU node's CPU; the claim order's estimate of a
  // job's compile time where the catalog has no history (kiln submit).
  double compile_s = kDefaultCompileS;
  static constexpr double kDefaultCompileS = 0.2;

  // given (an object of param values, or null) with every param it leaves out
  // that has a default set to that default. The engine's one place for the
  // defaults of kernels/operators.yaml: a job's params are complete from its
  // expansion on (manifest entries, matched references), its key covers them,
  // and the worker receives them complete (it fills in nothing). A required
  // param given leaves out stays out (the caller reports it); given's other
  // keys are kept as they are.
  nlohmann::json with_defaults(const nlohmann::json& given) const;
};

class OperatorRegistry : public NamedRegistry<OperatorSpec> {
 public:
  static OperatorRegistry load(const std::filesystem::path& yaml_file);
};

}  // namespace kiln
