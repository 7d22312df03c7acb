// Tests of the search plan. Each test works on a real SQLite file in a fresh temporary directory;
// the tree round trip and the lock test use a second process (storage_probe).
#include "storage/plan.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "storage/schema.h"
#include "tests/storage/tree_dump.h"

namespace hippo {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs SQL on its own connection, bypassing SearchPlan: to forge old or foreign files.
void raw_exec(const fs::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(db);
}

// A child process running storage_probe with its stdout on a pipe.
struct Probe {
  pid_t pid = -1;
  FILE* out = nullptr;

  Probe(const std::string& command, const fs::path& file) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid = fork();
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      execl(STORAGE_PROBE, STORAGE_PROBE, command.c_str(), file.c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    out = fdopen(fds[0], "r");
  }
  std::string read_line() {
    char buf[256];
    return fgets(buf, sizeof buf, out) ? std::string(buf) : std::string();
  }
  std::string read_all() {
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, out)) > 0) s.append(buf, n);
    return s;
  }
  int wait() {
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(out);
    return status;
  }
};

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hippo_storage_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    file_ = dir_ / "plan.db";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A study with `n` trials (ids first_id, first_id + 1, ...), of length 10 each.
  int64_t study_with_trials(SearchPlan& plan, const std::string& name, int n, TrialId first_id) {
    int64_t study = plan.create_study(name, {{"name", name}}, Policy::kShared);
    for (int i = 0; i < n; ++i) {
      TrialRow t;
      t.id = first_id + i;
      t.study_id = study;
      t.root_key = "root";
      t.params = {{"lr", 0.1 * (i + 1)}};
      t.hyperparams = {{"lr", Sequence::constant(0.1 * (i + 1))}};
      t.length = 10;
      plan.add_trial(t);
    }
    return study;
  }

  fs::path dir_;
  fs::path file_;
};

TEST_F(PlanTest, CreatesSchemaInWalMode) {
  {
    auto plan = SearchPlan::open(file_.string());
    EXPECT_EQ(plan.schema_version(), latest_schema_version());
    plan.create_study("a", {{"k", 1}}, Policy::kTrialBased);
  }
  // The journal mode is a property of the file; a plain connection sees it, and the data.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);

  auto plan = SearchPlan::open(file_.string());
  auto rows = plan.studies();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "a");
  EXPECT_EQ(rows[0].spec, nlohmann::json({{"k", 1}}));
  EXPECT_EQ(rows[0].policy, Policy::kTrialBased);
  EXPECT_EQ(rows[0].status, StudyStatus::kRunning);
  EXPECT_GT(rows[0].created_at, 1.6e9);
}

TEST_F(PlanTest, MigratesAVersion1File) {
  // A file as a version-1 binary left it: the first step only, one study in its columns.
  raw_exec(file_, std::string(migrations()[0]) +
                      "PRAGMA user_version = 1;"
                      "INSERT INTO studies (name, spec, policy, status, created_at) "
                      "VALUES ('old', '{\"name\":\"old\"}', 'shared', 'done', 1.7e9);");
  auto plan = SearchPlan::open(file_.string());
  EXPECT_EQ(plan.schema_version(), latest_schema_version());
  auto old = plan.study_by_name("old");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->status, StudyStatus::kDone);
  EXPECT_EQ(old->spec["name"], "old");
  EXPECT_FALSE(old->deleted_at);

  // Version 2's feature: deleting a study frees its name, and only non-deleted names are unique.
  EXPECT_THROW(plan.create_study("old", {}, Policy::kShared), std::invalid_argument);
  plan.delete_study(old->id);
  EXPECT_FALSE(plan.study_by_name("old"));
  EXPECT_TRUE(plan.study(old->id)->deleted_at);
  int64_t again = plan.create_study("old", {}, Policy::kShared);
  EXPECT_NE(again, old->id);
  ASSERT_EQ(plan.studies().size(), 1u);
  EXPECT_EQ(plan.studies()[0].id, again);
}

TEST_F(PlanTest, RefusesAFileThatIsNotADatabase) {
  std::string text(8192, 'x');
  std::ofstream(file_, std::ios::binary) << text;
  try {
    SearchPlan::open(file_.string());
    FAIL() << "opened a text file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file_.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a database"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(file_), text);
}

