// `hippo checkpoints`: the states in the search plan, per root key: those kept for later studies
// (master/retention.h) and those running studies need, with their bytes. `--free-to SIZE` evicts
// kept states by value until they fit in SIZE; `--forget STUDY` evicts the kept states that only
// that study's trials pass through. Both change the plan and the checkpoint directory, so they
// take the plan's lock (master/plan_lock.h) and refuse while a master runs on it; states that
// running studies need are never touched. A file removed by hand breaks nothing either: a master
// forgets a checkpoint whose file is gone and replays its state when it is needed.
//
// `--produced-by KEY` lists the states and metrics whose lineage holds a worker's key (the plan's
// provenance, schema 14: written by a worker of that key, or trained or measured from such a
// state); with `--forget` they are distrusted: the states go (rows, then files), the metrics go,
// and a trial that was done with one of them runs again on `hippo resume` to measure it anew,
// without telling its searcher (its decisions stand). Its study, done or interrupted, is
// interrupted until then; one that was done ends done again after. One transaction, under the
// plan's lock. A failed or cancelled study loses the metrics and keeps its end.
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
#include "protocol/auth.h"
#include "protocol/clock.h"
#include "protocol/text.h"
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

// The key of --produced-by: a key as a .pub file holds it, such a file, or "anonymous" (the peers
// of a master with --insecure).
std::string producer_key(const std::string& text) {
  if (text == "anonymous" || protocol::is_key_text(text)) return text;
  std::error_code ec;
  if (!text.empty() && std::filesystem::is_regular_file(text, ec)) {
    try {
      return protocol::read_public_key(text);
    } catch (const protocol::AuthError& e) {
      throw BadInput(std::string("--produced-by: ") + e.what());
    }
  }
  throw BadInput("--produced-by: " + protocol::printable(text) +
                 " is neither a public key (40 characters of Z85, as a .pub file holds it), a .pub "
                 "file, nor `anonymous`");
}

