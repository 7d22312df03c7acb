// `hippo preview SPEC`: what a study would do, without training. Runs the searcher's initial
// operations (for grid and random: every trial), puts the trials into a stage tree, and prints the
// trials, the tree and the step counts; `--format json` prints only the counts of INTERFACE.md as
// one line, `--format csv` the trials.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "master/cli.h"
#include "searchers/searcher.h"
#include "searchers/spec.h"
#include "stagetree/tree.h"

namespace hippo::cli {
namespace {

struct Preview {
  StudySpec spec;
  std::map<RequestId, Params> params;  // the trials the searcher created
  StageTree tree;
};

Preview build_preview(const std::string& path) {
  Preview p;
  try {
    p.spec = load_spec(path);
    std::unique_ptr<Searcher> searcher = make_searcher(p.spec);
    for (const Operation& op : searcher->on_study_start()) {
      if (const Create* c = std::get_if<Create>(&op)) p.params[c->trial] = c->params;
      const Train* t = std::get_if<Train>(&op);
      if (!t) continue;  // Stop and Finish change nothing here
      if (p.tree.has_trial(t->trial))
        p.tree.extend_trial(t->trial, t->length);
      else
        p.tree.add_trial(t->trial, p.spec.root_key, p.spec.hyperparams(p.params.at(t->trial)),
                         t->length);
    }
  } catch (const SpecError& e) {
    throw BadInput(e.what());
  }
  return p;
}

// A parameter value as text: strings without quotes, numbers as JSON writes them.
std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void print_csv(const Preview& p) {
  std::printf("trial,length");
  for (const Param& param : p.spec.space.params())
    std::printf(",%s", csv_field(param.name).c_str());
  std::printf("\n");
  for (const auto& [id, trial] : p.tree.trials()) {
    std::printf("%lld,%lld", static_cast<long long>(id), static_cast<long long>(trial.length));
    for (const Param& param : p.spec.space.params())
      std::printf(",%s", csv_field(value_text(p.params.at(id).at(param.name))).c_str());
    std::printf("\n");
  }
}

void print_table(const Preview& p) {
  const TreeCounts counts = p.tree.counts();
  std::printf("study %s: searcher %s, root key %s\n\n", p.spec.name.c_str(),
              p.spec.searcher.name.c_str(), p.spec.root_key.c_str());

  // Trials: one row each, columns as wide as their widest cell.
  std::vector<std::vector<std::string>> rows = {{"trial", "length"}};
  for (const Param& param : p.spec.space.params()) rows[0].push_back(param.name);
  for (const auto& [id, trial] : p.tree.trials()) {
    rows.push_back({std::to_string(id), std::to_string(trial.length)});
    for (const Param& param : p.spec.space.params())
      rows.back().push_back(value_text(p.params.at(id).at(param.name)));
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::printf("%lld trials:\n", static_cast<long long>(counts.trials));
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t i = 0; i < row.size(); ++i)
      line += " " + row[i] + std::string(width[i] - row[i].size(), ' ');
    std::printf("%s\n", line.substr(0, line.find_last_not_of(' ') + 1).c_str());
  }

  // The tree, depth first; each stage with its range, its values there, and the trials ending in
  // it.
  std::printf("\n%lld stages:\n", static_cast<long long>(counts.stages));
  std::vector<std::pair<StageId, int>> todo;  // (stage, depth), next on top
  std::vector<StageId> tops = p.tree.top_stages();
  for (auto it = tops.rbegin(); it != tops.rend(); ++it) todo.push_back({*it, 1});
  while (!todo.empty()) {
    auto [id, depth] = todo.back();
    todo.pop_back();
    const Stage& s = p.tree.stage(id);
    std::string line = std::string(2 * depth, ' ') + "[" + std::to_string(s.start) + ", " +
                       std::to_string(s.end) + ")";
    for (const auto& [name, seq] : p.tree.trial(s.representative).hyperparams)
      line += " " + name + "=" + seq.describe(s.start, s.end);
    const std::vector<TrialId>& ending = p.tree.trials_ending_in(id);
    if (!ending.empty()) {
      line += "  <- trial" + std::string(ending.size() > 1 ? "s" : "");
      for (TrialId t : ending) line += " " + std::to_string(t);
    }
    std::printf("%s\n", line.c_str());
    for (auto it = s.children.rbegin(); it != s.children.rend(); ++it)
      todo.push_back({*it, depth + 1});
  }

  std::printf("\nsteps: trial-based %lld, unique %lld (ratio %.2f), critical path %lld\n",
              static_cast<long long>(counts.steps_trial_based),
              static_cast<long long>(counts.steps_unique),
              double(counts.steps_trial_based) / double(counts.steps_unique),
              static_cast<long long>(counts.critical_path_steps));
}

int preview(const std::string& path, Format format) {
  Preview p = build_preview(path);
  if (format == Format::kCsv) {
    print_csv(p);
  } else if (format == Format::kJson) {
    TreeCounts counts = p.tree.counts();
    nlohmann::json out = {{"study", p.spec.name},
                          {"trials", counts.trials},
                          {"steps_trial_based", counts.steps_trial_based},
                          {"steps_unique", counts.steps_unique},
                          {"critical_path_steps", counts.critical_path_steps}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    print_table(p);
  }
  return 0;
}

}  // namespace

void add_preview_command(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* cmd = app.add_subcommand(
      "preview", "show the trials, stage tree and step counts of a study, without training");
  cmd->fallthrough();  // global options may also follow the subcommand
  auto path = std::make_shared<std::string>();
  cmd->add_option("spec", *path, "study spec (JSON file)")->required();
  cmd->callback([path, &global, action] {
    *action = [path, &global] { return preview(*path, global.format); };
  });
}

}  // namespace hippo::cli
