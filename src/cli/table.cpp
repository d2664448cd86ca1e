#include "cli/table.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "common/terminal_text.h"

namespace kiln {

std::string cell_text(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    std::ostringstream os;
    os << std::setprecision(5) << v.get<double>();
    return os.str();
  }
  return v.dump();
}

void Table::print_text(std::ostream& out) const {
  // Cells come from the catalog: control characters are escaped (terminal_text.h).
  const auto shown = [](const nlohmann::json& v) { return terminal_safe(cell_text(v)); };
  std::vector<size_t> width(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) width[c] = columns[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], shown(r[c]).size());
  auto line = [&](auto cell) {
    std::string s;
    for (size_t c = 0; c < columns.size(); ++c) {
      std::string t = cell(c);
      s += t;
      if (c + 1 < columns.size()) s += std::string(width[c] - t.size() + 2, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line([&](size_t c) { return columns[c]; });
  for (const auto& r : rows) line([&](size_t c) { return c < r.size() ? shown(r[c]) : std::string(); });
}

void Table::print_csv(std::ostream& out) const {
  auto quote = [](const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
  };
  for (size_t c = 0; c < columns.size(); ++c) out << (c ? "," : "") << quote(columns[c]);
  out << "\n";
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) out << (c ? "," : "") << quote(r[c].is_null() ? "" : cell_text(r[c]));
    out << "\n";
  }
}

nlohmann::json Table::to_json() const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json o = nlohmann::json::object();
    for (size_t c = 0; c < columns.size() && c < r.size(); ++c) o[columns[c]] = r[c];
    arr.push_back(o);
  }
  return arr;
}

}  // namespace kiln
