// The scheduler (master/scheduler.h) on hand-built trees, without sockets or processes: critical
// path first, locality preferred, replay when a state is missing, evaluations of states trained
// before anyone asked, and a split while a stage trains.
#include "master/scheduler.h"

#include <gtest/gtest.h>

#include <utility>

namespace hippo::master {
namespace {

// lr = 1 up to `diverge`, then `after`.
Hyperparams lr_until(int64_t diverge, double after) {
  return {{"lr", piecewise({{0, 1.0}, {diverge, after}})}};
}

// Every stage needed up to the lengths of all trials.
std::unordered_map<StageId, int64_t> all_needed(const StageTree& tree) {
  std::unordered_map<StageId, int64_t> out;
  for (const auto& [id, t] : tree.trials())
    for (StageId s : tree.path(id)) {
      const Stage& x = tree.stage(s);
      out[s] = std::max(out[s], std::min(x.end, t.length));
    }
  return out;
}

struct Fixture {
  StageTree tree;
  StateRegistry states{"test"};
  std::map<int64_t, RunningJob> jobs;
  PendingEvaluations pending;
  std::set<StageId> failed;
  std::map<std::string, double> cost;

  std::vector<WorkItem> work() {
    std::unordered_map<StageId, int64_t> needed = all_needed(tree);
    Priorities priorities;
    priorities.refresh(tree, needed, 0, {}, {}, [&](const std::string& root) {
      return cost.count(root) ? cost.at(root) : 1.0;
    });
    InFlight in_flight;
    in_flight.update(tree, jobs, 0, {});
    SchedulerInput in{tree, states, in_flight, pending, needed, failed, priorities};
    return ready_work(in);
  }
};

// Two root keys: "r" has trials 0 (300 steps) and 1 (150) sharing [0, 100); "other" has trial 2
// (120 steps). The critical path through r's top stage is 100 + 200 = 300 steps.
Fixture two_roots() {
  Fixture f;
  f.tree.add_trial(0, "r", lr_until(100, 0.5), 300);
  f.tree.add_trial(1, "r", lr_until(100, 0.25), 150);
  f.tree.add_trial(2, "other", lr_until(1000, 1), 120);
  return f;
}

TEST(Scheduler, CriticalPathFirst) {
  Fixture f = two_roots();
  std::vector<WorkItem> work = f.work();
  // Only the top stages are ready (their children need the state at 100).
  ASSERT_EQ(work.size(), 2u);
  EXPECT_EQ(f.tree.trial(work[0].representative).root_key, "r");
  EXPECT_EQ(work[0].from, 0);
  EXPECT_EQ(work[0].to, 100);
  EXPECT_DOUBLE_EQ(work[0].priority, 300);
  EXPECT_EQ(work[1].representative, 2);
  EXPECT_DOUBLE_EQ(work[1].priority, 120);

  // Priorities are times: steps of a root key that cost 3 s each put its 120 steps first.
  f.cost["other"] = 3;
  work = f.work();
  EXPECT_EQ(work[0].representative, 2);
  EXPECT_DOUBLE_EQ(work[0].priority, 360);
}

TEST(Scheduler, WorkThatARunningJobClaimsIsNotGivenTwice) {
  Fixture f = two_roots();
  RunningJob job;
  job.representative = 0;
  job.order.from = 0;
  job.order.to = 100;
  f.jobs[1] = job;
  std::vector<WorkItem> work = f.work();
  ASSERT_EQ(work.size(), 1u);
  EXPECT_EQ(work[0].representative, 2);
}

// The index of what running jobs produce, kept between decisions, says what one read afresh
// says: as jobs start and end, and after a split moved the states on a job's path.
TEST(Scheduler, InFlightKeptEqualsInFlightReadAfresh) {
  Fixture f = two_roots();
  auto job = [](TrialId trial, int64_t from, int64_t to, std::vector<int64_t> evals) {
    RunningJob j;
    j.representative = trial;
    j.order.from = from;
    j.order.to = to;
    j.order.eval_steps = std::move(evals);
    return j;
  };
  InFlight kept;
  int64_t shape = 0;
  std::vector<int64_t> changed;  // jobs started or ended since the last update
  auto same = [&] {
    InFlight fresh;
    fresh.update(f.tree, f.jobs, 0, {});
    kept.update(f.tree, f.jobs, shape, std::exchange(changed, {}));
    for (const Stage& x : f.tree.stages())
      EXPECT_EQ(kept.trains(x.id), fresh.trains(x.id)) << "stage " << x.id;
    for (TrialId t : {0, 1, 2})
      for (int64_t step : {50, 60, 100, 120, 150, 300}) {
        StateKey key = state_key(f.tree, t, std::min(step, f.tree.trial(t).length));
        EXPECT_EQ(kept.reports(key), fresh.reports(key)) << "trial " << t << " step " << step;
      }
  };
  f.jobs[1] = job(0, 0, 100, {50, 100});
  changed = {1};
  same();
  EXPECT_TRUE(kept.trains(f.tree.stage_at(0, 0)));
  EXPECT_TRUE(kept.reports(state_key(f.tree, 0, 50)));
  f.jobs[2] = job(2, 0, 120, {120});
  f.jobs[3] = job(1, 0, 100, {100});
  changed = {2, 3};
  same();
  // Job 1 ended, job 3 ended and was named twice, job 4 started and ended in between.
  f.jobs.erase(1);
  f.jobs.erase(3);
  changed = {3, 1, 4, 3, 4};
  same();
  EXPECT_FALSE(kept.trains(f.tree.stage_at(0, 0)));
  EXPECT_FALSE(kept.reports(state_key(f.tree, 0, 50)));
  // Trial 3 splits "other" at 60: the job's state at 120 is now on the new stage.
  Change change = f.tree.add_trial(3, "other", lr_until(60, 3), 90);
  ASSERT_EQ(change.splits.size(), 1u);
  ++shape;
  same();
  EXPECT_TRUE(kept.reports(state_key(f.tree, 2, 120)));
}

TEST(Scheduler, ChildrenForkFromTheParentStateAndPreferTheWorkerThatHoldsIt) {
  Fixture f = two_roots();
  StageId top = f.tree.stage_at(0, 100);
  f.tree.mark_trained(top, 100);
  f.states.add(7, {.stage = top, .step = 100, .file = "state-7.ckpt"});
  std::vector<WorkItem> work = f.work();
  // The longer child first (200 steps), then "other" (120), then the shorter child (50).
  ASSERT_EQ(work.size(), 3u);
  EXPECT_EQ(work[0].representative, 0);
  EXPECT_EQ(work[0].parent_state, 7);
  EXPECT_EQ(work[0].from, 100);
  EXPECT_EQ(work[0].to, 300);
  EXPECT_EQ(work[1].representative, 2);
  EXPECT_EQ(work[2].representative, 1);
  EXPECT_EQ(work[2].parent_state, 7);

  std::set<int64_t> none, holds{7};
  auto any = [](const WorkItem&, const IdleWorker&) { return true; };
  auto shared_disk = [](const WorkItem&, const IdleWorker&) { return int64_t{0}; };
  std::vector<Assignment> a = assign(work, {{"a", 1, &none}, {"b", 1, &holds}}, any, shared_disk);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].work.representative, 0);
  EXPECT_EQ(a[0].peer, "b");  // it holds state 7: a fork without reading a file
  EXPECT_EQ(a[1].peer, "a");

