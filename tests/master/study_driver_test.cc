// The study driver without sockets or workers (master/study_driver.h): studies run on a real plan
// file, a test "trains" what the driver needs (TrainStage edits, as a job's progress would) and
// "evaluates" what trials wait for (deliver_metrics, as a worker's metric would), and every edit
// goes through StudyDriver::apply. What users rely on: a diverging trial ends `diverged` and its
// study goes on and ends; a trainer that forgets the study's metric fails its trials, naming it;
// 100,000 trials that close at once need a stack of constant depth; every built-in searcher ends.
#include "master/study_driver.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

namespace hippo::master {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What an evaluation of a trial reports, from its parameters and the step.
using MetricFunction = std::function<json(const json& params, int64_t step)>;

// A learning curve: accuracy grows with the step, better for lr near 0.05; a trial whose lr is
// above 1 diverges (its loss and accuracy are NaN from the first evaluation after step 0).
json curve(const json& params, int64_t step) {
  double lr = 0.05;
  for (const auto& [name, value] : params.items())
    if (name.rfind("lr", 0) == 0 && value.is_number()) lr = value.get<double>();
  if (lr > 1 && step > 0) return {{"accuracy", NAN}, {"loss", NAN}};
  const double accuracy =
      0.9 - 0.5 / (1.0 + static_cast<double>(step) / 50) - std::abs(std::log(lr / 0.05)) / 20;
  return {{"accuracy", accuracy}, {"loss", 1 - accuracy}};
}

json spec_with(json searcher, json hyperparameters, int64_t epochs = 4) {
  return {{"name", "study"},
          {"model", {{"type", "mlp"}, {"hidden", {8}}}},
          {"data", {{"name", "fashion-mnist"}, {"train_samples", 640}, {"eval_samples", 64}}},
          {"seed", 0},
          {"fixed", {{"batch_size", 64}, {"optimizer", "sgd"}}},
          {"hyperparameters", hyperparameters},
          {"searcher", searcher},
          {"length", {{"epochs", epochs}}},
          {"eval", {{"every", {{"epochs", 1}}}}}};
}

class StudyDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-driver-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "checkpoints");
    plan_.emplace(SearchPlan::open((dir_ / "plan.db").string()));
    storages_.emplace((dir_ / "checkpoints").string());
    driver_.emplace(*plan_, tree_, states_, *storages_, rules_);
    plan_->transaction([&] { apply(driver_->restore(true)); });
  }
  void TearDown() override {
    driver_.reset();
    plan_.reset();
    fs::remove_all(dir_);
  }

  // Applies an edit, then the driver's queue, item after item (the master's loop).
  void apply(const Edit& e) {
    apply_one(e);
    while (driver_->has_work()) apply_one(driver_->next());
  }
  // One edit as the master's applier carries it out: op after op, a split's states moved next.
  void apply_one(const Edit& e) {
    for (const EditOp& op : e.ops) {
      driver_->apply_op(op);
      for (const Split& split : driver_->take_splits()) states_.on_split(split);
    }
    driver_->queue(e);
  }

  int64_t submit(const json& spec) {
    int64_t id = 0;
    plan_->transaction([&] {
      apply(driver_->submit(parse_spec(spec), spec, Policy::kShared));
      id = driver_->created();
    });
    return id;
  }

  // Runs the study to its end: trains what it needs, evaluates what its trials wait for (a
  // round is one transaction, as one poll of the master), at most `rounds` rounds.
  void run(int64_t study, const MetricFunction& metrics, int rounds = 10000) {
    for (int round = 0; round < rounds && driver_->running(study); ++round) {
      plan_->transaction([&] {
        while (driver_->expand()) apply({});
        Edit trained;
        for (const auto& [stage, end] : driver_->needed_ends().ends)
          if (tree_.stage(stage).trained_until < end) trained.add(edit::TrainStage{stage, end});
        apply(trained);
        const std::set<StateKey> waiting = driver_->pending_evaluations().trained();
        for (const StateKey& key : waiting) {
          const std::set<TrialId>& trials = driver_->pending_evaluations().waiting(key);
          if (trials.empty()) continue;
          const TrackedTrial* t = driver_->trial(*trials.begin());
          apply(driver_->deliver_metrics(key, {metrics(t->params, key.second)}));
        }
        driver_->close_trained_trials();
        apply({});
      });
    }
    ASSERT_FALSE(driver_->running(study)) << "the study did not end in " << rounds << " rounds";
  }

  std::vector<TrialRow> trials(int64_t study) { return plan_->trials(study); }

  fs::path dir_;
  std::optional<SearchPlan> plan_;
  StageTree tree_;
  StateRegistry states_{"0123456789abcdef"};
  std::optional<Storages> storages_;
  StudyRules rules_;
  std::optional<StudyDriver> driver_;
};

