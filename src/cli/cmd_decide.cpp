#include <iostream>
#include <vector>

#include "cli/cli_util.h"
#include "stats/regression.h"

namespace kiln {

using namespace kiln::cli;

// kiln decide: {"pairs": [{"previous": [ms...], "now": [ms...]}, ...]} on stdin
// (optional per pair "rounds_previous" / "rounds_now": the confirmation rounds
// each sample was taken in, which ratio_ci95 then resamples)
// -> {"decisions": [{verdict, p, median_ratio, ratio_ci95, n_previous, n_now}, ...]}:
// kiln nightly's decision (stats/regression.h) for tools that time outside a
// catalog (bench/trust/aa_nightly.py's A/A and injected-slowdown counts).
int cmd_decide(const Args& args) {
  return guarded("decide", [&] {
    po::options_description d("kiln decide options");
    d.add_options()("help,h", "show this help")("min-effect", po::value<double>()->default_value(0.03, "0.03"),
                                                 "the smallest slowdown of the medians that counts")(
        "alpha", po::value<double>()->default_value(0.01), "Mann-Whitney two-sided p below this");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(d).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: kiln decide [--min-effect 0.03] [--alpha 0.01] < pairs.json\n"
                   "kiln nightly's regression decision on raw samples: stdin {\"pairs\": [{\"previous\":\n"
                   "[ms, ...], \"now\": [ms, ...]}, ...]}, stdout {\"decisions\": [...]}. Optional per pair:\n"
                   "\"rounds_previous\", \"rounds_now\" (the confirmation rounds each sample was taken in;\n"
                   "ratio_ci95 then resamples the rounds and the calls within them).\n"
                << d;
      return 0;
    }
    po::notify(vm);
    json in;
    try {
      in = json::parse(std::cin);
    } catch (const std::exception& e) {
      throw UsageError(std::string("kiln decide: stdin is not JSON: ") + e.what());
    }
    if (!in.is_object() || !in.contains("pairs") || !in["pairs"].is_array())
      throw UsageError("kiln decide: stdin must be {\"pairs\": [{\"previous\": [...], \"now\": [...]}, ...]}");
    const stats::RegressionSettings rs{vm["alpha"].as<double>(), vm["min-effect"].as<double>()};
    json out = json::array();
    for (const auto& p : in["pairs"]) {
      std::vector<double> a, b;
      size_t rounds_a = 0, rounds_b = 0;
      try {
        a = p.at("previous").get<std::vector<double>>();
        b = p.at("now").get<std::vector<double>>();
        rounds_a = p.value("rounds_previous", size_t{0});
        rounds_b = p.value("rounds_now", size_t{0});
      } catch (const std::exception&) {
        throw UsageError(
            "kiln decide: each pair needs number lists 'previous' and 'now' (and, optionally, counts "
            "'rounds_previous' and 'rounds_now')");
      }
      if (a.empty() || b.empty()) throw UsageError("kiln decide: a pair with an empty sample");
      const auto dd = stats::decide_regression(a, b, rs, rounds_a, rounds_b);
      out.push_back({{"verdict", dd.verdict}, {"p", dd.p}, {"median_ratio", dd.ratio},
                     {"ratio_ci95", json::array({dd.ratio_ci.lo, dd.ratio_ci.hi})},
                     {"n_previous", dd.n_previous}, {"n_now", dd.n_now}});
    }
    std::cout << json{{"decisions", out}, {"alpha", rs.alpha}, {"min_effect", rs.min_effect}}.dump() << "\n";
    return 0;
  });
}

}  // namespace kiln
