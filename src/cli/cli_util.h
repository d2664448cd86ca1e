// Helpers shared by the `kiln` subcommands (one file per subcommand group).
#pragma once

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "batch/errors.h"
#include "evaluate/worker_process.h"
#include "explore/explorer.h"
#include "explore/scheduling_flags.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/home.h"
#include "common/shape_text.h"
#include "common/terminal_text.h"
#include "manifest/manifest.h"

namespace kiln::cli {

namespace po = boost::program_options;
using nlohmann::json;

// Thrown for usage errors; main prints it with the command's help.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --lease, --bench-cutoff and --ready-per-slot into a run's options (explore/scheduling_flags.h).
inline void set_scheduling_flags(RunOptions& o, const po::variables_map& vm) {
  const SchedulingFlags f = read_scheduling_flags(vm);
  if (auto e = scheduling_flags_error(f)) throw UsageError(*e);
  o.scheduling = f;
}

inline std::string default_catalog() {
  if (const char* env = std::getenv("KILN_CATALOG"); env && *env) return env;
  return "kiln.db";
}

inline void add_common(po::options_description& d, bool json_flag) {
  d.add_options()("help,h", "show this help")(
      "catalog", po::value<std::string>()->default_value(default_catalog()),
      "catalog file (default: $KILN_CATALOG, else ./kiln.db)");
  if (json_flag) d.add_options()("json", "machine-readable JSON on stdout");
}

// A bare argument's option and how many it takes (-1: all the rest).
struct Positional {
  const char* name;
  int count = 1;
};

// Parses args; returns nullopt (after printing usage and `d`) when --help was
// given. Bare arguments fill `positional` in order; `hidden` options are
// accepted but not shown in help. A parse error is a UsageError carrying the
// usage and the options.
inline std::optional<po::variables_map> parse(const Args& args, const po::options_description& d,
                                              const std::string& usage,
                                              std::initializer_list<Positional> positional = {},
                                              const po::options_description* hidden = nullptr) {
  po::options_description all;
  all.add(d);
  if (hidden) all.add(*hidden);
  po::positional_options_description pos;
  for (const Positional& p : positional) pos.add(p.name, p.count);
  po::variables_map vm;
  try {
    auto parser = po::command_line_parser(args).options(all);
    if (positional.size()) parser.positional(pos);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << d << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\n\n" + usage + "\n\n" +
                     [&] { std::ostringstream os; os << d; return os.str(); }());
  }
  return vm;
}

inline Knowledge load_knowledge() {
  try {
    return Knowledge::load(kiln_home());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot load Kiln's knowledge base under ") +
                             kiln_home().string() + " (set KILN_HOME to the Kiln tree): " + e.what());
  }
}

inline Catalog open_catalog(const po::variables_map& vm, bool read_only) {
  return Catalog::open(vm["catalog"].as<std::string>(), read_only);
}

// Runs fn, mapping exceptions to exit codes and messages.
template <typename Fn>
inline int guarded(const char* cmd, Fn fn) {
  try {
    return fn();
  } catch (const UsageError& e) {
    std::cerr << "kiln " << cmd << ": " << terminal_safe(e.what(), true) << "\n";
    return 2;
  } catch (const batch::InputError& e) {
    std::cerr << "kiln " << cmd << ": " << terminal_safe(e.what(), true) << "\n";
    return 2;
  } catch (const ManifestError& e) {
    std::cerr << terminal_safe(e.what(), true) << "\n";
    return 2;
  } catch (const batch::EvaluatorUnavailable& e) {
    std::cerr << "kiln " << cmd << ": " << terminal_safe(e.what(), true) << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "kiln " << cmd << ": " << terminal_safe(e.what(), true) << "\n";
    return 1;
  }
}

// Runs subcommand `cmd` of a catalog under guarded(): fn(d) gets its options
// with --help, --catalog and (json_flag) --json declared, adds its own, parses
// and returns the exit code.
template <typename Fn>
inline int catalog_command(const char* cmd, bool json_flag, Fn fn) {
  return guarded(cmd, [&] {
    po::options_description d(std::string("kiln ") + cmd + " options");
    add_common(d, json_flag);
    return fn(d);
  });
}

inline std::string config_text(const json& config) {
  std::string s;
  for (const auto& [k, v] : config.items()) s += (s.empty() ? "" : " ") + k + "=" + cell_text(v);
  return s;
}

// The first line of `s`, cut to `max` characters (its last three "...") when
// longer: a catalog message in a one-line listing.
inline std::string first_line(const std::string& s, size_t max) {
  std::string l = s.substr(0, s.find('\n'));
  if (l.size() > max) l = l.substr(0, max - 3) + "...";
  return l;
}

// A nullable catalog value as JSON: null when unset.
template <class T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace kiln::cli