TEST_F(PlanTest, RefusesANewerSchemaVersionAndLeavesTheFileAlone) {
  {
    auto plan = SearchPlan::open(file_.string());
    plan.create_study("a", {}, Policy::kShared);
  }
  raw_exec(file_, "PRAGMA user_version = " + std::to_string(latest_schema_version() + 1));
  std::string before = read_bytes(file_);
  try {
    SearchPlan::open(file_.string());
    FAIL() << "opened a newer file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file_.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(file_), before);
}

TEST_F(PlanTest, AFailedTransactionLeavesNothing) {
  auto plan = SearchPlan::open(file_.string());
  EXPECT_THROW(plan.transaction([&] {
    int64_t study = study_with_trials(plan, "s", 3, 0);
    plan.add_metric({0, 5, "loss", 0.5});
    plan.add_eval_requests(1, {5, 10});
    plan.add_event(study, "created", {{"trials", 3}});
    throw std::runtime_error("the master failed half way");
  }),
               std::runtime_error);
  EXPECT_TRUE(plan.studies().empty());
  EXPECT_FALSE(plan.study_by_name("s"));
  EXPECT_EQ(plan.next_trial_id(), 0);
  EXPECT_TRUE(plan.metrics(0).empty());
  EXPECT_TRUE(plan.eval_requests(1).empty());
  EXPECT_TRUE(plan.events(std::nullopt, 10).empty());

  // A nested transaction that throws undoes only its own writes when the outer one goes on.
  plan.transaction([&] {
    plan.create_study("kept", {}, Policy::kShared);
    EXPECT_THROW(plan.transaction([&] {
      plan.create_study("undone", {}, Policy::kShared);
      throw std::runtime_error("inner");
    }),
                 std::runtime_error);
  });
  ASSERT_EQ(plan.studies().size(), 1u);
  EXPECT_EQ(plan.studies()[0].name, "kept");
}

// A write of one statement runs in an open transaction without a savepoint of its own: when it
// fails (refused by its checks, or by a constraint of the schema), it leaves nothing, and the
// writes before it in the transaction stay.
TEST_F(PlanTest, AFailedSingleWriteInsideATransactionUndoesOnlyItself) {
  auto plan = SearchPlan::open(file_.string());
  int64_t study = study_with_trials(plan, "s", 2, 0);
  Stage stage;
  stage.id = 7;
  stage.root_key = "root";
  stage.end = 100;
  stage.representative = 0;
  plan.save_stage(stage);
  TrialRow duplicate = plan.trials(study)[1];
  CheckpointRow checkpoint;
  checkpoint.stage = stage.id;
  checkpoint.step = 10;
  checkpoint.file = "a.ckpt";
  plan.transaction([&] {
    plan.add_metric({0, 5, "loss", 0.5});
    EXPECT_TRUE(plan.add_metric({0, 5, "loss", 0.7}).has_value());  // kept: the first stays
    EXPECT_THROW(plan.add_trial(duplicate), std::invalid_argument);
    plan.add_checkpoint(checkpoint);
    // UNIQUE (stage_id, step): refused by SQLite itself, within the statement.
    checkpoint.file = "b.ckpt";
    EXPECT_THROW(plan.add_checkpoint(checkpoint), std::runtime_error);
    EXPECT_THROW(plan.set_trial_status(99, TrialStatus::kDone), std::invalid_argument);
    plan.add_event(study, "after", {});
  });
  ASSERT_EQ(plan.metrics(0).size(), 1u);
  EXPECT_EQ(plan.metrics(0)[0].value, 0.5);
  EXPECT_EQ(plan.trials(study).size(), 2u);
  ASSERT_EQ(plan.checkpoints().size(), 1u);
  EXPECT_EQ(plan.checkpoints()[0].file, "a.ckpt");
  EXPECT_EQ(plan.events(study, 10).size(), 1u);
}

// after_commit: what must follow a commit (removing a checkpoint's file once its row is gone)
// runs after it, and never for writes that were rolled back, nor for a savepoint's.
TEST_F(PlanTest, AfterCommitActionsRunOnlyOnceCommitted) {
  auto plan = SearchPlan::open(file_.string());
  std::vector<std::string> ran;
  plan.after_commit([&] { ran.push_back("outside"); });  // no transaction: at once
  EXPECT_EQ(ran, std::vector<std::string>{"outside"});
  ran.clear();
  plan.transaction([&] {
    plan.create_study("a", {}, Policy::kShared);
    plan.after_commit([&] {
      // The commit is visible to another connection when the action runs.
      auto other = SearchPlan::open(file_.string());
      ran.push_back(other.study_by_name("a") ? "committed" : "not yet");
    });
    plan.transaction([&] { plan.after_commit([&] { ran.push_back("kept savepoint"); }); });
    EXPECT_THROW(plan.transaction([&] {
      plan.after_commit([&] { ran.push_back("undone savepoint"); });
      throw std::runtime_error("inner");
    }),
                 std::runtime_error);
    EXPECT_TRUE(ran.empty());
  });
  EXPECT_EQ(ran, (std::vector<std::string>{"committed", "kept savepoint"}));
  ran.clear();
  EXPECT_THROW(plan.transaction([&] {
    plan.after_commit([&] { ran.push_back("rolled back"); });
    throw std::runtime_error("outer");
  }),
               std::runtime_error);
  plan.transaction([] {});
  EXPECT_TRUE(ran.empty());
}

TEST_F(PlanTest, RefusesBadInputWithoutChangingAnything) {
  auto plan = SearchPlan::open(file_.string());
  int64_t study = study_with_trials(plan, "s", 2, 0);
  EXPECT_THROW(plan.create_study("s", {}, Policy::kShared), std::invalid_argument);
  EXPECT_THROW(plan.create_study("", {}, Policy::kShared), std::invalid_argument);
  EXPECT_THROW(plan.set_study_status(99, StudyStatus::kDone), std::invalid_argument);
  EXPECT_THROW(plan.save_searcher_state(99, {}), std::invalid_argument);
  EXPECT_THROW(plan.delete_study(99), std::invalid_argument);
  TrialRow t = *plan.trial(0);
  EXPECT_THROW(plan.add_trial(t), std::invalid_argument);  // duplicate id
  t.id = 7;
  t.study_id = 99;
  EXPECT_THROW(plan.add_trial(t), std::invalid_argument);  // unknown study
  t.study_id = study;
  t.length = 0;
  EXPECT_THROW(plan.add_trial(t), std::invalid_argument);
  EXPECT_THROW(plan.set_trial_length(0, 0), std::invalid_argument);
  EXPECT_THROW(plan.set_trial_length(99, 5), std::invalid_argument);
  EXPECT_THROW(plan.set_trial_status(99, TrialStatus::kDone), std::invalid_argument);
  EXPECT_THROW(plan.add_eval_requests(99, {1}), std::invalid_argument);
  EXPECT_THROW(plan.add_eval_requests(99, {}), std::invalid_argument);
  EXPECT_THROW(plan.add_searcher_event(99, {SearcherEvent::Kind::kClosed, 0, 0, NAN, {}, 0}),
               std::invalid_argument);
  EXPECT_THROW(plan.add_eval_requests(0, {3, -1}), std::invalid_argument);
  EXPECT_THROW(plan.add_metric({99, 1, "loss", 1.0}), std::invalid_argument);
  EXPECT_THROW(plan.add_checkpoint({0, 99, 5, "c", 1, "x", 0}), std::invalid_argument);
  EXPECT_THROW(plan.delete_checkpoint(99), std::invalid_argument);
  EXPECT_THROW(parse_policy("sharde"), std::invalid_argument);

  EXPECT_EQ(plan.studies().size(), 1u);
  EXPECT_EQ(plan.trials(study).size(), 2u);
  EXPECT_EQ(plan.trial(0)->length, 10);
  EXPECT_TRUE(plan.eval_requests(0).empty());
  EXPECT_TRUE(plan.checkpoints().empty());
}

TEST_F(PlanTest, MetricsAreIdempotentAndRefuseConflicts) {
  auto plan = SearchPlan::open(file_.string());
  study_with_trials(plan, "s", 2, 0);
  plan.add_metric({0, 10, "accuracy", 0.875});
  plan.add_metric({0, 10, "accuracy", 0.875});  // a resend
  plan.add_metric({0, 10, "loss", NAN});        // a diverged loss
  plan.add_metric({0, 10, "loss", NAN});
  plan.add_metric({0, 5, "accuracy", 0.5});
  plan.add_metric({1, 10, "accuracy", 0.25});
  // A conflicting value is not written: the first stays, and the answer says so.
  const std::optional<std::string> kept = plan.add_metric({0, 10, "accuracy", 0.876});
  ASSERT_TRUE(kept.has_value());
  EXPECT_NE(kept->find("accuracy"), std::string::npos) << *kept;
  EXPECT_TRUE(plan.add_metric({0, 10, "loss", 1.0}).has_value());
  EXPECT_FALSE(plan.add_metric({0, 10, "accuracy", 0.875}).has_value());

  std::vector<MetricRow> expected = {
      {0, 5, "accuracy", 0.5}, {0, 10, "accuracy", 0.875}, {0, 10, "loss", NAN}};
  EXPECT_EQ(plan.metrics(0), expected);
  expected.push_back({1, 10, "accuracy", 0.25});
  EXPECT_EQ(plan.study_metrics(plan.studies()[0].id), expected);
}

TEST_F(PlanTest, StoresStudiesTrialsRequestsCheckpointsAndEvents) {
  int64_t s1 = 0, s2 = 0;
  {
    auto plan = SearchPlan::open(file_.string());
    s1 = study_with_trials(plan, "first", 3, 0);
    s2 = study_with_trials(plan, "second", 2, 3);
    plan.set_study_status(s1, StudyStatus::kFailed, "worker lost");
    plan.save_searcher_state(s2, {{"rung", 2}, {"pending", {3, 4}}});
    plan.set_trial_length(4, 40);
    plan.set_trial_status(3, TrialStatus::kStopped, "stopped at rung 1");
    plan.add_eval_requests(4, {40, 10, 20, 10});
    plan.add_eval_requests(4, {20});
    for (int i = 0; i < 5; ++i)
      plan.add_event(i % 2 ? std::optional<int64_t>(s2) : std::nullopt, "e" + std::to_string(i),
                     {{"i", i}});
  }
  auto plan = SearchPlan::open(file_.string());
  auto first = *plan.study(s1);
  EXPECT_EQ(first.status, StudyStatus::kFailed);
  EXPECT_EQ(first.error, "worker lost");
  EXPECT_TRUE(first.ended_at);
  auto second = *plan.study_by_name("second");
  EXPECT_EQ(second.status, StudyStatus::kRunning);
  EXPECT_FALSE(second.ended_at);
  EXPECT_EQ(second.searcher_state["pending"], nlohmann::json({3, 4}));
  EXPECT_TRUE(first.searcher_state.is_null());

  auto trials = plan.trials(s2);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].id, 3);
  EXPECT_EQ(trials[0].number, 1);
  EXPECT_EQ(trials[0].status, TrialStatus::kStopped);
  EXPECT_EQ(trials[0].end_reason, "stopped at rung 1");
  // When each entered the plan, and when the stopped one ended (the pending one has not).
  ASSERT_TRUE(trials[0].ended_at);
  EXPECT_GE(*trials[0].ended_at, trials[0].created_at);
  EXPECT_GT(trials[0].created_at, 1.7e9);
  EXPECT_FALSE(trials[1].ended_at);
  EXPECT_EQ(trials[1].number, 2);
  EXPECT_EQ(trials[1].length, 40);
  EXPECT_EQ(trials[1].status, TrialStatus::kPending);
  EXPECT_EQ(trials[1].params["lr"], 0.2);
  EXPECT_EQ(trials[1].hyperparams, (Hyperparams{{"lr", Sequence::constant(0.2)}}));
  EXPECT_EQ(plan.next_trial_id(), 5);
  EXPECT_EQ(plan.eval_requests(4), (std::vector<int64_t>{10, 20, 40}));

  auto events = plan.events(s2, 10);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, "e1");
  EXPECT_EQ(events[1].kind, "e3");
  EXPECT_EQ(events[1].detail["i"], 3);
  auto last = plan.events(std::nullopt, 2);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].kind, "e3");
  EXPECT_EQ(last[1].kind, "e4");
  EXPECT_FALSE(last[1].study);

  // Checkpoints belong to a stage and a step inside it.
  StageTree tree;
  tree.add_trial(0, "root", plan.trial(0)->hyperparams, 10);
  plan.save_tree(tree);
  int64_t c5 = plan.add_checkpoint({0, 0, 5, "ckpt/0-5", 1000, "crc:1", 0});
  int64_t c10 = plan.add_checkpoint({0, 0, 10, "ckpt/0-10", 2000, "crc:2", 0});
  EXPECT_THROW(plan.add_checkpoint({0, 0, 11, "ckpt/0-11", 1, "x", 0}), std::invalid_argument);
  EXPECT_THROW(plan.add_checkpoint({0, 0, 5, "ckpt/again", 1, "x", 0}), std::runtime_error);
  plan.delete_checkpoint(c5);
  auto ckpts = plan.checkpoints();
  ASSERT_EQ(ckpts.size(), 1u);
  EXPECT_EQ(ckpts[0].id, c10);
  EXPECT_EQ(ckpts[0].file, "ckpt/0-10");
  EXPECT_EQ(ckpts[0].size, 2000);
  EXPECT_EQ(ckpts[0].checksum, "crc:2");
  EXPECT_GT(ckpts[0].created_at, 1.6e9);
  // Kept for later studies since a time, then needed again; an unknown id is refused.
  EXPECT_FALSE(ckpts[0].retained_at);
  plan.set_checkpoint_retained(c10, 1.8e9);
  EXPECT_EQ(plan.checkpoints()[0].retained_at, 1.8e9);
  plan.set_checkpoint_retained(c10, std::nullopt);
  EXPECT_FALSE(plan.checkpoints()[0].retained_at);
  EXPECT_THROW(plan.set_checkpoint_retained(c5, 1.8e9), std::invalid_argument);
}

