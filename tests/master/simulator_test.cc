// hippo simulate (master/simulator.h): the real master in virtual time, on a real SQLite file,
// with simulated workers. What a user relies on: a run is deterministic, the shared policy trains
// each unique step once where trial-based trains every trial's, failures are survived with the
// lost work done again, and replayed metrics make an adaptive study decide as it did.
#include "master/simulator.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace hippo::master {
namespace {

// The docs/spec.md example's shape, small: 3 x 2 x 2 multistep grid of 4 epochs.
SimulatedStudy grid(const std::string& name = "grid") {
  nlohmann::json spec = {
      {"name", name},
      {"model", {{"type", "mlp"}, {"hidden", {16}}}},
      {"data", {{"name", "fashion-mnist"}, {"train_samples", 1280}, {"eval_samples", 256}}},
      {"seed", 0},
      {"fixed", {{"batch_size", 128}, {"optimizer", "sgd"}, {"momentum", 0.9}}},
      {"hyperparameters",
       {{"lr",
         {{"schedule", "multistep"},
          {"unit", "epoch"},
          {"init", {{"grid", {0.1, 0.05, 0.02}}}},
          {"milestones", {{{"grid", {1, 2}}}}},
          {"gamma", {{"grid", {0.1, 0.3}}}}}}}},
      {"searcher", {{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}}},
      {"length", {{"epochs", 4}}},
      {"eval", {{"every", {{"epochs", 1}}}}}};
  return {parse_spec(spec), spec, 0};
}

SimulatedStudy asha() {
  nlohmann::json spec = {
      {"name", "asha"},
      {"model", {{"type", "mlp"}, {"hidden", {16}}}},
      {"data", {{"name", "fashion-mnist"}, {"train_samples", 1280}, {"eval_samples", 256}}},
      {"seed", 2},
      {"fixed", {{"batch_size", 128}, {"optimizer", "sgd"}}},
      {"hyperparameters",
       {{"lr", {{"loguniform", {0.003, 0.3}}}}, {"momentum", {{"uniform", {0.5, 0.95}}}}}},
      {"searcher",
       {{"name", "asha"},
        {"metric", "loss"},
        {"mode", "min"},
        {"max_trials", 40},
        {"eta", 3},
        {"min_length", {{"epochs", 1}}},
        {"max_length", {{"epochs", 9}}},
        {"parallel", 4}}},
      {"length", {{"epochs", 9}}},
      {"eval", {{"every", {{"epochs", 1}}}}}};
  return {parse_spec(spec), spec, 0};
}

SimulationOptions options(int64_t workers, Policy policy = Policy::kShared) {
  SimulationOptions o;
  o.workers = workers;
  o.policy = policy;
  o.times.defaults = {.step_s = 0.01, .eval_s = 0.05, .job_s = 0.1, .state_bytes = 1 << 20};
  return o;
}

TEST(Simulator, SharedTrainsEachUniqueStepOnceAndIsDeterministic) {
  SyntheticCurves curves;
  const std::vector<SimulatedStudy> studies = {grid()};
  SimulatedRun shared = simulate(studies, options(3), curves);
  SimulatedRun again = simulate(studies, options(3), curves);
  SimulatedRun alone = simulate(studies, options(3, Policy::kTrialBased), curves);
  ASSERT_EQ(shared.studies.size(), 1u);
  EXPECT_EQ(shared.studies[0].status, "done");
  EXPECT_EQ(shared.studies[0].trials, 12);
  EXPECT_EQ(shared.steps_executed, shared.steps_unique);
  EXPECT_EQ(alone.steps_executed, alone.steps_trial_based);
  EXPECT_EQ(shared.steps_trial_based, alone.steps_trial_based);
  EXPECT_LT(shared.steps_unique, shared.steps_trial_based);
  EXPECT_LT(shared.makespan_s, alone.makespan_s);
  EXPECT_LT(shared.busy_s, alone.busy_s);
  // Virtual time: the makespan is at least the longest trial's training.
  EXPECT_GE(shared.makespan_s, shared.critical_path_s);
  EXPECT_GT(shared.utilization, 0);
  EXPECT_LE(shared.utilization, 1.0 + 1e-9);
  // The same inputs give the same run.
  EXPECT_EQ(again.makespan_s, shared.makespan_s);
  EXPECT_EQ(again.jobs, shared.jobs);
  EXPECT_EQ(again.studies[0].best_value, shared.studies[0].best_value);
  EXPECT_GT(shared.master.decisions.count, 0);
  EXPECT_GT(shared.master.messages.at("done").count, 0);
}

TEST(Simulator, FailuresAreSurvivedAndTheirWorkDoneAgain) {
  SyntheticCurves curves;
  SimulationOptions o = options(3);
  o.mtbf_s = 5;  // each worker fails every few jobs
  o.restart_s = 1;
  SimulatedRun run = simulate({grid()}, o, curves);
  SimulatedRun calm = simulate({grid()}, options(3), curves);
  EXPECT_GT(run.failures, 0);
  EXPECT_EQ(run.studies[0].status, "done");
  EXPECT_EQ(run.studies[0].trials, 12);
  EXPECT_GE(run.steps_executed, run.steps_unique);
  EXPECT_GT(run.makespan_s, calm.makespan_s);
  // The study's results do not depend on the failures (they depend on the states only).
  EXPECT_EQ(run.studies[0].best_value, calm.studies[0].best_value);
}

// A plan's jobs give back the times that made them: two grids of one model, evaluated every
// epoch and every other epoch, make jobs of different lengths and evaluations per step, which is
// what separates a job's own cost, a step's and an evaluation's.
TEST(Simulator, TimesFromAPlanAreTheTimesThatMadeIt) {
  const std::string dir = testing::TempDir() + "simulator_times";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SimulatedStudy sparse = grid("sparse");
  sparse.spec_json["hyperparameters"]["lr"]["init"]["grid"] = {0.2, 0.3};
  sparse.spec_json["eval"]["every"]["epochs"] = 2;
  sparse.spec = parse_spec(sparse.spec_json);
  SyntheticCurves curves;
  SimulationOptions o = options(3);
  o.plan_path = dir + "/plan.db";
  simulate({grid(), sparse}, o, curves);
  const std::map<std::string, JobTimes> times = times_from_plan(o.plan_path);
  ASSERT_EQ(times.size(), 1u);
  const JobTimes& t = times.begin()->second;
  // Loading a parent (1 MiB at 1 GB/s) adds a millisecond to some jobs' own cost.
  EXPECT_NEAR(t.job_s, 0.1, 0.002);
  EXPECT_NEAR(t.step_s, 0.01, 1e-4);
  EXPECT_NEAR(t.eval_s, 0.05, 1e-3);
  EXPECT_EQ(t.state_bytes, 1 << 20);
  std::filesystem::remove_all(dir);
}

TEST(Simulator, ReplayedMetricsRepeatAnAdaptiveStudy) {
  const std::string dir = testing::TempDir() + "simulator_replay";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SyntheticCurves curves;
  SimulationOptions o = options(4);
  o.plan_path = dir + "/first.db";
  SimulatedRun first = simulate({asha()}, o, curves);
  ASSERT_EQ(first.studies[0].status, "done");
  ReplayedMetrics replayed(o.plan_path);
  SimulatedRun second = simulate({asha()}, options(4), replayed);
  EXPECT_EQ(second.studies[0].best_trial, first.studies[0].best_trial);
  EXPECT_EQ(second.studies[0].best_value, first.studies[0].best_value);
  EXPECT_EQ(second.steps_executed, first.steps_executed);
  EXPECT_EQ(second.makespan_s, first.makespan_s);
  // A study the plan never measured is refused by name.
  EXPECT_THROW(simulate({grid()}, options(2), replayed), std::runtime_error);
  std::filesystem::remove_all(dir);
}

// Two architectures (model.hidden): each is a tree root of its own, trained once under the shared
// policy, and replayed metrics are found by the architecture's root key.
TEST(Simulator, ArchitecturesAreRootsOfTheirOwn) {
  SimulatedStudy one = grid();
  SimulatedStudy two = grid("architectures");
  two.spec_json["model"]["hidden"] = {{"grid", {{16}, {32, 16}}}};
  two.spec = parse_spec(two.spec_json);
  SyntheticCurves curves;
  const SimulatedRun single = simulate({one}, options(3), curves);
  const std::string dir = testing::TempDir() + "simulator_architectures";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SimulationOptions o = options(3);
  o.plan_path = dir + "/first.db";
  const SimulatedRun shared = simulate({two}, o, curves);
  const SimulatedRun alone = simulate({two}, options(3, Policy::kTrialBased), curves);
  ASSERT_EQ(shared.studies[0].status, "done");
  EXPECT_EQ(shared.studies[0].trials, 2 * single.studies[0].trials);
  EXPECT_EQ(shared.steps_unique, 2 * single.steps_unique);
  EXPECT_EQ(shared.steps_executed, shared.steps_unique);
  EXPECT_EQ(alone.steps_executed, alone.steps_trial_based);
  EXPECT_EQ(alone.steps_trial_based, 2 * single.steps_trial_based);
  ReplayedMetrics replayed(o.plan_path);
  const SimulatedRun again = simulate({two}, options(3), replayed);
  EXPECT_EQ(again.studies[0].best_value, shared.studies[0].best_value);
  std::filesystem::remove_all(dir);
}

TEST(Simulator, SeveralStudiesAndTheFifoOrderRunToTheEnd) {
  SyntheticCurves curves;
  SimulatedStudy late = grid("late");
  late.submit_at_s = 3;
  SimulationOptions o = options(4);
  SimulatedRun critical = simulate({grid(), late}, o, curves);
  o.order = ScheduleOrder::kFifo;
  SimulatedRun fifo = simulate({grid(), late}, o, curves);
  for (const SimulatedRun* r : {&critical, &fifo}) {
    ASSERT_EQ(r->studies.size(), 2u);
    EXPECT_EQ(r->studies[0].status, "done");
    EXPECT_EQ(r->studies[1].status, "done");
    EXPECT_GE(r->makespan_s, 3);
  }
  // The second study's trials are the first's: it trains nothing of its own.
  EXPECT_EQ(critical.studies[1].steps_executed + critical.studies[0].steps_executed,
            critical.studies[0].steps_unique);
}

// A study submitted while a job trains the stage it branches from splits that stage mid-job: the
// running job snapshots at the split as its training passes it, and the branch starts then, not
// once the job's other snapshots (its end's) are written.
TEST(Simulator, ABranchMadeMidJobStartsWhenTheJobPassesIt) {
  auto study = [](const std::string& name, const nlohmann::json& lr) {
    nlohmann::json spec = {
        {"name", name},
        {"model", {{"type", "mlp"}, {"hidden", {16}}}},
        {"data", {{"name", "fashion-mnist"}, {"train_samples", 1280}, {"eval_samples", 256}}},
        {"seed", 0},
        {"fixed", {{"batch_size", 128}, {"optimizer", "sgd"}}},
        {"hyperparameters", {{"lr", lr}}},
        {"searcher", {{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}}},
        {"length", {{"epochs", 100}}},  // 1,000 steps: 10 s at 0.01 s a step
        {"eval", {{"every", {{"epochs", 10}}}}}};
    return SimulatedStudy{parse_spec(spec), spec, 0};
  };
  SimulatedStudy late = study("late", {{"schedule", "multistep"},
                                       {"unit", "epoch"},
                                       {"init", 0.1},
                                       {"milestones", {50}},
                                       {"gamma", 0.1}});
  late.submit_at_s = 2;  // the first study's job is at step ~190 of 1,000
  SyntheticCurves curves;
  SimulatedRun r = simulate({study("early", {{"grid", {0.1}}}), late}, options(2), curves);
  ASSERT_EQ(r.studies.size(), 2u);
  EXPECT_EQ(r.steps_executed, 1500);  // steps 500..1000 twice, 0..500 once
  // Both about 10.6 s long, the branch from ~5.35 s: the late study ends by ~11 s (it ended
  // after 16 s when the split's snapshot waited for the end's).
  EXPECT_LT(r.makespan_s, 12) << r.to_json().dump();
}

// A job that trained to its end and is writing its last checkpoint is still needed: its metrics
// there (or a heartbeat) said it got to its end, but its state is not announced yet. The master
// looks for jobs that nothing needs at most once a second (in virtual time, first a second in);
// with these times that look came while such a checkpoint was written (100 MiB or more at 1 GB/s),
// the job was abandoned and its stage trained again: the docs/spec.md example's shape predicted
// 21,528 steps (one epoch more) for 21,060 unique, and up to 23,868 with 4 workers.
TEST(Simulator, AJobWritingItsLastCheckpointIsNotAbandoned) {
  SimulatedStudy study = grid();
  study.spec_json["data"]["train_samples"] = 60000;  // 468 steps an epoch
  study.spec_json["hyperparameters"]["lr"]["milestones"][0]["grid"] = {1, 2, 3};
  study.spec = parse_spec(study.spec_json);
  struct Case {
    int64_t workers;
    double step_s;
    int64_t state_bytes;
  };
  for (const Case& c : {Case{2, 0.0005, 100 << 20}, Case{3, 0.0003, 100 << 20},
                        Case{4, 0.0003, 100 << 20}, Case{4, 0.0006, 500 << 20}}) {
    SimulationOptions o = options(c.workers);
    o.times.defaults = {.step_s = c.step_s, .eval_s = 0, .job_s = 0, .state_bytes = c.state_bytes};
    SyntheticCurves curves;
    SimulatedRun r = simulate({study}, o, curves);
    SCOPED_TRACE(testing::Message() << c.workers << " workers, " << c.step_s << " s a step, "
                                    << c.state_bytes << " bytes a state");
    ASSERT_EQ(r.studies.size(), 1u);
    EXPECT_EQ(r.studies[0].status, "done");
    EXPECT_EQ(r.steps_unique, 21060);
    EXPECT_EQ(r.steps_executed, r.steps_unique);
    EXPECT_EQ(r.studies[0].steps_executed, r.steps_unique);
    EXPECT_EQ(r.master.messages.count("abandoned"), 0u);
  }
}

}  // namespace
}  // namespace hippo::master
