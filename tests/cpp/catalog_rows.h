// Rows the catalog tests add through the Catalog's own API (catalog_test,
// confirmations_test).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "catalog/catalog.h"

namespace kiln_test {

// Adds a candidate of job `job_id` from template `template_name` with
// `config`; returns its id (add_candidate's: the existing one for a config the
// job already has).
inline long long add_template_candidate(kiln::Catalog& cat, long long job_id, const nlohmann::json& config,
                                        const std::string& template_name = "softmax") {
  kiln::CandidateRow c;
  c.job_id = job_id;
  c.generator = "template";
  c.template_name = template_name;
  c.config = config;
  return cat.add_candidate(c).id;
}

}  // namespace kiln_test
