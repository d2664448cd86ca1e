// Text output for the CLI: aligned tables for terminals, CSV and JSON for machines.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;

  void print_text(std::ostream& out) const;   // aligned, one header line
  void print_csv(std::ostream& out) const;    // RFC 4180 quoting
  nlohmann::json to_json() const;             // array of objects keyed by column
};

// A JSON scalar as a cell: strings bare, numbers compact, null as "-".
std::string cell_text(const nlohmann::json& v);

}  // namespace kiln