  // A worker that cannot take an item (too few devices, a stage that failed on its storage) is
  // skipped, and an item that nobody can take waits.
  auto not_b = [](const WorkItem&, const IdleWorker& w) { return w.peer != "b"; };
  a = assign(work, {{"b", 1, &holds}, {"a", 1, &none}}, not_b, shared_disk);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].peer, "a");
  EXPECT_EQ(a[0].work.representative, 0);

  // Without a shared disk: a worker whose storage has the parent's file moves no bytes, and is
  // preferred to one that must fetch it; of those that must, the one that moves the fewest.
  auto on_storage = [](const WorkItem& item, const IdleWorker& w) -> int64_t {
    if (item.parent_state < 0) return 0;
    return w.storage == "s2" ? 0 : w.storage == "s3" ? 500 : 1000;
  };
  const std::vector<WorkItem> first(work.begin(), work.begin() + 1);
  a = assign(first, {{"a", 1, &none, "s1"}, {"c", 1, &none, "s3"}, {"b", 1, &none, "s2"}}, any,
             on_storage);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].peer, "b");
  a = assign(first, {{"a", 1, &none, "s1"}, {"c", 1, &none, "s3"}}, any, on_storage);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].peer, "c");
  // Memory first, whatever the storages.
  a = assign(first, {{"b", 1, &none, "s2"}, {"a", 1, &holds, "s1"}}, any, on_storage);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].peer, "a");
}

