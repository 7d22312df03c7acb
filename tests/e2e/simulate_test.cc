// `hippo simulate` against real runs (master/simulator.h): a study run for real with 2 workers,
// then simulated with the times (and, for an adaptive study, the metrics) of a finished plan. The
// shared run's prediction must be within 15% of its measured wall time, and an adaptive study
// must decide as it did (and, on a run of seconds, be predicted within 15% too). Plus its refusals
// of bad input.
#include <fstream>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Simulate : public E2ETest {
 protected:
  json run(const std::string& db, const std::string& spec, const std::string& options = "") {
    Result r = sh(hippo(db) + "--format json run " + spec + " --workers 2 " + options);
    EXPECT_EQ(r.status, 0) << r.out;
    return r.status == 0 ? last_json(r.out) : json();
  }
  // An ASHA study (the example with `changes` merged) run for real, then simulated with its own
  // plan's times and metrics: the real run's summary and the simulation's shared column.
  std::pair<json, json> replay_asha(const json& changes) {
    json asha = json::parse(read_file(kExamples + "/fmnist-mlp-asha.json"));
    asha.merge_patch(changes);
    const std::string file = path("asha.json"), plan = path("asha.db");
    std::ofstream(file) << asha.dump();
    json real = run("asha.db", file);
    if (real.is_null()) return {};
    return {real, simulate(file, "--policy shared --times-from " + plan + " --metrics-from " + plan,
                           "shared")};
  }
  // One column of `simulate --format json`.
  json simulate(const std::string& spec, const std::string& options, const std::string& column) {
    Result r = sh(kHippo + " --format json simulate " + spec + " --workers 2 " + options);
    EXPECT_EQ(r.status, 0) << r.out;
    return r.status == 0 ? last_json(r.out)[column] : json();
  }
};

// The docs/spec.md example, each policy predicted from the plan of the other one's run (so the
// times are measured on other jobs than those predicted). Release only (label slow): two runs on
// all of Fashion-MNIST.
TEST_F(Simulate, PredictsTheInterfaceExampleWithin15Percent) {
  const std::string file = kExamples + "/fmnist-mlp-lr-decay.json";
  json shared = run("shared.db", file);
  json trial_based = run("trial.db", file, "--policy trial-based");
  ASSERT_FALSE(shared.is_null() || trial_based.is_null());
  json predicted_shared =
      simulate(file, "--policy shared --times-from " + path("trial.db"), "shared");
  json predicted_trial_based =
      simulate(file, "--policy trial-based --times-from " + path("shared.db"), "trial-based");
  const double measured_s = shared["wall_s"], measured_t = trial_based["wall_s"];
  const double predicted_s = predicted_shared["makespan_s"];
  const double predicted_t = predicted_trial_based["makespan_s"];
  std::printf(
      "shared: measured %.2f s, predicted %.2f s; trial-based: measured %.2f s, "
      "predicted %.2f s\n",
      measured_s, predicted_s, measured_t, predicted_t);
  EXPECT_NEAR(predicted_s / measured_s, 1.0, 0.15);
  // The other way is looser: trial-based jobs evaluate 72 states in 33,696 steps where the shared
  // ones evaluate fewer per step, and with every job of both runs evaluating once an epoch, a fit
  // cannot tell an evaluation's cost from a step's (times_from_plan): it comes out 4-16% short.
  EXPECT_NEAR(predicted_t / measured_t, 1.0, 0.2);
  EXPECT_EQ(predicted_shared["steps_executed"], shared["steps_executed"]);
  EXPECT_EQ(predicted_trial_based["steps_executed"], trial_based["steps_executed"]);
}

// An ASHA study replayed from its own plan: the same decisions (trials, steps, best) and about
// the same time. With one trial in flight (parallel 1): with more, ASHA's decisions depend on the
// order in which concurrent results arrive, which the real run's timing sets (under the
// sanitizers it differs from the simulated one, and so does the search).
TEST_F(Simulate, ReplaysAnAshaStudyAsItRan) {
  auto [real, sim] = replay_asha({{"searcher", {{"parallel", 1}}}});
  ASSERT_FALSE(real.is_null() || sim.is_null());
  const json& study = sim["studies"][0];
  EXPECT_EQ(study["status"], "done");
  EXPECT_EQ(study["trials"], real["trials"]);
  EXPECT_EQ(study["steps_executed"], real["steps_executed"]);
  EXPECT_EQ(study["best"], real["best"]);
  const double measured = real["wall_s"], predicted = sim["makespan_s"];
  std::printf("asha: measured %.2f s, predicted %.2f s\n", measured, predicted);
  // Loose here: a run of a second, under whatever else the machine (or a sanitizer) does. The
  // 15% goal is the slow test's, on a run of seconds.
  EXPECT_NEAR(predicted / measured, 1.0, 0.5);
}

// The same on a run of seconds, the 15% goal: the docs/spec.md example's model on 16,384 samples,
// 27 trials of up to 9 epochs, one in flight (as above). Release only (label slow).
TEST_F(Simulate, ReplaysALongerAshaStudyWithin15Percent) {
  auto [real, sim] = replay_asha({{"model", {{"hidden", {256, 128}}}},
                                  {"data", {{"train_samples", 16384}}},
                                  {"searcher", {{"max_trials", 27}, {"parallel", 1}}}});
  ASSERT_FALSE(real.is_null() || sim.is_null());
  const json& study = sim["studies"][0];
  EXPECT_EQ(study["trials"], real["trials"]);
  EXPECT_EQ(study["steps_executed"], real["steps_executed"]);
  EXPECT_EQ(study["best"], real["best"]);
  const double measured = real["wall_s"], predicted = sim["makespan_s"];
  std::printf("asha: measured %.2f s, predicted %.2f s\n", measured, predicted);
  EXPECT_NEAR(predicted / measured, 1.0, 0.15);
}