TEST_F(StudyDriverTest, ADivergingTrialEndsDivergedAndTheStudyGoesOn) {
  const int64_t study =
      submit(spec_with({{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}},
                       {{"lr", {{"grid", {0.1, 1e6, 0.05}}}}}));
  run(study, curve);
  EXPECT_EQ(plan_->study(study)->status, StudyStatus::kDone);
  const std::vector<TrialRow> rows = trials(study);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].status, TrialStatus::kDone);
  EXPECT_EQ(rows[1].status, TrialStatus::kDiverged);
  EXPECT_EQ(rows[1].end_step, 10);  // its first evaluation after step 0: one epoch of 10 steps
  EXPECT_NE(rows[1].end_reason.find("accuracy is nan at step 10"), std::string::npos)
      << rows[1].end_reason;
  EXPECT_EQ(rows[2].status, TrialStatus::kDone);
  // Nothing needs it trained beyond where it diverged.
  EXPECT_EQ(driver_->trial(rows[1].id)->needed_length(), 10);
  // Its NaN is kept, as measured; the others were evaluated at every epoch.
  EXPECT_TRUE(std::isnan(plan_->metrics(rows[1].id).at(0).value));
  EXPECT_EQ(plan_->metrics(rows[0].id).size(), 2u * 4);
}

TEST_F(StudyDriverTest, ATrainerWithoutTheStudysMetricFailsItsTrialsSayingSo) {
  const int64_t study =
      submit(spec_with({{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}},
                       {{"lr", {{"grid", {0.1, 0.05}}}}}));
  run(study, [](const json&, int64_t) { return json{{"loss", 0.5}}; });
  const std::optional<StudyRow> row = plan_->study(study);
  EXPECT_EQ(row->status, StudyStatus::kFailed);
  EXPECT_NE(row->error.find("no accuracy at step 10 (the trainer reported loss)"),
            std::string::npos)
      << row->error;
  for (const TrialRow& t : trials(study)) {
    EXPECT_EQ(t.status, TrialStatus::kFailed);
    EXPECT_NE(t.end_reason.find("no accuracy at step"), std::string::npos) << t.end_reason;
  }
}

TEST_F(StudyDriverTest, AJobThatEndsWithoutMetricsFailsTheTrialsThatWaitedNamingWhy) {
  const int64_t study = submit(spec_with(
      {{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}}, {{"lr", {{"grid", {0.1}}}}}, 1));
  plan_->transaction([&] {
    const TrialId trial = trials(study).at(0).id;
    apply(driver_->deliver_nothing(state_key(tree_, trial, 10), "job 1 ended without them"));
  });
  const TrialRow t = trials(study).at(0);
  EXPECT_EQ(t.status, TrialStatus::kFailed);
  EXPECT_EQ(t.end_reason, "no accuracy at step 10: job 1 ended without them");
  EXPECT_EQ(plan_->study(study)->status, StudyStatus::kFailed);
}