TEST(Scheduler, AMissingStateIsReplayedFromTheNearestEarlierOne) {
  Fixture f = two_roots();
  StageId top = f.tree.stage_at(0, 100);
  f.tree.mark_trained(top, 100);  // trained, but the state at 100 was lost
  f.states.add(3, {.stage = top, .step = 40, .file = "state-3.ckpt"});
  f.pending.add(f.tree, 1, 120);  // trial 1 waits for an evaluation at 120, on its own child
  std::vector<WorkItem> work = f.work();
  ASSERT_EQ(work.size(), 2u);
  // One replay rebuilds the state at 100 for both children (through either child's trial), with
  // the highest priority of the stages that wait for it (the longer child: 200 steps).
  EXPECT_EQ(f.tree.stage_at(work[0].representative, 100), top);
  EXPECT_DOUBLE_EQ(work[0].priority, 200);
  EXPECT_EQ(work[0].from, 40);
  EXPECT_EQ(work[0].to, 100);
  EXPECT_EQ(work[0].parent_state, 3);
  EXPECT_EQ(work[0].stage, kNoStage);
  EXPECT_TRUE(work[0].evals.empty());
  EXPECT_EQ(work[1].representative, 2);

  // With no earlier state at all, the replay starts from a fresh model.
  f.states.forget(3);
  work = f.work();
  EXPECT_EQ(work[0].from, 0);
  EXPECT_EQ(work[0].parent_state, -1);
}

TEST(Scheduler, EvaluationsOfStatesTrainedBeforeAnyoneAskedComeFirst) {
  Fixture f = two_roots();
  StageId top = f.tree.stage_at(0, 100);
  f.tree.mark_trained(top, 100);
  f.states.add(7, {.stage = top, .step = 100, .file = "state-7.ckpt"});
  f.pending.add(f.tree, 1, 100);
  std::vector<WorkItem> work = f.work();
  ASSERT_FALSE(work.empty());
  EXPECT_EQ(work[0], (WorkItem{1e300, 1, 100, 100, 7, {100}, kNoStage}));
  // A pending evaluation inside a stage's range goes with that stage's work instead.
  f.pending.clear();
  f.pending.add(f.tree, 0, 200);
  work = f.work();
  EXPECT_EQ(work[0].representative, 0);
  EXPECT_EQ(work[0].evals, std::vector<int64_t>{200});
}

TEST(Scheduler, NothingBelowAFailedStage) {
  Fixture f = two_roots();
  f.failed.insert(f.tree.stage_at(0, 100));
  std::vector<WorkItem> work = f.work();
  ASSERT_EQ(work.size(), 1u);
  EXPECT_EQ(work[0].representative, 2);
}