// Adds trials in a mix of schedules to `tree` and `plan` together, one transaction per change as
// the master does, with training progress, extensions and splits of trained stages in between.
StageTree build_tree(SearchPlan& plan) {
  StageTree tree;
  int64_t study = plan.create_study("mix", {{"name", "mix"}}, Policy::kShared);
  TrialId next = 0;
  auto add = [&](const std::string& root, Hyperparams h, int64_t length) {
    plan.transaction([&] {
      TrialRow row;
      row.id = next++;
      row.study_id = study;
      row.root_key = root;
      row.params = {{"n", row.id}};
      row.hyperparams = h;
      row.length = length;
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(row.id, root, std::move(h), length));
    });
  };
  auto train = [&](StageId id, int64_t until) {
    tree.mark_trained(id, until);
    plan.save_stage(tree.stage(id));
  };
  for (int i = 0; i < 24; ++i) {
    Sequence lr;
    switch (i % 4) {
      case 0:
        lr = multistep(0.1, {100 * (1 + i % 3)}, i % 8 ? 0.1 : 0.3);
        break;
      case 1:
        lr = step_decay(0.1, 50 * (1 + i % 2), 0.5);
        break;
      case 2:
        lr = cosine(0.1, 0.001, 300);
        break;
      default:
        lr = warmup_linear(0.1, 20, multistep(0.1, {150}, 0.1));
        break;
    }
    add("mlp",
        {{"lr", lr},
         {"momentum", Sequence::constant(i % 5 ? 0.9 : 0.95)},
         {"optimizer", Sequence::text(i % 7 ? "sgd" : "adam")}},
        100 + 50 * (i % 6));
    if (i % 6 == 5) {
      for (const Stage& s : tree.stages()) train(s.id, s.start + (s.end - s.start) * 2 / 3);
    }
  }
  for (int i = 0; i < 10; ++i) {
    add("cnn",
        {{"lr", piecewise({{0, 0.05}, {40 * (1 + i % 3), 0.01}})},
         {"wd", i % 2 ? exponential(1e-4, 0.9, 25) : Sequence::constant(0)}},
        80 + 20 * (i % 4));
  }
  for (const Stage& s : tree.stages()) {
    if (s.id % 3 == 0) train(s.id, s.end);
  }
  for (TrialId id : {1, 6, 25, 30}) {
    int64_t length = tree.trial(id).length + 100;
    plan.transaction([&] {
      plan.set_trial_length(id, length);
      plan.save_change(tree, tree.extend_trial(id, length));
    });
  }
  // Late trials that split stages already trained.
  add("mlp",
      {{"lr", multistep(0.1, {60}, 0.1)},
       {"momentum", Sequence::constant(0.9)},
       {"optimizer", Sequence::text("sgd")}},
      250);
  add("cnn", {{"lr", piecewise({{0, 0.05}, {10, 0.02}})}, {"wd", Sequence::constant(0)}}, 90);
  return tree;
}