// The driver with the stack of a small thread: no event recurses into the next one.
void on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
#ifdef HIPPO_SANITIZED  // the code under test is instrumented (tests/CMakeLists.txt)
  pthread_attr_setstacksize(&attr, 1 << 20);  // ASan's frames are larger
#else
  pthread_attr_setstacksize(&attr, 256 << 10);
#endif
  struct Call {
    const std::function<void()>* fn;
    std::exception_ptr error;
  } call{&fn, nullptr};
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, &attr,
                [](void* p) -> void* {
                  Call* c = static_cast<Call*>(p);
                  try {
                    (*c->fn)();
                  } catch (...) {
                    c->error = std::current_exception();
                  }
                  return nullptr;
                },
                &call),
            0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  if (call.error) std::rethrow_exception(call.error);
}

// 100,000 trials over 24 points (4 x 3 x 2 categories): after the first of each point, every
// trial lands on states trained and evaluated already and closes at once, and its searcher places
// the next, which closes at once... (that recursion ran out of an 8 MiB stack at 5,000 trials).
TEST_F(StudyDriverTest, AHundredThousandTrialsOverASmallSpaceNeedConstantStack) {
#ifdef HIPPO_SANITIZED
  // In ASan's time: a recursion of 2,000 levels would overflow the 1 MiB stack (5,000 levels
  // overflowed 8 MiB before), and the driver's memory is watched over 2,000 closings.
  const int64_t n = 2000;
#else
  const int64_t n = 100000;
#endif
  rules_.budget.trials = n;
  driver_.emplace(*plan_, tree_, states_, *storages_, rules_);
  const json space = {{"lr",
                       {{"schedule", "multistep"},
                        {"unit", "epoch"},
                        {"init", {{"choice", {0.1, 0.05, 0.02, 0.01}}}},
                        {"milestones", {{{"choice", {1, 2, 3}}}}},
                        {"gamma", {{"choice", {0.1, 0.3}}}}}}};
  for (const char* searcher : {"random", "asha"}) {
    json s = {{"name", searcher}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", n}};
    if (std::string(searcher) == "asha")
      s.update({{"eta", 3}, {"min_length", {{"epochs", 1}}}, {"max_length", {{"epochs", 9}}}});
    json spec = spec_with(s, space, 9);
    spec["name"] = searcher;
    on_small_stack([&] {
      const int64_t study = submit(spec);
      run(study, [](const json& p, int64_t step) {
        return json{{"accuracy", 0.5 + 0.01 * static_cast<double>(step) - p.value("lr.init", 0.0)}};
      });
      EXPECT_EQ(plan_->study(study)->status, StudyStatus::kDone) << searcher;
      EXPECT_EQ(static_cast<int64_t>(trials(study).size()), n) << searcher;
    });
  }
}

// Every built-in searcher, with a third of its trials diverging: the study ends done, the diverged
// trials say so, and the best trial is never one of them.
TEST_F(StudyDriverTest, EverySearcherEndsWithDivergingTrials) {
  const json lr = {{"choice", {0.05, 0.1, 5.0}}};  // 5.0 diverges
  const std::vector<json> searchers = {
      {{"name", "grid"}},
      {{"name", "random"}, {"max_trials", 12}},
      {{"name", "sha"},
       {"max_trials", 9},
       {"eta", 3},
       {"min_length", {{"epochs", 1}}},
       {"max_length", {{"epochs", 9}}}},
      {{"name", "asha"},
       {"max_trials", 12},
       {"eta", 3},
       {"min_length", {{"epochs", 1}}},
       {"max_length", {{"epochs", 9}}}},
      {{"name", "hyperband"},
       {"eta", 3},
       {"min_length", {{"epochs", 1}}},
       {"max_length", {{"epochs", 9}}}},
      {{"name", "median_stop"}, {"max_trials", 12}},
      {{"name", "pbt"}, {"population", 6}, {"interval", {{"epochs", 1}}}},
      {{"name", "tpe"}, {"max_trials", 12}},
  };
  int n = 0;
  for (json s : searchers) {
    const std::string name = s["name"];
    s.update({{"metric", "accuracy"}, {"mode", "max"}});
    json hp = name == "grid" ? json{{"lr", {{"grid", {0.05, 0.1, 5.0}}}}} : json{{"lr", lr}};
    if (name == "pbt") hp = {{"lr", {{"choice", {0.05, 0.1, 5.0}}}}};
    json spec = spec_with(s, hp, 9);
    spec["name"] = name + "-" + std::to_string(n++);
    SCOPED_TRACE(name);
    const int64_t study = submit(spec);
    run(study, curve);
    const std::optional<StudyRow> row = plan_->study(study);
    EXPECT_EQ(row->status, StudyStatus::kDone) << row->error;
    int64_t diverged = 0;
    for (const TrialRow& t : trials(study)) {
      if (t.params.value("lr", 0.0) > 1 && t.status != TrialStatus::kStopped) {
        EXPECT_EQ(t.status, TrialStatus::kDiverged) << t.params;
      }
      diverged += t.status == TrialStatus::kDiverged;
    }
    EXPECT_GT(diverged, 0);
    // The study summary's best rule (reports.h) never returns a diverged trial.
    for (const TrialRow& t : trials(study)) {
      if (t.status != TrialStatus::kDiverged) continue;
      for (const MetricRow& m : plan_->metrics(t.id))
        EXPECT_TRUE(m.step == 0 || !std::isfinite(m.value)) << t.params;
    }
  }
}

TEST_F(StudyDriverTest, ACancelStopsOpenTrialsAndARefusedOperationFailsOnlyItsStudy) {
  const int64_t study =
      submit(spec_with({{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}},
                       {{"lr", {{"grid", {0.1, 0.05}}}}}));
  EXPECT_THROW(driver_->cancel(study + 1), std::out_of_range);
  plan_->transaction([&] { apply(driver_->cancel(study)); });
  EXPECT_EQ(plan_->study(study)->status, StudyStatus::kCancelled);
  for (const TrialRow& t : trials(study)) EXPECT_EQ(t.status, TrialStatus::kStopped);
  // Cancelled twice: refused, nothing changed.
  EXPECT_THROW(driver_->cancel(study), std::invalid_argument);
  // A name that exists: refused with how to go on (an ended study is not offered resume).
  json again = spec_with({{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}},
                         {{"lr", {{"grid", {0.1}}}}});
  try {
    submit(again);
    FAIL() << "a second study named study was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find("resume"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hippo summary study"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hippo delete study"), std::string::npos) << e.what();
  }
}

TEST_F(StudyDriverTest, AnInterruptedStudyResumesWhereItStopped) {
  const json spec = spec_with({{"name", "grid"}, {"metric", "accuracy"}, {"mode", "max"}},
                              {{"lr", {{"grid", {0.1, 0.05, 0.02}}}}});
  const int64_t study = submit(spec);
  // Half of the work: every stage trained to step 20, the evaluations there delivered.
  plan_->transaction([&] {
    Edit trained;
    for (const auto& [stage, end] : driver_->needed_ends().ends)
      trained.add(edit::TrainStage{stage, std::min<int64_t>(end, 20)});
    apply(trained);
    for (const TrialRow& t : trials(study))
      for (int64_t step : {10, 20})
        apply(driver_->deliver_metrics(state_key(tree_, t.id, step), {curve(t.params, step)}));
  });
  plan_->transaction([&] { apply(driver_->interrupt(study, "interrupted by SIGINT")); });
  EXPECT_EQ(plan_->study(study)->status, StudyStatus::kInterrupted);
  EXPECT_EQ(plan_->study(study)->error, "interrupted by SIGINT");
  // Its trials stay as they were, for the resume.
  for (const TrialRow& t : trials(study)) EXPECT_NE(t.status, TrialStatus::kStopped);
  EXPECT_THROW(driver_->resume(study + 7), std::invalid_argument);
  plan_->transaction([&] { apply(driver_->resume(study)); });
  // What remains is trained (from step 20 on) and evaluated (at 30 and 40) once.
  for (const auto& [stage, end] : driver_->needed_ends().ends)
    EXPECT_GE(tree_.stage(stage).trained_until, std::min<int64_t>(end, 20));
  run(study, curve);
  EXPECT_EQ(plan_->study(study)->status, StudyStatus::kDone);
  for (const TrialRow& t : trials(study)) {
    EXPECT_EQ(t.status, TrialStatus::kDone);
    EXPECT_EQ(plan_->metrics(t.id).size(), 2u * 4);
  }
  // Resumed studies are not resumed again.
  EXPECT_THROW(driver_->resume(study), std::invalid_argument);
}

// A warm start (master/warm_start.h) is read from the plan when the study is submitted and stored
// with its spec: the earlier study's evaluations, its params cut to the new leaves, those outside
// the new space left out; the searcher's first proposal is not the one it makes without them.
TEST_F(StudyDriverTest, AWarmStartIsReadFromThePlanAtSubmitAndStoredWithTheSpec) {
  json earlier =
      spec_with({{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 8}},
                {{"lr", {{"loguniform", {0.01, 0.5}}}}, {"momentum", {{"uniform", {0.5, 0.9}}}}});
  earlier["name"] = "earlier";
  const int64_t first = submit(earlier);
  run(first, curve);
  // lr only (momentum is the default constant here), over a narrower range.
  json cold = spec_with({{"name", "tpe"},
                         {"metric", "accuracy"},
                         {"mode", "max"},
                         {"max_trials", 4},
                         {"n_startup", 3},
                         {"parallel", 1}},
                        {{"lr", {{"loguniform", {0.01, 0.2}}}}});
  cold["name"] = "cold";
  json warm = cold;
  warm["name"] = "warm";
  warm["warm_start"] = {{"studies", {"earlier"}}};
  const int64_t c = submit(cold), w = submit(warm);
  const json stored = plan_->study(w)->spec;
  int64_t inside = 0;
  for (const TrialRow& t : trials(first)) inside += t.params["lr"].get<double>() <= 0.2;
  ASSERT_GE(inside, 3) << "the test needs earlier trials inside the new range";
  ASSERT_EQ(stored["warm_start"]["evaluations"].size(), static_cast<size_t>(inside));
  for (const json& e : stored["warm_start"]["evaluations"]) {
    EXPECT_EQ(e["study"], "earlier");
    EXPECT_EQ(e["params"].size(), 1u) << e;  // momentum dropped
    EXPECT_EQ(e["values"].size(), 4u) << e;  // every epoch
  }
  EXPECT_EQ(parse_spec(stored).prior.size(), static_cast<size_t>(inside));
  EXPECT_NE(trials(w)[0].params, trials(c)[0].params);
  run(w, curve);
  EXPECT_EQ(plan_->study(w)->status, StudyStatus::kDone);
}

// Bad warm starts are refused with the field and the reason, and change nothing.
TEST_F(StudyDriverTest, ABadWarmStartIsRefusedAndChangesNothing) {
  json earlier =
      spec_with({{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 3}},
                {{"lr", {{"uniform", {0.01, 0.1}}}}});
  earlier["name"] = "earlier";
  run(submit(earlier), curve);
  auto refusal = [&](json changes) {
    json warm =
        spec_with({{"name", "tpe"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 4}},
                  {{"lr", {{"uniform", {0.01, 0.1}}}}});
    warm["name"] = "warm";
    warm["warm_start"] = {{"studies", {"earlier"}}};
    warm.merge_patch(changes);
    const size_t studies = plan_->studies().size();
    try {
      submit(warm);
    } catch (const SpecError& e) {
      EXPECT_EQ(plan_->studies().size(), studies);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({{"warm_start", {{"studies", {"nosuch"}}}}}),
            "warm_start.studies[0]: no study \"nosuch\" in this plan");
  EXPECT_EQ(refusal({{"searcher", {{"metric", "loss"}, {"mode", "min"}}}}),
            "warm_start.studies[0]: study earlier searched accuracy (max), this study loss (min): "
            "its evaluations cannot seed this one");
  EXPECT_EQ(refusal({{"searcher", {{"mode", "min"}}}}),
            "warm_start.studies[0]: study earlier searched accuracy (max), this study accuracy "
            "(min): its evaluations cannot seed this one");
  EXPECT_EQ(refusal({{"hyperparameters", {{"momentum", {{"uniform", {0.5, 0.9}}}}}}}),
            "warm_start.studies[0]: study earlier has no leaf momentum (it did not search it): a "
            "warm start needs a value of every leaf of this study");
  EXPECT_EQ(refusal({{"hyperparameters", {{"lr", {{"uniform", {0.2, 0.3}}}}}}}),
            "warm_start.studies[0]: study earlier has no evaluation of accuracy inside this "
            "study's space (3 of its evaluated trials lie outside it)");
  EXPECT_EQ(refusal({{"warm_start", {{"evaluations", json::array()}}}}),
            "warm_start.evaluations: hippo writes them when the study is submitted, from "
            "warm_start.studies: leave them out");
  EXPECT_EQ(refusal({{"warm_start", {{"studies", {"warm"}}}}}),
            "warm_start.studies[0]: \"warm\" is this study itself");
  EXPECT_EQ(refusal(json::object()), "accepted");
}

// `hippo enqueue` at the driver (StudyDriver::enqueue): the configuration is the next trial, the
// searcher's state saved with it at once; params outside the space, an ended study or a searcher
// that takes none are refused and change nothing.
TEST_F(StudyDriverTest, AnEnqueuedConfigurationIsTheNextTrial) {
  const json leaf = {{"lr", {{"uniform", {0.01, 0.1}}}}};
  const int64_t study = submit(spec_with({{"name", "tpe"},
                                          {"metric", "accuracy"},
                                          {"mode", "max"},
                                          {"max_trials", 3},
                                          {"parallel", 1}},
                                         leaf));
  const json given = {{"lr", 0.0425}};
  try {
    driver_->enqueue(study, {{"lr", 2}});
    ADD_FAILURE() << "accepted";
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "params.lr: value 2 is not in its range");
  }
  EXPECT_THROW(driver_->enqueue(study, {{"momentum", 0.5}}), SpecError);
  plan_->transaction([&] { apply(driver_->enqueue(study, given).edit); });
  EXPECT_EQ(plan_->study(study)->searcher_state["queued"], json::array({given}));
  EXPECT_TRUE(plan_->last_event(study, "enqueued").has_value());
  run(study, curve);
  std::vector<TrialRow> made = trials(study);
  ASSERT_EQ(made.size(), 3u);
  EXPECT_EQ(made[1].params, given);
  EXPECT_NE(made[2].params, given);
  try {
    driver_->enqueue(study, given);
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "study study has already ended: done");
  }
  json random = spec_with(
      {{"name", "random"}, {"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 2}}, leaf);
  random["name"] = "random";
  const int64_t g = submit(random);
  const json state = plan_->study(g)->searcher_state;
  try {
    driver_->enqueue(g, {{"lr", 0.0425}});
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("study random: searcher random: it takes no "
                                          "configuration while it runs",
                                          0),
              0u)
        << e.what();
  }
  EXPECT_EQ(plan_->study(g)->searcher_state, state);
}

// Optuna's enqueue_trial(skip_if_exists=True), hippo enqueue's only way: params a trial has
// already (compared in their stored form: a uniform leaf's 0.1000 and 1e-1 are 0.1, its 1 is 1.0;
// a choice's 1.0 is its candidate 1) make no trial and change nothing, and the decision names the
// trial with its status; params enqueued that wait for a slot are found too; others are
// enqueued in their stored form.
TEST_F(StudyDriverTest, ParamsAStudyHasAlreadyAreNotEnqueuedAgain) {
  json spec = spec_with({{"name", "tpe"},
                         {"metric", "accuracy"},
                         {"mode", "max"},
                         {"max_trials", 6},
                         {"parallel", 1}},
                        {{"lr", {{"uniform", {0.01, 1}}}},
                         {"momentum", {{"choice", {0, 0.5, 1}}}},
                         {"weight_decay", {{"int", {0, 3}}}}});
  spec["enqueue"] = {{{"lr", 0.1}, {"momentum", 0.5}, {"weight_decay", 1}},
                     {{"lr", 0.2}, {"momentum", 0}, {"weight_decay", 2}}};
  const int64_t study = submit(spec);
  auto decide = [&](const std::string& params) {
    return driver_->enqueue(study, json::parse(params));
  };
  auto state = [&] { return plan_->study(study)->searcher_state; };
  const json before = state();
  // Trial 1 runs (parallel 1): the spec's first entry, however it is written.
  for (const char* same : {R"({"lr": 0.1000, "momentum": 0.5, "weight_decay": 1})",
                           R"({"weight_decay": 1, "lr": 1e-1, "momentum": 0.50})"}) {
    EnqueueDecision d = decide(same);
    ASSERT_TRUE(d.existing.has_value()) << same;
    EXPECT_EQ(d.existing->trial, 1);
    EXPECT_EQ(d.existing->status, TrialStatus::kRunning);
    EXPECT_TRUE(d.edit.ops.empty());
  }
  // The spec's second entry is no trial yet: it waits for a slot.
  EnqueueDecision waiting = decide(R"({"lr": 0.2, "momentum": 0.0, "weight_decay": 2})");
  ASSERT_TRUE(waiting.existing.has_value());
  EXPECT_EQ(waiting.existing->trial, 0);
  EXPECT_EQ(state(), before);
  EXPECT_FALSE(plan_->last_event(study, "enqueued").has_value());
  // New params: enqueued in their stored form (lr 1 as 1.0, momentum 1.0 as the choice's 1); the
  // same again, written otherwise, is found waiting.
  EnqueueDecision fresh = decide(R"({"lr": 1, "momentum": 1.0, "weight_decay": 3})");
  ASSERT_FALSE(fresh.existing.has_value());
  const json stored = {{"lr", 1.0}, {"momentum", 1}, {"weight_decay", 3}};
  plan_->transaction([&] { apply(fresh.edit); });
  EXPECT_EQ(state()["queued"].dump(), json::array({stored}).dump());
  EXPECT_TRUE(state()["queued"][0]["lr"].is_number_float());
  EXPECT_TRUE(state()["queued"][0]["momentum"].is_number_integer());
  EnqueueDecision again = decide(R"({"lr": 1.0, "momentum": 1, "weight_decay": 3})");
  ASSERT_TRUE(again.existing.has_value());
  EXPECT_EQ(again.existing->trial, 0);
  // An int leaf takes integers only (its type), and other values are other params.
  EXPECT_THROW(decide(R"({"lr": 0.1, "momentum": 0.5, "weight_decay": 1.0})"), SpecError);
  EXPECT_FALSE(decide(R"({"lr": 0.1000001, "momentum": 0.5, "weight_decay": 1})").existing);
  // Once run, the enqueued params are trial 3, done.
  run(study, curve);
  const std::vector<TrialRow> made = trials(study);
  ASSERT_EQ(made.size(), 6u);
  EXPECT_EQ(made[2].params.dump(), stored.dump());
  EXPECT_THROW(decide(stored.dump()), std::invalid_argument);  // it has ended
}

}  // namespace
}  // namespace hippo::master