TEST(Scheduler, ASplitWhileAStageTrainsOrdersASnapshotAtTheSplitPoint) {
  Fixture f;
  f.tree.add_trial(0, "r", lr_until(1000, 1), 300);
  RunningJob job;
  job.representative = 0;
  job.order.from = 0;
  job.order.to = 300;
  job.progress_step = 20;
  f.jobs[4] = job;
  // A new trial diverges at 60, inside the stage the job trains.
  Change change = f.tree.add_trial(1, "r", lr_until(60, 2), 200);
  ASSERT_EQ(change.splits.size(), 1u);
  EXPECT_EQ(change.splits[0].at, 60);
  EXPECT_EQ(jobs_to_snapshot_at_split(change.splits[0], f.tree, f.states, f.jobs),
            std::vector<int64_t>{4});
  // Too late when the job is past the point (the state is then replayed), and not needed when
  // the state exists.
  f.jobs[4].progress_step = 60;
  EXPECT_TRUE(jobs_to_snapshot_at_split(change.splits[0], f.tree, f.states, f.jobs).empty());
  f.jobs[4].progress_step = 20;
  f.states.add(9, {.stage = change.splits[0].stage, .step = 60, .file = ""});
  EXPECT_TRUE(jobs_to_snapshot_at_split(change.splits[0], f.tree, f.states, f.jobs).empty());
}

TEST(Scheduler, SnapshotsAtTheEndAtTrialEndsAndEveryKSteps) {
  StageTree tree;
  tree.add_trial(0, "r", lr_until(1000, 1), 300);
  tree.add_trial(1, "r", lr_until(1000, 1), 130);  // ends inside the same stage
  WorkItem w{1, 0, 100, 300, 5, {}, tree.stage_at(0, 300)};
  EXPECT_EQ(snapshot_steps(tree, w, 0), (std::vector<int64_t>{130, 300}));
  EXPECT_EQ(snapshot_steps(tree, w, 80), (std::vector<int64_t>{130, 160, 240, 300}));
  WorkItem evaluation{1, 0, 100, 100, 5, {100}, kNoStage};
  EXPECT_TRUE(snapshot_steps(tree, evaluation, 0).empty());
}

TEST(StateRegistry, StatesAndMetricsAboveASplitMoveToTheUpperStage) {
  StageTree tree;
  tree.add_trial(0, "r", lr_until(1000, 1), 300);
  StateRegistry states("abc");
  StageId top = tree.stage_at(0, 300);
  protocol::SnapshotOrder order = states.new_snapshot_order(200);
  EXPECT_EQ(order.file, "state-abc-1.ckpt");
  states.add(order.state, {.stage = top, .step = 200, .file = order.file});
  states.add(states.new_snapshot_order(50).state, {.stage = top, .step = 50, .file = ""});
  states.cache_metrics({top, 200}, Measured{{{"accuracy", 0.5}}});
  Change change = tree.add_trial(1, "r", lr_until(100, 2), 150);
  ASSERT_EQ(change.splits.size(), 1u);
  states.on_split(change.splits[0]);
  StageId upper = change.splits[0].upper;
  EXPECT_EQ(states.state_at({upper, 200}), order.state);
  EXPECT_EQ(states.info(order.state).stage, upper);
  EXPECT_FALSE(states.state_at({top, 200}));
  EXPECT_TRUE(states.state_at({top, 50}));
  ASSERT_NE(states.cached_metrics({upper, 200}), nullptr);
  EXPECT_EQ(states.nearest_before(tree, 0, 250), std::make_pair(order.state, int64_t{200}));
  EXPECT_EQ(states.nearest_before(tree, 0, 200).second, 50);
  // A state an earlier study left behind is history for a trial through it, up to its step.
  EXPECT_EQ(states.deepest_retained(tree, 0, 300), 0);
  states.set_needed(order.state, false, 1000.0);
  EXPECT_EQ(states.deepest_retained(tree, 0, 300), 200);
  EXPECT_EQ(states.deepest_retained(tree, 0, 199), 0);  // not beyond what the trial needs
  EXPECT_EQ(states.deepest_retained(tree, 1, 150), 0);  // not on trial 1's path
}

}  // namespace
// Critical paths: a stage's needed pending steps times its root key's cost, plus the largest
// priority among its needed children.
TEST(Priorities, AreCriticalPathsOfWhatIsNeeded) {
  StageTree tree;
  tree.add_trial(0, "r", lr_until(60, 1), 200);
  tree.add_trial(1, "r", lr_until(60, 3), 150);
  tree.add_trial(2, "q", lr_until(1000, 1), 10);
  // Stages: 0 [0,60) r, 1 [60,200) r, 2 [60,150) r, 3 [0,10) q.
  auto cost = [](const std::string& root) { return root == "r" ? 2.0 : 5.0; };
  auto totals = [&](const std::map<TrialId, int64_t>& lengths) {
    Priorities p;
    p.refresh(tree, tree.needed_ends(lengths), 0, {}, {}, cost);
    std::map<StageId, double> out;
    for (const auto& [stage, e] : p.entries()) out[stage] = e.total;
    return out;
  };
  const std::map<TrialId, int64_t> all = {{0, 200}, {1, 150}, {2, 10}};
  std::map<StageId, double> p = totals(all);
  EXPECT_EQ(p, (std::map<StageId, double>{{0, 60 * 2.0 + 280}, {1, 280}, {2, 180}, {3, 50}}));
  tree.mark_trained(0, 60);
  tree.mark_trained(1, 100);
  // Stage 0 is done (no entry); stage 1 has 100 steps left.
  EXPECT_EQ(totals(all), (std::map<StageId, double>{{1, 200}, {2, 180}, {3, 50}}));
  // Only what trials still need counts: trial 0 needs 120 of its 200 steps, trial 1 nothing.
  EXPECT_EQ(totals({{0, 120}, {2, 10}}), (std::map<StageId, double>{{1, 40}, {3, 50}}));
}

