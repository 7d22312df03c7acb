#include "master/master.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <tuple>

#include "protocol/socket.h"

namespace hippo::master {
namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of this thread: the master's own cost, without the time it waits for a core while
// the workers on the same machine keep them busy.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The value of the study's metric among a worker's metrics, or nullopt.
std::optional<double> metric_value(const json& metrics, const std::string& name) {
  auto it = metrics.find(name);
  if (it == metrics.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

bool better(double a, double b, bool maximize) {
  return maximize ? a > b : a < b;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

json StudySummary::to_json() const {
  json j{{"study", name},
         {"status", status},
         {"trials", trials},
         {"steps_trial_based", steps_trial_based},
         {"steps_unique", steps_unique},
         {"steps_executed", steps_executed},
         {"critical_path_steps", critical_path_steps},
         {"wall_s", std::round(wall_s * 1000) / 1000},
         {"makespan_ratio", std::round(makespan_ratio * 1000) / 1000},
         {"master_ms_per_trial", std::round(master_ms_per_trial * 1000) / 1000}};
  if (!error.empty()) j["error"] = error;
  if (has_best)
    j["best"] = {{"trial", best_trial},
                 {"params", best_params},
                 {"metric", metric},
                 {"value", best_value},
                 {"step", best_step}};
  return j;
}

Master::Master(SearchPlan plan, const Options& options)
    : plan_(std::move(plan)), options_(options), socket_(context_, zmq::socket_type::router) {
  std::random_device random;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", random(), random());
  incarnation_ = buf;
  protocol::configure(socket_);
  socket_.set(zmq::sockopt::router_handover, 1);  // a reconnecting worker keeps its identity
  if (options_.auth)
    curve_ = std::make_unique<protocol::CurveServer>(
        context_, socket_, *options_.auth, [quiet = options_.quiet](const std::string& line) {
          if (!quiet) std::fprintf(stderr, "master: %s\n", line.c_str());
        });
  socket_.bind(options_.bind);
  std::filesystem::create_directories(options_.checkpoints);
  restore();
}

Master::~Master() = default;

// ---------------------------------------------------------------------------------------------
// Restoring from the search plan.

void Master::restore() {
  tree_ = plan_.load_tree();
  next_trial_ = plan_.next_trial_id();
  for (const CheckpointRow& row : plan_.checkpoints()) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(options_.checkpoints) / row.file, ec)) {
      // Lost with its disk: forgotten, and replayed from an earlier state when it is needed.
      plan_.transaction([&] {
        plan_.delete_checkpoint(row.id);
        plan_.add_event(std::nullopt, "checkpoint_lost", {{"file", row.file}, {"why", "missing"}});
      });
      continue;
    }
    int64_t id = next_state_++;
    states_[id] = {row.stage, row.step, row.file, row.id};
    state_index_[{row.stage, row.step}] = id;
  }
  for (const StudyRow& row : plan_.studies()) {
    // Metrics of every study feed the cache, so a new study reuses evaluations of shared states.
    std::map<std::pair<TrialId, int64_t>, json> by_state;
    for (const MetricRow& m : plan_.study_metrics(row.id))
      by_state[{m.trial, m.step}][m.name] = m.value;
    for (const auto& [ts, metrics] : by_state)
      if (tree_.has_trial(ts.first) && tree_.trial(ts.first).length >= ts.second)
        metric_cache_[key_of(ts.first, ts.second)] = metrics;
    if (row.status != StudyStatus::kRunning) continue;

    Study s;
    s.id = row.id;
    s.policy = row.policy;
    s.started = Clock::now();
    try {
      s.spec = parse_spec(row.spec);
      s.searcher = make_searcher(s.spec);
      s.searcher->load(row.searcher_state);
    } catch (const std::exception& e) {
      plan_.set_study_status(row.id, StudyStatus::kFailed,
                             std::string("cannot resume after a restart: ") + e.what());
      continue;
    }
    for (const TrialRow& tr : plan_.trials(row.id)) {
      Trial t;
      t.id = tr.id;
      t.study = row.id;
      t.number = tr.number;
      t.request = tr.number - 1;
      t.params = tr.params;
      t.length = tr.length;
      t.in_tree = tree_.has_trial(tr.id);
      t.status = tr.status;
      if (t.status == TrialStatus::kFailed) t.error = tr.end_reason;
      if (t.status == TrialStatus::kStopped) t.stopped_at = trained_length(t);
      if (t.status == TrialStatus::kPending || t.status == TrialStatus::kRunning) {
        std::set<int64_t> have;
        for (const MetricRow& m : plan_.metrics(tr.id))
          if (m.name == s.spec.searcher.metric) have.insert(m.step);
        for (int64_t step : plan_.eval_requests(tr.id))
          if (!have.count(step)) {
            t.pending_evals.insert(step);
            pending_by_step_[step].insert(t.id);
          }
      }
      s.trials[t.request] = t.id;
      trials_[t.id] = std::move(t);
    }
    plan_.add_event(row.id, "resumed", json::object());
    studies_[row.id] = std::move(s);
  }
  trials_to_close_ = true;  // the previous master may have died between a snapshot and its done
}

// A trial closes when the "done" of the job that trained its last stage comes. If its last state
// was reported (a snapshot) but that "done" never came (the master restarted, or the worker was
// lost, in between), nothing is left to train and nothing else would close it: this does.
void Master::close_trained_trials() {
  plan_.transaction([&] {
    for (auto& [id, t] : trials_) {
      auto study = studies_.find(t.study);
      if (t.status != TrialStatus::kRunning || study == studies_.end() ||
          study->second.status != StudyStatus::kRunning)
        continue;
      Study& s = study->second;
      guarded(s, [&] {
        maybe_close(t);
        plan_.save_searcher_state(s.id, s.searcher->save());
      });
    }
  });
  trials_to_close_ = false;
  schedule_changed_ = true;
}

void Master::resync() {
  tree_ = plan_.load_tree();
  for (auto it = trials_.begin(); it != trials_.end();) {
    std::optional<TrialRow> row = plan_.trial(it->first);
    if (!row) {
      for (int64_t step : it->second.pending_evals) pending_by_step_[step].erase(it->first);
      it = trials_.erase(it);
      continue;
    }
    it->second.length = row->length;
    it->second.in_tree = tree_.has_trial(it->first);
    ++it;
  }
  for (auto& [id, s] : studies_)
    for (auto it = s.trials.begin(); it != s.trials.end();)
      it = trials_.count(it->second) ? std::next(it) : s.trials.erase(it);
}

void Master::guarded(Study& s, const std::function<void()>& fn) {
  double started = thread_cpu_seconds();
  try {
    plan_.transaction(fn);
  } catch (const PlanBusy&) {
    throw;  // the plan is locked (fn has not begun): the caller retries, the study is fine
  } catch (const std::exception& e) {
    resync();
    plan_.transaction([&] { finish(s, StudyStatus::kFailed, e.what()); });
  }
  s.master_s += thread_cpu_seconds() - started;
}

// ---------------------------------------------------------------------------------------------
// Studies and searchers.

int64_t Master::submit(const StudySpec& spec, const json& spec_json, Policy policy) {
  double started = thread_cpu_seconds();
  int64_t id = 0;
  try {
    plan_.transaction([&] {
      id = plan_.create_study(spec.name, spec_json, policy);
      Study s;
      s.id = id;
      s.spec = spec;
      s.searcher = make_searcher(spec);
      s.policy = policy;
      s.started = Clock::now();
      Study& study = studies_[id] = std::move(s);
      try {
        apply(study, study.searcher->on_study_start());
        plan_.save_searcher_state(id, study.searcher->save());
        plan_.add_event(id, "submitted", {{"policy", to_string(policy)}});
      } catch (...) {
        studies_.erase(id);
        throw;
      }
    });
  } catch (...) {
    resync();
    throw;
  }
  studies_[id].master_s += thread_cpu_seconds() - started;
  schedule_changed_ = true;
  return id;
}

void Master::apply(Study& s, const std::vector<Operation>& ops) {
  for (const Operation& op : ops) {
    if (s.status != StudyStatus::kRunning) return;
    if (const Create* c = std::get_if<Create>(&op)) {
      if (s.trials.count(c->trial))
        throw std::runtime_error("searcher created trial " + std::to_string(c->trial) + " twice");
      if (c->trial != static_cast<RequestId>(s.trials.size()))
        throw std::runtime_error("searcher trial ids must be 0, 1, 2, ... in creation order");
      // The trial enters the plan and the tree with its first Train (a stored trial has work).
      if (c->fork && !s.trials.count(c->fork->donor))
        throw std::runtime_error("searcher forked trial " + std::to_string(c->trial) +
                                 " from unknown trial " + std::to_string(c->fork->donor));
      Trial t;
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
      if (it == s.trials.end()) continue;
      Trial& t = trials_.at(it->second);
      for (int64_t step : t.pending_evals) pending_by_step_[step].erase(t.id);
      t.pending_evals.clear();
      t.stopped_at = trained_length(t);
      t.status = TrialStatus::kStopped;
      plan_.set_trial_status(t.id, t.status, "stopped by the searcher");
    } else if (std::holds_alternative<Finish>(op)) {
      finish(s, StudyStatus::kDone, "");
    }
  }
}

void Master::place_trial(Study& s, Trial& t, int64_t length, const std::vector<int64_t>& evals) {
  if (length > t.length) {
    Change change;
    if (!t.in_tree) {
      TrialRow row;
      row.id = t.id;
      row.study_id = s.id;
      // Trial-based: a root key of its own, so that no trial shares a stage with another.
      row.root_key = s.policy == Policy::kTrialBased
                         ? s.spec.root_key + "/trial-" + std::to_string(t.id)
                         : s.spec.root_key;
      row.params = t.params;
      row.hyperparams = s.spec.hyperparams(t.params);
      if (t.fork) {
        // The donor's history up to the fork step, the trial's own values after it.
        const Trial& donor = trials_.at(s.trials.at(t.fork->donor));
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
    note_change(change);
  }
  plan_.add_eval_requests(t.id, evals);
  t.status = TrialStatus::kRunning;
  plan_.set_trial_status(t.id, t.status);
  for (int64_t step : evals) {
    auto cached = metric_cache_.find(key_of(t.id, step));
    if (cached != metric_cache_.end()) {
      record_metric(t, step, cached->second);  // evaluated already, for another trial
    } else {
      t.pending_evals.insert(step);
      pending_by_step_[step].insert(t.id);
    }
  }
}

// Stores the metric for the trial and lets its searcher react, in the caller's transaction.
void Master::record_metric(Trial& t, int64_t step, const json& metrics) {
  for (const auto& [name, value] : metrics.items())
    plan_.add_metric({t.id, step, name, value.get<double>()});
  t.pending_evals.erase(step);
  pending_by_step_[step].erase(t.id);
  Study& s = studies_.at(t.study);
  if (s.status != StudyStatus::kRunning) return;
  if (std::optional<double> v = metric_value(metrics, s.spec.searcher.metric))
    apply(s, s.searcher->on_validation(t.request, step, *v));
  maybe_close(t);
}

int64_t Master::needed_length(const Trial& t) const {
  return t.stopped_at >= 0 ? std::min(t.stopped_at, t.length) : t.length;
}

int64_t Master::trained_length(const Trial& t) const {
  if (!t.in_tree) return 0;
  for (StageId id : tree_.path(t.id)) {
    const Stage& x = tree_.stage(id);
    if (x.trained_until < std::min(x.end, t.length)) return x.trained_until;
  }
  return t.length;
}

std::unordered_map<StageId, int64_t> Master::needed_ends() const {
  std::unordered_map<StageId, int64_t> out;
  for (const auto& [id, t] : trials_) {
    // Work of a study that ended (done, failed, cancelled) is not trained any further.
    auto study = studies_.find(t.study);
    if (!t.in_tree || t.status == TrialStatus::kFailed || study == studies_.end() ||
        study->second.status != StudyStatus::kRunning)
      continue;
    int64_t need = needed_length(t);
    for (StageId s : tree_.path(id)) {
      const Stage& x = tree_.stage(s);
      if (x.start >= need) break;
      int64_t& end = out[s];
      end = std::max(end, std::min(x.end, need));
    }
  }
  return out;
}

bool Master::trial_trained(const Trial& t) const {
  if (!t.in_tree) return false;
  return tree_.stage(tree_.stage_at(t.id, t.length)).trained_until >= t.length;
}

void Master::maybe_close(Trial& t) {
  if (t.status != TrialStatus::kRunning || !t.pending_evals.empty() || !trial_trained(t)) return;
  t.status = TrialStatus::kDone;
  plan_.set_trial_status(t.id, t.status, "trained to its length");
  Study& s = studies_.at(t.study);
  if (s.status == StudyStatus::kRunning) apply(s, s.searcher->on_trial_closed(t.request));
}

void Master::finish(Study& s, StudyStatus status, std::string error) {
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
  plan_.set_study_status(s.id, status, error);
  schedule_changed_ = true;  // its work under way may be abandoned
  plan_.add_event(s.id, status == StudyStatus::kDone ? "finished" : to_string(status),
                  {{"error", error}});
  collect_checkpoints();
  if (!options_.quiet && status == StudyStatus::kFailed)
    std::fprintf(stderr, "master: study %s failed: %s\n", s.spec.name.c_str(), error.c_str());
}

void Master::cancel(int64_t id) {
  Study& s = studies_.at(id);
  if (s.status != StudyStatus::kRunning)
    throw std::invalid_argument("study " + s.spec.name + " (id " + std::to_string(id) +
                                ") has already ended: " + to_string(s.status));
  try {
    plan_.transaction([&] {
      for (const auto& [request, trial] : s.trials) {
        Trial& t = trials_.at(trial);
        if (t.status != TrialStatus::kPending && t.status != TrialStatus::kRunning) continue;
        for (int64_t step : t.pending_evals) pending_by_step_[step].erase(t.id);
        t.pending_evals.clear();
        t.stopped_at = trained_length(t);
        t.status = TrialStatus::kStopped;
        plan_.set_trial_status(t.id, t.status, "the study was cancelled");
      }
      finish(s, StudyStatus::kCancelled, "cancelled by a client");
    });
  } catch (...) {
    resync();
    throw;
  }
  if (!options_.quiet) std::fprintf(stderr, "master: study %s cancelled\n", s.spec.name.c_str());
  schedule_changed_ = true;
}

int64_t Master::find_study(const json& id_or_name) const {
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

json Master::workers_json() const {
  json out = json::array();
  const auto now = Clock::now();
  for (const auto& [peer, w] : workers_) {
    json j{{"name", w.name},
           {"device", w.device},
           {"devices", w.devices},
           {"threads", w.threads},
           {"pid", w.pid},
           {"last_seen_s",
            std::round(std::chrono::duration<double>(now - w.last_seen).count() * 10) / 10},
           {"states_held", w.held.size()}};
    if (w.job >= 0) {
      const Job& job = jobs_.at(w.job);
      json studies = json::array();
      for (int64_t id : job.studies)
        if (auto it = studies_.find(id); it != studies_.end())
          studies.push_back(it->second.spec.name);
      j["job"] = {{"studies", studies},
                  {"trial", trials_.count(job.rep) ? trials_.at(job.rep).number : -1},
                  {"from", job.wire.from},
                  {"to", job.wire.to},
                  {"step", std::max(job.progress_step, job.wire.from)}};
    }
    out.push_back(j);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tree and states.

Master::Key Master::key_of(TrialId rep, int64_t step) const {
  return {tree_.stage_at(rep, step), step};
}

std::optional<int64_t> Master::state_at(const Key& key) const {
  auto it = state_index_.find(key);
  if (it == state_index_.end()) return std::nullopt;
  return it->second;
}

// Moves state names and cached metrics above each split point to the upper stage, and asks a
// worker that is training through a split point to snapshot there.
void Master::note_change(const Change& change) {
  for (const Split& split : change.splits) {
    auto move_above = [&](auto& index, auto on_move) {
      auto first = index.upper_bound(Key{split.stage, split.at});
      auto last = index.lower_bound(Key{split.stage + 1, INT64_MIN});
      std::vector<std::pair<Key, typename std::decay_t<decltype(index)>::mapped_type>> moved(first,
                                                                                             last);
      index.erase(first, last);
      for (auto& [key, value] : moved) {
        index[{split.upper, key.second}] = value;
        on_move(value);
      }
    };
    move_above(state_index_, [&](int64_t id) { states_[id].stage = split.upper; });
    move_above(metric_cache_, [](const json&) {});
    if (state_at({split.stage, split.at})) continue;
    for (auto& [id, job] : jobs_) {
      const protocol::Job& w = job.wire;
      if (w.from >= split.at || w.to <= split.at || job.progress_step >= split.at) continue;
      if (key_of(job.rep, split.at) != Key{split.stage, split.at}) continue;
      int64_t state = next_state_++;
      protocol::SnapshotOrder order{
          split.at, state, "state-" + incarnation_ + "-" + std::to_string(state) + ".ckpt"};
      auto pos = std::lower_bound(job.wire.snapshots.begin(), job.wire.snapshots.end(), order,
                                  [](const auto& a, const auto& b) { return a.step < b.step; });
      job.wire.snapshots.insert(pos, order);
      json m = protocol::make("snapshot_at");
      m["job"] = id;
      m["step"] = order.step;
      m["state"] = order.state;
      m["file"] = order.file;
      protocol::router_send(socket_, job.worker, m);
    }
  }
}

// The job trained its path over [from, step) and the worker holds the state at `step`.
void Master::mark_progress(Job& job, int64_t step) {
  for (StageId id : tree_.path(job.rep)) {
    const Stage& x = tree_.stage(id);
    if (x.end <= job.wire.from) continue;
    if (x.start >= step) break;
    if (x.start >= job.wire.from || x.trained_until >= job.wire.from) {
      int64_t before = x.trained_until;
      tree_.mark_trained(id, step);
      if (tree_.stage(id).trained_until != before) plan_.save_stage(tree_.stage(id));
    }
  }
  int64_t steps = step - job.reported_step;
  job.reported_step = step;
  for (int64_t sid : job.studies) {
    auto it = studies_.find(sid);
    if (it != studies_.end()) it->second.steps_executed += steps;
  }
}

double Master::cost_per_step(const std::string& root_key) const {
  auto it = step_cost_.find(root_key);
  if (it == step_cost_.end() || it->second.second == 0) return 1.0;
  return it->second.first / static_cast<double>(it->second.second);
}

std::set<int64_t> Master::studies_through(StageId stage) const {
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

void Master::collect_checkpoints() {
  std::set<StageId> reachable;
  for (const auto& [id, t] : trials_) {
    auto study = studies_.find(t.study);
    if (!t.in_tree || study == studies_.end() || study->second.status != StudyStatus::kRunning)
      continue;
    for (StageId s : tree_.path(id)) reachable.insert(s);
  }
  for (auto it = state_index_.begin(); it != state_index_.end();) {
    StateInfo& info = states_.at(it->second);
    if (reachable.count(info.stage)) {
      ++it;
      continue;
    }
    if (info.checkpoint_row >= 0) plan_.delete_checkpoint(info.checkpoint_row);
    if (!info.file.empty()) {
      std::error_code ec;  // already gone is fine
      std::filesystem::remove(std::filesystem::path(options_.checkpoints) / info.file, ec);
    }
    states_.erase(it->second);
    it = state_index_.erase(it);
  }
}

// ---------------------------------------------------------------------------------------------
// Messages.

void Master::poll(int timeout_ms) {
  if (!deferred_.empty() && seconds_since(last_busy_) >= 1) {
    // Short tries, so that the master keeps answering clients while the lock is held.
    int busy_timeout = plan_.set_busy_timeout(100);
    while (!deferred_.empty() && try_handle(deferred_.front())) deferred_.pop_front();
    plan_.set_busy_timeout(busy_timeout);
    if (deferred_.empty() && !options_.quiet)
      std::fprintf(stderr, "master: the search plan is writable again\n");
  }
  auto envelope = protocol::router_receive(socket_, timeout_ms);
  while (envelope) {
    // A worker's messages keep their order: behind one that waits for the plan, they wait too.
    // Others (clients, hellos) never wait: they only read, or fail with the lock's error.
    auto worker = workers_.find(envelope->peer);
    if (worker != workers_.end()) worker->second.last_seen = Clock::now();  // alive all the same
    if (worker == workers_.end() || deferred_.empty()) {
      if (!try_handle(*envelope)) deferred_.push_back(std::move(*envelope));
    } else {
      deferred_.push_back(std::move(*envelope));
    }
    envelope = protocol::router_receive(socket_, 0);
  }
  // Scheduling work is shared by the running studies, in proportion to their trials.
  double started = thread_cpu_seconds();
  check_workers();
  if (trials_to_close_ && deferred_.empty()) {
    try {
      close_trained_trials();
    } catch (const PlanBusy&) {
      // the plan is locked by another process: the next poll tries again
    }
  }
  // Work becomes ready or a worker free only through some events (schedule_changed_ says which
  // happened): otherwise there is nothing to recompute.
  if (schedule_changed_) {
    abandon_orphan_jobs();
    dispatch();
  }
  schedule_changed_ = false;
  double spent = thread_cpu_seconds() - started;
  int64_t trials = 0;
  for (const auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning) trials += static_cast<int64_t>(s.trials.size());
  for (auto& [id, s] : studies_)
    if (s.status == StudyStatus::kRunning && trials > 0)
      s.master_s += spent * static_cast<double>(s.trials.size()) / static_cast<double>(trials);
}

bool Master::try_handle(const protocol::Envelope& envelope) {
  try {
    handle(envelope.peer, protocol::parse(envelope.body));
  } catch (const PlanBusy& e) {
    // Every handler's first write is a BEGIN IMMEDIATE, and nothing before it changes what a
    // retry would do: the message is handled again, whole, once the lock is released.
    if (deferred_.empty() && !options_.quiet)
      std::fprintf(stderr, "master: %s; worker messages wait and are retried every second\n",
                   e.what());
    last_busy_ = Clock::now();
    return false;
  } catch (const std::exception& e) {
    // A bad message is refused and logged; it changed nothing (handlers validate before they
    // write, and their writes are transactions).
    if (!options_.quiet) std::fprintf(stderr, "master: refused a message: %s\n", e.what());
    log_event(std::nullopt, "refused_message", {{"error", e.what()}});
  }
  return true;
}

void Master::log_event(std::optional<int64_t> study, const std::string& kind, const json& detail) {
  try {
    plan_.add_event(study, kind, detail);
  } catch (const std::exception& e) {
    if (!options_.quiet)
      std::fprintf(stderr, "master: event %s not logged: %s\n", kind.c_str(), e.what());
  }
}

void Master::handle(const std::string& peer, const json& m) {
  const std::string type = m["type"];
  if (type == "hello") return on_hello(peer, m);
  if (type == "submit" || type == "status" || type == "cancel" || type == "workers")
    return on_client(peer, m);
  auto it = workers_.find(peer);
  if (it == workers_.end()) {
    protocol::router_send(socket_, peer, protocol::make("reset"));  // a stranger: say hello first
    return;
  }
  Worker& w = it->second;
  w.last_seen = Clock::now();
  if (type == "heartbeat") {
    if (m.contains("job") && w.job >= 0 && protocol::get_int(m, "job") == w.job)
      jobs_.at(w.job).progress_step = protocol::get_int(m, "step");
  } else if (type == "metric") {
    on_metric(w, m);
  } else if (type == "snapshot") {
    on_snapshot(w, m);
  } else if (type == "done") {
    on_done(w, m);
  } else if (type == "failed") {
    on_failed(w, m);
  } else if (type == "abandoned") {
    on_abandoned(w, m);
  } else {
    throw protocol::ProtocolError("message.type: unknown type \"" + type + "\"");
  }
}

void Master::on_hello(const std::string& peer, const json& m) {
  Worker w;
  w.peer = peer;
  w.name = protocol::get_string(m, "name", 256);
  w.device = protocol::get_string(m, "device", 64);
  w.threads = protocol::get_int(m, "threads", 1, 4096);
  // Pipeline stages it can run at once (--devices); older workers say nothing: one.
  w.devices = m.contains("devices") ? protocol::get_int(m, "devices", 1, 4096) : 1;
  w.pid = protocol::get_int(m, "pid");
  w.last_seen = Clock::now();
  auto old = workers_.find(peer);
  if (old != workers_.end() && old->second.job >= 0) {
    record_execution(jobs_.at(old->second.job), old->second, ExecutionOutcome::kLost,
                     jobs_.at(old->second.job).progress_step);
    jobs_.erase(old->second.job);
  }
  workers_[peer] = w;
  schedule_changed_ = true;
  log_event(std::nullopt, "worker_joined", {{"name", w.name}, {"device", w.device}});
  // Five heartbeats fit in the timeout, so one late heartbeat never loses a worker.
  json welcome = protocol::make("welcome");
  welcome["incarnation"] = incarnation_;
  welcome["heartbeat_ms"] =
      std::clamp<int64_t>(static_cast<int64_t>(options_.worker_timeout_s * 200), 10, 60000);
  protocol::router_send(socket_, peer, welcome);
}

void Master::on_client(const std::string& peer, const json& m) {
  const std::string type = m["type"];
  json reply = protocol::make("reply");
  try {
    if (type == "submit") {
      json spec_json = protocol::get_object(m, "spec");
      Policy policy = parse_policy(protocol::get_string(m, "policy", 32));
      StudySpec spec = parse_spec(spec_json);
      int64_t id = submit(spec, spec_json, policy);
      reply["study"] = id;
      reply["name"] = spec.name;
    } else if (type == "status") {
      int64_t id = protocol::get_int(m, "study");
      if (!studies_.count(id)) throw std::invalid_argument("no study " + std::to_string(id));
      reply["summary"] = summary(id).to_json();
      reply["running"] = study_running(id);
    } else if (type == "cancel") {
      if (!m.contains("study")) throw std::invalid_argument("cancel.study: missing");
      int64_t id = find_study(m["study"]);
      cancel(id);
      reply["summary"] = summary(id).to_json();
    } else if (type == "workers") {
      reply["workers"] = workers_json();
    }
    reply["ok"] = true;
  } catch (const std::exception& e) {
    reply["ok"] = false;
    reply["error"] = e.what();
  }
  protocol::router_send(socket_, peer, reply);
}

void Master::on_metric(Worker& w, const json& m) {
  int64_t job_id = protocol::get_int(m, "job");
  if (job_id != w.job) throw protocol::ProtocolError("metric.job: not this worker's job");
  Job& job = jobs_.at(job_id);
  int64_t step = protocol::get_int(m, "step", job.wire.from, job.wire.to);
  const json& metrics = protocol::get_object(m, "metrics");
  for (const auto& [name, value] : metrics.items())
    if (!value.is_number())
      throw protocol::ProtocolError("metric.metrics." + name + ": not a number");
  Key key = key_of(job.rep, step);
  metric_cache_[key] = metrics;
  std::vector<TrialId> waiting;
  for (TrialId t : pending_by_step_[step])
    if (tree_.stage_at(t, step) == key.first) waiting.push_back(t);
  // One commit for every trial that waited for this state; each study's part is a savepoint of
  // its own (guarded), so one failing searcher fails only its study.
  plan_.transaction([&] {
    for (TrialId id : waiting) {
      auto it = trials_.find(id);
      if (it == trials_.end()) continue;
      Trial& t = it->second;
      Study& s = studies_.at(t.study);
      guarded(s, [&] {
        record_metric(t, step, metrics);
        plan_.save_searcher_state(s.id, s.searcher->save());
      });
    }
  });
}

void Master::on_snapshot(Worker& w, const json& m) {
  int64_t job_id = protocol::get_int(m, "job");
  if (job_id != w.job) throw protocol::ProtocolError("snapshot.job: not this worker's job");
  Job& job = jobs_.at(job_id);
  int64_t step = protocol::get_int(m, "step", job.wire.from + 1, job.wire.to);
  int64_t state = protocol::get_int(m, "state");
  auto order = std::find_if(job.wire.snapshots.begin(), job.wire.snapshots.end(),
                            [&](const auto& o) { return o.state == state && o.step == step; });
  if (order == job.wire.snapshots.end())
    throw protocol::ProtocolError("snapshot.state: no such snapshot was ordered");
  int64_t bytes = protocol::get_int(m, "bytes");
  Key key = key_of(job.rep, step);
  std::optional<int64_t> known = state_at(key);
  // A snapshot announced after every study of its job ended (its file is announced once written,
  // so the message can come late) is a state that nobody can reach.
  const bool orphan = std::none_of(job.studies.begin(), job.studies.end(),
                                   [&](int64_t id) { return study_running(id); });
  StateInfo info{key.first, step, order->file, -1};
  plan_.transaction([&] {
    if (!known && !orphan && !order->file.empty())
      info.checkpoint_row = plan_.add_checkpoint({0, key.first, step, order->file, bytes, "", 0});
    mark_progress(job, step);
  });
  if (known || orphan) {
    // Made twice (a replay raced with a late snapshot: keep the first), or an orphan: this file
    // goes.
    if (!order->file.empty() && !(known && order->file == states_.at(*known).file)) {
      std::error_code ec;  // already gone is fine
      std::filesystem::remove(std::filesystem::path(options_.checkpoints) / order->file, ec);
    }
    return;
  }
  states_[state] = info;
  state_index_[key] = state;
  w.held.insert(state);
  schedule_changed_ = true;
  job.progress_step = std::max(job.progress_step, step);
}

void Master::on_done(Worker& w, const json& m) {
  int64_t job_id = protocol::get_int(m, "job");
  if (job_id != w.job) throw protocol::ProtocolError("done.job: not this worker's job");
  Job& job = jobs_.at(job_id);
  int64_t step = protocol::get_int(m, "step", job.wire.to, job.wire.to);
  double busy = protocol::get_number(m, "busy_s");
  // A job that outlived every study it worked for (a study may end while work is under way)
  // leaves states that nobody can reach.
  bool orphan = std::none_of(job.studies.begin(), job.studies.end(),
                             [&](int64_t id) { return study_running(id); });
  // The worker is past every split point of its job: no snapshot order goes to it any more.
  job.progress_step = step;
  // One commit for the progress and every trial this job closes; if the plan is locked, nothing
  // has changed yet and the message is retried whole.
  plan_.transaction([&] {
    mark_progress(job, step);
    record_execution(job, w, ExecutionOutcome::kDone, step);
    if (orphan) collect_checkpoints();
    // Trials whose last step this job trained (and that need no more evaluations) close now.
    std::vector<TrialId> ending;
    for (StageId id : tree_.path(job.rep)) {
      const Stage& x = tree_.stage(id);
      if (x.end <= job.wire.from || x.start >= step) continue;
      for (TrialId t : tree_.trials_ending_in(id)) ending.push_back(t);
    }
    for (TrialId id : ending) {
      auto it = trials_.find(id);
      if (it == trials_.end()) continue;
      Trial& t = it->second;
      Study& s = studies_.at(t.study);
      if (s.status != StudyStatus::kRunning) continue;
      guarded(s, [&] {
        maybe_close(t);
        plan_.save_searcher_state(s.id, s.searcher->save());
      });
    }
  });
  w.held.clear();
  for (const json& id : m.value("held", json::array()))
    if (id.is_number_integer()) w.held.insert(id.get<int64_t>());
  const std::string& root = tree_.trial(job.rep).root_key;
  int64_t steps = job.wire.to - job.wire.from;
  if (steps > 0 && busy > 0) {
    step_cost_[root].first += busy;
    step_cost_[root].second += steps;
  }
  for (int64_t sid : job.studies)
    if (studies_.count(sid)) studies_.at(sid).busy_worker_s += busy;
  storage_failures_.erase(tree_.stage_at(job.rep, std::max<int64_t>(job.wire.from + 1, 1)));
  jobs_.erase(job_id);
  w.job = -1;
  schedule_changed_ = true;
}

void Master::on_failed(Worker& w, const json& m) {
  int64_t job_id = protocol::get_int(m, "job", -1);
  if (job_id != w.job) throw protocol::ProtocolError("failed.job: not this worker's job");
  std::string error = protocol::get_string(m, "error", 4096);
  bool retry = false;
  if (m.contains("retry")) {
    if (!m["retry"].is_boolean()) throw protocol::ProtocolError("failed.retry: expected a boolean");
    retry = m["retry"].get<bool>();
  }
  Job job = jobs_.at(job_id);
  std::string lost;
  if (m.contains("lost_file")) {
    lost = protocol::get_file_name(m, "lost_file");
    if (lost != job.wire.parent_file || job.wire.parent_state < 0)
      throw protocol::ProtocolError("failed.lost_file: not the job's parent checkpoint");
  }
  StageId stage = tree_.stage_at(job.rep, std::max<int64_t>(job.wire.from + 1, 1));
  if (!lost.empty()) {
    // The parent checkpoint is missing or corrupt: rebuilt by replay, the stage is not at fault.
    if (states_.count(job.wire.parent_state)) forget_state(job.wire.parent_state, error);
  } else if (retry && storage_failures_[stage].count + 1 < kStorageAttempts) {
    // The worker could not write a checkpoint (a full disk): another worker, if there is one,
    // tries again from the newest state reported.
    log_event(std::nullopt, "stage_retry", {{"worker", w.name}, {"error", error}});
    if (!options_.quiet)
      std::fprintf(stderr, "master: worker %s failed a stage on storage, retrying: %s\n",
                   w.name.c_str(), error.c_str());
  } else {
    if (retry)
      error += " (the stage failed on storage " + std::to_string(kStorageAttempts) + " times)";
    // One transaction first: if the plan is locked, nothing has changed and this is retried.
    plan_.transaction([&] { fail_trials_through(job, error); });
  }
  if (retry && lost.empty()) {
    ++storage_failures_[stage].count;
    storage_failures_[stage].workers.insert(w.peer);
  }
  record_execution(job, w, ExecutionOutcome::kFailed, job.progress_step, error);
  // Steps trained after its last snapshot are lost, and trained again: they count as executed.
  count_lost_steps(job);
  jobs_.erase(job_id);
  w.job = -1;
  schedule_changed_ = true;
}

void Master::forget_state(int64_t state, const std::string& why) {
  StateInfo info = states_.at(state);
  plan_.transaction([&] {
    if (info.checkpoint_row >= 0) plan_.delete_checkpoint(info.checkpoint_row);
    plan_.add_event(std::nullopt, "checkpoint_lost", {{"file", info.file}, {"why", why}});
  });
  if (!options_.quiet)
    std::fprintf(stderr, "master: checkpoint %s is lost (%s); its state will be replayed\n",
                 info.file.c_str(), why.c_str());
  std::error_code ec;  // a corrupt file goes; a missing one is already gone
  if (!info.file.empty())
    std::filesystem::remove(std::filesystem::path(options_.checkpoints) / info.file, ec);
  state_index_.erase({info.stage, info.step});
  states_.erase(state);
  for (auto& [peer, w] : workers_) w.held.erase(state);
}

// A job failed in the engine (bad settings, a diverged model, unreadable data): retrying would
// fail again, so every trial that needs the stage fails, and the stage is not scheduled again.
void Master::fail_trials_through(const Job& job, const std::string& error) {
  StageId stage = tree_.stage_at(job.rep, std::max<int64_t>(job.wire.from + 1, 1));
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
    Trial& t = it->second;
    Study& s = studies_.at(t.study);
    for (int64_t step : t.pending_evals) pending_by_step_[step].erase(t.id);
    t.pending_evals.clear();
    t.status = TrialStatus::kFailed;
    t.error = error;
    if (!options_.quiet)
      std::fprintf(stderr, "master: trial %lld of study %s failed: %s\n",
                   static_cast<long long>(t.number), s.spec.name.c_str(), error.c_str());
    guarded(s, [&] {
      plan_.set_trial_status(t.id, t.status, error);
      if (s.status != StudyStatus::kRunning) return;
      apply(s, s.searcher->on_trial_failed(t.request));
      plan_.save_searcher_state(s.id, s.searcher->save());
    });
  }
}

void Master::check_workers() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (seconds_since(it->second.last_seen) < options_.worker_timeout_s) {
      ++it;
      continue;
    }
    // Lost: its job goes back to the queue from the newest state it reported.
    log_event(std::nullopt, "worker_lost", {{"name", it->second.name}});
    if (!options_.quiet) std::fprintf(stderr, "master: lost worker %s\n", it->second.name.c_str());
    schedule_changed_ = true;
    if (it->second.job >= 0) {
      // The steps it trained after its last snapshot are lost and will be trained again: they
      // count as executed (the heartbeats said how far it got).
      const Job& job = jobs_.at(it->second.job);
      record_execution(job, it->second, ExecutionOutcome::kLost, job.progress_step);
      count_lost_steps(job);
      jobs_.erase(it->second.job);
      trials_to_close_ = true;
    }
    it = workers_.erase(it);
  }
}

void Master::record_execution(const Job& job, const Worker& w, ExecutionOutcome outcome,
                              int64_t reached, const std::string& error) {
  ExecutionRow row;
  const protocol::Job& wire = job.wire;
  row.stage = tree_.stage_at(job.rep, wire.to > wire.from ? wire.from + 1 : wire.from);
  row.trial = job.rep;
  row.kind = job.kind;
  row.from = wire.from;
  row.to = wire.to;
  row.reached = std::clamp(reached, wire.from, wire.to);
  row.worker = w.name;
  row.started_at = job.started_at;
  row.ended_at = std::max(job.started_at, unix_seconds());
  row.outcome = outcome;
  row.error = error;
  row.studies.assign(job.studies.begin(), job.studies.end());
  try {
    plan_.add_execution(row);
  } catch (const std::exception& e) {
    if (!options_.quiet)
      std::fprintf(stderr, "master: execution of job %lld not recorded: %s\n",
                   static_cast<long long>(wire.id), e.what());
  }
}

void Master::count_lost_steps(const Job& job) {
  for (int64_t sid : job.studies)
    if (studies_.count(sid))
      studies_.at(sid).steps_executed +=
          std::max<int64_t>(0, job.progress_step - job.reported_step);
}

// A job that no running study needs any more (they were cancelled, or ended while it ran) is
// abandoned: its worker stops at its next step and says "abandoned" (or, if it finished first,
// "done"), and stays busy for the master until then.
void Master::abandon_orphan_jobs() {
  for (auto& [id, job] : jobs_) {
    if (job.abandoned || std::any_of(job.studies.begin(), job.studies.end(),
                                     [&](int64_t s) { return study_running(s); }))
      continue;
    job.abandoned = true;
    json order = protocol::make("abandon");
    order["job"] = id;
    protocol::router_send(socket_, job.worker, order);
    log_event(std::nullopt, "job_abandoned", {{"job", id}});
  }
}

void Master::on_abandoned(Worker& w, const json& m) {
  int64_t job_id = protocol::get_int(m, "job");
  if (job_id != w.job || !jobs_.at(job_id).abandoned)
    throw protocol::ProtocolError("abandoned.job: not a job this worker was told to abandon");
  record_execution(jobs_.at(job_id), w, ExecutionOutcome::kAbandoned,
                   jobs_.at(job_id).progress_step);
  count_lost_steps(jobs_.at(job_id));
  w.held.clear();
  for (const json& id : m.value("held", json::array()))
    if (id.is_number_integer()) w.held.insert(id.get<int64_t>());
  jobs_.erase(job_id);
  w.job = -1;
  schedule_changed_ = true;
}

void Master::remove_unreported_checkpoints() {
  std::set<std::string> known;
  for (const auto& [id, info] : states_) known.insert(info.file);
  const std::string mine = "state-" + incarnation_ + "-";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.checkpoints, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(mine, 0) == 0 && !known.count(name)) std::filesystem::remove(entry.path(), ec);
  }
}

void Master::shutdown_workers() {
  for (const auto& [peer, w] : workers_)
    protocol::router_send(socket_, peer, protocol::make("shutdown"));
}

// ---------------------------------------------------------------------------------------------
// Scheduling.

std::vector<Master::Candidate> Master::candidates() {
  // What running jobs will produce: stages they train and states they will snapshot.
  std::set<StageId> claimed;
  std::set<Key> coming;
  for (const auto& [id, job] : jobs_) {
    for (StageId s : tree_.path(job.rep)) {
      const Stage& x = tree_.stage(s);
      if (x.end > job.wire.from && x.start < job.wire.to) claimed.insert(s);
    }
    for (const auto& order : job.wire.snapshots) coming.insert(key_of(job.rep, order.step));
    for (int64_t e : job.wire.eval_steps) coming.insert(key_of(job.rep, e));
  }

  // The pending evaluations of trials through the range of `rep` between from and to.
  auto evals_between = [&](TrialId rep, int64_t from, int64_t to, bool include_from) {
    std::vector<int64_t> out;
    for (auto it = pending_by_step_.lower_bound(from);
         it != pending_by_step_.end() && it->first <= to; ++it) {
      if (it->first == from && !include_from) continue;
      StageId at = tree_.stage_at(rep, it->first);
      for (TrialId t : it->second)
        if (tree_.stage_at(t, it->first) == at) {
          out.push_back(it->first);
          break;
        }
    }
    return out;
  };
  // The nearest state before `step` on rep's path: (state id or -1 for a fresh model, its step).
  auto nearest_before = [&](TrialId rep, int64_t step) -> std::pair<int64_t, int64_t> {
    std::vector<StageId> path = tree_.path(rep);
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const Stage& x = tree_.stage(*it);
      if (x.start >= step) continue;
      auto found = state_index_.lower_bound(Key{x.id, step});
      while (found != state_index_.begin()) {
        --found;
        if (found->first.first != x.id) break;
        return {found->second, found->first.second};
      }
    }
    return {-1, 0};
  };

  std::vector<Candidate> out;
  std::set<Key> planned;  // states that a candidate already rebuilds
  auto rebuild = [&](TrialId rep, const Key& target, double priority) {
    if (coming.count(target) || !planned.insert(target).second) return;
    auto [state, step] = nearest_before(rep, target.second);
    Candidate c;
    c.priority = priority;
    c.rep = rep;
    c.from = step;
    c.to = target.second;
    c.parent_state = state;
    c.evals = evals_between(rep, step, target.second, step == 0);
    out.push_back(c);
  };

  std::unordered_map<StageId, double> priorities =
      tree_.priorities([&](const std::string& root) { return cost_per_step(root); });
  // Only what a trial that is not stopped needs is trained (a stopped trial keeps its length in
  // the tree, which records what was asked).
  std::unordered_map<StageId, int64_t> needed = needed_ends();
  for (const auto& [id, priority] : priorities) {
    if (claimed.count(id) || failed_stages_.count(id)) continue;
    const Stage& x = tree_.stage(id);
    if (x.parent != kNoStage && failed_stages_.count(x.parent)) continue;
    auto need = needed.find(id);
    if (need == needed.end() || need->second <= x.trained_until) continue;
    int64_t t = x.trained_until;
    Candidate c;
    c.priority = priority;
    c.rep = x.representative;
    c.from = t;
    c.to = need->second;
    c.stage = id;
    if (t > 0) {
      Key parent{t == x.start ? x.parent : x.id, t};
      std::optional<int64_t> state = state_at(parent);
      if (!state) {
        // Rebuilt only if its stage was trained past it (else that stage's own work makes it).
        if (tree_.stage(parent.first).trained_until >= t)
          rebuild(x.representative, parent, priority);
        continue;
      }
      c.parent_state = *state;
    }
    c.evals = evals_between(c.rep, t, c.to, t == 0 || t > x.start);
    out.push_back(c);
  }

  // Evaluations of states that were trained before anyone asked for them.
  for (const auto& [step, waiting] : pending_by_step_) {
    for (TrialId tid : waiting) {
      Key key = key_of(tid, step);
      const Stage& x = tree_.stage(key.first);
      bool trained_past = x.trained_until > step || (x.trained_until == step && step == x.end);
      if (!trained_past || coming.count(key) || planned.count(key)) continue;
      double priority = 1e300;  // cheap, and a searcher waits for it
      if (step == 0) {
        planned.insert(key);
        out.push_back({priority, tid, 0, 0, -1, {0}, kNoStage});
      } else if (std::optional<int64_t> state = state_at(key)) {
        planned.insert(key);
        out.push_back({priority, tid, step, step, *state, {step}, kNoStage});
      } else {
        rebuild(tid, key, priority);
      }
    }
  }
  // Ties go to the older trial and the earlier step, so that the same plan gives the same order
  // of work (and of results, which adaptive searchers depend on) in every run.
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(b.priority, a.rep, a.from) < std::tie(a.priority, b.rep, b.from);
  });
  return out;
}

