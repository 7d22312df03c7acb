// Several objectives and constraints (docs/spec.md, "Several objectives") with the real hippo and
// hippo-worker processes: `best` prints exactly the feasible trials that no feasible trial
// dominates, computed here by brute force from what `trials` prints; constraints exclude what
// they must; an nsga2 run killed mid-study and resumed (its searcher fed its journal of
// evaluations again) ends with the front of an undisturbed run.
#include <signal.h>

#include <tuple>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Objectives : public E2ETest {
 protected:
  // Two objectives that pull apart on this data (a high accuracy comes with a low loss, so
  // maximizing both gives a front of several trials) and a constraint that some draws miss.
  std::string study(const std::string& name, const std::string& searcher, int trials) {
    json searcher_spec = {
        {"name", searcher},
        {"metric", nullptr},
        {"mode", nullptr},
        {"objectives",
         {{{"metric", "accuracy"}, {"mode", "max"}}, {{"metric", "loss"}, {"mode", "max"}}}},
        {"constraints", {{{"metric", "accuracy"}, {"min", 0.55}}}},
        {"max_trials", trials}};
    if (searcher == "nsga2") searcher_spec["population"] = 4;
    json space = constant_lr_from({{"loguniform", {0.0003, 0.5}}});
    space["momentum"] = {{"uniform", {0.0, 0.9}}};
    return spec(name, {{"hyperparameters", space},
                       {"fixed", {{"momentum", nullptr}}},
                       {"searcher", searcher_spec},
                       {"length", {{"epochs", 2}}}});
  }

  json best(const std::string& db, const std::string& name) {
    Result r = sh(hippo(db) + "--format json best " + name + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
    return json::parse(r.out);
  }
};

// a dominates b when both maximize accuracy and loss.
bool dominates(const json& a, const json& b) {
  const double aa = a["accuracy"], al = a["loss"], ba = b["accuracy"], bl = b["loss"];
  return aa >= ba && al >= bl && (aa > ba || al > bl);
}

// The trial numbers a brute-force filter of `trials --format json` puts on the front.
std::set<int64_t> brute_force_front(const json& trials) {
  std::set<int64_t> front;
  for (const json& t : trials) {
    if (!t.contains("values") || !t["feasible"].get<bool>()) continue;
    bool dominated = false;
    for (const json& u : trials)
      if (u.contains("values") && u["feasible"].get<bool>() && dominates(u["values"], t["values"]))
        dominated = true;
    if (!dominated) front.insert(t["trial"].get<int64_t>());
  }
  return front;
}

std::set<int64_t> trials_in(const json& front) {
  std::set<int64_t> out;
  for (const json& t : front) out.insert(t["trial"].get<int64_t>());
  return out;
}