TEST_F(PlanTest, TreeRoundTripsThroughAnotherProcess) {
  auto plan = SearchPlan::open(file_.string());
  StageTree tree = build_tree(plan);
  ASSERT_GE(tree.trials().size(), 30u);
  ASSERT_GT(tree.stages().size(), 20u);
  std::string expected = dump_tree(tree);

  Probe probe("dump", file_);
  std::string dumped = probe.read_all();
  EXPECT_EQ(probe.wait(), 0);
  EXPECT_EQ(dumped, expected);
  EXPECT_EQ(dump_tree(plan.load_tree()), expected);

  // save_tree writes the same stages into a file that has the trials but no stages yet.
  fs::path copy = dir_ / "copy.db";
  auto other = SearchPlan::open(copy.string());
  other.transaction([&] {
    int64_t study = other.create_study("mix", {}, Policy::kShared);
    for (TrialRow row : plan.trials(plan.studies()[0].id)) {
      row.study_id = study;
      other.add_trial(row);
    }
    other.save_tree(tree);
  });
  Probe copy_probe("dump", copy);
  EXPECT_EQ(copy_probe.read_all(), expected);
  EXPECT_EQ(copy_probe.wait(), 0);
}

TEST_F(PlanTest, SplitMovesCheckpointsAboveTheSplitToTheUpperPart) {
  auto plan = SearchPlan::open(file_.string());
  int64_t study = plan.create_study("s", {}, Policy::kShared);
  StageTree tree;
  auto add = [&](TrialId id, Sequence lr) {
    TrialRow row;
    row.id = id;
    row.study_id = study;
    row.root_key = "r";
    row.hyperparams = {{"lr", std::move(lr)}};
    row.length = 300;
    plan.transaction([&] {
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(id, "r", row.hyperparams, 300));
    });
  };
  add(0, multistep(0.1, {200}, 0.1));
  tree.mark_trained(0, 300);
  plan.save_stage(tree.stage(0));
  for (int64_t step : {100, 200, 300}) {
    plan.add_checkpoint({0, 0, step, "c" + std::to_string(step), 1, "x", 0});
  }
  add(1, multistep(0.1, {150}, 0.1));  // diverges from trial 0 at step 150
  for (const CheckpointRow& c : plan.checkpoints()) {
    EXPECT_EQ(c.stage, tree.stage_at(0, c.step)) << c.file;
  }
  EXPECT_EQ(plan.checkpoints()[0].stage, 0);
  EXPECT_NE(plan.checkpoints()[1].stage, 0);
}

