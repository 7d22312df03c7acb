#include "stagetree/tree.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace hippo {

namespace {

// Raw bytes in host order: keys never leave the process.
void append_u64(std::string& out, uint64_t v) {
  out.append(reinterpret_cast<const char*>(&v), 8);
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument(what);
}

std::string trial_name(TrialId id) {
  return "trial " + std::to_string(id);
}
std::string stage_name(StageId id) {
  return "stage " + std::to_string(id);
}

// divergence_until() over two trials' sequences, given in the same (name) order.
int64_t first_difference(const std::vector<const Sequence*>& a,
                         const std::vector<const Sequence*>& b, int64_t from, int64_t until) {
  for (size_t i = 0; i < a.size() && from < until; ++i)
    until = divergence_until(*a[i], *b[i], from, until);
  return until;
}

}  // namespace

StageTree::StageTree(const StageTree& other)
    : stages_(other.stages_),
      ending_in_(other.ending_in_),
      trials_(other.trials_),
      child_index_(other.child_index_),
      root_trial_(other.root_trial_) {
  for (const auto& [id, record] : trials_)
    index_record(record).last_stage = other.state_.at(id).last_stage;
  for (const Stage& s : stages_) rep_.push_back(&state_.at(s.representative));
}

StageTree& StageTree::operator=(const StageTree& other) {
  if (this != &other) *this = StageTree(other);
  return *this;
}

std::string StageTree::child_key(StageId parent, const std::string& root_key,
                                 const std::vector<const Sequence*>& seqs, int64_t step) {
  // A top stage is found by its root key, a child by its parent's id; the tag keeps the two apart.
  std::string key;
  key.reserve(16 + root_key.size() + 9 * seqs.size());
  if (parent == kNoStage) {
    key += 'R';
    append_u64(key, root_key.size());
    key += root_key;
  } else {
    key += 'C';
    append_u64(key, uint64_t(parent));
  }
  // All trials under one root key have the same names, so the values alone identify the child.
  for (const Sequence* seq : seqs) {
    if (seq->is_text()) {
      key += 't';
      append_u64(key, seq->text_value().size());
      key += seq->text_value();
    } else {
      key += 'n';
      append_u64(key, std::bit_cast<uint64_t>(seq->value_at(step)));
    }
  }
  return key;
}

std::string StageTree::stage_key(StageId id) const {
  const Stage& s = stages_[id];
  return child_key(s.parent, s.root_key, rep_[id]->seqs, s.start);
}

void StageTree::check_names(const TrialRecord& trial) const {
  auto it = root_trial_.find(trial.root_key);
  if (it == root_trial_.end()) return;
  const Hyperparams& other = trials_.at(it->second).hyperparams;
  bool same =
      std::equal(trial.hyperparams.begin(), trial.hyperparams.end(), other.begin(), other.end(),
                 [](const auto& a, const auto& b) { return a.first == b.first; });
  if (!same)
    fail(trial_name(trial.id) + ": its hyper-parameter names differ from those of " +
         trial_name(it->second) + " under the same root key");
}

StageTree::TrialState& StageTree::add_record(TrialRecord record) {
  check_names(record);
  root_trial_.emplace(record.root_key, record.id);
  TrialId id = record.id;
  return index_record(trials_.emplace(id, std::move(record)).first->second);
}

StageTree::TrialState& StageTree::index_record(const TrialRecord& stored) {
  TrialState& state = state_[stored.id];
  state.record = &stored;
  for (const auto& [name, seq] : stored.hyperparams) state.seqs.push_back(&seq);
  return state;
}

StageId StageTree::new_stage(StageId parent, int64_t start, int64_t end,
                             const TrialState& representative, Change& change) {
  StageId id = StageId(stages_.size());
  stages_.push_back(Stage{.id = id,
                          .parent = parent,
                          .root_key = representative.record->root_key,
                          .start = start,
                          .end = end,
                          .trained_until = start,
                          .representative = representative.record->id,
                          .children = {}});
  rep_.push_back(&representative);
  ending_in_.emplace_back();
  if (parent != kNoStage) stages_[parent].children.push_back(id);
  child_index_.emplace(stage_key(id), id);
  change.created.push_back(id);
  return id;
}