TEST_F(Objectives, BestIsTheNonDominatedFeasibleTrialsOfTrials) {
  const std::string file = study("front", "random", 10);
  Result r = sh(hippo("plan.db") + "--format json run " + file + " --workers 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const json summary = last_json(r.out);
  EXPECT_EQ(summary["status"], "done");
  const json trials = this->trials(path("plan.db"), "front");
  ASSERT_EQ(trials.size(), 10u);
  int infeasible = 0;
  for (const json& t : trials) {
    ASSERT_TRUE(t.contains("values")) << t.dump();
    // Its values are those of its last evaluation, and feasible means the constraint holds there.
    const int64_t last = t["values_step"];
    EXPECT_EQ(last, t["length"].get<int64_t>());
    for (const json& m : t["metrics"]) {
      const std::string name = m["name"];
      if (m["step"] == last && (name == "accuracy" || name == "loss")) {
        EXPECT_EQ(t["values"][name], m["value"]);
      }
    }
    const bool feasible = t["values"]["accuracy"].get<double>() >= 0.55;
    EXPECT_EQ(t["feasible"], feasible) << t.dump();
    infeasible += !feasible;
  }
  EXPECT_GT(infeasible, 0) << "no draw misses the constraint: the test would not see it work";
  const std::set<int64_t> expected = brute_force_front(trials);
  ASSERT_GE(expected.size(), 2u) << "a front of one trial would not show the order";
  const json front = best(path("plan.db"), "front");
  EXPECT_EQ(trials_in(front), expected);
  for (const json& t : trials)
    EXPECT_EQ(t["pareto_optimal"], expected.count(t["trial"].get<int64_t>()) > 0);
  for (const json& f : front) {
    EXPECT_TRUE(f.contains("params"));
    EXPECT_EQ(f["values"].size(), 2u);
  }
  EXPECT_EQ(summary["front"], front);  // `run` says what `best` says
  EXPECT_FALSE(summary.contains("best"));
}

TEST_F(Objectives, ARunKilledMidStudyAndResumedEndsWithTheSameFront) {
  const std::string file = study("restart", "nsga2", 10);
  Result calm = sh(hippo("calm.db") + "run " + file + " --workers 2 2>&1");
  ASSERT_EQ(calm.status, 0) << calm.out;
  const json expected = best(path("calm.db"), "restart");
  const pid_t run =
      spawn({"/bin/sh", "-c", "exec " + hippo("plan.db") + "run " + file + " --workers 2"});
  wait_for_a_metric(path("plan.db"), "restart");
  kill(run, SIGKILL);
  waitpid(run, nullptr, 0);
  Result r = sh(hippo("plan.db") + "--format json resume restart --workers 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(last_json(r.out)["status"], "done");
  EXPECT_EQ(best(path("plan.db"), "restart"), expected);
}

// The moasha example (three architectures, accuracy against params, a loss ceiling) on a prefix of
// the data, shared against trial-based (each trial trains its own path): shared executes fewer
// steps, and every evaluation both runs made is equal bit for bit. Promotions are asynchronous,
// so a trial may be promoted in one run and not the other: only common evaluations compare.
TEST_F(Objectives, MoashaSharesStagesAndEachTrialIsWhatItIsAlone) {
  std::ifstream in(kExamples + "/fmnist-mlp-moasha.json");
  json s = json::parse(in);
  s["data"] = {{"name", "fashion-mnist"}, {"train_samples", 4096}, {"eval_samples", 512}};
  s["searcher"]["max_trials"] = 12;
  const std::string file = path("moasha.json");
  std::ofstream(file) << s.dump();
  std::map<std::string, json> summary;
  std::map<std::string, std::map<std::tuple<int64_t, int64_t, std::string>, double>> evaluations;
  for (const std::string policy : {"shared", "trial-based"}) {
    const std::string db = policy + ".db";
    Result r =
        sh(hippo(db) + "--format json run " + file + " --workers 2 --policy " + policy + " 2>&1");
    ASSERT_EQ(r.status, 0) << r.out;
    summary[policy] = last_json(r.out);
    EXPECT_EQ(summary[policy]["status"], "done");
    for (const json& t : trials(path(db), "fmnist-mlp-moasha"))
      for (const json& m : t["metrics"])
        evaluations[policy][{t["trial"], m["step"], m["name"]}] = m["value"];
  }
  EXPECT_LT(summary["shared"]["steps_executed"].get<int64_t>(),
            summary["trial-based"]["steps_executed"].get<int64_t>());
  int64_t common = 0;
  for (const auto& [key, value] : evaluations["shared"])
    if (auto other = evaluations["trial-based"].find(key);
        other != evaluations["trial-based"].end()) {
      EXPECT_EQ(value, other->second) << "trial " << std::get<0>(key) << " step "
                                      << std::get<1>(key) << " " << std::get<2>(key);
      ++common;
    }
  EXPECT_GE(common, 12 * 3) << "every trial's first rung is evaluated under both policies";
  // Built-in models report params, which moasha ranks by: each architecture's own count.
  const std::set<double> counts = {784 * 32 + 32 + 32 * 10 + 10, 784 * 128 + 128 + 128 * 10 + 10,
                                   784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10};
  for (const auto& [key, value] : evaluations["shared"]) {
    if (std::get<2>(key) == "params") {
      EXPECT_TRUE(counts.count(value)) << value;
    }
  }
  EXPECT_FALSE(summary["shared"]["front"].empty());
}

}  // namespace
}  // namespace hippo::e2e
