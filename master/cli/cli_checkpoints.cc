// `hippo checkpoints`: the states in the search plan, per root key: those kept for later studies
// (master/retention.h) and those running studies need, with their bytes. `--free-to SIZE` evicts
// kept states by value until they fit in SIZE; `--forget STUDY` evicts the kept states that only
// that study's trials pass through. Both change the plan and the checkpoint directory, so they
// take the plan's lock (master/plan_lock.h) and refuse while a master runs on it; states that
// running studies need are never touched. A file removed by hand breaks nothing either: a master
// forgets a checkpoint whose file is gone and replays its state when it is needed.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "master/checkpoint_files.h"
#include "master/cli/cli.h"
#include "master/cli/report.h"
#include "master/plan_lock.h"
#include "master/retention.h"
#include "protocol/clock.h"
#include "storage/plan.h"

namespace hippo::cli {
namespace {

using nlohmann::json;

struct Usage {
  int64_t kept_states = 0, kept_bytes = 0, needed_states = 0, needed_bytes = 0;
};

int list(const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  const StageTree tree = plan.load_tree();
  std::map<std::string, Usage> by_root;
  for (const CheckpointRow& row : plan.checkpoints()) {
    Usage& u = by_root[tree.stage(row.stage).root_key];
    (row.retained_at ? u.kept_states : u.needed_states) += 1;
    (row.retained_at ? u.kept_bytes : u.needed_bytes) += row.size;
  }
  if (global.format == Format::kJson) {
    json out = json::array();
    for (const auto& [root, u] : by_root)
      out.push_back({{"root_key", root},
                     {"kept_states", u.kept_states},
                     {"kept_bytes", u.kept_bytes},
                     {"needed_states", u.needed_states},
                     {"needed_bytes", u.needed_bytes}});
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  const bool csv = global.format == Format::kCsv;
  auto size = [&](int64_t bytes) {
    return csv ? std::to_string(bytes) : master::format_size(bytes);
  };
  std::vector<std::vector<std::string>> rows = {
      csv ? std::vector<std::string>{"root_key", "kept_states", "kept_bytes", "needed_states",
                                     "needed_bytes"}
          : std::vector<std::string>{"root key", "kept for later", "bytes",
                                     "needed by running studies", "bytes"}};
  for (const auto& [root, u] : by_root)
    rows.push_back({root, std::to_string(u.kept_states), size(u.kept_bytes),
                    std::to_string(u.needed_states), size(u.needed_bytes)});
  if (csv)
    print_csv(rows);
  else if (by_root.empty())
    std::printf("no checkpoints in %s\n", global.db.c_str());
  else
    print_table(rows);
  return 0;
}

// Deletes the rows of `gone` (one transaction, with an event) and then their files.
void evict(SearchPlan& plan, const std::string& dir, const std::vector<CheckpointRow>& gone,
           const std::string& why, const GlobalOptions& global) {
  int64_t bytes = 0;
  plan.transaction([&] {
    for (const CheckpointRow& row : gone) {
      plan.delete_checkpoint(row.id);
      master::remove_after_commit(plan, dir, row.file);
      bytes += row.size;
    }
    if (!gone.empty())
      plan.add_event(std::nullopt, "checkpoints_evicted",
                     {{"count", gone.size()}, {"bytes", bytes}, {"why", why}});
  });
  if (global.format == Format::kJson)
    std::printf("%s\n",
                json{{"evicted_states", gone.size()}, {"evicted_bytes", bytes}}.dump().c_str());
  else
    std::printf("evicted %zu checkpoint(s), %s (%s)\n", gone.size(),
                master::format_size(bytes).c_str(), why.c_str());
}

int free_to(const std::string& size_text, const std::string& dir, const GlobalOptions& global) {
  int64_t budget = 0;
  try {
    budget = master::parse_size(size_text);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--free-to: ") + e.what());
  }
  SearchPlan plan = open_existing_plan(global.db);
  master::PlanLock lock(global.db, "hippo checkpoints --free-to");
  const StageTree tree = plan.load_tree();
  const auto ends = master::trials_through_ends(tree);
  const double now = unix_seconds();
  std::vector<master::RetentionCandidate> candidates;
  std::map<int64_t, CheckpointRow> kept_rows;
  for (const CheckpointRow& row : plan.checkpoints()) {
    if (!row.retained_at) continue;
    kept_rows[row.id] = row;
    candidates.push_back({row.id, row.step, row.size,
                          master::trials_through(tree, ends, row.stage, row.step),
                          now - *row.retained_at});
  }
  for (int64_t id : master::choose_retained(candidates, budget)) kept_rows.erase(id);
  std::vector<CheckpointRow> gone;
  for (const auto& [id, row] : kept_rows) gone.push_back(row);
  evict(plan, dir, gone, "freed to " + master::format_size(budget), global);
  return 0;
}

int forget(const std::string& study_text, const std::string& dir, const GlobalOptions& global) {
  SearchPlan plan = open_existing_plan(global.db);
  std::optional<StudyRow> study = plan.study_by_name(study_text);
  if (!study)
    if (std::optional<int64_t> id = study_id_in(study_text)) study = plan.study(*id);
  if (!study || study->deleted_at)
    throw BadInput("no study named " + study_text + " in " + global.db);
  master::PlanLock lock(global.db, "hippo checkpoints --forget");
  const StageTree tree = plan.load_tree();
  // The stages of its trials' paths, less those of any other study's trials.
  std::set<StageId> its, others;
  for (const StudyRow& s : plan.studies())
    for (const TrialRow& t : plan.trials(s.id))
      if (tree.has_trial(t.id))
        for (StageId stage : tree.path(t.id)) (s.id == study->id ? its : others).insert(stage);
  std::vector<CheckpointRow> gone;
  for (const CheckpointRow& row : plan.checkpoints())
    if (row.retained_at && its.count(row.stage) && !others.count(row.stage)) gone.push_back(row);
  evict(plan, dir, gone, "forgot study " + study->name, global);
  return 0;
}

}  // namespace

void add_checkpoints_command(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* cmd = app.add_subcommand(
      "checkpoints",
      "show the checkpoints kept for later studies and those running studies need, per root key; "
      "free space or forget a study's");
  cmd->fallthrough();
  struct Args {
    std::string free_to, forget, checkpoints;
  };
  auto a = std::make_shared<Args>();
  auto* free = cmd->add_option("--free-to", a->free_to,
                               "evict kept checkpoints, least valuable first, until they fit in "
                               "this size (e.g. 5GB; 0 evicts all)");
  cmd->add_option("--forget", a->forget,
                  "evict the kept checkpoints that only this study's trials pass through")
      ->excludes(free);
  cmd->add_option("--checkpoints", a->checkpoints, "checkpoint directory (default DB.checkpoints)");
  // The listing is rows, one per root key; what an eviction did is one line (set_action's
  // formats, which depend on the options here).
  cmd->footer("Prints " + formats_text(kEveryFormat) + "; with --free-to or --forget, " +
              formats_text(kTableOrJson) + ".");
  cmd->callback([a, &global, action] {
    const bool evicts = !a->free_to.empty() || !a->forget.empty();
    *action = {evicts ? kTableOrJson : kEveryFormat, [a, &global] {
                 const std::string dir =
                     a->checkpoints.empty() ? global.db + ".checkpoints" : a->checkpoints;
                 try {
                   if (!a->free_to.empty()) return free_to(a->free_to, dir, global);
                   if (!a->forget.empty()) return forget(a->forget, dir, global);
                 } catch (const master::PlanLocked& e) {
                   throw RunFailed(e.what());
                 }
                 return list(global);
               }};
  });
}

}  // namespace hippo::cli
