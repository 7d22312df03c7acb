#include "master/study_driver.h"

#include <algorithm>
#include <cmath>

#include "master/access.h"
#include "master/warm_start.h"
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

// What a searcher sees of a diverged trial: the worst value of its mode.
double worst_value(bool maximize) {
  return maximize ? -INFINITY : INFINITY;
}

// The searcher's view of an evaluation whose metrics hold every metric of the goals, finite
// objectives included: each objective's value, the constraints' violation (pareto.h), and the
// single value of a searcher of one objective (the worst of its mode when infeasible). A spec of
// one metric and mode carries the value alone, as before objectives existed.
SearcherEvent evaluation_event(const Goals& goals, RequestId trial, int64_t step,
                               const json& metrics) {
  SearcherEvent event;
  event.trial = trial;
  event.step = step;
  double violation = 0;
  for (const Constraint& c : goals.constraints)
    violation += c.violation(*metric_value(metrics, c.metric));
  const Objective& first = goals.objectives[0];
  event.value = violation == 0 ? *metric_value(metrics, first.metric) : worst_value(first.maximize);
  if (!goals.multi()) return event;
  for (const Objective& o : goals.objectives)
    event.values.push_back(*metric_value(metrics, o.metric));
  event.violation = violation;
  return event;
}

// A diverged trial's: the worst value of every objective's mode.
SearcherEvent worst_evaluation(const Goals& goals, RequestId trial, int64_t step) {
  SearcherEvent event;
  event.trial = trial;
  event.step = step;
  event.value = worst_value(goals.objectives[0].maximize);
  if (!goals.multi()) return event;
  for (const Objective& o : goals.objectives) event.values.push_back(worst_value(o.maximize));
  return event;
}

