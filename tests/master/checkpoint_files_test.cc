// Checkpoint files as the master handles them (master/checkpoint_files.h), on a real directory and
// a real SQLite plan: the naming rule, the sweep of files no row names, and removal only once the
// transaction that drops the rows has committed.
#include "master/checkpoint_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "master/study_driver.h"
#include "searchers/spec.h"
#include "storage/plan.h"

namespace hippo::master {
namespace {

namespace fs = std::filesystem;

const std::string kIncarnation = "0123456789abcdef";

// A grid of two trials that share nothing (two learning rates), 16 steps each.
nlohmann::json two_trial_spec_json() {
  return nlohmann::json::parse(R"({
    "name": "s", "model": {"type": "mlp", "hidden": [8]},
    "data": {"name": "fashion-mnist", "train_samples": 256, "eval_samples": 64},
    "fixed": {"batch_size": 64, "optimizer": "sgd"},
    "hyperparameters": {"lr": {"grid": [0.1, 0.05]}},
    "searcher": {"name": "grid", "metric": "accuracy", "mode": "max"},
    "length": {"steps": 16}, "eval": {"every": {"steps": 8}}})");
}
StudySpec two_trial_spec() {
  return parse_spec(two_trial_spec_json());
}
// Applies an edit and the driver's work it leads to, item after item (as the master does).
void apply_all(StudyDriver& driver, const Edit& edit) {
  driver.apply(edit);
  while (driver.has_work()) driver.apply(driver.next());
}
// Submits and places the study's first trials.
int64_t submit(SearchPlan& plan, StudyDriver& driver, const StudySpec& spec,
               const nlohmann::json& spec_json) {
  int64_t id = 0;
  plan.transaction([&] {
    apply_all(driver, driver.submit(spec, spec_json, Policy::kShared));
    id = driver.created();
  });
  return id;
}

StudyRules keep_none() {
  StudyRules rules;
  rules.keep_checkpoint_bytes = 0;
  return rules;
}

class CheckpointFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hippo_master_files_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ / "ck");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string ck() const { return (dir_ / "ck").string(); }
  void touch(const std::string& name) const { std::ofstream(dir_ / "ck" / name) << "bytes"; }
  bool exists(const std::string& name) const {
    return fs::exists(fs::symlink_status(dir_ / "ck" / name));
  }

  fs::path dir_;
};

TEST_F(CheckpointFilesTest, NamingRule) {
  const std::string name = checkpoint_file_name(kIncarnation, 42);
  EXPECT_EQ(name, "state-0123456789abcdef-42.ckpt");
  EXPECT_EQ(incarnation_of(name), kIncarnation);
  EXPECT_EQ(incarnation_of(name + ".tmp.00ff00ff00ff00ff"), kIncarnation);  // a worker's temporary
  for (const std::string other :
       {"notes.txt", "state-0123456789abcdef-42.ckpt.bak", "state-0123456789abcdef-.ckpt",
        "state-0123456789ABCDEF-42.ckpt", "state-0123456789abcde-42.ckpt",
        "state-0123456789abcdef-4x2.ckpt", "state-0123456789abcdef-42.ckpt.tmp.123",
        "state-0123456789abcdef-42.ckpt.tmp.00ff00ff00ff00fg", "xstate-0123456789abcdef-42.ckpt",
        "state-0123456789abcdef42.ckpt", ""})
    EXPECT_EQ(incarnation_of(other), std::nullopt) << other;
}

// Only files of this plan's incarnations that no row names go; everything else a user (or another
// plan's master sharing the directory) put there stays, and so do directories.
TEST_F(CheckpointFilesTest, SweepRemovesOnlyUnnamedFilesOfThisPlan) {
  const std::string named = checkpoint_file_name(kIncarnation, 1);
  const std::string unnamed = checkpoint_file_name(kIncarnation, 2);
  const std::string temporary = checkpoint_file_name(kIncarnation, 3) + ".tmp.0000000000000001";
  const std::string foreign = checkpoint_file_name("fedcba9876543210", 2);
  for (const std::string& f : {named, unnamed, temporary, foreign, std::string("notes.txt")})
    touch(f);
  fs::create_symlink("/etc/passwd", dir_ / "ck" / checkpoint_file_name(kIncarnation, 4));
  fs::create_directory(dir_ / "ck" / checkpoint_file_name(kIncarnation, 5));
  EXPECT_EQ(sweep_checkpoint_files(ck(), {kIncarnation}, {named}), 3);
  EXPECT_TRUE(exists(named));
  EXPECT_FALSE(exists(unnamed));
  EXPECT_FALSE(exists(temporary));
  EXPECT_FALSE(exists(checkpoint_file_name(kIncarnation, 4)));  // the link, not its target
  EXPECT_TRUE(fs::exists("/etc/passwd"));
  EXPECT_TRUE(exists(foreign));
  EXPECT_TRUE(exists("notes.txt"));
  EXPECT_TRUE(fs::is_directory(dir_ / "ck" / checkpoint_file_name(kIncarnation, 5)));
  EXPECT_EQ(sweep_checkpoint_files(ck(), {}, {}), 0);
  EXPECT_EQ(sweep_checkpoint_files((dir_ / "none").string(), {kIncarnation}, {}), 0);
}