void Master::dispatch() {
  std::vector<Worker*> idle;
  for (auto& [peer, w] : workers_)
    if (w.job < 0) idle.push_back(&w);
  if (idle.empty()) return;
  for (const Candidate& c : candidates()) {
    if (idle.empty()) break;
    // A stage that failed on a worker's storage goes to another worker, while there is one.
    const std::set<std::string>* failed_on = nullptr;
    if (!storage_failures_.empty()) {
      auto it = storage_failures_.find(tree_.stage_at(c.rep, std::max<int64_t>(c.from + 1, 1)));
      if (it != storage_failures_.end() && it->second.workers.size() < workers_.size())
        failed_on = &it->second.workers;
    }
    // A pipelined stage needs a worker with a device per pipeline stage.
    const int64_t devices = studies_.at(trials_.at(c.rep).study).spec.pipeline.stages;
    if (devices > 1) warn_if_no_worker_has(devices, trials_.at(c.rep).study);
    auto usable = [&](Worker* w) {
      return w->devices >= devices && (!failed_on || !failed_on->count(w->peer));
    };
    // Prefer a worker that holds the parent state in memory: it forks without reading a file.
    auto chosen = std::find_if(idle.begin(), idle.end(), [&](Worker* w) {
      return usable(w) && w->held.count(c.parent_state) != 0;
    });
    if (chosen == idle.end()) chosen = std::find_if(idle.begin(), idle.end(), usable);
    if (chosen == idle.end()) continue;
    send_job(**chosen, c);
    idle.erase(chosen);
  }
}

