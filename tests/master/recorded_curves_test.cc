// hippo simulate --curves-from (master/recorded_curves.h): a table of recorded learning curves
// read with every forgery refused by name, the mapping of a trial to the nearest recorded
// configuration in normalized coordinates (log leaves on their log), each trial served its
// configuration's curves at its own measured times, a replay that is the same for the same seed,
// and Python's reader (bench/curves/replay.py, Optuna's side) mapping as hippo does.
#include "master/recorded_curves.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "master/simulator.h"

namespace hippo::master {
namespace {

std::string temp_file(const std::string& name, const std::string& text, bool gzip = false) {
  const std::string path = testing::TempDir() + "curves-" + name;
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  } else {
    std::ofstream(path) << text;
  }
  return path;
}

struct Row {
  double lr;
  int width;
  double step_s, eval_s;
  std::vector<double> accuracy;
};

// A table over lr (log, 0.001 to 1) and width (linear, 16 to 512), 10 steps an epoch.
std::string table_text(const std::vector<Row>& rows) {
  std::string t =
      "# hippo recorded curves v1\n# a test table\n"
      "space\tlr\tlog\t0.001\t1\nspace\twidth\tlinear\t16\t512\n"
      "config\tlr\twidth\tsteps_per_epoch\tstep_s\teval_s\tepoch\taccuracy\tloss\n";
  for (size_t c = 0; c < rows.size(); ++c)
    for (size_t e = 0; e < rows[c].accuracy.size(); ++e) {
      char line[256];
      std::snprintf(line, sizeof line, "%zu\t%.17g\t%d\t10\t%.17g\t%.17g\t%zu\t%.17g\t%.17g\n", c,
                    rows[c].lr, rows[c].width, rows[c].step_s, rows[c].eval_s, e + 1,
                    rows[c].accuracy[e], 1 - rows[c].accuracy[e]);
      t += line;
    }
  return t;
}

const std::vector<Row> kRows = {{0.01, 16, 0.01, 0.5, {0.5, 0.6, 0.7}},
                                {0.1, 16, 0.02, 0.25, {0.3, 0.8, 0.9}},
                                {0.1, 512, 0.03, 0.125, {0.2, 0.4, 0.45}},
                                {0.01, 16, 0.04, 0.5, {0.1, 0.1, 0.1}}};  // config 0's twin

TEST(RecordedCurves, ATableIsReadPlainOrGzip) {
  for (bool gzip : {false, true}) {
    const CurveTable t = CurveTable::read(temp_file("good", table_text(kRows), gzip));
    ASSERT_EQ(t.leaves().size(), 2u);
    EXPECT_TRUE(t.leaves()[0].log);
    EXPECT_FALSE(t.leaves()[1].log);
    ASSERT_EQ(t.configs().size(), 4u);
    EXPECT_EQ(t.epochs(), 3);
    EXPECT_EQ(t.configs()[2].values, (std::vector<double>{0.1, 512}));
    EXPECT_EQ(t.configs()[1].accuracy, (std::vector<double>{0.3, 0.8, 0.9}));
    EXPECT_EQ(t.configs()[1].step_s, 0.02);
    EXPECT_EQ(t.configs()[1].steps_per_epoch, 10);
  }
}

TEST(RecordedCurves, AForgedTableIsRefusedNamingItsLine) {
  const std::string good = table_text(kRows);
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  const struct {
    std::string name, text, error;
  } cases[] = {
      {"magic", replace("curves v1", "curves v2"), ":1: not a table of recorded curves"},
      {"no-space", replace("space\tlr\tlog\t0.001\t1\nspace\twidth\tlinear\t16\t512\n", ""),
       ":3: expected the space's lines"},
      {"scale", replace("lr\tlog", "lr\tlogit"), ":3: a leaf's scale is log or linear, not logit"},
      {"log-at-0", replace("log\t0.001", "log\t0"), ":3: leaf lr: expected finite LO < HI"},
      {"header", replace("\tstep_s\t", "\tstep\t"), ":5: expected the header: config lr width"},
      {"renumbered", replace("\n1\t0.10", "\n2\t0.10"),
       ":9: config 2 epoch 1: configurations are numbered 0, 1, ... in order"},
      {"epoch-skipped", replace("\t2\t0.59999999999999998", "\t3\t0.59999999999999998"),
       ":7: config 0: epoch 3 after epoch 1"},
      {"leaf-moves", replace("0\t0.01\t16\t10\t0.01\t0.5\t2", "0\t0.02\t16\t10\t0.01\t0.5\t2"),
       ":7: config 0: lr differs from its epoch 1"},
      {"time-moves", replace("0\t0.01\t16\t10\t0.01\t0.5\t2", "0\t0.01\t16\t10\t0.02\t0.5\t2"),
       ":7: config 0: its times differ from its epoch 1"},
      {"accuracy-above-1", replace("\t0.59999999999999998\t", "\t1.5\t"),
       ":7: config 0 epoch 2: expected accuracy in [0, 1] and loss >= 0"},
      {"infinite", replace("\t0.59999999999999998\t", "\tinf\t"),
       ":7: accuracy: expected a finite number or nan, got \"inf\""},
      {"text", replace("\t0.01\t16\t10\t0.01\t", "\t0.01\tsixteen\t10\t0.01\t"),
       ":6: width: expected a finite number, got \"sixteen\""},
      {"zero-step-time", replace("0\t0.01\t16\t10\t0.01\t0.5\t1", "0\t0.01\t16\t10\t0\t0.5\t1"),
       ":6: expected step_s > 0 and eval_s >= 0"},
      {"fields", replace("\t1\t0.5\t0.5\n", "\t1\t0.5\n"), ":6: 9 fields expected, got 8"},
      {"empty", "", ":1: not a table of recorded curves"},
      {"no-config", good.substr(0, good.find("0\t0.01")), ":6: no configuration"},
      {"short-config", table_text({kRows[0], {0.1, 16, 0.02, 0.25, {0.3, 0.8}}, kRows[2]}),
       ":11: config 1 has 2 epochs, config 0 has 3"},
      {"short-last", table_text({kRows[0], {0.1, 16, 0.02, 0.25, {0.3, 0.8}}}),
       ":11: the last configuration has 2 epochs, config 0 has 3"},
  };
  for (const auto& c : cases) {
    const std::string path = temp_file(c.name, c.text);
    try {
      CurveTable::read(path);
      ADD_FAILURE() << c.name << ": read";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path + c.error), std::string::npos)
          << c.name << ": " << e.what();
    }
  }
  // After a diverged (nan) epoch, a number is a forgery; nan to the end is a diverged trial.
  std::vector<Row> diverged = kRows;
  diverged[1].accuracy = {0.3, NAN, NAN};
  EXPECT_TRUE(std::isnan(
      CurveTable::read(temp_file("nan", table_text(diverged))).configs()[1].accuracy[2]));
  diverged[1].accuracy = {0.3, NAN, 0.9};
  EXPECT_THROW(CurveTable::read(temp_file("nan-then-number", table_text(diverged))),
               std::runtime_error);
  EXPECT_THROW(CurveTable::read(testing::TempDir() + "curves-no-such-file"), std::runtime_error);
}