// Priorities kept between decisions: trials raised one by one give what a full computation over
// the same tree gives, and a trained stage leaves the front.
TEST(Priorities, RaisedPathsEqualAFullComputation) {
  StageTree tree;
  std::map<TrialId, int64_t> lengths;
  auto cost = [](const std::string&) { return 0.5; };
  Priorities kept;
  std::vector<TrialId> raised;
  std::vector<StageId> uppers;
  uint64_t seed = 7;
  auto next = [&](uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  const int64_t version = 0;
  for (TrialId id = 0; id < 60; ++id) {
    // Trials that share prefixes of different lengths, some extended later.
    const int64_t diverge = 10 * static_cast<int64_t>(1 + next(8) % 8);
    Change change = tree.add_trial(id, "r", lr_until(diverge, 0.1 * double(1 + next(5) % 5)),
                                   diverge + 10 * static_cast<int64_t>(1 + next(6) % 6));
    lengths[id] = tree.trial(id).length;
    raised.push_back(id);
    // A split's upper stage took the top of a stage on the trial's path (StudyDriver::NeededEnds).
    for (const Split& split : change.splits) uppers.push_back(split.upper);
    std::unordered_map<StageId, int64_t> needed = tree.needed_ends(lengths);
    kept.refresh(tree, needed, version, raised, uppers, cost);
    Priorities full;
    full.refresh(tree, needed, 0, {}, {}, cost);
    ASSERT_EQ(kept.entries().size(), full.entries().size()) << "after trial " << id;
    for (const auto& [stage, e] : full.entries())
      EXPECT_DOUBLE_EQ(kept.entries().at(stage).total, e.total) << "stage " << stage;
  }
  // The best stage trained: it leaves the front at the next refresh.
  const StageId best = kept.begin()->second;
  tree.mark_trained(best, tree.stage(best).end);
  kept.refresh(tree, tree.needed_ends(lengths), version, raised, uppers, cost);
  EXPECT_FALSE(kept.entries().count(best));
  // A stage behind the front trained (the front stays: a running job trains it): it leaves
  // through forget_trained, and what is left is what a full computation gives.
  const StageId behind = std::next(kept.begin(), 3)->second;
  tree.mark_trained(behind, tree.stage(behind).end);
  std::unordered_map<StageId, int64_t> needed = tree.needed_ends(lengths);
  kept.refresh(tree, needed, version, raised, uppers, cost);
  EXPECT_TRUE(kept.entries().count(behind)) << "refresh prunes the front only";
  kept.forget_trained(tree, needed, {behind, kept.begin()->second});
  Priorities full;
  full.refresh(tree, needed, 0, {}, {}, cost);
  EXPECT_FALSE(kept.entries().count(behind));
  EXPECT_EQ(kept.entries().size(), full.entries().size());
  EXPECT_EQ(kept.begin()->second, full.begin()->second);
}

// With a limit, the stage work is the same best items as without.
TEST(Scheduler, LimitedWorkIsTheBestOfAll) {
  Fixture f;
  for (TrialId id = 0; id < 20; ++id)
    f.tree.add_trial(id, "r" + std::to_string(id % 6), lr_until(10 * (1 + id % 4), 0.1 * (1 + id)),
                     50 + 5 * id);
  std::unordered_map<StageId, int64_t> needed = all_needed(f.tree);
  Priorities priorities;
  priorities.refresh(f.tree, needed, 0, {}, {}, [](const std::string&) { return 1.0; });
  InFlight in_flight;
  in_flight.update(f.tree, f.jobs, 0, {});
  SchedulerInput in{f.tree, f.states, in_flight, f.pending, needed, f.failed, priorities};
  std::vector<WorkItem> all = ready_work(in), best = ready_work(in, 2);
  ASSERT_EQ(all.size(), 6u);  // one top stage per root key
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0], all[0]);
  EXPECT_EQ(best[1], all[1]);
}

