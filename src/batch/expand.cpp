#include "batch/expand.h"

#include <algorithm>
#include <exception>
#include <set>

#include "catalog/job_key.h"
#include "search/estimate.h"

namespace kiln::batch {

using nlohmann::json;

std::vector<NewJob> expand_jobs(const Manifest& m, const Knowledge& knowledge, const json& hello,
                                const std::map<std::pair<std::string, std::string>, double>& compile_history) {
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

}  // namespace kiln::batch
