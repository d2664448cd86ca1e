#include "generate/generator.h"

#include <stdexcept>

#include "generate/llm_generator.h"
#include "generate/template_generator.h"

namespace kiln {

const nlohmann::json& JobContext::explore() const {
  static const nlohmann::json empty = nlohmann::json::object();
  auto it = row.spec.find("explore");
  return it == row.spec.end() ? empty : *it;
}

bool JobContext::is_reference() const {
  auto it = row.spec.find("reference");
  return it != row.spec.end() && it->is_object();
}

std::unique_ptr<Generator> make_generator(const JobContext& job, boost::asio::io_context& io) {
  const std::string g = job.explore().value("generator", "template");
  if (g == "template") {
    if (job.is_reference())
      throw std::invalid_argument("job " + job.row.op + " has a reference module: only the llm generator serves it");
    return std::make_unique<TemplateGenerator>();
  }
  if (g == "llm") return std::make_unique<LlmGenerator>(job, io);
  throw std::invalid_argument("generator '" + g + "' is not available in this build");
}

}  // namespace kiln