TEST_F(PlanTest, AWriteWaitsForAnotherProcessThenFailsClearly) {
  auto plan = SearchPlan::open(file_.string(), {.busy_timeout_ms = 200});
  plan.create_study("before", {}, Policy::kShared);
  Probe holder("hold", file_);
  ASSERT_EQ(holder.read_line(), "holding\n");

  auto start = std::chrono::steady_clock::now();
  try {
    plan.transaction([&] {
      int64_t id = plan.create_study("mine", {}, Policy::kShared);
      plan.add_event(id, "created", {});
    });
    FAIL() << "wrote while another process held the lock";
  } catch (const PlanBusy& e) {  // a std::runtime_error that callers may retry
    EXPECT_NE(std::string(e.what()).find("locked"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file_.string()), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  // A shorter wait for a retry.
  EXPECT_EQ(plan.set_busy_timeout(20), 200);
  start = std::chrono::steady_clock::now();
  EXPECT_THROW(plan.create_study("retry", {}, Policy::kShared), PlanBusy);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
  EXPECT_EQ(plan.set_busy_timeout(200), 20);
  // Reads go on while the other process writes.
  EXPECT_EQ(plan.studies().size(), 1u);

  // The holder dies mid-transaction: none of its writes survive, and the file is writable again.
  kill(holder.pid, SIGKILL);
  int status = holder.wait();
  EXPECT_TRUE(WIFSIGNALED(status));
  plan.create_study("after", {}, Policy::kShared);
  auto rows = plan.studies();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name, "before");
  EXPECT_EQ(rows[1].name, "after");
  EXPECT_TRUE(plan.events(std::nullopt, 10).empty());
}

TEST_F(PlanTest, StoresExecutionsWithTheirStudies) {
  auto plan = SearchPlan::open(file_.string());
  int64_t s1 = study_with_trials(plan, "first", 2, 0);
  int64_t s2 = study_with_trials(plan, "second", 1, 2);
  ExecutionRow done{0,    3,     0,     ExecutionKind::kTrain,   0,  10,      10,
                    "w1", 100.0, 102.5, ExecutionOutcome::kDone, "", {s2, s1}};
  ExecutionRow lost{0,    4,     1,     ExecutionKind::kReplay,  5,  10,  7,
                    "w2", 101.0, 104.0, ExecutionOutcome::kLost, "", {s1}};
  ExecutionRow failed{0,    4,     2,     ExecutionKind::kEvaluate,  10,         10,  10,
                      "w1", 103.0, 103.5, ExecutionOutcome::kFailed, "diverged", {s2}};
  done.busy_s = 2.25;
  done.times = {{"setup", 0.5}, {"train", 1.5}};
  done.id = plan.add_execution(done);
  lost.id = plan.add_execution(lost);
  failed.id = plan.add_execution(failed);
  done.studies = {s1, s2};  // read back in ascending order

  auto same = [](const ExecutionRow& a, const ExecutionRow& b) {
    return a.id == b.id && a.stage == b.stage && a.trial == b.trial && a.kind == b.kind &&
           a.from == b.from && a.to == b.to && a.reached == b.reached && a.worker == b.worker &&
           a.started_at == b.started_at && a.ended_at == b.ended_at && a.outcome == b.outcome &&
           a.error == b.error && a.studies == b.studies && a.busy_s == b.busy_s &&
           a.times == b.times;
  };
  auto all = plan.executions(std::nullopt);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_TRUE(same(all[0], done));
  EXPECT_TRUE(same(all[1], lost));
  EXPECT_TRUE(same(all[2], failed));
  auto of_first = plan.executions(s1);
  ASSERT_EQ(of_first.size(), 2u);
  EXPECT_TRUE(same(of_first[0], done));
  EXPECT_TRUE(same(of_first[1], lost));
  ASSERT_EQ(plan.executions(s2).size(), 2u);

  // Bad rows are refused whole.
  ExecutionRow bad = done;
  bad.reached = 11;
  EXPECT_THROW(plan.add_execution(bad), std::invalid_argument);
  bad = done;
  bad.ended_at = 99;
  EXPECT_THROW(plan.add_execution(bad), std::invalid_argument);
  bad = done;
  bad.trial = 42;
  EXPECT_THROW(plan.add_execution(bad), std::invalid_argument);
  bad = done;
  bad.studies = {s1, 77};
  EXPECT_THROW(plan.add_execution(bad), std::invalid_argument);
  bad = done;
  bad.busy_s = -1;
  EXPECT_THROW(plan.add_execution(bad), std::invalid_argument);
  EXPECT_EQ(plan.executions(std::nullopt).size(), 3u);
  EXPECT_EQ(plan.executions(s1).size(), 2u);
}

TEST_F(PlanTest, MigratesAVersion2FileToExecutions) {
  raw_exec(file_, std::string(migrations()[0]) + std::string(migrations()[1]) +
                      "PRAGMA user_version = 2;"
                      "INSERT INTO studies (name, spec, policy, status, created_at) "
                      "VALUES ('old', '{}', 'shared', 'done', 1.7e9);");
  {
    // Read only, a version-2 file is read as it is: no executions yet, nothing migrated.
    auto reader = SearchPlan::open_read_only(file_.string());
    EXPECT_EQ(reader.schema_version(), 2);
    EXPECT_TRUE(reader.executions(std::nullopt).empty());
    EXPECT_EQ(reader.studies().size(), 1u);
  }
  auto plan = SearchPlan::open(file_.string());
  EXPECT_EQ(plan.schema_version(), latest_schema_version());
  EXPECT_TRUE(plan.executions(std::nullopt).empty());
}

TEST_F(PlanTest, MigratesAVersion3FileToRetainedCheckpoints) {
  std::string sql;
  for (int i = 0; i < 3; ++i) sql += std::string(migrations()[i]);
  // A version-3 file that an older binary wrote: read only, its checkpoints are not retained.
  raw_exec(file_, sql +
                      "PRAGMA user_version = 3;"
                      "INSERT INTO studies (name, spec, policy, status, created_at) "
                      "VALUES ('old', '{}', 'shared', 'done', 1.7e9);"
                      "INSERT INTO trials (id, study_id, number, root_key, params, hyperparams, "
                      "length, status, created_at) VALUES (0, 1, 1, 'r', '{}', '{}', 10, 'done', "
                      "1.7e9);"
                      "INSERT INTO stages VALUES (0, 'r', NULL, 0, 10, 10, 0);"
                      "INSERT INTO checkpoints (stage_id, step, file, size, checksum, created_at) "
                      "VALUES (0, 10, 'a.ckpt', 5, '', 1.7e9);");
  {
    auto reader = SearchPlan::open_read_only(file_.string());
    EXPECT_EQ(reader.schema_version(), 3);
    ASSERT_EQ(reader.checkpoints().size(), 1u);
    EXPECT_FALSE(reader.checkpoints()[0].retained_at);
  }
  auto plan = SearchPlan::open(file_.string());
  EXPECT_EQ(plan.schema_version(), latest_schema_version());
  ASSERT_EQ(plan.checkpoints().size(), 1u);
  EXPECT_FALSE(plan.checkpoints()[0].retained_at);
  plan.set_checkpoint_retained(plan.checkpoints()[0].id, 1.9e9);
  EXPECT_EQ(plan.checkpoints()[0].retained_at, 1.9e9);
}

TEST_F(PlanTest, MigratesAVersion6FileToDivergedTrialsAndAccounts) {
  std::string sql;
  for (int i = 0; i < 6; ++i) sql += std::string(migrations()[i]);
  // A version-6 file with rows in every table that refers to studies and trials (the rebuild of
  // both must keep every reference), and a deleted study whose name a later one took.
  raw_exec(file_,
           sql +
               "PRAGMA user_version = 6;"
               "INSERT INTO studies (name, spec, policy, status, created_at, ended_at, "
               "error, deleted_at) VALUES ('old', '{}', 'shared', 'done', 1.7e9, 1.7e9 + 30, "
               "NULL, 1.8e9);"
               "INSERT INTO studies (name, spec, policy, status, created_at) "
               "VALUES ('old', '{}', 'shared', 'running', 1.7e9);"
               "INSERT INTO trials (id, study_id, number, root_key, params, hyperparams, "
               "length, status, end_reason, created_at) VALUES (0, 1, 1, 'r', '{}', '{}', "
               "10, 'stopped', 'at rung 1', 1.7e9);"
               "INSERT INTO stages VALUES (0, 'r', NULL, 0, 10, 10, 0);"
               "INSERT INTO eval_requests VALUES (0, 10);"
               "INSERT INTO metrics VALUES (0, 10, 'loss', NULL);"
               "INSERT INTO events (time, study_id, kind, detail) VALUES (1.7e9, 1, 'x', "
               "'{}');");
  {
    auto reader = SearchPlan::open_read_only(file_.string());  // as it is: no accounts yet
    ASSERT_EQ(reader.study(1)->account.run_s, 30);
    EXPECT_FALSE(reader.trial(0)->end_step);
  }
  auto plan = SearchPlan::open(file_.string());
  EXPECT_EQ(plan.schema_version(), latest_schema_version());
  ASSERT_TRUE(plan.study(1));
  EXPECT_TRUE(plan.study(1)->deleted_at);
  EXPECT_EQ(plan.study(1)->account.run_s, 30);  // its run time until then
  EXPECT_EQ(plan.study_by_name("old")->id, 2);
  EXPECT_THROW(plan.create_study("old", {}, Policy::kShared), std::invalid_argument);
  ASSERT_TRUE(plan.trial(0));
  EXPECT_EQ(plan.trial(0)->end_reason, "at rung 1");
  EXPECT_FALSE(plan.trial(0)->ended_at);  // it ended before version 13: when is not known
  EXPECT_EQ(plan.eval_requests(0), std::vector<int64_t>{10});
  EXPECT_TRUE(std::isnan(plan.metrics(0).at(0).value));
  EXPECT_EQ(plan.load_tree().stage(0).representative, 0);
  // The foreign keys hold on the rebuilt tables: a trial of no study is refused.
  TrialRow orphan;
  orphan.id = 5;
  orphan.study_id = 99;
  orphan.length = 3;
  EXPECT_THROW(plan.add_trial(orphan), std::invalid_argument);

  // Version 7's statuses and columns.
  plan.set_trial_status(0, TrialStatus::kDiverged, "loss is nan at step 10", 10);
  EXPECT_EQ(plan.trial(0)->status, TrialStatus::kDiverged);
  EXPECT_EQ(plan.trial(0)->end_step, 10);
  EXPECT_TRUE(plan.trial(0)->ended_at);
  plan.set_study_status(2, StudyStatus::kInterrupted, "interrupted (SIGINT)");
  EXPECT_EQ(plan.study(2)->status, StudyStatus::kInterrupted);
  EXPECT_TRUE(plan.study(2)->ended_at);
  plan.set_study_status(2, StudyStatus::kRunning);  // resumed
  EXPECT_FALSE(plan.study(2)->ended_at);
  StudyAccount account{1024, 3.5, 4096, 0.25, 0.125, 12.5};
  plan.set_study_account(2, account);
  EXPECT_EQ(plan.study(2)->account, account);
  EXPECT_THROW(plan.set_study_account(7, account), std::invalid_argument);
}

TEST_F(PlanTest, AReadOnlyPlanRefusesWritesAndSeesOthersCommits) {
  auto writer = SearchPlan::open(file_.string());
  int64_t study = study_with_trials(writer, "s", 2, 0);
  auto reader = SearchPlan::open_read_only(file_.string());
  EXPECT_THROW(reader.create_study("x", {}, Policy::kShared), std::runtime_error);
  EXPECT_THROW(reader.add_metric({0, 1, "loss", 1.0}), std::runtime_error);

  int64_t version = reader.data_version();
  EXPECT_EQ(reader.data_version(), version);  // nothing committed meanwhile
  writer.add_metric({0, 5, "loss", 0.5});
  EXPECT_NE(reader.data_version(), version);
  EXPECT_EQ(reader.study_metrics(study).size(), 1u);

  // A snapshot sees one state: the writer's commit during it shows only after it.
  reader.snapshot([&] {
    EXPECT_EQ(reader.study_metrics(study).size(), 1u);
    writer.add_metric({1, 5, "loss", 0.25});  // the writer is not blocked by the reader
    EXPECT_EQ(reader.study_metrics(study).size(), 1u);
  });
  EXPECT_EQ(reader.study_metrics(study).size(), 2u);
}

// An in-memory plan (hippo simulate's) writes no file until save_copy, which writes a whole,
// readable plan (also under a name with URI characters) and never over an existing file. A
// rollback inside it works as in a file.
TEST_F(PlanTest, AnInMemoryPlanReachesAFileOnlyThroughSaveCopy) {
  SearchPlan::Options options;
  options.durable = false;
  options.in_memory = true;
  auto plan = SearchPlan::open(file_.string(), options);
  int64_t study = study_with_trials(plan, "s", 3, 0);
  plan.add_metric({1, 5, "loss", 0.5});
  EXPECT_THROW(plan.transaction([&] {
    plan.add_metric({2, 5, "loss", 0.25});
    throw std::runtime_error("rolled back");
  }),
               std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir_)) << "nothing on disk before save_copy";
  const fs::path copy = dir_ / "a?b#c%d.db";
  plan.save_copy(copy.string());
  EXPECT_EQ(fs::directory_iterator(dir_)->path(), copy) << "the file named, and only it";
  EXPECT_THROW(plan.save_copy(copy.string()), std::runtime_error);
  auto saved = SearchPlan::open_read_only(copy.string());
  EXPECT_EQ(saved.trials(study).size(), 3u);
  ASSERT_EQ(saved.study_metrics(study).size(), 1u);
  EXPECT_EQ(saved.study_metrics(study)[0].trial, 1);
}

