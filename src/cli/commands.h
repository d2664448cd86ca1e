// The `kiln` subcommands. Each takes its own arguments (after the subcommand
// name) and returns the process exit code:
//   0 success · 1 runtime failure · 2 usage or manifest error ·
//   3 missing Python dependency · 4 `kiln nightly` found a regression ·
//   130 interrupted (the queue is left consistent)
#pragma once
#include <string>
#include <vector>

namespace kiln {

using Args = std::vector<std::string>;

int cmd_submit(const Args& args);
int cmd_run(const Args& args);
int cmd_status(const Args& args);
int cmd_best(const Args& args);
int cmd_query(const Args& args);
int cmd_package(const Args& args);               // cli/cmd_package.cpp
int cmd_import_measurements(const Args& args);  // cli/cmd_package.cpp
int cmd_merge(const Args& args);    // cli/cmd_merge.cpp
int cmd_nightly(const Args& args);  // cli/cmd_nightly.cpp
int cmd_decide(const Args& args);   // cli/cmd_nightly.cpp: the regression decision on samples from stdin
int cmd_lineage(const Args& args);  // cli/cmd_lineage.cpp
int cmd_retry(const Args& args);    // cli/cmd_retry.cpp
int cmd_serve(const Args& args);    // cli/cmd_serve.cpp
int cmd_report(const Args& args);   // cli/cmd_serve.cpp

}  // namespace kiln
