// What kiln merge accepts from a shard catalog: every row it imports is
// checked before it is written (merge.cpp). Internal to src/catalog.
//
// A shard is untrusted input (it may come from another machine, or be made by
// hand): a row is refused when a column has the wrong type, a number is out
// of range or not finite, a status-like string is not one the engine writes,
// a name that becomes part of a file path (operator, dtype, target, arch,
// template, kernel name) could leave its directory ("../../x", "/etc", a
// slash, a control character), a text or blob is larger than the engine ever
// writes, a key does not match what it is computed from (candidate keys,
// blob checksums and sizes), or a job's columns disagree with its spec.
#pragma once
#include <string>
#include <vector>

#include "catalog/sql.h"

namespace kiln::merge_check {

// Checks one row of `table` whose columns `cols` are the statement's columns
// from `at` on (as merge.cpp selects them); `rowid` names the row in messages.
// Throws CatalogError "TABLE row ROWID: COLUMN ...: the problem" (with a short,
// escaped excerpt of the value). Columns it has no rule for (a newer schema's)
// are only held to a size limit.
void check_row(const std::string& table, const std::vector<std::string>& cols, const sql::Stmt& row, int at,
               long long rowid);

// A short, printable excerpt of a value for a message (control characters escaped).
std::string excerpt(const std::string& s, size_t max = 60);

}  // namespace kiln::merge_check