int produced_by(const std::string& text, bool forget, const std::string& dir,
                const GlobalOptions& global) {
  const std::string key = producer_key(text);
  SearchPlan plan = open_existing_plan(global.db);
  std::optional<master::PlanLock> lock;
  if (forget) lock.emplace(global.db, "hippo checkpoints --produced-by --forget");
  const std::vector<CheckpointRow> states = plan.checkpoints_resting_on(key);
  const std::vector<MetricRow> metrics = plan.metrics_resting_on(key);
  std::map<TrialId, TrialRow> trials;
  for (const MetricRow& m : metrics)
    if (!trials.count(m.trial)) trials[m.trial] = *plan.trial(m.trial);
  std::map<int64_t, StudyRow> studies;
  for (const auto& [id, t] : trials)
    if (!studies.count(t.study_id)) studies[t.study_id] = *plan.study(t.study_id);
  auto study_name = [&](TrialId trial) { return studies.at(trials.at(trial).study_id).name; };

  // What it rests on: the key made it itself, or made a state it was trained or measured from.
  auto how = [&](const std::string& producer) { return producer == key ? "made" : "inherited"; };
  int64_t bytes = 0;
  for (const CheckpointRow& row : states) bytes += row.size;
  // Trials that measure again, and the studies that wait for them.
  std::set<TrialId> reopened;
  std::set<int64_t> waiting;
  if (forget) {
    plan.transaction([&] {
      for (const CheckpointRow& row : states) {
        plan.delete_checkpoint(row.id);
        master::remove_after_commit(plan, dir, row.file);
      }
      for (const MetricRow& m : metrics) plan.delete_metric(m.trial, m.step, m.name);
      for (const auto& [id, t] : trials) {
        const StudyRow& s = studies.at(t.study_id);
        if (s.deleted_at || t.status != TrialStatus::kDone ||
            (s.status != StudyStatus::kDone && s.status != StudyStatus::kInterrupted &&
             s.status != StudyStatus::kRunning))  // running: its master is gone (we hold the lock)
          continue;
        plan.reopen_trial_to_remeasure(id);
        reopened.insert(id);
        waiting.insert(s.id);
      }
      for (int64_t id : waiting) {
        const std::string why = "evaluations resting on a distrusted key; `hippo resume " +
                                studies.at(id).name + "` measures them again";
        plan.interrupt_study_to_remeasure(id, why);
        plan.add_event(id, "interrupted", {{"error", why}});
      }
      json evidence = json::array();
      for (const MetricRow& m : metrics)
        evidence.push_back({{"trial", m.trial},
                            {"step", m.step},
                            {"name", m.name},
                            {"value", m.value},
                            {"producer", m.producer}});
      plan.add_event(std::nullopt, "key_distrusted",
                     {{"key", key},
                      {"states", states.size()},
                      {"bytes", bytes},
                      {"metrics", evidence},
                      {"trials_reopened", reopened.size()},
                      {"studies_interrupted", waiting.size()}});
    });
  }

  if (global.format == Format::kJson) {
    json out = {{"key", key}, {"states", json::array()}, {"metrics", json::array()}};
    for (const CheckpointRow& row : states)
      out["states"].push_back({{"id", row.id},
                               {"stage", row.stage},
                               {"step", row.step},
                               {"file", row.file},
                               {"bytes", row.size},
                               {"how", how(row.producer)}});
    for (const MetricRow& m : metrics)
      out["metrics"].push_back({{"study", study_name(m.trial)},
                                {"trial", trials.at(m.trial).number},
                                {"step", m.step},
                                {"name", m.name},
                                {"value", m.value},
                                {"how", how(m.producer)}});
    if (forget) {
      out["forgotten"] = true;
      out["trials_to_measure_again"] = reopened.size();
      out["studies_to_resume"] = json::array();
      for (int64_t id : waiting) out["studies_to_resume"].push_back(studies.at(id).name);
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  const bool csv = global.format == Format::kCsv;
  std::vector<std::vector<std::string>> rows = {
      {"kind", "study", "trial", "stage", "step", "what", "how"}};
  for (const CheckpointRow& row : states)
    rows.push_back(
        {"state", "", "", std::to_string(row.stage), std::to_string(row.step),
         row.file + " (" + (csv ? std::to_string(row.size) : master::format_size(row.size)) + ")",
         how(row.producer)});
  for (const MetricRow& m : metrics)
    rows.push_back({"metric", study_name(m.trial), std::to_string(trials.at(m.trial).number), "",
                    std::to_string(m.step), m.name + " = " + json(m.value).dump(),
                    how(m.producer)});
  if (csv) {
    print_csv(rows);
    return 0;
  }
  const std::string who = "key " + key;
  if (rows.size() == 1)
    std::printf("nothing in %s rests on %s\n", protocol::printable(global.db).c_str(), who.c_str());
  else
    print_table(rows);
  if (!forget) return 0;
  std::printf("forgot %zu state(s), %s, and %zu metric(s) resting on %s\n", states.size(),
              master::format_size(bytes).c_str(), metrics.size(), who.c_str());
  for (int64_t id : waiting) {
    size_t n = 0;
    for (TrialId t : reopened) n += trials.at(t).study_id == id;
    std::printf("study %s: %zu trial(s) to measure again: hippo resume %s\n",
                protocol::printable(studies.at(id).name).c_str(), n,
                protocol::printable(studies.at(id).name).c_str());
  }
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
    std::string free_to, forget, checkpoints, produced_by;
  };
  auto a = std::make_shared<Args>();
  auto* free = cmd->add_option("--free-to", a->free_to,
                               "evict kept checkpoints, least valuable first, until they fit in "
                               "this size (e.g. 5GB; 0 evicts all)");
  auto* forget_option =
      cmd->add_option("--forget", a->forget,
                      "evict the kept checkpoints that only this study's trials pass "
                      "through; with --produced-by (no study), distrust what it lists")
          ->expected(0, 1)
          ->excludes(free);
  auto* by =
      cmd->add_option(
             "--produced-by", a->produced_by,
             "list the states and metrics that rest on a worker's key (its .pub file, the "
             "key itself, or `anonymous`): made by it, or trained or measured from its states")
          ->excludes(free);
  cmd->add_option("--checkpoints", a->checkpoints, "checkpoint directory (default DB.checkpoints)");
  // The listing is rows, one per root key; what an eviction did is one line (set_action's
  // formats, which depend on the options here).
  cmd->footer("Prints " + formats_text(kEveryFormat) + "; with --free-to or --forget, " +
              formats_text(kTableOrJson) + ".");
  cmd->callback([a, &global, action, forget_option, by] {
    const bool forgets = forget_option->count() > 0, by_key = by->count() > 0;
    const bool evicts = !a->free_to.empty() || forgets;
    *action = {
        evicts ? kTableOrJson : kEveryFormat, [a, &global, forgets, by_key] {
          if (by_key && a->produced_by.empty())
            throw BadInput("--produced-by: an empty key (give a .pub file, a key, or `anonymous`)");
          if (forgets && a->forget.empty() == a->produced_by.empty())
            throw BadInput(a->forget.empty()
                               ? "--forget: name a study, or give --produced-by KEY"
                               : "--forget takes no study with --produced-by (it forgets "
                                 "what KEY made)");
          const std::string dir =
              a->checkpoints.empty() ? global.db + ".checkpoints" : a->checkpoints;
          try {
            if (!a->produced_by.empty())  // before --forget, which it qualifies
              return produced_by(a->produced_by, forgets, dir, global);
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
