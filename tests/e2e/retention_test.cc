// Checkpoints kept for later studies (master/retention.h), as a user who tunes in rounds meets
// them: real `hippo run`s (each a new master on the same plan file), `hippo preview` and `hippo
// checkpoints`. A coarse multistep grid, then a finer one that shares the first epochs of some of
// its trials: the finer one trains only what no kept state covers, and its metrics equal the
// finer grid run alone, bit for bit.
#include <sys/wait.h>

#include <cstring>
#include <fstream>

#include "tests/e2e/e2e_helper.h"
#include "tests/e2e/forge.h"

namespace hippo::e2e {
namespace {

class Retention : public E2ETest {
 protected:
  // The CI example with a multistep schedule: 2 x 2 x 2 = 8 trials of 3 epochs (16 steps each).
  std::string coarse() {
    return spec("coarse", {{"hyperparameters", {{"lr", lr({0.1, 0.05}, {1, 2}, {0.1, 0.3})}}}});
  }
  // Around the coarse grid's lr 0.1 with its milestone at epoch 2: 3 trials of 4 epochs, whose
  // first 2 epochs are those of two coarse trials.
  std::string fine() {
    return spec("fine", {{"hyperparameters", {{"lr", lr({0.1}, {2}, {0.2, 0.3, 0.5})}}},
                         {"length", {{"epochs", 4}}}});
  }
  static json lr(const std::vector<double>& init, const std::vector<int>& milestone,
                 const std::vector<double>& gamma) {
    return {{"schedule", "multistep"},    {"unit", "epoch"},
            {"init", {{"grid", init}}},   {"milestones", json::array({{{"grid", milestone}}})},
            {"gamma", {{"grid", gamma}}}, {"every", nullptr}};
  }
  json run(const std::string& db, const std::string& spec_file, const std::string& options = "") {
    Result r = sh(hippo(db) + "--format json run " + spec_file + " --workers 2 " + options);
    EXPECT_EQ(r.status, 0) << r.out;
    return r.status == 0 ? last_json(r.out) : json();
  }
  int64_t directory_bytes(const std::string& dir) {
    int64_t bytes = 0;
    for (const std::string& file : checkpoint_names(dir)) bytes += fs::file_size(dir + "/" + file);
    return bytes;
  }
  std::vector<int64_t> kept_steps(const std::string& db) {
    std::istringstream out(
        sh("sqlite3 " + path(db) + " 'SELECT step FROM checkpoints WHERE retained_at IS NOT NULL'")
            .out);
    std::vector<int64_t> steps;
    for (int64_t step; out >> step;) steps.push_back(step);
    return steps;
  }
};

TEST_F(Retention, ARefinedStudyTrainsOnlyWhatNoKeptStateCovers) {
  const std::string coarse_file = coarse(), fine_file = fine();
  const json alone = run("alone.db", fine_file);
  ASSERT_EQ(alone["steps_reused"], 0);

  const json first = run("plan.db", coarse_file);
  ASSERT_EQ(first["status"], "done");
  EXPECT_EQ(files_not_retained(path("plan.db"), path("plan.db.checkpoints")),
            std::vector<std::string>{});
  ASSERT_FALSE(kept_steps("plan.db").empty());

  Result preview = sh(hippo("plan.db") + "--format json preview " + fine_file);
  ASSERT_EQ(preview.status, 0) << preview.out;
  const int64_t foreseen = last_json(preview.out)["steps_reused"];
  EXPECT_GT(foreseen, 0);

  const json second = run("plan.db", fine_file);
  ASSERT_EQ(second["status"], "done");
  std::printf("alone: %s\nafter the coarse grid: %s\n", alone.dump().c_str(),
              second.dump().c_str());
  EXPECT_EQ(second["steps_reused"], foreseen);
  EXPECT_EQ(second["steps_unique"], alone["steps_unique"]);
  EXPECT_EQ(second["steps_executed"].get<int64_t>(),
            second["steps_unique"].get<int64_t>() - foreseen);
  EXPECT_LT(second["steps_executed"], alone["steps_executed"]);
  EXPECT_EQ(metrics_by_trial(trials(path("plan.db"), "fine")),
            metrics_by_trial(trials(path("alone.db"), "fine")));
}

// Issue 29 (a state is what its producer wrote): whoever can write in the checkpoint directory
// rewrites every kept state with zeroed parameters, keeping the header and a valid CRC-32
// (worker/engine/checkpoint.h's layout). Field checks and the CRC pass; the content hash that the
// producer reported and the plan recorded does not. The finer study loses those copies (events
// naming the hash), replays them, and its metrics equal the finer grid run alone, bit for bit
// (before content hashes, it trained on the zeroed states: its metrics differed).
TEST_F(Retention, AKeptStateWithZeroedParametersIsNeverTrainedOn) {
  const std::string coarse_file = coarse(), fine_file = fine();
  const json alone = run("alone.db", fine_file);
  ASSERT_EQ(run("plan.db", coarse_file)["status"], "done");
  const std::string db = path("plan.db"), dir = path("plan.db.checkpoints");
  ASSERT_FALSE(kept_steps("plan.db").empty());
  // Each kept row records its file's content hash (64 hex digits).
  EXPECT_EQ(
      sh("sqlite3 " + db + " \"SELECT count(*) FROM checkpoints WHERE length(checksum) != 64\"")
          .out,
      "0\n");
  int forged = 0;
  for (const std::string& name : checkpoint_names(dir)) {
    const std::string file = dir + "/" + name;
    forged += zero_parameters(file);
  }
  ASSERT_GT(forged, 0);

  const json second = run("plan.db", fine_file);
  ASSERT_EQ(second["status"], "done");
  std::printf("forged %d kept files; alone: %s\nafter them: %s\n", forged, alone.dump().c_str(),
              second.dump().c_str());
  EXPECT_GE(std::stoll(sh("sqlite3 " + db +
                          " \"SELECT count(*) FROM events WHERE kind = 'checkpoint_lost' AND "
                          "detail LIKE '%content hash%'\"")
                           .out),
            1);
  EXPECT_EQ(metrics_by_trial(trials(db, "fine")),
            metrics_by_trial(trials(path("alone.db"), "fine")));
}

// Longer horizons later: a cooldown sweep, then one over later cooldown starts. The second reuses
// the stable phase that the first left behind (as far as its latest start), says so in preview,
// trains only the rest, and equals the same sweep run alone.
TEST_F(Retention, ALongerWsdHorizonReusesTheStablePhase) {
  auto sweep = [&](const std::string& name, const std::vector<int>& starts) {
    json s = json::parse(std::ifstream(kExamples + "/gpt-fortunes-wsd.json"));
    s["name"] = name;
    s["model"].update({{"layers", 1}, {"dim", 32}, {"heads", 2}, {"context", 32}});
    s["hyperparameters"]["lr"].update(
        {{"warmup", 5}, {"decay_start", {{"grid", starts}}}, {"decay", {{"grid", {5, 15}}}}});
    s["eval"]["every"] = {{"steps", 10}};
    const std::string file = path(name + ".json");
    std::ofstream(file) << s.dump();
    return file;
  };
  const std::string shorter = sweep("shorter", {20, 40}), longer = sweep("longer", {40, 60, 80});
  const json alone = run("alone.db", longer);
  ASSERT_EQ(alone["status"], "done");
  ASSERT_EQ(run("plan.db", shorter)["status"], "done");
  Result preview = sh(hippo("plan.db") + "--format json preview " + longer);
  ASSERT_EQ(preview.status, 0) << preview.out;
  const int64_t foreseen = last_json(preview.out)["steps_reused"];
  EXPECT_GE(foreseen, 40) << "the stable phase up to the shorter sweep's last start";
  const json second = run("plan.db", longer);
  ASSERT_EQ(second["status"], "done");
  std::printf("alone: %s\nafter the shorter horizon: %s\n", alone.dump().c_str(),
              second.dump().c_str());
  EXPECT_EQ(second["steps_reused"], foreseen);
  EXPECT_EQ(second["steps_executed"].get<int64_t>(),
            alone["steps_executed"].get<int64_t>() - foreseen);
  EXPECT_EQ(metrics_by_trial(trials(path("plan.db"), "longer")),
            metrics_by_trial(trials(path("alone.db"), "longer")));
}

// A budget of about two states: the directory never holds more once a study has ended, the
// branch points (more trials through them) are kept before the trials' ends, and the finer
// study is still exact.
TEST_F(Retention, ABudgetBoundsTheDirectoryAndKeepsBranchPointsFirst) {
  const std::string coarse_file = coarse(), fine_file = fine();
  const json alone = run("alone.db", fine_file);
  const int64_t state_bytes =
      std::stoll(sh("sqlite3 " + path("alone.db") + " 'SELECT max(size) FROM checkpoints'").out);
  ASSERT_GT(state_bytes, 0);
  const int64_t budget = 2 * state_bytes + state_bytes / 2;
  const std::string keep = "--keep-checkpoints " + std::to_string(budget);

  run("plan.db", coarse_file, keep);
  EXPECT_LE(directory_bytes(path("plan.db.checkpoints")), budget);
  EXPECT_GE(events(path("plan.db"), "checkpoints_evicted"), 1);
  const std::vector<int64_t> kept = kept_steps("plan.db");
  ASSERT_EQ(kept.size(), 2u);
  for (int64_t step : kept) EXPECT_LT(step, 48) << "a trial's end kept before a branch point";

  const json second = run("plan.db", fine_file, keep);
  EXPECT_GT(second["steps_reused"], 0);
  EXPECT_LE(directory_bytes(path("plan.db.checkpoints")), budget);
  EXPECT_EQ(metrics_by_trial(trials(path("plan.db"), "fine")),
            metrics_by_trial(trials(path("alone.db"), "fine")));

  // 0: nothing is kept (every state is deleted as before retention); nor is anything of a
  // trial-based run (its root keys are its trials' own: no later trial can reach them).
  run("none.db", coarse_file, "--keep-checkpoints 0");
  EXPECT_TRUE(checkpoint_names(path("none.db.checkpoints")).empty());
  run("trial-based.db", coarse_file, "--policy trial-based");
  EXPECT_TRUE(checkpoint_names(path("trial-based.db.checkpoints")).empty());
  // A budget that is not a size is bad input, and nothing runs.
  Result bad = sh(hippo("bad.db") + "run " + coarse_file + " --keep-checkpoints 3XB 2>&1");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--keep-checkpoints"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(path("bad.db.checkpoints")));
}

// `hippo checkpoints` lists what is kept, refuses to change anything while a master runs on the
// plan, forgets a study's states and frees space; a kept file deleted by hand costs a replay,
// never a wrong result.
TEST_F(Retention, CheckpointsAreSeenFreedAndForgotten) {
  const std::string coarse_file = coarse(), fine_file = fine();
  const json alone = run("alone.db", fine_file);
  run("plan.db", coarse_file);
  const std::string db = path("plan.db"), dir = path("plan.db.checkpoints");
  auto listed = [&] {
    Result r = sh(hippo("plan.db") + "--format json checkpoints");
    EXPECT_EQ(r.status, 0) << r.out;
    return json::parse(r.out);
  };
  json list = listed();
  ASSERT_EQ(list.size(), 1u);  // one root key
  const int64_t kept = list[0]["kept_states"];
  EXPECT_EQ(kept, static_cast<int64_t>(kept_steps("plan.db").size()));
  EXPECT_EQ(list[0]["kept_bytes"], directory_bytes(dir));
  EXPECT_EQ(list[0]["needed_states"], 0);

  // With a master on the plan: refused, and nothing changes.
  const std::string address = "ipc://" + path("master.sock");
  pid_t master = spawn({kHippo, "--db", db, "master", "--bind", address});
  for (int i = 0; i < 500 && !fs::exists(path("master.sock")); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Result refused = sh(hippo("plan.db") + "checkpoints --free-to 0 2>&1");
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_NE(refused.out.find("another process holds the search plan"), std::string::npos)
      << refused.out;
  Result second_master = sh(hippo("plan.db") + "master --bind ipc://" + path("m2.sock") + " 2>&1");
  EXPECT_EQ(second_master.status, 1) << second_master.out;
  EXPECT_EQ(listed()[0]["kept_states"], kept);
  kill(master, SIGTERM);
  waitpid(master, nullptr, 0);

  // One kept file removed by hand: the next study forgets it, replays, and is exact.
  const fs::path victim = fs::path(dir) / checkpoint_names(dir).at(0);
  fs::remove(victim);
  run("plan.db", fine_file);
  EXPECT_GE(events(db, "checkpoint_lost"), 1);
  EXPECT_EQ(metrics_by_trial(trials(db, "fine")),
            metrics_by_trial(trials(path("alone.db"), "fine")));

  // Forgetting the fine study evicts what only its trials pass through, then everything goes.
  Result forgot = sh(hippo("plan.db") + "--format json checkpoints --forget fine");
  ASSERT_EQ(forgot.status, 0) << forgot.out;
  EXPECT_GT(last_json(forgot.out)["evicted_states"], 0);
  EXPECT_EQ(files_not_retained(db, dir), std::vector<std::string>{});
  Result freed = sh(hippo("plan.db") + "--format json checkpoints --free-to 0");
  ASSERT_EQ(freed.status, 0) << freed.out;
  EXPECT_TRUE(checkpoint_names(dir).empty());
  EXPECT_EQ(listed(), json::array());
  Result bad = sh(hippo("plan.db") + "checkpoints --forget nobody 2>&1");
  EXPECT_EQ(bad.status, 2) << bad.out;
}

}  // namespace
}  // namespace hippo::e2e