// Idle cores lent: a host's idle workers' threads go to its borrowing jobs while fewer stages run
// there than it has workers, and come back when its workers are all busy.
TEST(LentThreads, IdleCoresOfAHostGoToItsBorrowingJobs) {
  using Map = std::map<std::string, int64_t>;
  auto holder = [](std::string peer, std::string host, int64_t threads, bool busy, bool borrows) {
    return CoreHolder{std::move(peer), std::move(host), threads, busy, borrows};
  };
  // A single root: one worker trains, the other waits.
  EXPECT_EQ(lent_threads({holder("a", "h", 1, true, true), holder("b", "h", 1, false, false)}),
            (Map{{"a", 2}}));
  // As many runnable stages as workers: each its own (the cores given back).
  EXPECT_EQ(lent_threads({holder("a", "h", 1, true, true), holder("b", "h", 1, true, true)}),
            (Map{{"a", 1}, {"b", 1}}));
  // Nothing to lend to: a PyTorch trainer (its bits change with its threads) borrows nothing.
  EXPECT_EQ(lent_threads({holder("a", "h", 1, true, false), holder("b", "h", 1, false, false)}),
            Map{});
  // Idle threads shared evenly, the first in peer order take what does not divide; its own
  // threads count (a worker of 2 lends 2).
  EXPECT_EQ(lent_threads({holder("c", "h", 1, true, true), holder("a", "h", 2, true, true),
                          holder("b", "h", 2, false, false), holder("d", "h", 1, false, false)}),
            (Map{{"a", 4}, {"c", 2}}));
  // Another host's idle cores are not this host's; a worker whose host is unknown neither lends
  // nor borrows.
  EXPECT_EQ(lent_threads({holder("a", "h1", 1, true, true), holder("b", "h2", 1, false, false),
                          holder("c", "", 1, true, true), holder("d", "", 1, false, false),
                          holder("e", "h2", 1, true, true)}),
            (Map{{"a", 1}, {"e", 2}}));
  EXPECT_EQ(lent_threads({}), Map{});
}

// Provenance: a job's states and metrics rest on its worker's key and on every key of its
// parent's lineage (a fresh model: its worker's alone); an anonymous peer is named so.
TEST(Provenance, MadeByAddsTheWorkerToItsParentsLineage) {
  EXPECT_EQ(made_by("b", {}), (Provenance{"b", "b"}));
  EXPECT_EQ(made_by("a", {"b", "b c"}), (Provenance{"a", "a b c"}));
  EXPECT_EQ(made_by("c", {"b", "b c"}), (Provenance{"c", "b c"}));
  EXPECT_EQ(producer_of(protocol::PeerIdentity{}), "anonymous");
  EXPECT_EQ(producer_of(protocol::PeerIdentity{.key = "k", .roles = 0, .name = "w"}), "k");
}

}  // namespace hippo::master