void StageTree::end_in(TrialState& trial, StageId stage) {
  trial.last_stage = stage;
  ending_in_[stage].push_back(trial.record->id);
}

void StageTree::split(StageId id, int64_t at, Change& change) {
  StageId up = StageId(stages_.size());
  {
    Stage& low = stages_[id];
    Stage upper{.id = up,
                .parent = id,
                .root_key = low.root_key,
                .start = at,
                .end = low.end,
                .trained_until = std::max(at, low.trained_until),
                .representative = low.representative,
                .children = std::move(low.children)};
    low.end = at;
    low.trained_until = std::min(low.trained_until, at);
    low.children = {up};
    stages_.push_back(std::move(upper));
    rep_.push_back(rep_[id]);
    ending_in_.emplace_back();
  }
  // The old children now hang below the upper part: re-index them under their new parent.
  for (StageId c : stages_[up].children) {
    child_index_.erase(stage_key(c));
    stages_[c].parent = up;
    child_index_.emplace(stage_key(c), c);
  }
  child_index_.emplace(stage_key(up), up);
  // Trials whose last step lies above the cut now end in the upper part.
  std::vector<TrialId>& low_ending = ending_in_[id];
  auto moved = std::stable_partition(low_ending.begin(), low_ending.end(),
                                     [&](TrialId t) { return state_.at(t).record->length <= at; });
  for (auto it = moved; it != low_ending.end(); ++it) end_in(state_.at(*it), up);
  low_ending.erase(moved, low_ending.end());
  change.splits.push_back({.stage = id, .upper = up, .at = at});
  change.created.push_back(up);
}

void StageTree::place(TrialState& trial, StageId id, int64_t checked, Change& change) {
  const int64_t length = trial.record->length;
  while (true) {
    const Stage& x = stages_[id];
    const int64_t end = x.end;
    const int64_t limit = std::min(end, length);
    int64_t d = first_difference(trial.seqs, rep_[id]->seqs, checked, limit);
    if (d < limit) {  // both need step d and differ there: cut, and branch off at d
      split(id, d, change);
      end_in(trial, new_stage(id, d, length, trial, change));
      return;
    }
    if (length <= end) {
      end_in(trial, id);
      return;
    }
    if (x.children.empty()) {  // nobody else needs the steps past this leaf: grow it
      Stage& leaf = stages_[id];
      leaf.end = length;
      leaf.representative = trial.record->id;
      rep_[id] = &trial;
      change.extended.push_back(id);
      end_in(trial, id);
      return;
    }
    auto it = child_index_.find(child_key(id, x.root_key, trial.seqs, end));
    if (it == child_index_.end()) {
      end_in(trial, new_stage(id, end, length, trial, change));
      return;
    }
    id = it->second;
    checked = end + 1;  // the key matched: the values at the child's start are equal
  }
}

Change StageTree::add_trial(TrialId id, const std::string& root_key, Hyperparams hyperparams,
                            int64_t length) {
  if (has_trial(id)) fail(trial_name(id) + " already exists");
  if (length < 1)
    fail(trial_name(id) + ": length must be at least 1, got " + std::to_string(length));
  TrialState& trial = add_record(
      {.id = id, .root_key = root_key, .hyperparams = std::move(hyperparams), .length = length});
  Change change;
  auto it = child_index_.find(child_key(kNoStage, root_key, trial.seqs, 0));
  if (it == child_index_.end())
    end_in(trial, new_stage(kNoStage, 0, length, trial, change));
  else
    place(trial, it->second, 1, change);
  return change;
}

Change StageTree::extend_trial(TrialId id, int64_t length) {
  auto it = trials_.find(id);
  if (it == trials_.end()) fail("extend_trial: unknown " + trial_name(id));
  TrialRecord& trial = it->second;
  if (length <= trial.length) return {};
  int64_t old_length = trial.length;
  trial.length = length;
  TrialState& state = state_.at(id);
  std::vector<TrialId>& ending = ending_in_[state.last_stage];
  ending.erase(std::find(ending.begin(), ending.end(), id));
  Change change;
  place(state, state.last_stage, old_length, change);
  return change;
}