std::string non_finite_name(double v) {
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

// "loss, accuracy" (the names a worker reported), for the message of a missing metric.
std::string names_in(const json& metrics) {
  std::string out;
  for (const auto& [name, value] : metrics.items()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// How to go on when a study of the name exists: only an interrupted one can be resumed; an ended
// one keeps its results (`hippo summary`), and a new run needs another name or its deletion.
std::string commands_hint(const StudyRow& old) {
  if (old.status == StudyStatus::kInterrupted)
    return fmt::format(
        "resume it with `hippo resume {0}`, give this spec another \"name\", or delete the old "
        "study with `hippo delete {0}`",
        old.name);
  if (old.status == StudyStatus::kRunning)
    return fmt::format(
        "it is running: wait for it (`hippo wait {0}`), cancel it (`hippo cancel {0}`), or give "
        "this spec another \"name\"",
        old.name);
  return fmt::format(
      "it has ended (`hippo summary {0}` shows its results): give this spec another \"name\", or "
      "delete the old study with `hippo delete {0}` to run it again",
      old.name);
}

}  // namespace

double TrackedStudy::run_s() const {
  return status == StudyStatus::kRunning ? account.run_s + seconds_since(resumed) : account.run_s;
}

double TrackedStudy::wall_s() const {
  return std::max(0.0, ended_at.value_or(unix_seconds()) - created_at - account.paused_s);
}

StudyDriver::StudyDriver(SearchPlan& plan, StageTree& tree, StateRegistry& states,
                         Storages& storages, StudyRules rules)
    : plan_(plan), tree_(tree), states_(states), storages_(storages), rules_(rules) {}

// ---------------------------------------------------------------------------------------------
// Restoring.

Edit StudyDriver::restore(bool resume_running) {
  next_trial_ = plan_.next_trial_id();
  // Metrics of every trial in the tree (a deleted study's too: its trials stay in the shared
  // tree) feed the cache, so a new study reuses evaluations of shared states.
  std::map<std::pair<TrialId, int64_t>, Measured> by_state;
  for (const MetricRow& m : plan_.every_metric()) {
    Measured& measured = by_state[{m.trial, m.step}];
    measured.metrics[m.name] = m.value;
    measured.provenance = {m.producer, m.lineage};
  }
  for (const auto& [ts, measured] : by_state)
    if (tree_.has_trial(ts.first) && tree_.trial(ts.first).length >= ts.second)
      states_.cache_metrics(state_key(tree_, ts.first, ts.second), measured);
  Edit e;
  for (const StudyRow& row : plan_.studies()) {
    if (row.status != StudyStatus::kRunning) continue;
    try {
      if (!resume_running)
        throw std::runtime_error("the run that had it ended without ending it (a crash)");
      e.add(edit::TakeUpStudy{std::make_shared<LoadedStudy>(load_study(row)), false});
    } catch (const std::exception& err) {
      // Not this master's to run (another master, or this one with --allow-exec, may resume it).
      const std::string why = resume_running
                                  ? std::string("this master cannot resume it: ") + err.what()
                                  : std::string(err.what());
      e.add(edit::InterruptStoredStudy{row.id, row.name, why});
    }
  }
  // States whose studies ended while no master ran are kept or evicted now, under this master's
  // budget (what running trials reuse from history is measured again on what is left).
  e.later.push_back(Collect{});
  return e;
}

LoadedStudy StudyDriver::load_study(const StudyRow& row) const {
  LoadedStudy loaded;
  TrackedStudy& s = loaded.study;
  s.id = row.id;
  s.policy = row.policy;
  s.resumed = Clock::now();
  s.owner = owner_of(row.id);
  s.account = row.account;
  s.created_at = row.created_at;
  s.resumed_at = unix_seconds();
  // Interrupted since its row's end: a pause, not a part of its wall time.
  if (row.status == StudyStatus::kInterrupted && row.ended_at)
    s.account.paused_s += std::max(0.0, unix_seconds() - *row.ended_at);
  s.account_changed = true;
  s.spec = parse_spec(row.spec);
  s.remeasure = row.remeasure;
  // Its command runs only if this master's operator allows it, whoever allowed it before.
  check_commands(s.spec, rules_.exec);
  s.searcher = make_searcher(s.spec);
  s.searcher->load(row.searcher_state);
  // The events fed to it after that state, again: their operations were carried out then.
  for (const SearcherEvent& e : plan_.searcher_events(row.id)) {
    feed(*s.searcher, e);
    ++s.journaled;
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
    t.status = tr.status;  // set_status once the study is running here (take_up)
    t.remeasure = tr.remeasure;
    const std::vector<int64_t> requested = plan_.eval_requests(tr.id);
    s.requested_steps += t.length;
    s.requested_evaluations += static_cast<int64_t>(requested.size());
    if (t.status == TrialStatus::kFailed) t.error = tr.end_reason;
    if (t.status == TrialStatus::kStopped || t.status == TrialStatus::kDiverged)
      t.stopped_at = tr.end_step.value_or(trained_length(t));
    if (is_open(t.status)) {
      std::set<int64_t> have;
      for (const MetricRow& m : plan_.metrics(tr.id))
        if (m.name == s.spec.searcher.metric) have.insert(m.step);
      for (int64_t step : requested)
        if (!have.count(step)) t.pending_evals.insert(step);
    }
    s.trials[t.request] = t.id;
    loaded.trials.push_back(std::move(t));
  }
  return loaded;
}

void StudyDriver::apply_op(const edit::TakeUpStudy& op) {
  TrackedStudy& s = op.loaded->study;
  if (op.resumed) plan_.resume_study(s.id);  // checks the status again, in the same statement
  plan_.set_study_account(s.id, s.account);
  plan_.add_event(s.id, "resumed", json::object());
  s.account_changed = false;
  for (auto it = trials_.begin(); it != trials_.end();) {  // of an earlier run of this master
    if (it->second.study == s.id) {
      forget_pending(it->second);
      open_.erase(it->first);
      it = trials_.erase(it);
    } else {
      ++it;
    }
  }
  for (TrackedTrial& t : op.loaded->trials) {
    for (int64_t step : t.pending_evals) pending_.add(tree_, t.id, step);
    // What it reuses from states that other studies left behind (those that trained while it
    // waited included).
    if (t.in_tree) t.history_steps = states_.deepest_retained(tree_, t.id, t.length);
    const TrialId id = t.id;
    trials_[id] = std::move(t);
  }
  op.loaded->trials.clear();
  TrackedStudy& study = studies_[s.id] = std::move(s);
  for (const auto& [request, id] : study.trials) {
    set_status(trials_.at(id), trials_.at(id).status);
    // A running trial may have been trained meanwhile (or before the master that had it
    // stopped): it closes if it was.
    if (trials_.at(id).status == TrialStatus::kRunning) queue_.push_back(Close{id});
  }
  needed_.valid = false;
  expanding_ = true;
  schedule_changed_ = true;
  if (op.resumed) spdlog::info("study {} resumed", study.spec.name);
}

void StudyDriver::apply_op(const edit::InterruptStoredStudy& op) {
  plan_.set_study_status(op.study, StudyStatus::kInterrupted, op.why);
  plan_.add_event(op.study, "interrupted", {{"error", op.why}});
  spdlog::warn("study {} is interrupted: {}", op.name, op.why);
}

std::string StudyDriver::owner_of(int64_t study) const {
  for (const EventRow& e : plan_.events(study, INT64_MAX))
    if (e.kind == "submitted") return e.detail.value("owner", "");
  return "";
}

Edit StudyDriver::resume(int64_t study) const {
  std::optional<StudyRow> row = plan_.study(study);
  if (!row || row->deleted_at) throw std::invalid_argument("no study " + std::to_string(study));
  if (row->status != StudyStatus::kInterrupted)
    throw std::invalid_argument("study " + row->name + " is " + to_string(row->status) +
                                ": only an interrupted study can be resumed");
  return Edit{}.add(edit::TakeUpStudy{std::make_shared<LoadedStudy>(load_study(*row)), true});
}

// ---------------------------------------------------------------------------------------------
// Studies.

Edit StudyDriver::submit(const StudySpec& given, const json& given_json, Policy policy,
                         const std::string& owner) const {
  // A warm start's evaluations are read from the plan now and stored with the spec.
  const json spec_json = resolve_warm_start(given, given_json, plan_).spec;
  const StudySpec spec = given.warm_start.empty() ? given : parse_spec(spec_json);
  check_commands(spec, rules_.exec);
  check_budget(spec, rules_.budget);
  if (std::optional<StudyRow> old = plan_.study_by_name(spec.name))
    throw std::invalid_argument(
        fmt::format("a study named {} exists already ({}); ", spec.name, to_string(old->status)) +
        commands_hint(*old));
  auto created = std::make_shared<TrackedStudy>();
  TrackedStudy& s = *created;
  s.spec = spec;
  s.searcher = make_searcher(spec);
  s.policy = policy;
  s.resumed = Clock::now();
  s.created_at = s.resumed_at = unix_seconds();
  s.owner = owner;
  std::vector<Operation> ops = s.searcher->on_study_start();
  // Its first operations are checked before anything is written: a study whose searcher asks
  // for more than this master allows is refused whole. (Later ones fail the study instead.)
  int64_t steps = 0, evaluations = 0;
  std::map<RequestId, int64_t> lengths;  // of the trials created, 0 until trained
  for (const Operation& op : ops) {
    if (const Create* c = std::get_if<Create>(&op)) {
      if (c->trial != static_cast<RequestId>(lengths.size()) || c->fork)
        throw SpecError("searcher: its first trials must be created 0, 1, 2, ... without forks");
      lengths[c->trial] = 0;
      if (static_cast<int64_t>(lengths.size()) > rules_.budget.trials)
        throw SpecError("searcher.max_trials: the searcher asked for more than " +
                        std::to_string(rules_.budget.trials) +
                        " trials, this master's limit (--max-trials)");
    } else if (const Train* t = std::get_if<Train>(&op)) {
      auto it = lengths.find(t->trial);
      if (it == lengths.end())
        throw SpecError("searcher: it trained trial " + std::to_string(t->trial) +
                        ", which it never created");
      steps += std::max<int64_t>(0, t->length - it->second);
      it->second = std::max(it->second, t->length);
      evaluations += static_cast<int64_t>(t->eval_steps.size());
    }
  }
  if (steps > rules_.budget.steps)
    throw SpecError("length: the searcher asked for " + std::to_string(steps) +
                    " steps in all, more than this master's limit of " +
                    std::to_string(rules_.budget.steps) + " (--max-steps)");
  if (evaluations > rules_.budget.evaluations)
    throw SpecError("eval.every: the searcher asked for " + std::to_string(evaluations) +
                    " evaluations in all, more than this master's limit of " +
                    std::to_string(rules_.budget.evaluations) + " (--max-evaluations)");
  return Edit{}.add(edit::CreateStudy{created, spec_json, std::move(ops)});
}

void StudyDriver::apply_op(const edit::CreateStudy& op) {
  TrackedStudy& s = *op.study;
  const int64_t id = plan_.create_study(s.spec.name, op.spec, s.policy);
  plan_.save_searcher_state(id, s.searcher->save());
  plan_.add_event(id, "submitted", {{"policy", to_string(s.policy)}, {"owner", s.owner}});
  s.id = id;
  studies_[id] = std::move(s);
  for (const Operation& first : op.first) queue_.push_back(Operate{id, first});
  touched(id);  // the caller's measurement of this goes to the new study
  created_ = id;
  schedule_changed_ = true;
  expanding_ = true;
}

bool StudyDriver::expand() {
  for (auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning && s.expanding) {
      queue_.push_back(searcher_work(id, SearcherEvent::Kind::kBatch, 0));
      return expanding_ = true;
    }
  return expanding_ = false;
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

std::optional<int64_t> StudyDriver::study_for(StageId stage) const {
  for (int64_t id : studies_through(stage))
    if (running(id)) return id;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Decisions the master asks for.

Edit StudyDriver::end_study(const TrackedStudy& s, StudyStatus status, const std::string& error,
                            const std::string& why) const {
  StudyStatus final_status = status;
  std::string final_error = error;
  // A study none of whose trials gave a result has failed, for the reason its first trial gives.
  if (status == StudyStatus::kDone && !s.trials.empty() &&
      std::all_of(s.trials.begin(), s.trials.end(), [&](const auto& rt) {
        const TrialStatus ts = trials_.at(rt.second).status;
        return ts == TrialStatus::kFailed || ts == TrialStatus::kDiverged;
      })) {
    const TrackedTrial& first = trials_.at(s.trials.begin()->second);
    final_status = StudyStatus::kFailed;
    final_error = "every trial failed or diverged; the first: " +
                  (first.status == TrialStatus::kFailed ? first.error : "it diverged");
  }
  Edit e;
  if (status != StudyStatus::kInterrupted)
    for (const auto& [request, id] : s.trials)
      if (const TrackedTrial& t = trials_.at(id); is_open(t.status))
        e.add(edit::EndTrial{id, TrialStatus::kStopped, why, trained_length(t)});
  e.add(edit::EndStudy{s.id, final_status, final_error});
  e.later.push_back(Collect{});
  return e;
}

Edit StudyDriver::cancel(int64_t study) const {
  const TrackedStudy& s = studies_.at(study);
  if (s.status != StudyStatus::kRunning)
    throw std::invalid_argument("study " + s.spec.name + " (id " + std::to_string(study) +
                                ") has already ended: " + to_string(s.status));
  return end_study(s, StudyStatus::kCancelled, "cancelled by a client", "the study was cancelled");
}

json enqueued_params(const SearchSpace& space, const json& params) {
  json stored = params;
  for (const Param& p : space.params()) {
    json& value = stored.at(p.name);
    switch (p.kind) {
      case DistKind::kUniform:
      case DistKind::kLogUniform:
        value = value.get<double>();
        break;
      case DistKind::kGrid:
      case DistKind::kChoice:
        value = *std::find(p.values.begin(), p.values.end(), value);  // admitted: it is there
        break;
      case DistKind::kInt:
        break;
    }
  }
  return stored;
}

std::optional<ExistingParams> StudyDriver::existing(const TrackedStudy& s,
                                                    const json& params) const {
  std::optional<ExistingParams> found;
  for (const auto& [request, id] : s.trials) {
    const TrackedTrial& t = trials_.at(id);
    if (t.params == params && (!found || t.number < found->trial))
      found = ExistingParams{t.number, t.status};
  }
  if (found) return found;
  // Every configuration enqueued becomes a trial (the searcher refuses one beyond max_trials):
  // one that no trial has yet waits for a slot.
  for (const json& given : s.spec.enqueued)
    if (given == params) return ExistingParams{};
  for (const EventRow& e : plan_.events(s.id, INT64_MAX))
    if (e.kind == "enqueued" && e.detail.value("params", json()) == params) return ExistingParams{};
  return std::nullopt;
}

EnqueueDecision StudyDriver::enqueue(int64_t study, const Params& given) {
  TrackedStudy& s = studies_.at(study);
  if (s.status != StudyStatus::kRunning)
    throw std::invalid_argument("study " + s.spec.name +
                                " has already ended: " + to_string(s.status));
  try {
    s.spec.check_params(given);
  } catch (const SpecError& e) {
    throw SpecError(std::string("params.") + e.what());
  }
  const Params params = enqueued_params(s.spec.space, given);
  if (std::optional<ExistingParams> had = existing(s, params)) return {{}, had};
  std::vector<Operation> ops;
  try {
    ops = s.searcher->enqueue(params);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("study " + s.spec.name + ": searcher " + s.spec.searcher.name +
                                ": " + e.what());
  }
  Edit e;
  e.add(edit::Journal{s.id, {}, s.searcher->save()});
  e.add(edit::AddEvent{s.id, "enqueued", {{"params", params}}});
  for (Operation& op : ops) e.next.push_back(Operate{s.id, std::move(op)});
  return {std::move(e), std::nullopt};
}

Edit StudyDriver::interrupt(int64_t study, const std::string& why) const {
  const TrackedStudy& s = studies_.at(study);
  if (s.status != StudyStatus::kRunning)
    throw std::invalid_argument("study " + s.spec.name + " has already ended");
  return end_study(s, StudyStatus::kInterrupted, why, "");
}

Edit StudyDriver::fail(int64_t study, const std::string& error) const {
  const TrackedStudy& s = studies_.at(study);
  if (s.status != StudyStatus::kRunning)
    throw std::invalid_argument("study " + s.spec.name + " has already ended");
  return end_study(s, StudyStatus::kFailed, error, "the study failed");
}

Edit StudyDriver::fail_stage(StageId stage, const std::string& error) const {
  Edit e;
  e.add(edit::FailStage{stage});
  std::vector<StageId> todo{stage};
  while (!todo.empty()) {
    const StageId id = todo.back();
    todo.pop_back();
    for (TrialId t : tree_.trials_ending_in(id)) {
      auto it = trials_.find(t);
      if (it == trials_.end() || it->second.status != TrialStatus::kRunning) continue;
      e.add(edit::EndTrial{t, TrialStatus::kFailed, error});
      e.later.push_back(
          searcher_work(it->second.study, SearcherEvent::Kind::kFailed, it->second.request));
    }
    for (StageId c : tree_.stage(id).children) todo.push_back(c);
  }
  return e;
}

Edit StudyDriver::close_trials_ending(TrialId trial, int64_t from, int64_t to) const {
  Edit e;
  for (StageId id : tree_.path(trial)) {
    const Stage& x = tree_.stage(id);
    if (x.end <= from || x.start >= to) continue;
    for (TrialId t : tree_.trials_ending_in(id))
      if (auto it = trials_.find(t);
          it != trials_.end() && it->second.status == TrialStatus::kRunning)
        e.later.push_back(Close{t});
  }
  return e;
}

Edit StudyDriver::deliver_metrics(const StateKey& state, const Measured& measured) const {
  Edit e;
  e.add(edit::CacheMetrics{state, measured});
  for (TrialId t : pending_.waiting(state))
    e.later.push_back(Deliver{t, state.second, measured.metrics, "", measured.provenance});
  return e;
}

Edit StudyDriver::deliver_nothing(const StateKey& state, const std::string& why) const {
  Edit e;
  const Measured* cached = states_.cached_metrics(state);
  for (TrialId t : pending_.waiting(state))
    e.later.push_back(cached ? Deliver{t, state.second, cached->metrics, "", cached->provenance}
                             : Deliver{t, state.second, {}, why});
  return e;
}

Edit StudyDriver::diverge_through(const StateKey& state, const std::string& why) const {
  Edit e;
  const int64_t step = state.second;
  for (TrialId id : open_) {
    const TrackedTrial& t = trials_.at(id);
    if (!t.in_tree || t.status != TrialStatus::kRunning || t.needed_length() <= step ||
        state_key(tree_, id, step) != state)
      continue;
    e.add(edit::EndTrial{id, TrialStatus::kDiverged, why, step});
    const TrackedStudy& s = studies_.at(t.study);
    if (auto next = t.pending_evals.lower_bound(step); next != t.pending_evals.end())
      e.later.push_back(
          Work{Feed{s.id, worst_evaluation(s.spec.searcher.goals, t.request, *next)}});
    e.later.push_back(searcher_work(s.id, SearcherEvent::Kind::kClosed, t.request));
  }
  return e;
}

void StudyDriver::close_trained_trials() {
  for (auto& [id, t] : trials_)
    if (t.status == TrialStatus::kRunning && running(t.study)) queue_.push_back(Close{id});
}

// ---------------------------------------------------------------------------------------------
// The queue's decisions.

Edit StudyDriver::next() {
  Work work = std::move(queue_.front());
  queue_.pop_front();
  return std::visit([&](const auto& w) { return decide(w); }, work);
}

Edit StudyDriver::decide(const Deliver& w) {
  auto it = trials_.find(w.trial);
  if (it == trials_.end() || !it->second.pending_evals.count(w.step)) return {};
  const TrackedTrial& t = it->second;
  const TrackedStudy& s = studies_.at(t.study);
  Edit e;
  if (!w.metrics.empty()) e.add(edit::RecordMetrics{t.id, w.step, w.metrics, w.provenance});
  if (s.status != StudyStatus::kRunning) return e;
  if (t.remeasure) {
    // Measured again after a key was distrusted: recorded, never fed to its searcher.
    if (!w.metrics.empty()) {
      e.next.push_back(Close{t.id});
      return e;
    }
    e.add(edit::EndTrial{t.id, TrialStatus::kFailed, w.absent, w.step});
    end_if_remeasured(t, e);
    return e;
  }
  const Goals& goals = s.spec.searcher.goals;
  const std::string at = " at step " + std::to_string(w.step);
  for (const std::string& metric : goals.metrics())
    if (!metric_value(w.metrics, metric)) {
      // The trainer forgot a metric, or the job ended without it: the trial fails, saying so.
      const std::string reason =
          w.metrics.empty()
              ? "no " + metric + at + ": " + (w.absent.empty() ? "no metric came" : w.absent)
              : "no " + metric + at + " (the trainer reported " + names_in(w.metrics) + ")";
      e.add(edit::EndTrial{t.id, TrialStatus::kFailed, reason, w.step});
      e.next.push_back(searcher_work(s.id, SearcherEvent::Kind::kFailed, t.request));
      return e;
    }
  for (const Objective& o : goals.objectives)
    if (const double v = *metric_value(w.metrics, o.metric); !std::isfinite(v)) {
      // Diverged: a result, not an error. The searcher sees the worst values, then the trial
      // closed.
      e.add(edit::EndTrial{t.id, TrialStatus::kDiverged,
                           o.metric + " is " + non_finite_name(v) + at, w.step});
      e.next.push_back(Work{Feed{s.id, worst_evaluation(goals, t.request, w.step)}});
      e.next.push_back(searcher_work(s.id, SearcherEvent::Kind::kClosed, t.request));
      return e;
    }
  // The searcher reacts (its operations come first), then the trial may close.
  e.next.push_back(Work{Feed{s.id, evaluation_event(goals, t.request, w.step, w.metrics)}});
  e.next.push_back(Close{t.id});
  return e;
}

Edit StudyDriver::decide(const Close& w) {
  auto it = trials_.find(w.trial);
  if (it == trials_.end()) return {};
  const TrackedTrial& t = it->second;
  if (t.status != TrialStatus::kRunning || !running(t.study) || !t.pending_evals.empty() ||
      !trial_trained(t))
    return {};
  Edit e;
  if (!t.remeasure) {
    e.add(edit::EndTrial{t.id, TrialStatus::kDone, "trained to its length"});
    e.next.push_back(searcher_work(t.study, SearcherEvent::Kind::kClosed, t.request));
    return e;
  }
  // Its searcher closed it long ago.
  e.add(edit::EndTrial{t.id, TrialStatus::kDone, "measured again (a key was distrusted)"});
  end_if_remeasured(t, e);
  return e;
}

void StudyDriver::end_if_remeasured(const TrackedTrial& t, Edit& e) const {
  // A study whose searcher had finished ends with the last trial it measures again.
  const TrackedStudy& s = studies_.at(t.study);
  if (s.remeasure && std::none_of(s.trials.begin(), s.trials.end(), [&](const auto& rt) {
        return rt.second != t.id && is_open(trials_.at(rt.second).status);
      })) {
    e.add(edit::EndStudy{s.id, StudyStatus::kDone, ""});
    e.later.push_back(Collect{});
  }
}

namespace {

// Why the study's budget (spec.h) is spent, or "" while it is not.
std::string budget_spent(const TrackedStudy& s) {
  const StudySpec& spec = s.spec;
  if (spec.budget_steps && s.account.steps_executed >= *spec.budget_steps)
    return fmt::format("its budget of {} steps is spent ({} trained)", *spec.budget_steps,
                       s.account.steps_executed);
  if (spec.budget_wall_s && s.wall_s() >= *spec.budget_wall_s)
    return fmt::format("its budget of {} s is spent ({:.1f} s since it was submitted)",
                       *spec.budget_wall_s, s.wall_s());
  return "";
}

}  // namespace

Edit StudyDriver::decide(const Feed& w) {
  auto it = studies_.find(w.study);
  if (it == studies_.end() || it->second.status != StudyStatus::kRunning) return {};
  TrackedStudy& s = it->second;
  // Spent: no new trial, and those in flight stop where they are.
  if (std::string spent = budget_spent(s); !spent.empty())
    return end_study(s, StudyStatus::kDone, spent, "the study's budget was spent");
  std::vector<Operation> ops;
  try {
    ops = feed(*s.searcher, w.event);
  } catch (const std::exception& e) {
    return end_study(s, StudyStatus::kFailed, std::string("its searcher failed: ") + e.what(),
                     "the study failed");
  }
  if (w.event.kind == SearcherEvent::Kind::kBatch && ops.empty()) {
    s.expanding = false;  // it holds nothing back any more
    return {};
  }
  Edit e;
  edit::Journal journal{s.id, w.event};
  if (save_due(s)) journal.state = s.searcher->save();
  e.add(std::move(journal));
  for (Operation& op : ops) e.next.push_back(Operate{s.id, std::move(op)});
  return e;
}

bool StudyDriver::save_due(const TrackedStudy& s) const {
  // A whole state costs about its trials to write: once the journal is as long, each event has
  // paid O(1) toward it, and a restart replays at most that many events.
  const int64_t due = std::max<int64_t>(kJournalBeforeSave, static_cast<int64_t>(s.trials.size()));
  return !s.searcher->replays_exactly() || s.journaled + 1 >= due;
}

Edit StudyDriver::decide(const Operate& w) {
  auto it = studies_.find(w.study);
  if (it == studies_.end() || it->second.status != StudyStatus::kRunning) return {};
  const TrackedStudy& s = it->second;
  auto trial_of = [&](RequestId request, const char* what) -> const TrackedTrial& {
    auto found = s.trials.find(request);
    if (found == s.trials.end())
      throw std::runtime_error(std::string("searcher ") + what + " unknown trial " +
                               std::to_string(request));
    return trials_.at(found->second);
  };
  Edit e;
  try {
    if (const Create* c = std::get_if<Create>(&w.op)) {
      if (s.trials.count(c->trial))
        throw std::runtime_error("searcher created trial " + std::to_string(c->trial) + " twice");
      if (c->trial != static_cast<RequestId>(s.trials.size()))
        throw std::runtime_error("searcher trial ids must be 0, 1, 2, ... in creation order");
      if (static_cast<int64_t>(s.trials.size()) >= rules_.budget.trials)
        throw std::runtime_error("the searcher asked for more than " +
                                 std::to_string(rules_.budget.trials) +
                                 " trials, this master's limit (--max-trials)");
      if (c->fork && !s.trials.count(c->fork->donor))
        throw std::runtime_error("searcher forked trial " + std::to_string(c->trial) +
                                 " from unknown trial " + std::to_string(c->fork->donor));
      e.add(edit::TrackTrial{s.id, c->trial, c->params, c->fork});
    } else if (const Train* tr = std::get_if<Train>(&w.op)) {
      const TrackedTrial& t = trial_of(tr->trial, "trained");
      if (t.status == TrialStatus::kFailed) {
        // Its stage fails in the engine: training it again would fail again.
        e.add(edit::AddEvent{s.id,
                             "operation_ignored",
                             {{"trial", t.number},
                              {"operation", "train"},
                              {"why", "the trial failed: " + t.error}}});
      } else {
        e.add(placement(s, t, *tr));
      }
    } else if (const Stop* st = std::get_if<Stop>(&w.op)) {
      auto found = s.trials.find(st->trial);
      // A trial that closed may be stopped too (a rung it is not promoted from); one that failed
      // or diverged keeps saying so.
      if (found != s.trials.end())
        if (const TrackedTrial& t = trials_.at(found->second);
            is_open(t.status) || t.status == TrialStatus::kDone)
          e.add(edit::EndTrial{t.id, TrialStatus::kStopped, "stopped by the searcher",
                               trained_length(t)});
    } else if (std::holds_alternative<Finish>(w.op)) {
      return end_study(s, StudyStatus::kDone, "", "the study finished");
    }
  } catch (const std::exception& err) {
    return end_study(s, StudyStatus::kFailed, err.what(), "the study failed");
  }
  return e;
}

edit::PlaceTrial StudyDriver::placement(const TrackedStudy& s, const TrackedTrial& t,
                                        const Train& train) const {
  const std::string name = "trial " + std::to_string(train.trial);
  if (train.length < 1)
    throw std::runtime_error("searcher trained " + name + " to length " +
                             std::to_string(train.length));
  for (int64_t step : train.eval_steps)
    if (step < 0 || step > train.length)
      throw std::runtime_error("searcher asked to evaluate " + name + " at step " +
                               std::to_string(step) + ", outside [0, " +
                               std::to_string(train.length) + "]");
  edit::PlaceTrial p;
  p.trial = t.id;
  p.length = train.length;
  p.evals = train.eval_steps;
  p.steps = std::max<int64_t>(0, train.length - t.length);
  p.evaluations = static_cast<int64_t>(train.eval_steps.size());
  const Budget& b = rules_.budget;
  if (s.requested_steps + p.steps > b.steps)
    throw std::runtime_error("the searcher asked for " +
                             std::to_string(s.requested_steps + p.steps) +
                             " steps in all, more than this master's limit of " +
                             std::to_string(b.steps) + " (--max-steps)");
  if (s.requested_evaluations + p.evaluations > b.evaluations)
    throw std::runtime_error("the searcher asked for " +
                             std::to_string(s.requested_evaluations + p.evaluations) +
                             " evaluations in all, more than this master's limit of " +
                             std::to_string(b.evaluations) + " (--max-evaluations)");
  if (t.in_tree || train.length <= t.length) return p;
  // Its first placement: its row.
  TrialRow row;
  row.id = t.id;
  row.study_id = s.id;
  // Its architecture's root key: trials share stages within their architecture only.
  // Trial-based: a root key of its own, so that no trial shares a stage with another.
  const std::string architecture = s.spec.root_key_of(t.params);
  row.root_key =
      s.policy == Policy::kTrialBased ? trial_based_root_key(architecture, t.id) : architecture;
  // A fork goes on from its donor's state, which a model of other fields cannot.
  if (t.fork && s.spec.root_key_of(trials_.at(s.trials.at(t.fork->donor)).params) != architecture)
    throw std::runtime_error("searcher forked trial " + std::to_string(t.request) + " from trial " +
                             std::to_string(t.fork->donor) +
                             ", whose model differs (a fork keeps its donor's architecture)");
  row.params = t.params;
  row.hyperparams = s.spec.hyperparams(t.params);
  if (t.fork) {
    // The donor's history up to the fork step, the trial's own values after it.
    const TrackedTrial& donor = trials_.at(s.trials.at(t.fork->donor));
    if (!donor.in_tree)
      throw std::runtime_error("searcher forked from trial " + std::to_string(t.fork->donor) +
                               ", which has never been trained");
    const Hyperparams& history = tree_.trial(donor.id).hyperparams;
    for (auto& [hp, seq] : row.hyperparams) {
      try {
        seq = splice(history.at(hp), seq, t.fork->step);
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error("fork of " + name + " at step " + std::to_string(t.fork->step) +
                                 ": " + hp + ": " + e.what());
      }
    }
  }
  row.length = train.length;
  row.status = TrialStatus::kRunning;
  p.row = std::move(row);
  return p;
}

Edit StudyDriver::decide(const Collect&) {
  Edit e;
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
      if (!info.needed) e.add(edit::Retain{id, std::nullopt});  // a study reuses it
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
    const StateInfo& info = states_.info(id);
    if (keep.count(id)) {
      if (info.needed) e.add(edit::Retain{id, now});  // newly left behind: its age starts now
      continue;
    }
    e.add(edit::DropState{id});
    if (info.checkpoint_row < 0) continue;
    ++evicted;
    evicted_bytes += info.bytes;
  }
  if (evicted > 0 && rules_.keep_checkpoint_bytes > 0) {
    e.add(edit::AddEvent{
        std::nullopt,
        "checkpoints_evicted",
        {{"count", evicted}, {"bytes", evicted_bytes}, {"budget", rules_.keep_checkpoint_bytes}}});
    spdlog::info("evicting {} checkpoint(s) ({}) to stay within --keep-checkpoints {}", evicted,
                 format_size(evicted_bytes), format_size(rules_.keep_checkpoint_bytes));
  }
  return e;
}

std::vector<Operation> StudyDriver::feed(Searcher& searcher, const SearcherEvent& e) {
  switch (e.kind) {
    case SearcherEvent::Kind::kValidation:
      return searcher.on_evaluation(
          e.trial, e.step,
          {e.values.empty() ? std::vector<double>{e.value} : e.values, e.violation, e.value});
    case SearcherEvent::Kind::kClosed:
      return searcher.on_trial_closed(e.trial);
    case SearcherEvent::Kind::kFailed:
      return searcher.on_trial_failed(e.trial);
    case SearcherEvent::Kind::kBatch:
      return searcher.next_batch();
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Applying.

void StudyDriver::apply(const Edit& edit) {
  for (const EditOp& op : edit.ops) apply_op(op);
  queue(edit);
}

void StudyDriver::apply_op(const EditOp& op) {
  std::visit([&](const auto& o) { apply_op(o); }, op);
}

void StudyDriver::queue(const Edit& edit) {
  for (auto it = edit.next.rbegin(); it != edit.next.rend(); ++it) queue_.push_front(*it);
  for (const Work& w : edit.later) queue_.push_back(w);
}

void StudyDriver::apply_op(const edit::TrackTrial& op) {
  TrackedStudy& s = studies_.at(op.study);
  TrackedTrial t;
  t.id = next_trial_++;
  t.study = op.study;
  t.request = op.request;
  t.params = op.params;
  t.fork = op.fork;
  s.trials[op.request] = t.id;
  trials_[t.id] = std::move(t);
  touched(op.study);
}

void StudyDriver::apply_op(const edit::PlaceTrial& op) {
  TrackedTrial& t = trials_.at(op.trial);
  TrackedStudy& s = studies_.at(t.study);
  s.requested_steps += op.steps;
  s.requested_evaluations += op.evaluations;
  touched(s.id);
  if (op.length > t.length) {
    Change change;
    if (!t.in_tree) {
      t.number = plan_.add_trial(*op.row);
      change = tree_.add_trial(t.id, op.row->root_key, op.row->hyperparams, op.length);
      t.in_tree = true;
    } else {
      change = tree_.extend_trial(t.id, op.length);
      plan_.set_trial_length(t.id, op.length);
    }
    t.length = op.length;
    schedule_changed_ = true;
    plan_.save_change(tree_, change);
    for (const Split& split : change.splits) pending_.on_split(tree_, split);
    tree_shape_ += static_cast<int64_t>(change.splits.size());
    raise_needed_ends(t, change);
    splits_.insert(splits_.end(), change.splits.begin(), change.splits.end());
    t.history_steps = std::max(t.history_steps, states_.deepest_retained(tree_, t.id, op.length));
  }
  plan_.add_eval_requests(t.id, op.evals);
  if (t.status != TrialStatus::kRunning) {
    t.stopped_at = -1;  // a stopped or diverged trial that its searcher trains again
    t.error.clear();
    set_status(t, TrialStatus::kRunning);
    plan_.set_trial_status(t.id, t.status);
  }
  // Every evaluation waits first; those measured already (for another trial) are delivered next,
  // in step order, so that a trained trial closes only after its last one.
  for (int64_t step : op.evals) {
    t.pending_evals.insert(step);
    pending_.add(tree_, t.id, step);
    if (const Measured* m = states_.cached_metrics(state_key(tree_, t.id, step)))
      queue_.push_back(Deliver{t.id, step, m->metrics, "", m->provenance});
  }
}

void StudyDriver::apply_op(const edit::EndTrial& op) {
  TrackedTrial& t = trials_.at(op.trial);
  forget_pending(t);
  t.remeasure = false;  // as set_trial_status writes
  if (op.status == TrialStatus::kStopped || op.status == TrialStatus::kDiverged)
    t.stopped_at = op.step.value_or(trained_length(t));
  if (op.status == TrialStatus::kFailed) t.error = op.reason;
  set_status(t, op.status);
  if (t.in_tree)  // else it has no row yet: created, never trained
    plan_.set_trial_status(t.id, op.status, op.reason,
                           op.status == TrialStatus::kDone ? std::nullopt : op.step);
  touched(t.study);
  const std::string& study = studies_.at(t.study).spec.name;
  if (op.status == TrialStatus::kFailed)
    spdlog::error("trial {} of study {} failed: {}", t.number, study, op.reason);
  else if (op.status == TrialStatus::kDiverged)
    spdlog::warn("trial {} of study {} diverged: {}", t.number, study, op.reason);
}

void StudyDriver::apply_op(const edit::RecordMetrics& op) {
  TrackedTrial& t = trials_.at(op.trial);
  for (const auto& [name, value] : op.metrics.items())
    // Measured again with another value (a trainer that is not deterministic): the first stays.
    if (std::optional<std::string> kept =
            plan_.add_metric({t.id, op.step, name, value.get<double>(), op.provenance.producer,
                              op.provenance.lineage}))
      spdlog::warn("trial {}: {}", t.number, *kept);
  t.pending_evals.erase(op.step);
  pending_.remove(tree_, t.id, op.step);
  touched(t.study);
}

void StudyDriver::apply_op(const edit::CacheMetrics& op) {
  states_.cache_metrics(op.state, op.measured);
}

void StudyDriver::apply_op(const edit::Journal& op) {
  TrackedStudy& s = studies_.at(op.study);
  if (op.state) {
    plan_.save_searcher_state(s.id, *op.state);
    s.journaled = 0;
  } else {
    plan_.add_searcher_event(s.id, op.event);
    ++s.journaled;
  }
  touched(s.id);
}

void StudyDriver::apply_op(const edit::EndStudy& op) {
  TrackedStudy& s = studies_.at(op.study);
  if (s.status != StudyStatus::kRunning) return;
  s.account.run_s = s.run_s();
  s.ended_at = unix_seconds();
  s.status = op.status;
  s.error = op.error;
  s.ended = Clock::now();
  ++studies_ended_;
  for (const auto& [request, id] : s.trials) {
    forget_pending(trials_.at(id));  // no evaluation is run for a study that ended
    open_.erase(id);
  }
  needed_.valid = false;
  schedule_changed_ = true;  // its work under way may be abandoned
  plan_.set_study_status(s.id, op.status, op.error);
  plan_.set_study_account(s.id, s.account);
  s.account_changed = false;
  plan_.add_event(s.id, op.status == StudyStatus::kDone ? "finished" : to_string(op.status),
                  {{"error", op.error}});
  summaries_due_.insert(s.id);
  touched(s.id);
  if (op.status == StudyStatus::kFailed)
    spdlog::error("study {} failed: {}", s.spec.name, op.error);
  else if (op.status == StudyStatus::kInterrupted)
    spdlog::warn("study {} interrupted: {}", s.spec.name, op.error);
}

void StudyDriver::apply_op(const edit::FailStage& op) {
  failed_stages_.insert(op.stage);
  schedule_changed_ = true;
}

void StudyDriver::apply_op(const edit::TrainStage& op) {
  const int64_t before = tree_.stage(op.stage).trained_until;
  tree_.mark_trained(op.stage, op.trained_until);
  if (tree_.stage(op.stage).trained_until == before) return;
  pending_.on_progress(tree_, op.stage);
  trained_stages_.push_back(op.stage);
  plan_.save_stage(tree_.stage(op.stage));
  schedule_changed_ = true;
}

void StudyDriver::apply_op(const edit::AddState& op) {
  StateInfo info = op.info;
  if (!info.file.empty()) {
    CheckpointRow row{0, info.stage, info.step, info.file, info.bytes, info.checksum, 0};
    row.storages.assign(info.storages.begin(), info.storages.end());
    row.environment = info.environment;
    row.producer = info.provenance.producer;
    row.lineage = info.provenance.lineage;
    info.checkpoint_row = plan_.add_checkpoint(row);
  }
  states_.add(op.id, info);
  schedule_changed_ = true;
}

void StudyDriver::apply_op(const edit::DropState& op) {
  const StateInfo info = states_.forget(op.id);
  if (info.checkpoint_row >= 0) plan_.delete_checkpoint(info.checkpoint_row);
  if (!op.lost.empty()) {
    plan_.add_event(std::nullopt, "checkpoint_lost", {{"file", info.file}, {"why", op.lost}});
    spdlog::warn("checkpoint {} is lost ({}); its state will be replayed", info.file, op.lost);
  }
  // Only once the row's deletion is committed: a rollback keeps the row, which needs its file.
  if (!info.file.empty()) storages_.remove_after_commit(plan_, info.storages, info.file);
  schedule_changed_ = true;
}

void StudyDriver::apply_op(const edit::SetStorages& op) {
  const StateInfo& info = states_.info(op.id);
  if (info.checkpoint_row >= 0)
    plan_.set_checkpoint_storages(info.checkpoint_row, {op.storages.begin(), op.storages.end()});
  if (!op.lost.empty()) {
    plan_.add_event(std::nullopt, "checkpoint_lost",
                    {{"file", info.file}, {"why", op.lost}, {"storage", op.lost_on}});
    storages_.remove_after_commit(plan_, {op.lost_on}, info.file);
    spdlog::warn("the copy of checkpoint {} on storage {} is lost ({}); {} other cop{} left",
                 info.file, op.lost_on, op.lost, op.storages.size(),
                 op.storages.size() == 1 ? "y is" : "ies are");
  }
  states_.set_storages(op.id, op.storages);
}

void StudyDriver::apply_op(const edit::Retain& op) {
  const StateInfo& info = states_.info(op.id);
  if (op.retained_at) plan_.set_checkpoint_retained(info.checkpoint_row, *op.retained_at);
  states_.set_needed(op.id, !op.retained_at, op.retained_at ? op.retained_at : info.retained_at);
}

void StudyDriver::apply_op(const edit::AddExecution& op) {
  plan_.add_execution(op.row);
}

void StudyDriver::apply_op(const edit::AddEvent& op) {
  plan_.add_event(op.study, op.kind, op.detail);
}

void StudyDriver::apply_op(const edit::Count& op) {
  for (int64_t id : op.studies)
    if (auto it = studies_.find(id); it != studies_.end()) {
      StudyAccount& a = it->second.account;
      a.steps_executed += op.steps;
      a.busy_s += op.busy_s;
      a.bytes_moved += op.bytes;
      a.transfer_s += op.transfer_s;
      it->second.account_changed = true;
      if (it->second.status != StudyStatus::kRunning) grown_after_end_.insert(id);
    }
}

void StudyDriver::apply_op(const edit::RemoveFile& op) {
  storages_.remove_after_commit(plan_, op.storages, op.file);
}

void StudyDriver::apply_op(const edit::SaveAccounts& op) {
  const bool due = seconds_since(accounts_saved_) >= op.every_s;
  if (due) accounts_saved_ = Clock::now();
  for (auto& [id, s] : studies_) {
    if (!s.account_changed && !(due && s.status == StudyStatus::kRunning)) continue;
    StudyAccount a = s.account;
    a.run_s = s.run_s();
    plan_.set_study_account(id, a);
    s.account_changed = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Accounting and what the scheduler reads.

std::set<int64_t> StudyDriver::take_summaries_due() {
  if (!grown_after_end_.empty() && seconds_since(late_summaries_) >= kLateSummaryEvery_s) {
    summaries_due_.merge(grown_after_end_);
    grown_after_end_.clear();
    late_summaries_ = Clock::now();
  }
  return std::exchange(summaries_due_, {});
}

bool StudyDriver::take_schedule_change() {
  return std::exchange(schedule_changed_, false);
}

void StudyDriver::charge_master_time(double seconds) {
  // To the studies whose edits it applied, evenly; else (scheduling) to the running studies.
  if (!charged_.empty()) {
    for (int64_t id : charged_)
      if (auto it = studies_.find(id); it != studies_.end())
        it->second.account.master_s += seconds / static_cast<double>(charged_.size());
    charged_.clear();
    return;
  }
  int64_t trials = 0;
  for (const auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning) trials += static_cast<int64_t>(s.trials.size());
  if (trials == 0) return;
  for (auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning)
      s.account.master_s +=
          seconds * static_cast<double>(s.trials.size()) / static_cast<double>(trials);
}

int64_t StudyDriver::trained_length(const TrackedTrial& t) const {
  return t.in_tree ? tree_.trained_length(t.id) : 0;
}

bool StudyDriver::trial_trained(const TrackedTrial& t) const {
  if (!t.in_tree) return false;
  return tree_.stage(tree_.stage_at(t.id, t.length)).trained_until >= t.length;
}

void StudyDriver::forget_pending(TrackedTrial& t) {
  for (int64_t step : t.pending_evals) pending_.remove(tree_, t.id, step);
  t.pending_evals.clear();
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
  const bool open = is_open(status);
  if (!open && status != TrialStatus::kDone) needed_.valid = false;
  t.status = status;
  if (open && running(t.study))
    open_.insert(t.id);
  else
    open_.erase(t.id);
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