void Master::warn_if_no_worker_has(int64_t devices, int64_t study) {
  int64_t most = 0;
  for (const auto& [peer, w] : workers_) most = std::max(most, w.devices);
  if (most >= devices || !device_warnings_.insert({study, most}).second) return;
  const std::string& name = studies_.at(study).spec.name;
  log_event(study, "no_worker_for_pipeline", {{"devices_needed", devices}, {"devices_most", most}});
  if (!options_.quiet)
    std::fprintf(stderr,
                 "master: study %s needs a worker with %lld devices (pipeline.stages) and no "
                 "connected worker has more than %lld: start one with --devices cpu:%lld\n",
                 name.c_str(), static_cast<long long>(devices), static_cast<long long>(most),
                 static_cast<long long>(devices));
}

void Master::send_job(Worker& w, const Candidate& c) {
  const TrialRecord& rep = tree_.trial(c.rep);
  const Study& study = studies_.at(trials_.at(c.rep).study);
  Job job;
  job.worker = w.peer;
  job.rep = c.rep;
  job.reported_step = c.from;
  job.progress_step = c.from;
  job.started_at = unix_seconds();
  job.kind = c.from == c.to        ? ExecutionKind::kEvaluate
             : c.stage == kNoStage ? ExecutionKind::kReplay
                                   : ExecutionKind::kTrain;
  protocol::Job& wire = job.wire;
  wire.id = next_job_++;
  wire.run.model = study.spec.model;
  wire.run.data = study.spec.data.name;
  wire.run.train_samples = study.spec.data.train_samples;
  wire.run.eval_samples = study.spec.data.eval_samples;
  wire.run.seed = study.spec.seed;
  wire.run.fixed = study.spec.fixed;
  wire.run.microbatches = study.spec.pipeline.microbatches;
  wire.run.pipeline_stages = study.spec.pipeline.stages;
  wire.run.pipeline_schedule = study.spec.pipeline.schedule;
  wire.run.pipeline_chunks = study.spec.pipeline.chunks;
  wire.hyperparams = rep.hyperparams;
  wire.from = c.from;
  wire.to = c.to;
  wire.parent_state = c.parent_state;
  if (c.parent_state >= 0) wire.parent_file = states_.at(c.parent_state).file;
  wire.eval_steps = c.evals;
  // Snapshots: the end, where trials end inside the stage (a searcher may extend them from
  // there), and every snapshot_every steps.
  std::set<int64_t> steps;
  if (c.to > c.from) steps.insert(c.to);
  if (c.stage != kNoStage)
    for (TrialId t : tree_.trials_ending_in(c.stage)) {
      int64_t len = tree_.trial(t).length;
      if (len > c.from && len < c.to) steps.insert(len);
    }
  if (options_.snapshot_every > 0)
    for (int64_t s = (c.from / options_.snapshot_every + 1) * options_.snapshot_every; s < c.to;
         s += options_.snapshot_every)
      steps.insert(s);
  for (int64_t s : steps) {
    int64_t state = next_state_++;
    wire.snapshots.push_back(
        {s, state, "state-" + incarnation_ + "-" + std::to_string(state) + ".ckpt"});
  }
  StageId first = tree_.stage_at(c.rep, std::max<int64_t>(c.from + 1, 1));
  job.studies = studies_through(first);
  w.job = wire.id;
  if (options_.verbose)
    std::fprintf(
        stderr,
        "master: job %lld to %s: trial %lld steps [%lld, %lld) from state %lld, %zu evals\n",
        static_cast<long long>(wire.id), w.name.c_str(), static_cast<long long>(c.rep),
        static_cast<long long>(c.from), static_cast<long long>(c.to),
        static_cast<long long>(c.parent_state), wire.eval_steps.size());
  protocol::router_send(socket_, w.peer, protocol::to_json(wire));
  jobs_[wire.id] = std::move(job);
}