void StageTree::mark_trained(StageId stage, int64_t until) {
  if (stage < 0 || stage >= StageId(stages_.size()))
    fail("mark_trained: unknown " + stage_name(stage));
  Stage& s = stages_[stage];
  s.trained_until = std::max(s.trained_until, std::min(until, s.end));
}

std::vector<StageId> StageTree::path(TrialId id) const {
  auto it = state_.find(id);
  if (it == state_.end()) fail("path: unknown " + trial_name(id));
  std::vector<StageId> out;
  for (StageId s = it->second.last_stage; s != kNoStage; s = stages_[s].parent) out.push_back(s);
  std::reverse(out.begin(), out.end());
  return out;
}

StageId StageTree::stage_at(TrialId id, int64_t step) const {
  auto it = state_.find(id);
  if (it == state_.end()) fail("stage_at: unknown " + trial_name(id));
  if (step < 0 || step > it->second.record->length)
    fail("stage_at: step " + std::to_string(step) + " is outside " + trial_name(id));
  StageId s = it->second.last_stage;
  while (stages_[s].parent != kNoStage && step <= stages_[s].start) s = stages_[s].parent;
  return s;
}

std::vector<StageId> StageTree::top_stages() const {
  std::vector<StageId> out;
  for (const Stage& s : stages_)
    if (s.parent == kNoStage) out.push_back(s.id);
  return out;
}

const std::vector<TrialId>& StageTree::trials_ending_in(StageId id) const {
  if (id < 0 || id >= StageId(ending_in_.size()))
    fail("trials_ending_in: unknown " + stage_name(id));
  return ending_in_[id];
}

TreeCounts StageTree::counts() const {
  TreeCounts c;
  c.trials = int64_t(trials_.size());
  c.stages = int64_t(stages_.size());
  for (const Stage& s : stages_) {
    c.steps_unique += s.steps();
    c.steps_trained += s.trained_until - s.start;
  }
  for (const auto& [id, t] : trials_) {
    c.steps_trial_based += t.length;
    c.critical_path_steps = std::max(c.critical_path_steps, t.length);
  }
  return c;
}

int64_t StageTree::trained_length(TrialId id) const {
  const int64_t length = trial(id).length;
  for (StageId s : path(id)) {
    const Stage& x = stages_[s];
    if (x.trained_until < std::min(x.end, length)) return x.trained_until;
  }
  return length;
}

std::unordered_map<StageId, int64_t> StageTree::needed_ends(
    const std::map<TrialId, int64_t>& lengths) const {
  std::unordered_map<StageId, int64_t> out;  // stage -> the end some trial needs of it
  for (const auto& [id, need] : lengths) raise_needed_ends(out, id, need);
  return out;
}

void StageTree::raise_needed_ends(std::unordered_map<StageId, int64_t>& ends, TrialId id,
                                  int64_t length) const {
  for (StageId s : path(id)) {
    if (stages_[s].start >= length) break;
    int64_t& end = ends[s];
    end = std::max(end, std::min(stages_[s].end, length));
  }
}

StageTree::NeededSteps StageTree::needed_steps(const std::map<TrialId, int64_t>& lengths) const {
  NeededSteps out;
  for (const auto& [id, end] : needed_ends(lengths)) {
    const Stage& x = stages_[id];
    out.unique += end - x.start;
    out.trained += std::max<int64_t>(0, std::min(end, x.trained_until) - x.start);
  }
  return out;
}

std::vector<StageId> StageTree::parents_first() const {
  // Pre-order from the top stages. No recursion: paths can be thousands of stages deep.
  std::vector<StageId> order;
  std::vector<StageId> todo = top_stages();
  while (!todo.empty()) {
    StageId s = todo.back();
    todo.pop_back();
    order.push_back(s);
    todo.insert(todo.end(), stages_[s].children.begin(), stages_[s].children.end());
  }
  return order;
}

