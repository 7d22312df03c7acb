// Text output shared by the subcommands: aligned tables, CSV fields, and the indented stage tree.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stagetree/tree.h"

namespace hippo::cli {

// Prints rows (the first is the header) as columns as wide as their widest cell, each cell
// printable (protocol/text.h: a control character in a name is shown escaped, never obeyed).
void print_table(const std::vector<std::vector<std::string>>& rows);
// Prints rows as CSV, quoting fields that need it.
void print_csv(const std::vector<std::vector<std::string>>& rows);
// A JSON value as a cell: strings without quotes, numbers as JSON writes them.
std::string cell(const nlohmann::json& value);

// The stage tree depth first, one printable line per stage: its range, the values that define it, the
// trials ending in it (named by `trial_name`), and its trained progress when show_progress.
// Only stages for which `keep` is true are printed (with their kept descendants).
void print_tree(const StageTree& tree, const std::function<bool(StageId)>& keep,
                const std::function<std::string(TrialId)>& trial_name, bool show_progress);

}  // namespace hippo::cli