// ---------------------------------------------------------------------------------------------
// Reports.

bool Master::study_running(int64_t study) const {
  auto it = studies_.find(study);
  return it != studies_.end() && it->second.status == StudyStatus::kRunning;
}

Progress Master::progress(int64_t study) const {
  Progress p;
  const Study& s = studies_.at(study);
  std::map<StageId, int64_t> needed;  // stage -> the end this study needs of it
  for (const auto& [req, tid] : s.trials) {
    const Trial& t = trials_.at(tid);
    ++p.trials;
    if (t.status != TrialStatus::kPending && t.status != TrialStatus::kRunning) ++p.trials_closed;
    if (!t.in_tree) continue;
    int64_t need = needed_length(t);
    for (StageId id : tree_.path(tid)) {
      if (tree_.stage(id).start >= need) break;
      int64_t end = std::min(tree_.stage(id).end, need);
      needed[id] = std::max(needed[id], end);
    }
  }
  for (const auto& [id, end] : needed) {
    const Stage& x = tree_.stage(id);
    p.steps_unique += end - x.start;
    p.steps_trained += std::max<int64_t>(0, std::min(end, x.trained_until) - x.start);
  }
  p.elapsed_s = seconds_since(s.started);
  return p;
}

StudySummary Master::summary(int64_t study) {
  const Study& s = studies_.at(study);
  StudySummary out;
  out.study = s.id;
  out.name = s.spec.name;
  out.status = to_string(s.status);
  out.error = s.error;
  out.metric = s.spec.searcher.metric;
  Progress p = progress(study);
  out.trials = p.trials;
  out.steps_unique = p.steps_unique;
  out.steps_executed = s.steps_executed;
  for (const auto& [req, tid] : s.trials) {
    const Trial& t = trials_.at(tid);
    out.steps_trial_based += needed_length(t);
    out.critical_path_steps = std::max(out.critical_path_steps, needed_length(t));
  }
  auto end = s.status == StudyStatus::kRunning ? Clock::now() : s.ended;
  out.wall_s = std::chrono::duration<double>(end - s.started).count();
  // Lower bounds of the makespan, in seconds: the critical path, and the work spread over all
  // workers, each at the measured time per step of this study's root key.
  double per_step = s.steps_executed > 0 ? s.busy_worker_s / s.steps_executed : 0;
  double workers = std::max<double>(1, static_cast<double>(workers_.size()));
  double bound = per_step * std::max<double>(out.critical_path_steps, out.steps_unique / workers);
  out.makespan_ratio = bound > 0 ? out.wall_s / bound : 0;
  out.master_ms_per_trial = p.trials > 0 ? 1000 * s.master_s / p.trials : 0;
  for (const MetricRow& m : plan_.study_metrics(study)) {
    if (m.name != out.metric || std::isnan(m.value)) continue;
    if (!out.has_best || better(m.value, out.best_value, s.spec.searcher.maximize)) {
      const Trial& t = trials_.at(m.trial);
      out.has_best = true;
      out.best_trial = t.number;
      out.best_params = t.params;
      out.best_value = m.value;
      out.best_step = m.step;
    }
  }
  return out;
}

}  // namespace hippo::master