StageTree StageTree::restore(std::vector<Stage> stages, std::vector<TrialRecord> trials) {
  StageTree t;
  for (TrialRecord& r : trials) {
    if (t.has_trial(r.id)) fail("restore: " + trial_name(r.id) + " appears twice");
    if (r.length < 1)
      fail("restore: " + trial_name(r.id) + " has length " + std::to_string(r.length));
    t.add_record(std::move(r));
  }
  const StageId n = StageId(stages.size());
  std::vector<int> listed(stages.size(), 0);  // how often each stage appears as a child
  for (StageId i = 0; i < n; ++i) {
    const Stage& s = stages[i];
    std::string where = "restore: " + stage_name(i) + ": ";
    if (s.id != i) fail(where + "has id " + std::to_string(s.id) + " (ids are dense, in order)");
    if (s.start < 0 || s.end <= s.start) fail(where + "bad range");
    if (s.trained_until < s.start || s.trained_until > s.end) fail(where + "bad trained_until");
    auto rep = t.trials_.find(s.representative);
    if (rep == t.trials_.end()) fail(where + "unknown representative");
    if (rep->second.root_key != s.root_key || rep->second.length < s.end)
      fail(where + "its representative does not need all of it");
    if (s.parent == kNoStage) {
      if (s.start != 0) fail(where + "a top stage must start at 0");
    } else {
      if (s.parent < 0 || s.parent >= n || s.parent == i) fail(where + "bad parent");
      const Stage& p = stages[s.parent];
      if (p.end != s.start || p.root_key != s.root_key)
        fail(where + "does not continue its parent");
    }
    if (s.children.size() == 1) fail(where + "has a single child (stages would merge)");
    for (StageId c : s.children) {
      if (c < 0 || c >= n || stages[c].parent != i)
        fail(where + "lists a child that is not its own");
      ++listed[c];
    }
  }
  for (StageId i = 0; i < n; ++i)
    if (listed[i] != (stages[i].parent == kNoStage ? 0 : 1))
      fail("restore: " + stage_name(i) + " is not listed exactly once by its parent");
  t.stages_ = std::move(stages);
  t.ending_in_.resize(t.stages_.size());
  for (const Stage& s : t.stages_) t.rep_.push_back(&t.state_.at(s.representative));
  for (StageId i = 0; i < n; ++i)
    if (!t.child_index_.emplace(t.stage_key(i), i).second)
      fail("restore: " + stage_name(i) + " has the same values at its start as a sibling");
  // Every trial must follow a path of stages whose values it shares, ending where its steps end.
  for (const auto& [id, record] : t.trials_) {
    std::string where = "restore: " + trial_name(id) + ": ";
    TrialState& trial = t.state_.at(id);
    auto it = t.child_index_.find(child_key(kNoStage, record.root_key, trial.seqs, 0));
    if (it == t.child_index_.end()) fail(where + "no top stage has its values at step 0");
    StageId s = it->second;
    while (true) {
      const Stage& x = t.stages_[s];
      int64_t limit = std::min(x.end, record.length);
      if (first_difference(trial.seqs, t.rep_[s]->seqs, x.start + 1, limit) < limit)
        fail(where + "differs from the values of " + stage_name(s) + " inside it");
      if (record.length <= x.end) break;
      it = t.child_index_.find(child_key(s, record.root_key, trial.seqs, x.end));
      if (it == t.child_index_.end()) fail(where + "no stage continues it after " + stage_name(s));
      s = it->second;
    }
    t.end_in(trial, s);
  }
  for (const Stage& s : t.stages_) {
    std::string where = "restore: " + stage_name(s.id) + ": ";
    if (s.children.empty()) {
      int64_t longest = 0;
      for (TrialId id : t.ending_in_[s.id]) longest = std::max(longest, t.trials_.at(id).length);
      if (longest != s.end) fail(where + "a leaf must end where its longest trial ends");
    }
    StageId r = t.rep_[s.id]->last_stage;
    while (r != kNoStage && r != s.id) r = t.stages_[r].parent;
    if (r == kNoStage) fail(where + "its representative does not pass through it");
  }
  return t;
}

}  // namespace hippo