// The cluster used by default (no `parallel`): an ASHA study keeps all 16 workers busy.
// With the old default of 2 in flight it used an eighth of them.
TEST_F(Simulate, AnAshaStudyWithoutParallelUsesEveryWorker) {
  json asha = json::parse(read_file(kExamples + "/fmnist-mlp-asha.json"));
  asha["searcher"].erase("parallel");
  asha["searcher"]["max_trials"] = 256;
  const std::string file = path("asha.json");
  std::ofstream(file) << asha.dump();
  Result r = sh(kHippo + " --format json simulate " + file +
                " --workers 16 --step-time 0.01 --policy shared");
  ASSERT_EQ(r.status, 0) << r.out;
  const json shared = last_json(r.out)["shared"];
  EXPECT_EQ(shared["studies"][0]["status"], "done") << shared;
  EXPECT_GE(shared["utilization"].get<double>(), 0.8) << shared;
}

// A study budget ends an ASHA study done, saying so, at its first event once spent: simulated
// seconds, or steps trained.
TEST_F(Simulate, AStudyBudgetEndsTheStudyDoneWhenSpent) {
  json asha = json::parse(read_file(kExamples + "/fmnist-mlp-asha.json"));
  asha["searcher"]["max_trials"] = 256;
  const std::string file = path("asha.json");
  auto simulate_with = [&](const json& budget) {
    asha["budget"] = budget;
    std::ofstream(file) << asha.dump();
    Result r = sh(kHippo + " --format json simulate " + file +
                  " --workers 4 --step-time 0.01 --policy shared");
    EXPECT_EQ(r.status, 0) << r.out;
    return r.status == 0 ? last_json(r.out)["shared"] : json();
  };
  json timed = simulate_with({{"wall_s", 3}});
  ASSERT_FALSE(timed.is_null());
  EXPECT_EQ(timed["studies"][0]["status"], "done") << timed;
  EXPECT_NE(timed["studies"][0]["error"].get<std::string>().find("its budget of 3 s is spent"),
            std::string::npos)
      << timed;
  EXPECT_GE(timed["makespan_s"].get<double>(), 3.0);
  EXPECT_LT(timed["makespan_s"].get<double>(), 3.5);
  json stepped = simulate_with({{"steps", 2000}});
  ASSERT_FALSE(stepped.is_null());
  const json& study = stepped["studies"][0];
  EXPECT_EQ(study["status"], "done") << study;
  EXPECT_GE(study["steps_executed"].get<int64_t>(), 2000);
  EXPECT_LT(study["steps_executed"].get<int64_t>(), 2600);  // stopped soon after
  EXPECT_LT(study["trials"].get<int64_t>(), 256);
}

TEST_F(Simulate, RefusesBadInputAndKeepsAPlanWhenAsked) {
  const std::string file = kExamples + "/fmnist-mlp-ci.json";
  auto refused = [&](const std::string& options, const std::string& says) {
    Result r = sh(kHippo + " simulate " + file + " " + options + " 2>&1");
    EXPECT_EQ(r.status, 2) << options << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << options << ": " << r.out;
  };
  refused("--workers 2", "--step-time or --times-from");
  refused("--workers 0 --step-time 0.1", "--workers");
  refused("--workers 2 --step-time 0.1 --order random", "--order");
  refused("--workers 2 --step-time 0.1 --at 1 --at 2", "--at");
  refused("--workers 2 --step-time 0.1 --metrics-from " + path("none.db"), "--metrics-from");
  refused("--workers 2 --step-time 0.1 --bandwidth 3XB", "--bandwidth");
  // A table of recorded curves that is not one (master/recorded_curves.h): its file and line.
  std::ofstream(path("forged.tsv")) << "# hippo recorded curves v1\nspace\tlr\tlog\t0\t1\n";
  refused("--workers 2 --curves-from " + path("forged.tsv"),
          "--curves-from: " + path("forged.tsv") + ":2: leaf lr: expected finite LO < HI");
  refused("--workers 2 --curves-from " + path("forged.tsv") + " --metrics-from " + path("none.db"),
          "give one source of metrics");
  refused("--workers 2 --step-time 0.1 --policy both --plan " + path("kept.db"),
          "--plan keeps one");
  refused("--workers 2 --step-time 0.1 --order both --plan " + path("kept.db"), "--plan keeps one");
  EXPECT_FALSE(fs::exists(path("kept.db")));
  // With --plan and no --policy, the shared run alone: its simulated plan stays, for the history
  // queries.
  Result kept =
      sh(kHippo + " simulate " + file + " --workers 2 --step-time 0.01 --plan " + path("kept.db"));
  ASSERT_EQ(kept.status, 0) << kept.out;
  EXPECT_NE(kept.out.find("makespan"), std::string::npos);
  Result studies = sh(hippo("kept.db") + "--format json studies");
  ASSERT_EQ(studies.status, 0);
  json list = json::parse(studies.out);
  ASSERT_EQ(list.size(), 1u) << studies.out;
  EXPECT_EQ(list[0]["status"], "done");
  EXPECT_EQ(list[0]["policy"], "shared");
  refused("--workers 2 --step-time 0.1 --policy trial-based --plan " + path("kept.db"), "exists");
}

}  // namespace
}  // namespace hippo::e2e
