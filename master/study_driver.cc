#include "master/study_driver.h"

#include <algorithm>

#include "master/access.h"
#include "master/checkpoint_files.h"
#include "protocol/clock.h"
#include "protocol/log.h"

namespace hippo::master {
namespace {

// The value of the study's metric among a worker's metrics, or nullopt.
std::optional<double> metric_value(const json& metrics, const std::string& name) {
  auto it = metrics.find(name);
  if (it == metrics.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

bool is_open(TrialStatus status) {
  return status == TrialStatus::kPending || status == TrialStatus::kRunning;
}

}  // namespace

StudyDriver::StudyDriver(SearchPlan& plan, StageTree& tree, StateRegistry& states,
                         Storages& storages, StudyRules rules,
                         std::function<void(const Change&)> on_tree_change)
    : plan_(plan),
      tree_(tree),
      states_(states),
      storages_(storages),
      rules_(rules),
      on_tree_change_(std::move(on_tree_change)) {}

// ---------------------------------------------------------------------------------------------
// Restoring, and staying in line with the plan.

void StudyDriver::restore() {
  next_trial_ = plan_.next_trial_id();
  for (const StudyRow& row : plan_.studies()) {
    // Metrics of every study feed the cache, so a new study reuses evaluations of shared states.
    std::map<std::pair<TrialId, int64_t>, json> by_state;
    for (const MetricRow& m : plan_.study_metrics(row.id))
      by_state[{m.trial, m.step}][m.name] = m.value;
    for (const auto& [ts, metrics] : by_state)
      if (tree_.has_trial(ts.first) && tree_.trial(ts.first).length >= ts.second)
        states_.cache_metrics(state_key(tree_, ts.first, ts.second), metrics);
    if (row.status != StudyStatus::kRunning) continue;

    TrackedStudy s;
    s.id = row.id;
    s.policy = row.policy;
    s.started = Clock::now();
    s.owner = owner_of(row.id);
    try {
      s.spec = parse_spec(row.spec);
      // Its command runs only if this master's operator allows it, whoever allowed it before.
      check_commands(s.spec, rules_.exec);
      s.searcher = make_searcher(s.spec);
      s.searcher->load(row.searcher_state);
      // The events fed to it after that state, again: their operations were carried out then.
      for (const SearcherEvent& e : plan_.searcher_events(row.id)) {
        feed(*s.searcher, e);
        ++s.journaled;
      }
    } catch (const std::exception& e) {
      plan_.set_study_status(row.id, StudyStatus::kFailed,
                             std::string("cannot resume after a restart: ") + e.what());
      continue;
    }
    for (const TrialRow& tr : plan_.trials(row.id)) {
      TrackedTrial t;
      t.id = tr.id;
      t.study = row.id;
      t.number = tr.number;
      t.request = tr.number - 1;
      t.params = tr.params;
      t.length = tr.length;
      t.in_tree = tree_.has_trial(tr.id);
      t.status = tr.status;  // set_status below, once the study is running here
      s.requested_steps += t.length;
      s.requested_evaluations += static_cast<int64_t>(plan_.eval_requests(tr.id).size());
      if (t.status == TrialStatus::kFailed) t.error = tr.end_reason;
      if (t.status == TrialStatus::kStopped) t.stopped_at = trained_length(t);
      if (is_open(t.status)) {
        std::set<int64_t> have;
        for (const MetricRow& m : plan_.metrics(tr.id))
          if (m.name == s.spec.searcher.metric) have.insert(m.step);
        for (int64_t step : plan_.eval_requests(tr.id))
          if (!have.count(step)) {
            t.pending_evals.insert(step);
            pending_.add(tree_, t.id, step);
          }
      }
      s.trials[t.request] = t.id;
      trials_[t.id] = std::move(t);
    }
    plan_.add_event(row.id, "resumed", json::object());
    TrackedStudy& study = studies_[row.id] = std::move(s);
    for (const auto& [request, id] : study.trials)
      set_status(trials_.at(id), trials_.at(id).status);
  }
  expanding_ = true;
  // States whose studies ended while no master ran are kept or evicted now, under this master's
  // budget; what running trials reuse from history is measured again on what is left.
  plan_.transaction([&] { collect_checkpoints(); });
  for (auto& [id, t] : trials_)
    if (t.in_tree) t.history_steps = states_.deepest_retained(tree_, id, t.length);
}

std::string StudyDriver::owner_of(int64_t study) {
  for (const EventRow& e : plan_.events(study, INT64_MAX))
    if (e.kind == "submitted") return e.detail.value("owner", "");
  return "";
}

void StudyDriver::resync() {
  tree_ = plan_.load_tree();
  ++tree_shape_;
  needed_.valid = false;
  pending_.clear();  // its keys name stages of the tree in memory: rebuilt below
  for (auto it = trials_.begin(); it != trials_.end();) {
    std::optional<TrialRow> row = plan_.trial(it->first);
    if (!row) {
      open_.erase(it->first);
      it = trials_.erase(it);
      continue;
    }
    it->second.length = row->length;
    it->second.in_tree = tree_.has_trial(it->first);
    if (it->second.in_tree)
      for (int64_t step : it->second.pending_evals) pending_.add(tree_, it->first, step);
    ++it;
  }
  for (auto& [id, s] : studies_)
    for (auto it = s.trials.begin(); it != s.trials.end();)
      it = trials_.count(it->second) ? std::next(it) : s.trials.erase(it);
}

void StudyDriver::study_transaction(TrackedStudy& s, const std::function<void()>& fn) {
  charged_.insert(s.id);  // the master's time for what this runs in is charged to s
  try {
    plan_.transaction(fn);
  } catch (const PlanBusy&) {
    throw;  // the plan is locked (fn has not begun): the caller retries, the study is fine
  } catch (const std::exception& e) {
    resync();
    plan_.transaction([&] { finish(s, StudyStatus::kFailed, e.what()); });
  }
}

std::vector<Operation> StudyDriver::feed(Searcher& searcher, const SearcherEvent& e) {
  switch (e.kind) {
    case SearcherEvent::Kind::kValidation:
      return searcher.on_validation(e.trial, e.step, e.value);
    case SearcherEvent::Kind::kClosed:
      return searcher.on_trial_closed(e.trial);
    case SearcherEvent::Kind::kFailed:
      return searcher.on_trial_failed(e.trial);
    case SearcherEvent::Kind::kBatch:
      return searcher.next_batch();
  }
  return {};
}

void StudyDriver::journal(TrackedStudy& s, const SearcherEvent& e) {
  if (!s.searcher->replays_exactly()) return;  // save_searcher saves it whole
  plan_.add_searcher_event(s.id, e);
  ++s.journaled;
}

void StudyDriver::react(TrackedStudy& s, const SearcherEvent& e) {
  std::vector<Operation> ops = feed(*s.searcher, e);
  journal(s, e);  // before the operations, so that events they cause come after it
  apply(s, ops);
}

void StudyDriver::save_searcher(TrackedStudy& s) {
  // A whole state costs about its trials to write: once the journal is as long, each event has
  // paid O(1) toward it (a study that grows to n trials writes about 7n in all; with a quarter,
  // it was 25n, a tenth of a large ASHA simulation), and a restart replays at most that many
  // events (cheap: no I/O but the journal's read).
  const int64_t due = std::max<int64_t>(kJournalBeforeSave, static_cast<int64_t>(s.trials.size()));
  if (s.searcher->replays_exactly() && s.journaled < due) return;
  plan_.save_searcher_state(s.id, s.searcher->save());
  s.journaled = 0;
}

bool StudyDriver::take_schedule_change() {
  bool changed = schedule_changed_;
  schedule_changed_ = false;
  return changed;
}

// ---------------------------------------------------------------------------------------------
// Studies.

int64_t StudyDriver::submit(const StudySpec& spec, const json& spec_json, Policy policy,
                            const std::string& owner) {
  check_commands(spec, rules_.exec);
  check_budget(spec, rules_.budget);
  int64_t id = 0;
  try {
    plan_.transaction([&] {
      id = plan_.create_study(spec.name, spec_json, policy);
      TrackedStudy s;
      s.id = id;
      s.spec = spec;
      s.searcher = make_searcher(spec);
      s.policy = policy;
      s.started = Clock::now();
      s.owner = owner;
      TrackedStudy& study = studies_[id] = std::move(s);
      try {
        apply(study, study.searcher->on_study_start());
        plan_.save_searcher_state(id, study.searcher->save());
        plan_.add_event(id, "submitted", {{"policy", to_string(policy)}, {"owner", owner}});
      } catch (...) {
        studies_.erase(id);
        throw;
      }
    });
  } catch (...) {
    resync();
    throw;
  }
  charged_.insert(id);  // the caller's measurement of this goes to the new study
  schedule_changed_ = true;
  expanding_ = true;
  return id;
}

bool StudyDriver::expand(double seconds) {
  const double started = thread_cpu_seconds();
  expanding_ = false;
  for (auto& [id, s] : studies_) {
    while (s.status == StudyStatus::kRunning) {
      if (thread_cpu_seconds() - started >= seconds) return expanding_ = true;
      // A batch stays held back until a transaction takes it: the plan may be locked (PlanBusy,
      // thrown before anything changed), and the searcher gives each batch once.
      if (s.held_back.empty()) s.held_back = s.searcher->next_batch();
      if (s.held_back.empty()) break;
      study_transaction(s, [&] {
        journal(s, {SearcherEvent::Kind::kBatch});
        apply(s, s.held_back);
        save_searcher(s);
      });
      s.held_back.clear();
      schedule_changed_ = true;
    }
  }
  return false;
}

void StudyDriver::charge_budget(TrackedStudy& s, int64_t steps, int64_t evaluations) {
  s.requested_steps += steps;
  s.requested_evaluations += evaluations;
  const Budget& b = rules_.budget;
  if (s.requested_steps > b.steps)
    throw std::runtime_error("the searcher asked for " + std::to_string(s.requested_steps) +
                             " steps in all, more than this master's limit of " +
                             std::to_string(b.steps) + " (--max-steps)");
  if (s.requested_evaluations > b.evaluations)
    throw std::runtime_error("the searcher asked for " + std::to_string(s.requested_evaluations) +
                             " evaluations in all, more than this master's limit of " +
                             std::to_string(b.evaluations) + " (--max-evaluations)");
}

void StudyDriver::cancel(int64_t id) {
  TrackedStudy& s = studies_.at(id);
  if (s.status != StudyStatus::kRunning)
    throw std::invalid_argument("study " + s.spec.name + " (id " + std::to_string(id) +
                                ") has already ended: " + to_string(s.status));
  try {
    plan_.transaction([&] {
      for (const auto& [request, trial] : s.trials) {
        TrackedTrial& t = trials_.at(trial);
        if (is_open(t.status)) stop(t, "the study was cancelled");
      }
      finish(s, StudyStatus::kCancelled, "cancelled by a client");
    });
  } catch (...) {
    resync();
    throw;
  }
  spdlog::info("study {} cancelled", s.spec.name);
  schedule_changed_ = true;
}

void StudyDriver::fail(int64_t id, const std::string& error) {
  TrackedStudy& s = studies_.at(id);
  plan_.transaction([&] { finish(s, StudyStatus::kFailed, error); });
}

int64_t StudyDriver::find(const json& id_or_name) const {
  if (id_or_name.is_number_integer()) {
    int64_t id = id_or_name.get<int64_t>();
    if (studies_.count(id)) return id;
    throw std::invalid_argument("no study " + std::to_string(id) + " on this master");
  }
  if (!id_or_name.is_string())
    throw std::invalid_argument("study: expected an id or a name, got " + id_or_name.dump());
  const std::string text = id_or_name.get<std::string>();
  for (const auto& [id, s] : studies_)
    if (s.spec.name == text) return id;
  if (std::optional<int64_t> id = study_id_in(text); id && studies_.count(*id)) return *id;
  throw std::invalid_argument("no study named " + text + " on this master");
}

bool StudyDriver::running(int64_t study) const {
  auto it = studies_.find(study);
  return it != studies_.end() && it->second.status == StudyStatus::kRunning;
}

const TrackedTrial* StudyDriver::trial(TrialId id) const {
  auto it = trials_.find(id);
  return it == trials_.end() ? nullptr : &it->second;
}

void StudyDriver::finish(TrackedStudy& s, StudyStatus status, std::string error) {
  if (s.status != StudyStatus::kRunning) return;
  // A study whose every trial failed has failed, for the reason its first trial gives.
  if (status == StudyStatus::kDone && !s.trials.empty() &&
      std::all_of(s.trials.begin(), s.trials.end(), [&](const auto& rt) {
        return trials_.at(rt.second).status == TrialStatus::kFailed;
      })) {
    status = StudyStatus::kFailed;
    error = "every trial failed; the first: " + trials_.at(s.trials.begin()->second).error;
  }
  s.status = status;
  s.error = error;
  s.ended = Clock::now();
  ++studies_ended_;
  for (const auto& [request, id] : s.trials) open_.erase(id);
  needed_.valid = false;
  plan_.set_study_status(s.id, status, error);
  schedule_changed_ = true;  // its work under way may be abandoned
  plan_.add_event(s.id, status == StudyStatus::kDone ? "finished" : to_string(status),
                  {{"error", error}});
  collect_checkpoints();
  if (status == StudyStatus::kFailed) spdlog::error("study {} failed: {}", s.spec.name, error);
}

// ---------------------------------------------------------------------------------------------
// Searcher operations.

void StudyDriver::apply(TrackedStudy& s, const std::vector<Operation>& ops) {
  for (const Operation& op : ops) {
    if (s.status != StudyStatus::kRunning) return;
    if (const Create* c = std::get_if<Create>(&op)) {
      if (s.trials.count(c->trial))
        throw std::runtime_error("searcher created trial " + std::to_string(c->trial) + " twice");
      if (c->trial != static_cast<RequestId>(s.trials.size()))
        throw std::runtime_error("searcher trial ids must be 0, 1, 2, ... in creation order");
      if (static_cast<int64_t>(s.trials.size()) >= rules_.budget.trials)
        throw std::runtime_error("the searcher asked for more than " +
                                 std::to_string(rules_.budget.trials) +
                                 " trials, this master's limit (--max-trials)");
      // The trial enters the plan and the tree with its first Train (a stored trial has work).
      if (c->fork && !s.trials.count(c->fork->donor))
        throw std::runtime_error("searcher forked trial " + std::to_string(c->trial) +
                                 " from unknown trial " + std::to_string(c->fork->donor));
      TrackedTrial t;
      t.id = next_trial_++;
      t.study = s.id;
      t.request = c->trial;
      t.params = c->params;
      t.fork = c->fork;
      s.trials[c->trial] = t.id;
      trials_[t.id] = std::move(t);
    } else if (const Train* tr = std::get_if<Train>(&op)) {
      auto it = s.trials.find(tr->trial);
      if (it == s.trials.end())
        throw std::runtime_error("searcher trained unknown trial " + std::to_string(tr->trial));
      place_trial(s, trials_.at(it->second), tr->length, tr->eval_steps);
    } else if (const Stop* st = std::get_if<Stop>(&op)) {
      auto it = s.trials.find(st->trial);
      if (it != s.trials.end()) stop(trials_.at(it->second), "stopped by the searcher");
    } else if (std::holds_alternative<Finish>(op)) {
      finish(s, StudyStatus::kDone, "");
    }
  }
}

void StudyDriver::place_trial(TrackedStudy& s, TrackedTrial& t, int64_t length,
                              const std::vector<int64_t>& evals) {
  charge_budget(s, std::max<int64_t>(0, length - t.length), static_cast<int64_t>(evals.size()));
  if (length > t.length) {
    Change change;
    if (!t.in_tree) {
      TrialRow row;
      row.id = t.id;
      row.study_id = s.id;
      // Trial-based: a root key of its own, so that no trial shares a stage with another.
      row.root_key = s.policy == Policy::kTrialBased ? trial_based_root_key(s.spec.root_key, t.id)
                                                     : s.spec.root_key;
      row.params = t.params;
      row.hyperparams = s.spec.hyperparams(t.params);
      if (t.fork) {
        // The donor's history up to the fork step, the trial's own values after it.
        const TrackedTrial& donor = trials_.at(s.trials.at(t.fork->donor));
        if (!donor.in_tree)
          throw std::runtime_error("searcher forked from trial " + std::to_string(t.fork->donor) +
                                   ", which has never been trained");
        const Hyperparams& history = tree_.trial(donor.id).hyperparams;
        for (auto& [name, seq] : row.hyperparams) {
          try {
            seq = splice(history.at(name), seq, t.fork->step);
          } catch (const std::invalid_argument& e) {
            throw std::runtime_error("fork of trial " + std::to_string(t.request) + " at step " +
                                     std::to_string(t.fork->step) + ": " + name + ": " + e.what());
          }
        }
      }
      row.length = length;
      row.status = TrialStatus::kRunning;
      t.number = plan_.add_trial(row);
      change = tree_.add_trial(t.id, row.root_key, row.hyperparams, length);
      t.in_tree = true;
    } else {
      change = tree_.extend_trial(t.id, length);
      plan_.set_trial_length(t.id, length);
    }
    t.length = length;
    schedule_changed_ = true;
    plan_.save_change(tree_, change);
    for (const Split& split : change.splits) pending_.on_split(tree_, split);
    tree_shape_ += static_cast<int64_t>(change.splits.size());
    raise_needed_ends(t, change);
    on_tree_change_(change);
    t.history_steps = std::max(t.history_steps, states_.deepest_retained(tree_, t.id, length));
  }
  plan_.add_eval_requests(t.id, evals);
  set_status(t, TrialStatus::kRunning);
  plan_.set_trial_status(t.id, t.status);
  // Every evaluation waits first, those evaluated already (for another trial) are then reported
  // in step order: a trial that is trained closes only after its last one, so its searcher sees
  // them all (reported one by one, it would close after the first).
  std::vector<std::pair<int64_t, json>> cached;
  for (int64_t step : evals) {
    t.pending_evals.insert(step);
    pending_.add(tree_, t.id, step);
    if (const json* m = states_.cached_metrics(state_key(tree_, t.id, step)))
      cached.emplace_back(step, *m);
  }
  for (const auto& [step, metrics] : cached)
    if (t.pending_evals.count(step)) record_metric(t, step, metrics);  // unless stopped meanwhile
}

void StudyDriver::stop(TrackedTrial& t, const std::string& reason) {
  forget_pending(t);
  t.stopped_at = trained_length(t);
  set_status(t, TrialStatus::kStopped);
  plan_.set_trial_status(t.id, t.status, reason);
}

void StudyDriver::forget_pending(TrackedTrial& t) {
  for (int64_t step : t.pending_evals) pending_.remove(tree_, t.id, step);
  t.pending_evals.clear();
}

// Stores the metric for the trial and lets its searcher react, in the caller's transaction.
void StudyDriver::record_metric(TrackedTrial& t, int64_t step, const json& metrics) {
  for (const auto& [name, value] : metrics.items())
    plan_.add_metric({t.id, step, name, value.get<double>()});
  t.pending_evals.erase(step);
  pending_.remove(tree_, t.id, step);
  TrackedStudy& s = studies_.at(t.study);
  if (s.status != StudyStatus::kRunning) return;
  if (std::optional<double> v = metric_value(metrics, s.spec.searcher.metric)) {
    react(s, {SearcherEvent::Kind::kValidation, t.request, step, *v});
  }
  maybe_close(t);
}

void StudyDriver::maybe_close(TrackedTrial& t) {
  if (t.status != TrialStatus::kRunning || !t.pending_evals.empty() || !trial_trained(t)) return;
  set_status(t, TrialStatus::kDone);
  plan_.set_trial_status(t.id, t.status, "trained to its length");
  TrackedStudy& s = studies_.at(t.study);
  if (s.status != StudyStatus::kRunning) return;
  react(s, {SearcherEvent::Kind::kClosed, t.request});
}

bool StudyDriver::trial_trained(const TrackedTrial& t) const {
  if (!t.in_tree) return false;
  return tree_.stage(tree_.stage_at(t.id, t.length)).trained_until >= t.length;
}

// ---------------------------------------------------------------------------------------------
// What workers report.

void StudyDriver::record_metrics(const StateKey& key, const json& metrics) {
  states_.cache_metrics(key, metrics);
  const int64_t step = key.second;
  const std::set<TrialId>& index = pending_.waiting(key);
  const std::vector<TrialId> waiting(index.begin(), index.end());
  // One commit for every trial that waited for this state; each study's part is a savepoint of
  // its own, so one failing searcher fails only its study.
  plan_.transaction([&] {
    for (TrialId id : waiting) {
      auto it = trials_.find(id);
      if (it == trials_.end()) continue;
      TrackedTrial& t = it->second;
      TrackedStudy& s = studies_.at(t.study);
      study_transaction(s, [&] {
        record_metric(t, step, metrics);
        save_searcher(s);
      });
    }
  });
}

void StudyDriver::close_trials_ending(TrialId trial, int64_t from, int64_t to) {
  std::vector<TrialId> ending;
  for (StageId id : tree_.path(trial)) {
    const Stage& x = tree_.stage(id);
    if (x.end <= from || x.start >= to) continue;
    for (TrialId t : tree_.trials_ending_in(id)) ending.push_back(t);
  }
  for (TrialId id : ending) {
    auto it = trials_.find(id);
    if (it == trials_.end()) continue;
    TrackedTrial& t = it->second;
    TrackedStudy& s = studies_.at(t.study);
    if (s.status != StudyStatus::kRunning) continue;
    study_transaction(s, [&] {
      maybe_close(t);
      save_searcher(s);
    });
  }
}

// A trial closes when the "done" of the job that trained its last stage comes. If its last state
// was reported (a snapshot) but that "done" never came (the master restarted, or the worker was
// lost, in between), nothing is left to train and nothing else would close it: this does.
void StudyDriver::close_trained_trials() {
  plan_.transaction([&] {
    for (auto& [id, t] : trials_) {
      if (t.status != TrialStatus::kRunning || !running(t.study)) continue;
      TrackedStudy& s = studies_.at(t.study);
      study_transaction(s, [&] {
        maybe_close(t);
        save_searcher(s);
      });
    }
  });
  schedule_changed_ = true;
}

void StudyDriver::fail_trials_through(StageId stage, const std::string& error) {
  failed_stages_.insert(stage);
  std::vector<StageId> todo{stage};
  std::vector<TrialId> failed;
  while (!todo.empty()) {
    StageId id = todo.back();
    todo.pop_back();
    for (TrialId t : tree_.trials_ending_in(id)) failed.push_back(t);
    for (StageId c : tree_.stage(id).children) todo.push_back(c);
  }
  for (TrialId id : failed) {
    auto it = trials_.find(id);
    if (it == trials_.end() || it->second.status != TrialStatus::kRunning) continue;
    TrackedTrial& t = it->second;
    TrackedStudy& s = studies_.at(t.study);
    forget_pending(t);
    set_status(t, TrialStatus::kFailed);
    t.error = error;
    spdlog::error("trial {} of study {} failed: {}", t.number, s.spec.name, error);
    study_transaction(s, [&] {
      plan_.set_trial_status(t.id, t.status, error);
      if (s.status != StudyStatus::kRunning) return;
      react(s, {SearcherEvent::Kind::kFailed, t.request});
      save_searcher(s);
    });
  }
}

void StudyDriver::collect_checkpoints() {
  std::set<StageId> reachable;
  for (const auto& [id, t] : trials_) {
    if (!t.in_tree || !running(t.study)) continue;
    for (StageId s : tree_.path(id)) reachable.insert(s);
  }
  // What running studies need counts against the budget first; the rest compete for what is left.
  const double now = unix_seconds();
  int64_t needed_bytes = 0;
  std::vector<RetentionCandidate> candidates;
  std::vector<int64_t> unreachable;
  std::unordered_map<StageId, int64_t> ends;
  for (const auto& [id, info] : states_.all()) {
    if (reachable.count(info.stage)) {
      needed_bytes += info.bytes;
      if (!info.needed) states_.set_needed(id, true, info.retained_at);  // a study reuses it
      continue;
    }
    unreachable.push_back(id);
    // In a worker's memory only, nothing to keep; a trial-based trial's, nothing to reuse.
    if (info.checkpoint_row < 0 || is_trial_based_root_key(tree_.stage(info.stage).root_key))
      continue;
    if (ends.empty()) ends = trials_through_ends(tree_);
    candidates.push_back({id, info.step, info.bytes,
                          trials_through(tree_, ends, info.stage, info.step),
                          info.needed ? 0.0 : now - info.retained_at.value_or(now)});
  }
  const std::vector<int64_t> kept = choose_retained(
      candidates, std::max<int64_t>(0, rules_.keep_checkpoint_bytes - needed_bytes));
  const std::set<int64_t> keep(kept.begin(), kept.end());
  int64_t evicted = 0, evicted_bytes = 0;
  for (int64_t id : unreachable) {
    const StateInfo info = states_.info(id);
    if (keep.count(id)) {
      if (info.needed) {  // newly left behind: its age starts now
        plan_.set_checkpoint_retained(info.checkpoint_row, now);
        states_.set_needed(id, false, now);
      }
      continue;
    }
    states_.forget(id);
    if (info.checkpoint_row < 0) continue;
    plan_.delete_checkpoint(info.checkpoint_row);
    // Only once the row's deletion is committed: a rollback keeps the row, which needs its file.
    storages_.remove_after_commit(plan_, info.storages, info.file);
    ++evicted;
    evicted_bytes += info.bytes;
  }
  if (evicted > 0 && rules_.keep_checkpoint_bytes > 0) {
    plan_.add_event(
        std::nullopt, "checkpoints_evicted",
        {{"count", evicted}, {"bytes", evicted_bytes}, {"budget", rules_.keep_checkpoint_bytes}});
    spdlog::info("evicted {} checkpoint(s) ({}) to stay within --keep-checkpoints {}", evicted,
                 format_size(evicted_bytes), format_size(rules_.keep_checkpoint_bytes));
  }
}

void StudyDriver::keep_within_budget() {
  if (states_.bytes() <= rules_.keep_checkpoint_bytes) return;  // the common case, at once
  if (states_.kept() == 0) return;  // only what running studies need: nothing to evict
  try {
    plan_.transaction([&] { collect_checkpoints(); });
  } catch (const PlanBusy&) {
    // Another process holds the plan: the next checkpoint tries again; nothing was written.
  }
}

// ---------------------------------------------------------------------------------------------
// Accounting and what the scheduler reads.

void StudyDriver::count_executed(const std::set<int64_t>& studies, int64_t steps) {
  for (int64_t id : studies)
    if (auto it = studies_.find(id); it != studies_.end()) it->second.steps_executed += steps;
}

void StudyDriver::count_moved(const std::set<int64_t>& studies, int64_t bytes, double seconds) {
  for (int64_t id : studies)
    if (auto it = studies_.find(id); it != studies_.end()) {
      it->second.bytes_moved += bytes;
      it->second.transfer_s += seconds;
    }
}

void StudyDriver::count_busy(const std::set<int64_t>& studies, double seconds) {
  for (int64_t id : studies)
    if (auto it = studies_.find(id); it != studies_.end()) it->second.busy_worker_s += seconds;
}

void StudyDriver::charge_master_time(double seconds) {
  // To the studies whose events it handled, evenly; else (scheduling) to the running studies.
  if (!charged_.empty()) {
    for (int64_t id : charged_)
      if (auto it = studies_.find(id); it != studies_.end())
        it->second.master_s += seconds / static_cast<double>(charged_.size());
    charged_.clear();
    return;
  }
  int64_t trials = 0;
  for (const auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning) trials += static_cast<int64_t>(s.trials.size());
  if (trials == 0) return;
  for (auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning)
      s.master_s += seconds * static_cast<double>(s.trials.size()) / static_cast<double>(trials);
}

int64_t StudyDriver::trained_length(const TrackedTrial& t) const {
  return t.in_tree ? tree_.trained_length(t.id) : 0;
}

const StudyDriver::NeededEnds& StudyDriver::needed_ends() {
  if (!needed_.valid) {
    // Only open trials of running studies may need steps that are not trained: a closed trial
    // was trained to its length, a stopped one needs nothing more, and work of a study that
    // ended is not trained any further. So this costs what is open, not what has finished.
    std::map<TrialId, int64_t> lengths;
    for (TrialId id : open_) {
      const TrackedTrial& t = trials_.at(id);
      if (t.in_tree) lengths[id] = t.needed_length();
    }
    needed_.ends = tree_.needed_ends(lengths);
    needed_.valid = true;
    ++needed_.version;
    needed_.raised.clear();
    needed_.uppers.clear();
  }
  return needed_;
}

void StudyDriver::raise_needed_ends(const TrackedTrial& t, const Change& change) {
  if (!needed_.valid) return;  // computed anew at the next call
  NeededEnds& n = needed_;
  for (const Split& split : change.splits) {
    // The part above the split point is the upper stage's now.
    auto it = n.ends.find(split.stage);
    if (it != n.ends.end() && it->second > split.at) {
      n.ends[split.upper] = it->second;
      n.ends[split.stage] = split.at;
    }
    n.uppers.push_back(split.upper);
  }
  tree_.raise_needed_ends(n.ends, t.id, t.needed_length());
  n.raised.push_back(t.id);
}

void StudyDriver::set_status(TrackedTrial& t, TrialStatus status) {
  // A trial that becomes open was placed (raise_needed_ends did its part); one that closes was
  // trained to its length, so dropping it changes no work. Any other change may lower the ends.
  const bool open = status == TrialStatus::kPending || status == TrialStatus::kRunning;
  if (!open && status != TrialStatus::kDone) needed_.valid = false;
  t.status = status;
  if (open && running(t.study))
    open_.insert(t.id);
  else
    open_.erase(t.id);
}

void StudyDriver::on_progress(StageId stage) {
  pending_.on_progress(tree_, stage);
}

std::set<int64_t> StudyDriver::studies_through(StageId stage) const {
  std::set<int64_t> out;
  std::vector<StageId> todo{stage};
  while (!todo.empty()) {
    StageId id = todo.back();
    todo.pop_back();
    for (TrialId t : tree_.trials_ending_in(id)) {
      auto it = trials_.find(t);
      if (it != trials_.end()) out.insert(it->second.study);
    }
    for (StageId c : tree_.stage(id).children) todo.push_back(c);
  }
  return out;
}

}  // namespace hippo::master
