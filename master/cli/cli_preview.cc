// `hippo preview SPEC`: what a study would do, without training. Runs the searcher's initial
// operations (for grid and random: every trial), puts the trials into a stage tree, and prints the
// trials, the tree and the step counts; `--format json` prints only the counts of INTERFACE.md as
// one line, `--format csv` the trials.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "master/cli/cli.h"
#include "master/cli/report.h"
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

// One row per trial: its id, its length and its parameters.
std::vector<std::vector<std::string>> trial_rows(const Preview& p) {
  std::vector<std::vector<std::string>> rows = {{"trial", "length"}};
  for (const Param& param : p.spec.space.params()) rows[0].push_back(param.name);
  for (const auto& [id, trial] : p.tree.trials()) {
    rows.push_back({std::to_string(id), std::to_string(trial.length)});
    for (const Param& param : p.spec.space.params())
      rows.back().push_back(cell(p.params.at(id).at(param.name)));
  }
  return rows;
}

void print_preview(const Preview& p) {
  const TreeCounts counts = p.tree.counts();
  std::printf("study %s: searcher %s, root key %s\n\n", p.spec.name.c_str(),
              p.spec.searcher.name.c_str(), p.spec.root_key.c_str());
  std::printf("%lld trials:\n", static_cast<long long>(counts.trials));
  print_table(trial_rows(p));
  std::printf("\n%lld stages:\n", static_cast<long long>(counts.stages));
  print_tree(
      p.tree, [](StageId) { return true; }, [](TrialId id) { return std::to_string(id); }, false);
  std::printf("\nsteps: trial-based %lld, unique %lld (ratio %.2f), critical path %lld\n",
              static_cast<long long>(counts.steps_trial_based),
              static_cast<long long>(counts.steps_unique),
              double(counts.steps_trial_based) / double(counts.steps_unique),
              static_cast<long long>(counts.critical_path_steps));
}

int preview(const std::string& path, Format format) {
  Preview p = build_preview(path);
  if (format == Format::kCsv) {
    print_csv(trial_rows(p));
  } else if (format == Format::kJson) {
    TreeCounts counts = p.tree.counts();
    nlohmann::json out = {{"study", p.spec.name},
                          {"trials", counts.trials},
                          {"steps_trial_based", counts.steps_trial_based},
                          {"steps_unique", counts.steps_unique},
                          {"critical_path_steps", counts.critical_path_steps}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    print_preview(p);
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
