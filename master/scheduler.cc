#include "master/scheduler.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <stdexcept>
#include <tuple>

namespace hippo::master {
namespace {

// The steps in [from, to] (from itself only when include_from) of the states on `trial`'s path
// that some trial waits to have evaluated.
std::vector<int64_t> evals_between(const SchedulerInput& in, TrialId trial, int64_t from,
                                   int64_t to, bool include_from) {
  std::vector<int64_t> out;
  const int64_t first = include_from ? from : from + 1;
  if (in.pending_evaluations.empty() || first > to) return out;
  for (StageId id : in.tree.path(trial)) {
    const Stage& x = in.tree.stage(id);
    if (x.end < first) continue;  // its states (start, end] lie before the range
    if (x.start > to) break;
    auto [begin, end] = in.pending_evaluations.of_stage(id, first, to);
    for (auto it = begin; it != end; ++it) out.push_back(it->first.second);
  }
  return out;
}

// Builds the list: stage work and the rebuilds they need, then evaluations.
class WorkList {
 public:
  explicit WorkList(const SchedulerInput& in) : in_(in) {}

  void add_stage_work(size_t limit) {
    // The priorities of the best `limit` items found so far, the lowest on top.
    std::priority_queue<double, std::vector<double>, std::greater<>> best;
    auto found = [&](double priority) {
      best.push(priority);
      if (best.size() > limit) best.pop();
    };
    const bool bounded = in_.order == ScheduleOrder::kCriticalPath && limit != SIZE_MAX;
    for (auto it = in_.priorities.begin(); it != in_.priorities.end(); ++it) {
      const auto [minus_total, id] = *it;
      if (bounded && best.size() >= limit && -minus_total <= best.top()) break;
      // Running jobs' stages lead the order (they were the best): skipped at the cost of one
      // lookup each.
      if (in_.in_flight.trains(id) || in_.failed_stages.count(id)) continue;
      const Priorities::Entry& entry = in_.priorities.entries().at(id);
      const Stage& x = in_.tree.stage(id);
      if (x.parent != kNoStage && in_.failed_stages.count(x.parent)) continue;
      auto need = in_.needed_ends.find(id);
      if (need == in_.needed_ends.end() || need->second <= x.trained_until) continue;
      const double priority = in_.priorities.now(x, entry);
      const int64_t t = x.trained_until;
      WorkItem w;
      w.priority =
          in_.order == ScheduleOrder::kFifo ? -static_cast<double>(x.representative) : priority;
      w.representative = x.representative;
      w.from = t;
      w.to = need->second;
      w.stage = id;
      if (t > 0) {
        StateKey parent{t == x.start ? x.parent : x.id, t};
        std::optional<int64_t> state = in_.states.state_at(parent);
        if (!state) {
          // Rebuilt only if its stage was trained past it (else that stage's own work makes it).
          if (in_.tree.stage(parent.first).trained_until >= t) {
            rebuild(x.representative, parent, w.priority);
            found(w.priority);
          }
          continue;
        }
        w.parent_state = *state;
      }
      w.evals = evals_between(in_, w.representative, t, w.to, t == 0 || t > x.start);
      out_.push_back(w);
      found(w.priority);
    }
  }

  // Evaluations of states that were trained before anyone asked for them.
  void add_evaluations() {
    const double priority = 1e300;  // cheap, and a searcher waits for it
    for (const StateKey& key : in_.pending_evaluations.trained()) {
      const int64_t step = key.second;
      const TrialId trial = *in_.pending_evaluations.waiting(key).begin();  // the oldest
      if (in_.in_flight.reports(key) || planned_.count(key)) continue;
      if (step == 0) {
        planned_.insert(key);
        out_.push_back({priority, trial, 0, 0, -1, {0}, kNoStage});
      } else if (std::optional<int64_t> state = in_.states.state_at(key)) {
        planned_.insert(key);
        out_.push_back({priority, trial, step, step, *state, {step}, kNoStage});
      } else {
        rebuild(trial, key, priority);
      }
    }
  }

  std::vector<WorkItem> sorted() {
    std::sort(out_.begin(), out_.end(), [](const WorkItem& a, const WorkItem& b) {
      return std::tie(b.priority, a.representative, a.from) <
             std::tie(a.priority, b.representative, b.from);
    });
    return std::move(out_);
  }

 private:
  // A replay that makes the state `target` on `trial`'s path from the nearest earlier state. Work
  // that several stages wait for gets the highest of their priorities.
  void rebuild(TrialId trial, const StateKey& target, double priority) {
    if (in_.in_flight.reports(target)) return;
    if (auto it = replays_.find(target); it != replays_.end()) {
      out_[it->second].priority = std::max(out_[it->second].priority, priority);
      return;
    }
    if (!planned_.insert(target).second) return;
    replays_[target] = out_.size();
    auto [state, step] = in_.states.nearest_before(in_.tree, trial, target.second);
    WorkItem w;
    w.priority = priority;
    w.representative = trial;
    w.from = step;
    w.to = target.second;
    w.parent_state = state;
    w.evals = evals_between(in_, trial, step, target.second, step == 0);
    out_.push_back(w);
  }

