#include "stagetree/tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <memory>
#include <tuple>

#include "tests/stagetree/random_schedules.h"

namespace hippo {
namespace {

Hyperparams lr(const Sequence& seq) {
  return {{"lr", seq}, {"weight_decay", Sequence::constant(5e-4)}};
}
Sequence steps(std::vector<std::pair<int64_t, double>> points) {
  return piecewise(points);
}

TEST(StageTree, InterfaceExampleStudy) {
  const int64_t epoch = 60000 / 128;  // 468 steps
  StageTree tree;
  TrialId id = 0;
  for (double init : {0.1, 0.05, 0.02})
    for (int64_t milestone : {1, 2, 3})
      for (double gamma : {0.1, 0.3})
        tree.add_trial(id++, "fmnist-mlp", lr(multistep(init, {milestone * epoch}, gamma)),
                       4 * epoch);
  TreeCounts c = tree.counts();
  EXPECT_EQ(c.trials, 18);
  EXPECT_EQ(c.steps_trial_based, 33696);
  EXPECT_EQ(c.steps_unique, 21060);
  EXPECT_EQ(c.critical_path_steps, 1872);
  EXPECT_EQ(c.steps_trained, 0);
  // Per init: [0,1e) then {m1 g.1, m1 g.3, m2|m3}; m2|m3 [1e,2e) then {m2 g.1, m2 g.3, m3}; m3
  // [2e,3e) then {m3 g.1, m3 g.3}: 9 stages.
  EXPECT_EQ(c.stages, 27);
  EXPECT_EQ(tree.top_stages().size(), 3u);
}

TEST(StageTree, TrainedLengthAndNeededSteps) {
  StageTree tree;
  // 0 and 1 share [0, 10); 1 goes on to 30; 2 is alone.
  tree.add_trial(0, "r", lr(steps({{0, 0.1}, {10, 0.01}})), 20);
  tree.add_trial(1, "r", lr(steps({{0, 0.1}, {10, 0.05}})), 30);
  tree.add_trial(2, "r", lr(Sequence::constant(0.3)), 15);
  EXPECT_EQ(tree.trained_length(1), 0);
  StageId shared = tree.stage_at(1, 10), upper = tree.stage_at(1, 30);
  tree.mark_trained(shared, 10);
  tree.mark_trained(upper, 18);
  EXPECT_EQ(tree.trained_length(1), 18);
  EXPECT_EQ(tree.trained_length(0), 10);
  // All of them: 10 shared + 10 + 20 + 15 unique; trained: 10 + 8.
  auto all = tree.needed_steps({{0, 20}, {1, 30}, {2, 15}});
  EXPECT_EQ(all.unique, 55);
  EXPECT_EQ(all.trained, 18);
  // Trial 1 stopped at 12: only [10, 12) of its own stage is needed.
  auto stopped = tree.needed_steps({{0, 20}, {1, 12}});
  EXPECT_EQ(stopped.unique, 10 + 10 + 2);
  EXPECT_EQ(stopped.trained, 10 + 2);
}

TEST(StageTree, SplitKeepsTheIdOnTheLowerPart) {
  StageTree tree;
  tree.add_trial(0, "r", lr(steps({{0, 1}, {100, 2}})), 200);
  tree.add_trial(1, "r", lr(steps({{0, 1}, {100, 2}})), 120);  // ends inside stage 0
  tree.add_trial(2, "r", lr(steps({{0, 1}, {100, 2}})), 30);
  EXPECT_EQ(tree.stages().size(), 1u);
  Change change = tree.add_trial(3, "r", lr(steps({{0, 1}, {60, 3}})), 150);
  ASSERT_EQ(change.splits.size(), 1u);
  EXPECT_EQ(change.splits[0].stage, 0);
  EXPECT_EQ(change.splits[0].upper, 1);
  EXPECT_EQ(change.splits[0].at, 60);
  EXPECT_EQ(change.created, (std::vector<StageId>{1, 2}));
  EXPECT_TRUE(change.extended.empty());
  const Stage& low = tree.stage(0);
  EXPECT_EQ(std::tie(low.start, low.end, low.representative), std::make_tuple(0, 60, 0));
  EXPECT_EQ(low.children, (std::vector<StageId>{1, 2}));
  const Stage& up = tree.stage(1);
  EXPECT_EQ(std::tie(up.parent, up.start, up.end, up.representative),
            std::make_tuple(0, 60, 200, 0));
  const Stage& branch = tree.stage(2);
  EXPECT_EQ(std::tie(branch.parent, branch.start, branch.end), std::make_tuple(0, 60, 150));
  EXPECT_EQ(tree.path(0), (std::vector<StageId>{0, 1}));
  EXPECT_EQ(tree.path(2), (std::vector<StageId>{0}));
  EXPECT_EQ(tree.path(3), (std::vector<StageId>{0, 2}));
  EXPECT_EQ(tree.trials_ending_in(0), (std::vector<TrialId>{2}));
  EXPECT_EQ(tree.trials_ending_in(1), (std::vector<TrialId>{0, 1}));
  EXPECT_EQ(tree.stage_at(3, 0), 0);
  EXPECT_EQ(tree.stage_at(3, 60), 0);
  EXPECT_EQ(tree.stage_at(3, 61), 2);
  EXPECT_EQ(tree.stage_at(3, 150), 2);
  EXPECT_THROW(tree.stage_at(3, 151), std::invalid_argument);
}

TEST(StageTree, TrainedProgressFollowsTheSplit) {
  StageTree tree;
  tree.add_trial(0, "r", lr(Sequence::constant(1)), 200);
  tree.mark_trained(0, 150);
  tree.add_trial(1, "r", lr(steps({{0, 1}, {60, 3}})), 100);
  EXPECT_EQ(tree.stage(0).trained_until, 60);
  EXPECT_EQ(tree.stage(1).trained_until, 150);  // the upper part keeps the work above the cut
  EXPECT_EQ(tree.stage(2).trained_until, 60);   // the new branch has nothing yet
  tree.add_trial(2, "r", lr(steps({{0, 1}, {30, 4}})), 100);
  EXPECT_EQ(tree.stage(0).trained_until, 30);
  EXPECT_EQ(tree.stage(3).trained_until, 60);
  EXPECT_EQ(tree.counts().steps_trained, 150);
  tree.mark_trained(2, 1000);  // clamped to the stage's end
  EXPECT_EQ(tree.stage(2).trained_until, 100);
  tree.mark_trained(2, 70);  // never goes back
  EXPECT_EQ(tree.stage(2).trained_until, 100);
}

TEST(StageTree, LeafExtensionAndExtendTrial) {
  StageTree tree;
  tree.add_trial(0, "r", lr(steps({{0, 1}, {200, 2}})), 100);
  Change grow = tree.add_trial(1, "r", lr(steps({{0, 1}, {200, 2}})), 150);
  EXPECT_EQ(grow.extended, (std::vector<StageId>{0}));
  EXPECT_TRUE(grow.created.empty());
  EXPECT_EQ(tree.stage(0).end, 150);
  EXPECT_EQ(tree.stage(0).representative, 1);
  EXPECT_EQ(tree.trials_ending_in(0), (std::vector<TrialId>{0, 1}));

  EXPECT_TRUE(tree.extend_trial(0, 90).created.empty());  // shorter: nothing happens
  EXPECT_EQ(tree.trial(0).length, 100);
  tree.extend_trial(0, 300);
  EXPECT_EQ(tree.stage(0).end, 300);
  EXPECT_EQ(tree.stage(0).representative, 0);
  EXPECT_EQ(tree.trials_ending_in(0), (std::vector<TrialId>{1, 0}));

  // A trial that differs at 250 from the extended leaf splits it there.
  tree.add_trial(2, "r", lr(steps({{0, 1}, {200, 2}, {250, 7}})), 260);
  EXPECT_EQ(tree.stage(0).end, 250);
  // Extending trial 1 (which ends at 150 in stage 0) runs into the new children and follows the
  // one with its values.
  Change into = tree.extend_trial(1, 400);
  EXPECT_EQ(tree.path(1), (std::vector<StageId>{0, 1}));
  EXPECT_EQ(into.extended, (std::vector<StageId>{1}));
  EXPECT_EQ(tree.stage(1).end, 400);
  EXPECT_EQ(tree.counts().steps_unique, 400 + 10);
}

TEST(StageTree, RootKeysAreSeparateTrees) {
  StageTree tree;
  tree.add_trial(0, "a", lr(Sequence::constant(1)), 10);
  tree.add_trial(1, "b", lr(Sequence::constant(1)), 10);
  tree.add_trial(2, "c", {{"momentum", Sequence::constant(1)}}, 10);  // other names, other key
  EXPECT_EQ(tree.top_stages(), (std::vector<StageId>{0, 1, 2}));
  EXPECT_EQ(tree.counts().steps_unique, 30);
}

TEST(StageTree, RefusesBadTrials) {
  StageTree tree;
  tree.add_trial(0, "r", lr(Sequence::constant(1)), 10);
  EXPECT_THROW(tree.add_trial(0, "r", lr(Sequence::constant(1)), 10), std::invalid_argument);
  EXPECT_THROW(tree.add_trial(1, "r", lr(Sequence::constant(1)), 0), std::invalid_argument);
  EXPECT_THROW(tree.add_trial(2, "r", {{"lr", Sequence::constant(1)}}, 5), std::invalid_argument);
  EXPECT_THROW(tree.extend_trial(9, 50), std::invalid_argument);
  EXPECT_THROW(tree.path(9), std::invalid_argument);
  EXPECT_THROW(tree.mark_trained(5, 1), std::invalid_argument);
  EXPECT_EQ(tree.counts().trials, 1);
}

TEST(StageTree, RestoreRoundTripAndRefusals) {
  StageTree tree;
  tree.add_trial(0, "r", lr(Sequence::constant(1)), 200);
  tree.add_trial(1, "r", lr(steps({{0, 1}, {60, 3}})), 150);
  tree.add_trial(2, "r", lr(steps({{0, 2}})), 50);
  tree.mark_trained(1, 90);
  std::vector<TrialRecord> trials;
  for (const auto& [id, t] : tree.trials()) trials.push_back(t);

  StageTree back = StageTree::restore(tree.stages(), trials);
  EXPECT_EQ(back.stages(), tree.stages());
  EXPECT_EQ(back.trials(), tree.trials());
  EXPECT_EQ(back.path(1), tree.path(1));
  back.add_trial(3, "r", lr(steps({{0, 1}, {80, 5}})), 100);  // usable after restore
  EXPECT_EQ(back.stage(1).end, 80);

  auto refuses = [&](std::vector<Stage> stages, std::vector<TrialRecord> ts) {
    EXPECT_THROW(StageTree::restore(std::move(stages), std::move(ts)), std::invalid_argument);
  };
  auto with = [&](auto edit) {
    std::vector<Stage> s = tree.stages();
    edit(s);
    return s;
  };
  refuses(with([](auto& s) { s[1].end = 180; }), trials);   // leaf longer than its trials
  refuses(with([](auto& s) { s[1].start = 61; }), trials);  // gap after its parent
  refuses(with([](auto& s) { s[1].representative = 7; }), trials);
  refuses(with([](auto& s) { s[1].representative = 1; }), trials);  // trial 1 is not in stage 1
  refuses(with([](auto& s) { s[0].children.pop_back(); }), trials);
  refuses(with([](auto& s) { s[2].id = 5; }), trials);
  refuses(with([](auto& s) { s[2].trained_until = 0; }), trials);
  refuses(with([](auto& s) { s[0].end = 50, s[1].start = 50, s[2].start = 50; }), trials);
  std::vector<TrialRecord> changed = trials;
  changed[1].hyperparams["lr"] = steps({{0, 1}, {30, 3}});  // differs inside stage 0
  refuses(tree.stages(), changed);
  changed = trials;
  changed.push_back(changed[0]);
  refuses(tree.stages(), changed);
}

TEST(StageTree, CopiesAreIndependent) {
  auto original = std::make_unique<StageTree>();
  original->add_trial(0, "r", lr(Sequence::constant(1)), 200);
  original->add_trial(1, "r", lr(steps({{0, 1}, {60, 3}})), 150);
  StageTree copy = *original;
  StageTree assigned;
  assigned = *original;
  original.reset();
  for (StageTree* t : {&copy, &assigned}) {
    t->add_trial(2, "r", lr(steps({{0, 1}, {30, 4}})), 100);
    t->extend_trial(1, 300);
    EXPECT_EQ(t->path(1), (std::vector<StageId>{0, 3, 2}));
    EXPECT_EQ(t->counts().steps_unique, 30 + 30 + 140 + 240 + 70);
  }
}

// ---- properties over random trial sets -------------------------------------------------------

struct RandomTrial {
  TrialId id;
  std::string root;
  Hyperparams hp;
  int64_t length;
};

std::vector<RandomTrial> random_trials(std::mt19937_64& rng, int n) {
  std::vector<RandomTrial> out;
  for (int i = 0; i < n; ++i) {
    RandomTrial t{.id = i * 3 + 1, .root = rng() % 4 ? "a" : "b", .hp = {}, .length = 1};
    for (const char* name : {"lr", "momentum"}) t.hp[name] = testing::random_sequence(rng);
    t.length = 1 + int64_t(rng() % 30);
    if (i > 0 && rng() % 5 == 0) t.hp = out[rng() % out.size()].hp;  // an exact repeat
    out.push_back(t);
  }
  return out;
}

// The tree as a value independent of stage ids: each stage as (root, start, end, the trials
// through it), sorted.
using Description = std::vector<std::tuple<std::string, int64_t, int64_t, std::vector<TrialId>>>;
Description describe(const StageTree& tree) {
  std::vector<std::vector<TrialId>> through(tree.stages().size());
  for (const auto& [id, t] : tree.trials())
    for (StageId s : tree.path(id)) through[s].push_back(id);
  Description out;
  for (const Stage& s : tree.stages()) {
    std::sort(through[s.id].begin(), through[s.id].end());
    out.emplace_back(s.root_key, s.start, s.end, through[s.id]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Steps that sharing must run, counted without the tree: at each step d, the number of classes of
// trials needing d (length > d) that agree on all of [0, d].
int64_t brute_force_unique_steps(const std::vector<RandomTrial>& trials) {
  int64_t total = 0;
  for (int64_t d = 0; d < 30; ++d) {
    std::vector<const RandomTrial*> classes;
    for (const RandomTrial& t : trials) {
      if (t.length <= d) continue;
      bool seen = false;
      for (const RandomTrial* c : classes)
        seen = seen || (c->root == t.root && divergence(c->hp, t.hp) > d);
      if (!seen) classes.push_back(&t);
    }
    total += int64_t(classes.size());
  }
  return total;
}

bool same_values_at(const Hyperparams& a, const Hyperparams& b, int64_t s) {
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    const Sequence& x = ia->second;
    const Sequence& y = ib->second;
    if (x.is_text() != y.is_text()) return false;
    if (x.is_text()
            ? x.text_value() != y.text_value()
            : std::bit_cast<uint64_t>(x.value_at(s)) != std::bit_cast<uint64_t>(y.value_at(s)))
      return false;
  }
  return true;
}

void check_invariants(const StageTree& tree) {
  for (const auto& [id, t] : tree.trials()) {
    std::vector<StageId> path = tree.path(id);
    int64_t at = 0;
    for (size_t i = 0; i < path.size(); ++i) {
      const Stage& s = tree.stage(path[i]);
      EXPECT_EQ(s.start, at);
      EXPECT_EQ(s.parent, i == 0 ? kNoStage : path[i - 1]);
      const Hyperparams& rep = tree.trial(s.representative).hyperparams;
      EXPECT_GE(tree.trial(s.representative).length, s.end);
      for (int64_t step = s.start; step < std::min(s.end, t.length); ++step)
        EXPECT_TRUE(same_values_at(t.hyperparams, rep, step)) << "trial " << id << " step " << step;
      at = s.end;
    }
    const Stage& last = tree.stage(path.back());
    EXPECT_TRUE(last.start < t.length && t.length <= last.end);
  }
  for (const Stage& s : tree.stages()) EXPECT_NE(s.children.size(), 1u);
}

TEST(Property, TreeIsIndependentOfInsertionOrderAndMatchesBruteForce) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 150; ++round) {
    std::vector<RandomTrial> trials = random_trials(rng, 2 + int(rng() % 24));
    StageTree first;
    for (const RandomTrial& t : trials) first.add_trial(t.id, t.root, t.hp, t.length);
    check_invariants(first);
    TreeCounts c = first.counts();
    EXPECT_LE(c.steps_unique, c.steps_trial_based);
    EXPECT_EQ(c.steps_unique, brute_force_unique_steps(trials));
    for (int order = 0; order < 3; ++order) {
      // Another order; half of the trials arrive shorter and are extended at the end.
      std::vector<RandomTrial> shuffled = trials;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      StageTree other;
      std::vector<const RandomTrial*> later;
      for (const RandomTrial& t : shuffled) {
        bool extend = rng() % 2;
        other.add_trial(t.id, t.root, t.hp, extend ? 1 + t.length / 2 : t.length);
        if (extend) later.push_back(&t);
      }
      for (const RandomTrial* t : later) other.extend_trial(t->id, t->length);
      check_invariants(other);
      EXPECT_EQ(describe(other), describe(first)) << "round " << round;
      TreeCounts o = other.counts();
      EXPECT_EQ(std::tie(o.stages, o.steps_unique, o.steps_trial_based, o.critical_path_steps),
                std::tie(c.stages, c.steps_unique, c.steps_trial_based, c.critical_path_steps));
    }
    std::vector<TrialRecord> records;
    for (const auto& [id, t] : first.trials()) records.push_back(t);
    std::shuffle(records.begin(), records.end(), rng);
    StageTree back = StageTree::restore(first.stages(), records);
    EXPECT_EQ(back.stages(), first.stages());
    for (const RandomTrial& t : trials) EXPECT_EQ(back.path(t.id), first.path(t.id));
  }
}

}  // namespace
}  // namespace hippo