// With --keep-checkpoints 0 (nothing kept for later studies): a study cancelled inside a
// transaction that then rolls back (a commit that fails, a crash before it): its checkpoint rows
// are back, and so must be their files. Once a cancel commits, the files go. (Before,
// collect_checkpoints removed the files inside the transaction.)
TEST_F(CheckpointFilesTest, FilesGoOnlyOnceTheirRowsAreGoneForGood) {
  const nlohmann::json spec_json = two_trial_spec_json();
  const StudySpec spec = two_trial_spec();
  const std::string plan_file = (dir_ / "plan.db").string();
  std::vector<std::string> files;
  {
    SearchPlan plan = SearchPlan::open(plan_file);
    StageTree tree = plan.load_tree();
    StateRegistry states(kIncarnation);
    Storages storages(ck());
    StudyDriver driver(plan, tree, states, storages, keep_none());
    const int64_t study = submit(plan, driver, spec, spec_json);
    // A state at step 8 of each trial, with its file and its row, as a worker would report it.
    for (TrialId trial : {0, 1}) {
      const StateKey key = state_key(tree, trial, 8);
      const protocol::SnapshotOrder order = states.new_snapshot_order(8);
      touch(order.file);
      const int64_t row = plan.add_checkpoint({0, key.first, 8, order.file, 5, "", 0});
      states.add(order.state, {.stage = key.first,
                               .step = 8,
                               .file = order.file,
                               .storages = {storages.own()},
                               .checkpoint_row = row});
      files.push_back(order.file);
    }
    EXPECT_THROW(plan.transaction([&] {
      apply_all(driver, driver.cancel(study));
      throw std::runtime_error("the commit failed");
    }),
                 std::runtime_error);
    EXPECT_EQ(plan.checkpoints().size(), 2u);
    for (const std::string& f : files) EXPECT_TRUE(exists(f)) << f;
  }
  // A master that starts on that plan has the study running and both files; its cancel commits.
  SearchPlan plan = SearchPlan::open(plan_file);
  StageTree tree = plan.load_tree();
  StateRegistry states("fedcba9876543210");
  Storages storages(ck());
  for (const CheckpointRow& row : plan.checkpoints())
    states.add_restored(state_of(row, storages.own()));
  StudyDriver driver(plan, tree, states, storages, keep_none());
  plan.transaction([&] { apply_all(driver, driver.restore(true)); });
  ASSERT_TRUE(driver.running(1));
  plan.transaction([&] { apply_all(driver, driver.cancel(1)); });
  EXPECT_TRUE(plan.checkpoints().empty());
  for (const std::string& f : files) EXPECT_FALSE(exists(f)) << f;
}

// Under a budget that fits one of a cancelled study's two states (master/retention.h): the one
// kept is marked retained in the plan, and only the other's row and file go.
TEST_F(CheckpointFilesTest, ABudgetKeepsWhatFitsForLaterStudies) {
  SearchPlan plan = SearchPlan::open((dir_ / "plan.db").string());
  StageTree tree = plan.load_tree();
  StateRegistry states(kIncarnation);
  StudyRules rules;
  rules.keep_checkpoint_bytes = 7;
  Storages storages(ck());
  StudyDriver driver(plan, tree, states, storages, rules);
  const int64_t study = submit(plan, driver, two_trial_spec(), two_trial_spec_json());
  std::vector<std::string> files;
  for (TrialId trial : {0, 1}) {  // equal values: the older state (trial 0's) wins the tie
    const StateKey key = state_key(tree, trial, 8);
    const protocol::SnapshotOrder order = states.new_snapshot_order(8);
    touch(order.file);
    const int64_t row = plan.add_checkpoint({0, key.first, 8, order.file, 5, "", 0});
    states.add(order.state, {.stage = key.first,
                             .step = 8,
                             .file = order.file,
                             .storages = {storages.own()},
                             .checkpoint_row = row,
                             .bytes = 5});
    files.push_back(order.file);
  }
  plan.transaction([&] { apply_all(driver, driver.cancel(study)); });
  const std::vector<CheckpointRow> rows = plan.checkpoints();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].file, files[0]);
  EXPECT_TRUE(rows[0].retained_at.has_value());
  EXPECT_TRUE(exists(files[0]));
  EXPECT_FALSE(exists(files[1]));
  // A later trial through it reuses it from history.
  EXPECT_EQ(states.deepest_retained(tree, 0, 16), 8);
}

}  // namespace
}  // namespace hippo::master