  const SchedulerInput& in_;
  std::set<StateKey> planned_;          // states that an item already rebuilds or evaluates
  std::map<StateKey, size_t> replays_;  // state -> the item of out_ that rebuilds it
  std::vector<WorkItem> out_;
};

}  // namespace

void InFlight::update(const StageTree& tree, const std::map<int64_t, RunningJob>& jobs,
                      int64_t shape, const std::vector<int64_t>& changed) {
  if (shape != shape_) {
    jobs_.clear();
    stages_.clear();
    states_.clear();
    shape_ = shape;
    for (const auto& [id, job] : jobs) add(id, tree, job);
    return;
  }
  for (int64_t id : changed) {
    auto running = jobs.find(id);
    auto known = jobs_.find(id);
    if (running == jobs.end() && known != jobs_.end())
      remove(known);
    else if (running != jobs.end() && known == jobs_.end())
      add(id, tree, running->second);
  }
}

void InFlight::add(int64_t job, const StageTree& tree, const RunningJob& running) {
  Footprint& f = jobs_[job];
  const protocol::Job& order = running.order;
  for (StageId s : tree.path(running.representative)) {
    const Stage& x = tree.stage(s);
    if (x.end > order.from && x.start < order.to) f.stages.push_back(s);
  }
  for (const auto& snapshot : order.snapshots)
    f.states.push_back(state_key(tree, running.representative, snapshot.step));
  for (int64_t e : order.eval_steps) f.states.push_back(state_key(tree, running.representative, e));
  for (StageId s : f.stages) ++stages_[s];
  for (const StateKey& k : f.states) ++states_[k];
}

void InFlight::remove(std::unordered_map<int64_t, Footprint>::iterator job) {
  for (StageId s : job->second.stages)
    if (auto it = stages_.find(s); --it->second == 0) stages_.erase(it);
  for (const StateKey& k : job->second.states)
    if (auto it = states_.find(k); --it->second == 0) states_.erase(it);
  jobs_.erase(job);
}

double Priorities::cost(const std::string& root_key) {
  auto it = costs_.find(root_key);
  if (it == costs_.end()) it = costs_.emplace(root_key, cost_per_step_(root_key)).first;
  return it->second;
}

void Priorities::compute(const StageTree& tree, const std::unordered_map<StageId, int64_t>& needed,
                         StageId s) {
  const Stage& x = tree.stage(s);
  double below = 0;
  for (StageId child : x.children)
    if (auto t = totals_.find(child); t != totals_.end()) below = std::max(below, t->second);
  const double c = cost(x.root_key);
  const int64_t pending = std::max<int64_t>(0, needed.at(s) - x.trained_until);
  const double total = double(pending) * c + below;
  totals_[s] = total;
  if (auto old = entries_.find(s); old != entries_.end()) {
    order_.erase({-old->second.total, s});
    entries_.erase(old);
  }
  if (pending > 0) {
    entries_[s] = {total, x.trained_until, c};
    order_.insert({-total, s});
  }
}

void Priorities::refresh(const StageTree& tree, const std::unordered_map<StageId, int64_t>& needed,
                         int64_t version, const std::vector<TrialId>& raised,
                         const std::vector<StageId>& uppers,
                         const std::function<double(const std::string& root_key)>& cost_per_step) {
  cost_per_step_ = cost_per_step;
  bool stale = version != version_;
  for (auto& [root, used] : costs_)
    if (std::abs(cost_per_step(root) - used) > 0.1 * used) stale = true;
  if (stale) {
    costs_.clear();
    totals_.clear();
    entries_.clear();
    order_.clear();
    // Every ancestor of a needed stage is needed: walk from the needed top stages through needed
    // children, then backwards, so that each stage finds its children's totals done.
    std::vector<StageId> order, todo;
    for (const auto& [id, end] : needed)
      if (tree.stage(id).parent == kNoStage) todo.push_back(id);
    while (!todo.empty()) {
      StageId s = todo.back();
      todo.pop_back();
      order.push_back(s);
      for (StageId child : tree.stage(s).children)
        if (needed.count(child)) todo.push_back(child);
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) compute(tree, needed, *it);
    version_ = version;
    raised_ = raised.size();
    uppers_ = uppers.size();
    return;
  }
  // Split tops first (their children's totals are kept), then the paths that grew since: their
  // stages, bottom up (an upper stage on such a path is computed again there).
  for (; uppers_ < uppers.size(); ++uppers_)
    if (needed.count(uppers[uppers_])) compute(tree, needed, uppers[uppers_]);
  for (; raised_ < raised.size(); ++raised_) {
    std::vector<StageId> path = tree.path(raised[raised_]);
    for (auto it = path.rbegin(); it != path.rend(); ++it)
      if (needed.count(*it)) compute(tree, needed, *it);
  }
  // The best stages are trained first: dropping those at the front keeps a search short.
  while (!order_.empty()) {
    const StageId s = order_.begin()->second;
    const Stage& x = tree.stage(s);
    auto need = needed.find(s);
    if (need != needed.end() && need->second > x.trained_until) break;
    order_.erase(order_.begin());
    entries_.erase(s);
  }
}

void Priorities::forget_trained(const StageTree& tree,
                                const std::unordered_map<StageId, int64_t>& needed,
                                const std::vector<StageId>& stages) {
  for (StageId s : stages) {
    auto entry = entries_.find(s);  // only stages of the tree refresh computed on
    if (entry == entries_.end()) continue;
    auto need = needed.find(s);
    if (need != needed.end() && need->second > tree.stage(s).trained_until) continue;
    order_.erase({-entry->second.total, s});
    entries_.erase(entry);
  }
}

ScheduleOrder parse_schedule_order(const std::string& text) {
  if (text == "critical-path") return ScheduleOrder::kCriticalPath;
  if (text == "fifo") return ScheduleOrder::kFifo;
  throw std::invalid_argument("unknown schedule order \"" + text + "\" (critical-path or fifo)");
}

std::vector<WorkItem> ready_work(const SchedulerInput& in, size_t limit) {
  WorkList list(in);
  list.add_stage_work(limit);
  list.add_evaluations();
  return list.sorted();
}

std::vector<Assignment> assign(
    const std::vector<WorkItem>& work, std::vector<IdleWorker> idle,
    const std::function<bool(const WorkItem&, const IdleWorker&)>& usable,
    const std::function<int64_t(const WorkItem&, const IdleWorker&)>& moved_bytes) {
  std::vector<Assignment> out;
  for (const WorkItem& w : work) {
    if (idle.empty()) break;
    auto chosen = std::find_if(idle.begin(), idle.end(), [&](const IdleWorker& i) {
      return usable(w, i) && i.held->count(w.parent_state) != 0;
    });
    // Else the first that moves no bytes, or the one that moves the fewest.
    int64_t fewest = INT64_MAX;
    for (auto i = idle.begin(); chosen == idle.end() && i != idle.end(); ++i) {
      if (!usable(w, *i)) continue;
      const int64_t bytes = moved_bytes(w, *i);
      if (bytes < fewest) {
        fewest = bytes;
        if (bytes == 0) chosen = i;
      }
    }
    if (chosen == idle.end() && fewest != INT64_MAX)
      chosen = std::find_if(idle.begin(), idle.end(), [&](const IdleWorker& i) {
        return usable(w, i) && moved_bytes(w, i) == fewest;
      });
    if (chosen == idle.end()) continue;
    out.push_back({w, chosen->peer});
    idle.erase(chosen);
  }
  return out;
}

std::map<std::string, int64_t> lent_threads(const std::vector<CoreHolder>& workers) {
  struct Host {
    int64_t idle_threads = 0;
    std::vector<const CoreHolder*> borrowers;
  };
  std::map<std::string, Host> hosts;
  for (const CoreHolder& w : workers) {
    if (w.host.empty()) continue;
    Host& h = hosts[w.host];
    if (!w.busy)
      h.idle_threads += w.threads;
    else if (w.borrows)
      h.borrowers.push_back(&w);
  }
  std::map<std::string, int64_t> out;
  for (auto& [name, h] : hosts) {
    std::sort(h.borrowers.begin(), h.borrowers.end(),
              [](const CoreHolder* a, const CoreHolder* b) { return a->peer < b->peer; });
    const int64_t n = static_cast<int64_t>(h.borrowers.size());
    for (int64_t i = 0; i < n; ++i)
      out[h.borrowers[i]->peer] =
          h.borrowers[i]->threads + h.idle_threads / n + (i < h.idle_threads % n ? 1 : 0);
  }
  return out;
}

std::vector<int64_t> snapshot_steps(const StageTree& tree, const WorkItem& work, int64_t every) {
  std::set<int64_t> steps;
  if (work.to > work.from) steps.insert(work.to);
  if (work.stage != kNoStage)
    for (TrialId t : tree.trials_ending_in(work.stage)) {
      int64_t length = tree.trial(t).length;
      if (length > work.from && length < work.to) steps.insert(length);
    }
  if (every > 0)
    for (int64_t s = (work.from / every + 1) * every; s < work.to; s += every) steps.insert(s);
  return {steps.begin(), steps.end()};
}

std::vector<int64_t> jobs_to_snapshot_at_split(const Split& split, const StageTree& tree,
                                               const StateRegistry& states,
                                               const std::map<int64_t, RunningJob>& jobs) {
  std::vector<int64_t> out;
  if (states.state_at({split.stage, split.at})) return out;
  for (const auto& [id, job] : jobs) {
    const protocol::Job& o = job.order;
    if (o.from >= split.at || o.to <= split.at || job.progress_step >= split.at) continue;
    if (state_key(tree, job.representative, split.at) != StateKey{split.stage, split.at}) continue;
    out.push_back(id);
  }
  return out;
}

}  // namespace hippo::master