TEST(RecordedCurves, ATrialIsMappedToTheNearestConfigurationInNormalizedCoordinates) {
  const CurveTable t = CurveTable::read(temp_file("map", table_text(kRows)));
  // lr 0.05: nearer 0.1 on the log scale (ln 2 against ln 5), nearer 0.01 on a linear one.
  EXPECT_EQ(t.nearest({0.05, 16}), 1u);
  EXPECT_EQ(t.nearest({0.03, 16}), 0u);
  // width on its linear scale: 300 is nearer 512 than 16.
  EXPECT_EQ(t.nearest({0.1, 300}), 2u);
  EXPECT_EQ(t.nearest({0.1, 200}), 1u);
  // Ties go to the lower number: config 0's twin (3), and width 264, halfway.
  EXPECT_EQ(t.nearest({0.01, 16}), 0u);
  EXPECT_EQ(t.nearest({0.1, 264}), 1u);
  // Outside the space: still the nearest.
  EXPECT_EQ(t.nearest({5.0, 900}), 2u);
}

// The replay spec's shape (bench/curves/replay.json), over the test table's leaves.
SimulatedStudy replay_study(const std::string& searcher, uint64_t seed) {
  nlohmann::json s = {{"metric", "accuracy"}, {"mode", "max"}, {"max_trials", 30}};
  s["name"] = searcher;
  if (searcher == "asha")
    s.update({{"eta", 3},
              {"min_length", {{"steps", 1}}},
              {"max_length", {{"steps", 3}}},
              {"sampler", {{"name", "tpe"}}}});
  nlohmann::json spec = {
      {"name", "replay"},
      {"model", {{"type", "external"}, {"command", {"replayed-not-run"}}}},
      {"data", {{"name", "curves"}, {"train_samples", 100}, {"eval_samples", 10}}},
      {"seed", seed},
      {"hyperparameters",
       {{"lr", {{"loguniform", {0.001, 1.0}}}}, {"width", {{"int", {16, 512}}}}}},
      {"searcher", s},
      {"length", {{"steps", 3}}},
      {"eval", {{"every", {{"steps", 1}}}}}};
  return {parse_spec(spec), spec, 0};
}