TEST_F(PlanTest, ReadOnlyOpeningRefusesMissingForeignAndNewerFiles) {
  EXPECT_THROW(SearchPlan::open_read_only((dir_ / "missing.db").string()), std::runtime_error);
  EXPECT_FALSE(fs::exists(dir_ / "missing.db"));
  std::ofstream(dir_ / "text.db") << std::string(8192, 'x');
  EXPECT_THROW(SearchPlan::open_read_only((dir_ / "text.db").string()), std::runtime_error);
  raw_exec(dir_ / "empty.db", "CREATE TABLE t (x);");
  try {
    SearchPlan::open_read_only((dir_ / "empty.db").string());
    FAIL() << "opened a database that is no plan";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not a search plan"), std::string::npos) << e.what();
  }
  { SearchPlan::open(file_.string()); }
  raw_exec(file_, "PRAGMA user_version = " + std::to_string(latest_schema_version() + 1));
  EXPECT_THROW(SearchPlan::open_read_only(file_.string()), std::runtime_error);
}

}  // namespace
}  // namespace hippo

namespace hippo {
namespace {

TEST_F(PlanTest, SearcherEventsKeepEveryObjectiveValueAndTheViolation) {
  auto plan = SearchPlan::open(file_.string());
  int64_t study = study_with_trials(plan, "s", 1, 0);
  const std::vector<SearcherEvent> events = {
      {SearcherEvent::Kind::kValidation, 0, 5, 0.5, {}, 0},  // one metric and mode: the value alone
      {SearcherEvent::Kind::kValidation, 0, 10, -INFINITY, {0.7, 1200}, 0.25},
      {SearcherEvent::Kind::kValidation, 1, 10, -INFINITY, {-INFINITY, INFINITY}, 0},
      {SearcherEvent::Kind::kValidation, 2, 10, 0.1, {0.1, NAN}, INFINITY},
      {SearcherEvent::Kind::kClosed, 0, 0, 0, {}, 0},
  };
  for (const SearcherEvent& e : events) plan.add_searcher_event(study, e);
  EXPECT_EQ(plan.searcher_events(study), events);
  // Read back by a fresh connection too (what a restarted master feeds its searcher).
  auto again = SearchPlan::open_read_only(file_.string());
  EXPECT_EQ(again.searcher_events(study), events);
}

// Provenance (schema 13): who made each state and metric, found by any key of its lineage (a
// key's characters are matched as text, never as a pattern: Z85 has '%'); distrusted metrics go,
// a done trial reopens to be measured again, and its study is interrupted until then.
TEST_F(PlanTest, RecordsProvenanceAndReopensWhatADistrustedKeyMade) {
  auto plan = SearchPlan::open(file_.string());
  const int64_t study = study_with_trials(plan, "s", 2, 0);
  StageTree tree;
  tree.add_trial(0, "root", plan.trial(0)->hyperparams, 10);
  plan.save_tree(tree);
  CheckpointRow state{0, 0, 5, "ckpt/0-5", 1000, "", 0};
  state.producer = "a%b";
  state.lineage = "a%b c";
  plan.add_checkpoint(state);
  plan.add_metric({0, 5, "loss", 0.5, "a%b", "a%b c"});
  plan.add_metric({0, 10, "loss", 0.25, "c", "c"});
  plan.add_metric({1, 10, "loss", 0.75, "d", "d"});
  EXPECT_EQ(plan.checkpoints()[0].lineage, "a%b c");
  EXPECT_EQ(plan.checkpoints_resting_on("c").size(), 1u);
  EXPECT_TRUE(plan.checkpoints_resting_on("a").empty());  // a key is matched whole
  EXPECT_TRUE(plan.checkpoints_resting_on("%").empty());
  ASSERT_EQ(plan.metrics_resting_on("c").size(), 2u);
  EXPECT_EQ(plan.metrics_resting_on("c")[0].producer, "a%b");
  EXPECT_EQ(plan.metrics(1)[0].lineage, "d");

  plan.set_trial_status(0, TrialStatus::kDone);
  plan.set_study_status(study, StudyStatus::kDone);
  plan.delete_metric(0, 5, "loss");
  EXPECT_THROW(plan.delete_metric(0, 5, "loss"), std::invalid_argument);
  plan.reopen_trial_to_remeasure(0);
  EXPECT_THROW(plan.reopen_trial_to_remeasure(1), std::invalid_argument);  // not done
  EXPECT_EQ(plan.trial(0)->status, TrialStatus::kRunning);
  EXPECT_TRUE(plan.trial(0)->remeasure);
  plan.interrupt_study_to_remeasure(study, "distrusted");
  EXPECT_EQ(plan.study(study)->status, StudyStatus::kInterrupted);
  EXPECT_TRUE(plan.study(study)->remeasure);
  plan.resume_study(study);
  EXPECT_TRUE(plan.study(study)->remeasure);  // until the study ends
  plan.set_trial_status(0, TrialStatus::kDone);
  EXPECT_FALSE(plan.trial(0)->remeasure);
  plan.set_study_status(study, StudyStatus::kDone);
  EXPECT_FALSE(plan.study(study)->remeasure);
  plan.set_study_status(study, StudyStatus::kFailed);
  EXPECT_THROW(plan.interrupt_study_to_remeasure(study, "x"), std::invalid_argument);
}

TEST_F(PlanTest, MigratesAVersion12FileToUnknownProvenance) {
  std::string sql;
  for (int i = 0; i < 12; ++i) sql += std::string(migrations()[i]);
  raw_exec(file_, sql +
                      "PRAGMA user_version = 12;"
                      "INSERT INTO studies (name, spec, policy, status, created_at) "
                      "VALUES ('old', '{}', 'shared', 'done', 1.7e9);"
                      "INSERT INTO trials (id, study_id, number, root_key, params, hyperparams, "
                      "length, status, created_at) VALUES (0, 1, 1, 'r', '{}', '{}', 10, 'done', "
                      "1.7e9);"
                      "INSERT INTO stages VALUES (0, 'r', NULL, 0, 10, 10, 0);"
                      "INSERT INTO checkpoints (stage_id, step, file, size, checksum, created_at) "
                      "VALUES (0, 10, 'a.ckpt', 5, '', 1.7e9);"
                      "INSERT INTO metrics VALUES (0, 10, 'loss', 0.5);");
  {
    auto reader = SearchPlan::open_read_only(file_.string());  // as it is: unknown, no error
    EXPECT_EQ(reader.checkpoints()[0].producer, "");
    EXPECT_EQ(reader.metrics(0)[0].lineage, "");
    EXPECT_TRUE(reader.metrics_resting_on("").empty());
    EXPECT_FALSE(reader.trial(0)->remeasure);
  }
  auto plan = SearchPlan::open(file_.string());
  EXPECT_EQ(plan.schema_version(), latest_schema_version());
  EXPECT_EQ(plan.checkpoints()[0].lineage, "");
  EXPECT_EQ(plan.metrics(0)[0].producer, "");
  EXPECT_FALSE(plan.study(1)->remeasure);
}

}  // namespace
}  // namespace hippo
