#include "master/cli/report.h"

#include <algorithm>
#include <cstdio>

#include "protocol/text.h"

namespace hippo::cli {

void print_table(const std::vector<std::vector<std::string>>& raw) {
  std::vector<std::vector<std::string>> rows;  // names and values from outside: printable
  for (const auto& row : raw) {
    rows.emplace_back();
    for (const std::string& c : row) rows.back().push_back(protocol::printable(c));
  }
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i) line += "  ";
      line += row[i];
      line.append(width[i] - row[i].size(), ' ');
    }
    std::printf("%s\n", line.substr(0, line.find_last_not_of(' ') + 1).c_str());
  }
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out(1, '"');
  for (char c : s) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

void print_csv(const std::vector<std::vector<std::string>>& rows) {
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i) line += ',';
      line += csv_field(row[i]);
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string cell(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

void print_tree(const StageTree& tree, const std::function<bool(StageId)>& keep,
                const std::function<std::string(TrialId)>& trial_name, bool show_progress) {
  std::vector<std::pair<StageId, int>> todo;  // (stage, depth), next on top
  std::vector<StageId> tops = tree.top_stages();
  for (auto it = tops.rbegin(); it != tops.rend(); ++it)
    if (keep(*it)) todo.push_back({*it, 1});
  while (!todo.empty()) {
    auto [id, depth] = todo.back();
    todo.pop_back();
    const Stage& s = tree.stage(id);
    std::string line = std::string(2 * depth, ' ') + "[" + std::to_string(s.start) + ", " +
                       std::to_string(s.end) + ")";
    for (const auto& [name, seq] : tree.trial(s.representative).hyperparams)
      line += " " + name + "=" + seq.describe(s.start, s.end);
    if (show_progress)
      line += s.trained_until >= s.end ? "  trained"
                                       : "  trained to " + std::to_string(s.trained_until);
    std::string ending;
    for (TrialId t : tree.trials_ending_in(id)) {
      std::string name = trial_name(t);
      if (!name.empty()) ending += " " + name;
    }
    if (!ending.empty()) line += "  <- trial" + ending;
    std::printf("%s\n", protocol::printable(line).c_str());
    for (auto it = s.children.rbegin(); it != s.children.rend(); ++it)
      if (keep(*it)) todo.push_back({*it, depth + 1});
  }
}

}  // namespace hippo::cli