SimulationOptions replay_options(int64_t workers) {
  SimulationOptions o;
  o.workers = workers;
  o.times.defaults = {.step_s = 0, .eval_s = 0, .job_s = 0, .state_bytes = 0};
  return o;
}

TEST(RecordedCurves, EachTrialHasItsConfigurationsCurvesAndTimes) {
  RecordedCurves curves(temp_file("serve", table_text(kRows)));
  const SimulatedStudy study = replay_study("random", 1);
  const Hyperparams near_1 = study.spec.hyperparams({{"lr", 0.05}, {"width", 20}});
  EXPECT_EQ(curves.metrics(study.spec, "", near_1, 2),
            (nlohmann::json{{"accuracy", 0.8}, {"loss", 1 - 0.8}}));
  const auto times = curves.times(study.spec, "", near_1);
  ASSERT_TRUE(times);
  EXPECT_DOUBLE_EQ(times->step_s, 0.02 * 10);  // a step is an epoch: step_s x steps_per_epoch
  EXPECT_EQ(times->eval_s, 0.25);
  EXPECT_FALSE(curves.times(study.spec, "", {}));  // a job of no trial (a root's initial state)
  EXPECT_THROW(curves.metrics(study.spec, "", near_1, 4), std::runtime_error);  // 3 epochs
  EXPECT_THROW(curves.metrics(study.spec, "", near_1, 0), std::runtime_error);
  EXPECT_THROW(curves.metrics(study.spec, "", {{"lr", near_1.at("lr")}}, 1), std::runtime_error);

  // One configuration: every trial is it, and one worker's makespan is its trials' times.
  RecordedCurves one(temp_file("one", table_text({kRows[2]})));
  SimulatedRun run = simulate({replay_study("random", 1)}, replay_options(1), one);
  ASSERT_EQ(run.studies.at(0).status, "done");
  EXPECT_EQ(run.studies[0].trials, 30);
  EXPECT_NEAR(run.makespan_s, 30 * 3 * (0.03 * 10 + 0.125), 1e-9);
  EXPECT_EQ(run.studies[0].best_value, 0.45);
}

TEST(RecordedCurves, AReplayIsTheSameForTheSameSeed) {
  std::vector<Row> rows;
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int c = 0; c < 40; ++c) {
    const double q = u(random);
    rows.push_back({std::exp(std::log(0.001) * u(random)),
                    16 + static_cast<int>(496 * u(random)),
                    0.001 + 0.01 * u(random),
                    0.1 * u(random),
                    {0.3 * q, 0.6 * q, 0.9 * q}});
  }
  RecordedCurves curves(temp_file("determinism", table_text(rows)));
  auto run = [&](uint64_t seed) {
    SimulationOptions o = replay_options(4);
    o.plan_path = testing::TempDir() + "curves-plan-" + std::to_string(seed) + "-" +
                  std::to_string(std::random_device{}());
    SimulatedRun r = simulate({replay_study("asha", seed)}, o, curves);
    std::filesystem::remove(o.plan_path);
    return r;
  };
  const SimulatedRun a = run(3), b = run(3), c = run(4);
  ASSERT_EQ(a.studies.at(0).status, "done");
  EXPECT_EQ(a.makespan_s, b.makespan_s);
  EXPECT_EQ(a.jobs, b.jobs);
  EXPECT_EQ(a.steps_executed, b.steps_executed);
  EXPECT_EQ(a.studies[0].best_value, b.studies[0].best_value);
  EXPECT_NE(a.makespan_s, c.makespan_s);  // another seed draws other trials
}

// bench/curves/replay.py (Optuna's and top-K's side) maps as this reader does.
TEST(RecordedCurves, PythonsMappingIsHippos) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  std::vector<Row> rows;
  std::mt19937_64 random(11);
  std::uniform_real_distribution<double> u(0, 1);
  for (int c = 0; c < 50; ++c)
    rows.push_back({std::exp(std::log(0.001) * u(random)),
                    16 + static_cast<int>(496 * u(random)),
                    0.01,
                    0.1,
                    {0.5}});
  const std::string table = temp_file("python.tsv", table_text(rows));
  const CurveTable t = CurveTable::read(table);
  std::string points, expected;
  for (int i = 0; i < 200; ++i) {
    const double lr = std::exp(std::log(0.001) * u(random)), width = 16 + 496 * u(random);
    char line[128];
    std::snprintf(line, sizeof line, "[%.17g, %.17g]\n", lr, width);
    points += line;
    expected += std::to_string(t.nearest({lr, width})) + "\n";
  }
  const std::string in = temp_file("python-points", points);
  const std::string out = testing::TempDir() + "curves-python-out";
  const std::string command = "/usr/bin/python3 " HIPPO_SOURCE_DIR "/bench/curves/replay.py map " +
                              table + " < " + in + " > " + out;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream f(out);
  const std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace hippo::master
