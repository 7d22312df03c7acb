// `hippo preview SPEC`: what a study would do, without training. Checks the spec against the
// budget (the master's default limits, or --max-trials ...), runs the searcher's initial
// operations (for grid and random: every trial, batch after batch), puts the trials into a stage
// tree, and prints the trials, the tree and the step counts; `--format json` prints only the
// counts of docs/spec.md ("Output") as one line, `--format csv` the trials. With a search plan at
// --db, it also says how many of the unique steps the states kept there (master/retention.h) would
// save; a warm start is read from it (how many evaluations of which earlier studies the searcher
// starts from). It never starts a process: an external searcher's trials are not known without
// running its command, so it shows none.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kernels.h"
#include "master/cli/cli.h"
#include "master/cli/pipeline_balance.h"
#include "master/cli/report.h"
#include "master/state_registry.h"
#include "master/warm_start.h"
#include "protocol/text.h"
#include "searchers/budget.h"
#include "searchers/searcher.h"
#include "searchers/spec.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::cli {
namespace {

struct Preview {
  StudySpec spec;
  std::vector<master::PriorStudy> warm_start;  // what each earlier study gives
  std::map<RequestId, Params> params;          // the trials the searcher created
  StageTree tree;
  int64_t steps_reused = 0;  // of the tree's unique steps, those the plan's states cover
};

// Whether the spec's searcher runs a command (preview never starts one).
bool runs_a_command(const StudySpec& spec) {
  return spec.searcher.name == "external";
}

// A warm start read from the plan at `db`, as `run` would at submit (master/warm_start.h).
master::WarmStart warm_start(const StudySpec& spec, const nlohmann::json& spec_json,
                             const std::string& db) {
  if (spec.warm_start.empty()) return {spec_json, {}};
  if (!std::filesystem::exists(db))
    throw BadInput("warm_start: no search plan at " + db + " to read earlier studies from (--db)");
  SearchPlan plan = SearchPlan::open_read_only(db);
  return master::resolve_warm_start(spec, spec_json, plan);
}

Preview build_preview(const std::string& path, const Budget& budget, int64_t workers,
                      const std::string& db) {
  Preview p;
  try {
    // As `run --workers` would store it: searcher.parallel resolved, and the warm start read.
    const nlohmann::json spec_json = with_parallel(load_spec_file(path).spec_json, workers);
    master::WarmStart warm = warm_start(parse_spec(spec_json), spec_json, db);
    p.spec = parse_spec(warm.spec);
    p.warm_start = std::move(warm.studies);
    check_budget(p.spec, budget);
    check_devices(p.spec, kernels::cuda_device_count() > 0);  // what `run` would refuse
    if (runs_a_command(p.spec)) return p;
    std::unique_ptr<Searcher> searcher = make_searcher(p.spec);
    std::vector<Operation> ops = searcher->on_study_start();
    for (; !ops.empty(); ops = searcher->next_batch()) {
      for (const Operation& op : ops) {
        if (const Create* c = std::get_if<Create>(&op)) p.params[c->trial] = c->params;
        const Train* t = std::get_if<Train>(&op);
        if (!t) continue;  // Stop and Finish change nothing here
        if (p.tree.has_trial(t->trial))
          p.tree.extend_trial(t->trial, t->length);
        else
          p.tree.add_trial(t->trial, p.spec.root_key_of(p.params.at(t->trial)),
                           p.spec.hyperparams(p.params.at(t->trial)), t->length);
      }
    }
  } catch (const SpecError& e) {
    throw BadInput(e.what());
  }
  return p;
}

// The steps of the study's trials that the checkpoints in the plan at `db` cover (none without a
// plan): the trials go into a copy of the plan's tree, after its trials, the checkpoints move with
// the splits they cause, and each trial reuses its path up to the deepest one (as the master
// counts steps_reused). Every checkpoint counts: one that a running study needs is shared too.
int64_t steps_reused(const Preview& p, const std::string& db) {
  if (!std::filesystem::exists(db)) return 0;
  try {
    SearchPlan plan = SearchPlan::open_read_only(db);
    StageTree tree = plan.load_tree();
    master::StateRegistry states("preview");
    for (CheckpointRow row : plan.checkpoints()) {
      row.retained_at = row.created_at;  // every checkpoint counts here (see above)
      states.add_restored(master::state_of(row, /*own_storage=*/""));  // where: not asked here
    }
    std::map<TrialId, int64_t> history;
    TrialId next = plan.next_trial_id();
    for (const auto& [id, trial] : p.tree.trials()) {
      for (const Split& split :
           tree.add_trial(next, trial.root_key, trial.hyperparams, trial.length).splits)
        states.on_split(split);
      history[next] = states.deepest_retained(tree, next, trial.length);
      ++next;
    }
    return tree.needed_steps(history).unique;
  } catch (const std::exception& e) {
    throw BadInput(std::string("search plan ") + db + ": " + e.what());
  }
}

// The number a trial will have in its study (`hippo trials`, `best`, `tree`): a study numbers its
// trials 1, 2, ... in creation order, and a built-in searcher's request ids are dense from 0
// (StudyDriver restores request = number - 1).
std::string trial_number(TrialId id) {
  return std::to_string(id + 1);
}

// One row per trial: its number, its length and its parameters.
std::vector<std::vector<std::string>> trial_rows(const Preview& p) {
  std::vector<std::vector<std::string>> rows = {{"trial", "length"}};
  for (const Param& param : p.spec.space.params()) rows[0].push_back(param.name);
  for (const auto& [id, trial] : p.tree.trials()) {
    rows.push_back({trial_number(id), std::to_string(trial.length)});
    for (const Param& param : p.spec.space.params())
      rows.back().push_back(cell(p.params.at(id).at(param.name)));
  }
  return rows;
}

// "asha", or "asha (parallel 8)" where it keeps trials in flight.
std::string searcher_shown(const StudySpec& spec) {
  std::optional<int64_t> parallel = parallel_of({{"searcher", spec.searcher.options}});
  return spec.searcher.name + (parallel ? " (parallel " + std::to_string(*parallel) + ")" : "");
}

// A setting of the first trial: its own value, else the spec's fixed one (null when neither).
nlohmann::json first_trial_setting(const Preview& p, const std::string& name) {
  if (!p.params.empty() && p.params.begin()->second.contains(name))
    return p.params.begin()->second.at(name);
  return p.spec.fixed.value(name, nlohmann::json());
}

// The pipeline's balance for the first trial's model, batch size and optimizer.
void print_balance(const Preview& p) {
  const nlohmann::json batch = first_trial_setting(p, "batch_size");
  const nlohmann::json optimizer = first_trial_setting(p, "optimizer");
  std::printf("\n");
  if (p.params.empty() || !batch.is_number_integer() || !optimizer.is_string()) {
    std::printf(
        "pipeline balance: not shown (no trial with a constant batch size and optimizer)\n");
    return;
  }
  const PipelineSpec& pipe = p.spec.pipeline;
  const pipeline::PipelineShape shape{pipe.stages, pipe.microbatches,
                                      *pipeline::parse_schedule(pipe.schedule), pipe.chunks,
                                      pipe.vocab_parallel};
  std::printf("(trial %s's model, batch size %lld in %d micro-batches)\n",
              trial_number(p.params.begin()->first).c_str(),
              static_cast<long long>(batch.get<int64_t>()), pipe.microbatches);
  print_pipeline_balance(p.spec.model_of(p.params.begin()->second), shape,
                         static_cast<int>(batch.get<int64_t>() / pipe.microbatches),
                         optimizer.get<std::string>());
}

void print_preview(const Preview& p) {
  const TreeCounts counts = p.tree.counts();
  if (p.spec.architectures.size() == 1)
    std::printf("study %s: searcher %s, root key %s\n\n", protocol::printable(p.spec.name).c_str(),
                searcher_shown(p.spec).c_str(), p.spec.architectures.begin()->first.c_str());
  else
    std::printf("study %s: searcher %s, %zu architectures (a root key each)\n\n",
                protocol::printable(p.spec.name).c_str(), searcher_shown(p.spec).c_str(),
                p.spec.architectures.size());
  if (runs_a_command(p.spec))
    std::printf(
        "the external searcher decides the trials, and preview runs no command: none shown\n\n");
  if (!p.warm_start.empty()) {
    std::string from;
    int64_t evaluations = 0;
    for (const master::PriorStudy& s : p.warm_start) {
      from +=
          (from.empty() ? "" : ", ") + protocol::printable(s.name) + " (" +
          std::to_string(s.trials) + " trials" +
          (s.left_out ? ", " + std::to_string(s.left_out) + " outside this space left out" : "") +
          ")";
      evaluations += s.evaluations;
    }
    std::printf("warm start: %lld evaluations of %zu trials from %s\n\n",
                static_cast<long long>(evaluations), p.spec.prior.size(), from.c_str());
  }
  std::printf("%lld trials:\n", static_cast<long long>(counts.trials));
  print_table(trial_rows(p));
  std::printf("\n%lld stages:\n", static_cast<long long>(counts.stages));
  print_tree(
      p.tree, [](StageId) { return true; }, trial_number, false);
  std::printf(
      "\nsteps: trial-based %lld, unique %lld (ratio %.2f), critical path %lld\n",
      static_cast<long long>(counts.steps_trial_based), static_cast<long long>(counts.steps_unique),
      counts.steps_unique ? double(counts.steps_trial_based) / double(counts.steps_unique) : 0.0,
      static_cast<long long>(counts.critical_path_steps));
  if (p.steps_reused > 0)
    std::printf("reused from the checkpoints of earlier studies: %lld of the unique steps\n",
                static_cast<long long>(p.steps_reused));
  if (p.spec.pipeline.stages > 1) print_balance(p);
}

int preview(const std::string& path, const Budget& budget, int64_t workers,
            const GlobalOptions& global) {
  const Format format = global.format;
  Preview p = build_preview(path, budget, workers, global.db);
  p.steps_reused = steps_reused(p, global.db);
  if (format == Format::kCsv) {
    print_csv(trial_rows(p));
  } else if (format == Format::kJson) {
    TreeCounts counts = p.tree.counts();
    nlohmann::json out = {{"study", p.spec.name},
                          {"trials", counts.trials},
                          {"steps_trial_based", counts.steps_trial_based},
                          {"steps_unique", counts.steps_unique},
                          {"steps_reused", p.steps_reused},
                          {"critical_path_steps", counts.critical_path_steps}};
    if (std::optional<int64_t> parallel = parallel_of({{"searcher", p.spec.searcher.options}}))
      out["parallel"] = *parallel;
    for (const master::PriorStudy& s : p.warm_start)
      out["warm_start"].push_back({{"study", s.name},
                                   {"trials", s.trials},
                                   {"evaluations", s.evaluations},
                                   {"left_out", s.left_out}});
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
  auto budget = std::make_shared<Budget>();
  auto workers = std::make_shared<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  cmd->add_option("spec", *path, "study spec (JSON file)")->required();
  add_budget_options(cmd, budget.get());
  cmd->add_option("--workers", *workers,
                  "the workers it will run on: a searcher without `parallel` keeps as many trials "
                  "in flight (default: one per core, as `run`)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  set_action(cmd, action, kEveryFormat, [path, budget, workers, &global] {
    return preview(*path, *budget, *workers, global);
  });
}

}  // namespace hippo::cli
