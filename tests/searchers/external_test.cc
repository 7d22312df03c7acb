// The external searcher: real processes (small sh and Python scripts written into a temporary
// directory) speaking the JSON-lines protocol of searchers/README.md. Every misbehaviour gives an
// error that names the command, the event and the problem, and leaves no process behind.
#include "searchers/external.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tests/searchers/spec_helpers.h"

namespace hippo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::example_spec;

// Creates trial 0 (full length) and trial 1 (forked from 0 at step 468), stops a trial whose
// validation is below 0.5, finishes when trial 1 closes; its state is the log of its events.
constexpr char kScripted[] = R"(import json, sys
log = []
def reply(obj):
    print(json.dumps(obj), flush=True)
for line in sys.stdin:
    e = json.loads(line)
    if e["event"] == "save":
        reply({"state": {"log": log}})
        continue
    if e["event"] == "load":
        log = e["state"]["log"]
        reply({"ok": True})
        continue
    log.append(e)
    ops = []
    if e["event"] == "start":
        ops = [{"op": "create", "trial": 0,
                "params": {"lr.init": 0.1, "lr.milestones[0]": 1, "lr.gamma": 0.1}},
               {"op": "train", "trial": 0, "length": "full"},
               {"op": "create", "trial": 1, "fork": {"donor": 0, "step": 468},
                "params": {"lr.init": 0.05, "lr.milestones[0]": 3, "lr.gamma": 0.3}},
               {"op": "train", "trial": 1, "length": 936, "eval_steps": [468, 936]}]
    elif e["event"] == "validation" and e["value"] < 0.5:
        ops = [{"op": "stop", "trial": e["trial"]}]
    elif e["event"] == "trial_closed" and e["trial"] == 1:
        ops = [{"op": "finish"}]
    reply({"operations": ops})
)";

// A valid answer to "start" for sh scripts: trial 0 at full length.
constexpr char kStartReply[] =
    R"('{"operations": [{"op": "create", "trial": 0, "params": {"lr.init": 0.1, )"
    R"("lr.milestones[0]": 1, "lr.gamma": 0.1}}, {"op": "train", "trial": 0, "length": "full"}]}')";

bool reaped(pid_t pid) {
  return kill(pid, 0) == -1 && errno == ESRCH && waitpid(pid, nullptr, WNOHANG) == -1;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

class External : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hippo-external-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A spec whose searcher runs `interpreter` on a script with this text.
  StudySpec spec(const std::string& interpreter, const std::string& text, double timeout_s = 10) {
    std::string script = (dir_ / "searcher").string();
    std::ofstream(script) << text;
    json j = example_spec();
    j["searcher"] = {{"name", "external"},
                     {"command", {interpreter, script}},
                     {"metric", "accuracy"},
                     {"mode", "max"},
                     {"timeout_s", timeout_s}};
    return parse_spec(j);
  }
  // An sh script that first writes its pid where pid_of_script() reads it.
  StudySpec sh(const std::string& body, double timeout_s = 10) {
    return spec("/bin/sh", "echo $$ > \"$0.pid\"\n" + body, timeout_s);
  }
  pid_t pid_of_script() const {
    pid_t pid = -1;
    std::ifstream(dir_ / "searcher.pid") >> pid;
    return pid;
  }
  std::string label() const {
    return "external searcher \"/bin/sh " + (dir_ / "searcher").string();
  }

  fs::path dir_;
};

TEST_F(External, OperationsArriveAsCppOperations) {
  StudySpec s = spec("/usr/bin/python3", kScripted);
  ExternalSearcher searcher(s);
  EXPECT_EQ(searcher.pid(), -1);  // parse_spec and the constructor start nothing
  Params p0 = {{"lr.init", 0.1}, {"lr.milestones[0]", 1}, {"lr.gamma", 0.1}};
  Params p1 = {{"lr.init", 0.05}, {"lr.milestones[0]", 3}, {"lr.gamma", 0.3}};
  EXPECT_EQ(
      searcher.on_study_start(),
      (std::vector<Operation>{Create{0, p0, std::nullopt}, Train{0, 1872, {468, 936, 1404, 1872}},
                              Create{1, p1, Fork{0, 468}}, Train{1, 936, {468, 936}}}));
  pid_t pid = searcher.pid();
  EXPECT_GT(pid, 0);
  EXPECT_EQ(searcher.on_validation(0, 468, 0.7), std::vector<Operation>{});
  EXPECT_EQ(searcher.on_validation(1, 468, 0.2), std::vector<Operation>{Stop{1}});
  EXPECT_EQ(searcher.on_trial_closed(0), std::vector<Operation>{});
  EXPECT_EQ(searcher.on_trial_closed(1), std::vector<Operation>{Finish{}});
  // Finished: the final state is kept and the process has ended.
  EXPECT_EQ(searcher.pid(), -1);
  EXPECT_TRUE(reaped(pid));
  json saved = searcher.save();
  EXPECT_EQ(saved["finished"], true);
  EXPECT_EQ(saved["trials"], json({p0, p1}));
  const json& log = saved["state"]["log"];
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0], json::parse(R"({"event": "start", "seed": 0, "metric": "accuracy",
    "mode": "max", "max_trials": null, "length": 1872, "eval_steps": [468, 936, 1404, 1872],
    "space": [{"name": "lr.init", "kind": "grid", "values": [0.1, 0.05, 0.02]},
              {"name": "lr.milestones[0]", "kind": "grid", "values": [1, 2, 3]},
              {"name": "lr.gamma", "kind": "grid", "values": [0.1, 0.3]}]})"));
  EXPECT_EQ(log[2], json({{"event", "validation"}, {"trial", 1}, {"step", 468}, {"value", 0.2}}));
  EXPECT_EQ(log[4], json({{"event", "trial_closed"}, {"trial", 1}}));
}

// The start event describes leaves of every kind; a batch size drawn per trial makes lengths
// per trial, so the event has none and "full" gives each trial its own.
TEST_F(External, StartDescribesEveryKindOfLeaf) {
  json j = example_spec();
  j["hyperparameters"]["lr"]["init"] = {{"loguniform", {0.001, 0.1}}};
  j["hyperparameters"]["weight_decay"] = {{"uniform", {0, 0.001}}};
  j["hyperparameters"]["batch_size"] = {{"int", {32, 64}}};
  j["fixed"].erase("batch_size");
  std::string script = (dir_ / "start.py").string();
  std::ofstream(script) << R"(import sys
open(sys.argv[0] + ".start", "w").write(sys.stdin.readline())
print('{"operations": [{"op": "create", "trial": 0, "params": {"lr.init": 0.01,'
      ' "lr.milestones[0]": 1, "lr.gamma": 0.1, "weight_decay": 0.0005, "batch_size": 32}},'
      ' {"op": "train", "trial": 0, "length": "full"}]}', flush=True)
)";
  j["searcher"] = {{"name", "external"},
                   {"command", {"/usr/bin/python3", script}},
                   {"metric", "loss"},
                   {"mode", "min"},
                   {"max_trials", 4}};
  ExternalSearcher searcher(parse_spec(j));
  std::vector<Operation> ops = searcher.on_study_start();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[1], Operation(Train{0, 7500, {1875, 3750, 5625, 7500}}));  // 60000 / 32 a epoch
  std::ifstream in(script + ".start");
  EXPECT_EQ(json::parse(in), json::parse(R"({"event": "start", "seed": 0, "metric": "loss",
    "mode": "min", "max_trials": 4, "length": null, "eval_steps": null,
    "space": [{"name": "batch_size", "kind": "int", "range": [32, 64]},
              {"name": "lr.init", "kind": "loguniform", "range": [0.001, 0.1]},
              {"name": "lr.milestones[0]", "kind": "grid", "values": [1, 2, 3]},
              {"name": "lr.gamma", "kind": "grid", "values": [0.1, 0.3]},
              {"name": "weight_decay", "kind": "uniform", "range": [0.0, 0.001]}]})"));
}

TEST_F(External, SaveAndLoadContinueIdentically) {
  StudySpec s = spec("/usr/bin/python3", kScripted);
  ExternalSearcher a(s);
  a.on_study_start();
  a.on_validation(0, 468, 0.9);
  json state = a.save();
  EXPECT_EQ(state["finished"], false);
  ExternalSearcher b(s);
  b.load(json::parse(state.dump()));  // through text, as the search plan keeps it
  EXPECT_GT(b.pid(), 0);
  EXPECT_NE(b.pid(), a.pid());
  EXPECT_EQ(b.save(), a.save());
  for (ExternalSearcher* x : {&a, &b}) {
    EXPECT_EQ(x->on_validation(0, 936, 0.3), std::vector<Operation>{Stop{0}});
    EXPECT_EQ(x->on_trial_closed(1), std::vector<Operation>{Finish{}});
  }
  EXPECT_EQ(b.save(), a.save());
  // A finished searcher loads without a process.
  ExternalSearcher c(s);
  c.load(a.save());
  EXPECT_EQ(c.pid(), -1);
  EXPECT_EQ(c.save(), a.save());

  EXPECT_THROW(c.load({{"state", 1}, {"trials", {{{"lr.init", 5}}}}, {"finished", false}}),
               SpecError);
  EXPECT_THROW(c.load({{"state", 1}, {"trials", json::array()}}), SpecError);
}

// Keeps every line it reads, byte for byte, in "<script>.log"; creates trial 0 at full length.
constexpr char kLogger[] = R"(import json, sys
log = open(sys.argv[0] + ".log", "w")
for line in sys.stdin:
    log.write(line)
    log.flush()
    e = json.loads(line)
    if e["event"] == "save":
        print('{"state": null}', flush=True)
    elif e["event"] == "start":
        print('{"operations": [{"op": "create", "trial": 0, "params": {"lr.init": 0.1,'
              ' "lr.milestones[0]": 1, "lr.gamma": 0.1}}, {"op": "train", "trial": 0,'
              ' "length": "full"}]}', flush=True)
    else:
        print('{"operations": []}', flush=True)
)";

// The lines a logger searcher read for the study `j` when started and fed these evaluations.
std::vector<std::string> lines_read(const fs::path& dir, json j,
                                    const std::vector<Evaluation>& evaluations) {
  std::string script = (dir / "logger.py").string();
  std::ofstream(script) << kLogger;
  j["searcher"]["name"] = "external";
  j["searcher"]["command"] = {"/usr/bin/python3", script};
  ExternalSearcher searcher(parse_spec(j));
  searcher.on_study_start();
  int64_t step = 0;
  for (const Evaluation& e : evaluations) searcher.on_evaluation(0, step += 468, e);
  std::vector<std::string> lines;
  std::ifstream in(script + ".log");
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

constexpr char kSpace[] = R"("space":[{"kind":"grid","name":"lr.init","values":[0.1,0.05,0.02]},)"
                          R"({"kind":"grid","name":"lr.milestones[0]","values":[1,2,3]},)"
                          R"({"kind":"grid","name":"lr.gamma","values":[0.1,0.3]}])";

// A spec of one metric and mode sends the bytes it sent before objectives existed: searchers
// written then read it unchanged.
TEST_F(External, OneMetricAndModeSendTheEventsOfBefore) {
  json j = example_spec();
  j["searcher"] = {{"metric", "accuracy"}, {"mode", "max"}};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(lines_read(dir_, j, {{{0.7}, 0, 0.7}, {{nan}, 0, nan}}),
            (std::vector<std::string>{
                R"({"eval_steps":[468,936,1404,1872],"event":"start","length":1872,)"
                R"("max_trials":null,"metric":"accuracy","mode":"max","seed":0,)" +
                    std::string(kSpace) + "}",
                R"({"event":"validation","step":468,"trial":0,"value":0.7})",
                R"({"event":"validation","step":936,"trial":0,"value":null})"}));
}

// Objectives or constraints: start names them all (metric and mode stay, the first objective's),
// and each validation carries every objective's value and the violation, non-finite ones as the
// strings of the search plan; value stays what a searcher of one objective reads.
TEST_F(External, ObjectivesAndConstraintsReachTheProcess) {
  EXPECT_TRUE(external_searcher_kind().several_objectives);
  const double inf = std::numeric_limits<double>::infinity();
  json j = example_spec();
  j["searcher"] = {
      {"objectives",
       {{{"metric", "accuracy"}, {"mode", "max"}}, {{"metric", "loss"}, {"mode", "min"}}}},
      {"constraints",
       {{{"metric", "loss"}, {"max", 0.6}}, {{"metric", "accuracy"}, {"min", 0.5}, {"max", 1}}}},
      {"max_trials", 3}};
  EXPECT_EQ(
      lines_read(dir_, j,
                 {{{0.8, 0.4}, 0, 0.8}, {{0.7, 0.65}, 0.05, -inf}, {{-inf, inf}, inf, -inf}}),
      (std::vector<std::string>{
          R"({"constraints":[{"max":0.6,"metric":"loss"},{"max":1.0,"metric":"accuracy","min":0.5}],)"
          R"("eval_steps":[468,936,1404,1872],"event":"start","length":1872,"max_trials":3,)"
          R"("metric":"accuracy","mode":"max",)"
          R"("objectives":[{"metric":"accuracy","mode":"max"},{"metric":"loss","mode":"min"}],)"
          R"("seed":0,)" +
              std::string(kSpace) + "}",
          R"({"event":"validation","step":468,"trial":0,"value":0.8,"values":[0.8,0.4],"violation":0.0})",
          R"({"event":"validation","step":936,"trial":0,"value":null,"values":[0.7,0.65],"violation":0.05})",
          R"({"event":"validation","step":1404,"trial":0,"value":null,"values":["-inf","inf"],"violation":"inf"})"}));
  // Constraints on one objective: every value too (one), and the violation.
  j["searcher"] = {{"metric", "loss"},
                   {"mode", "min"},
                   {"constraints", {{{"metric", "accuracy"}, {"min", 0.5}}}}};
  std::vector<std::string> lines = lines_read(dir_, j, {{{0.3}, 0, 0.3}});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(json::parse(lines[0])["objectives"],
            json::parse(R"([{"metric": "loss", "mode": "min"}])"));
  EXPECT_EQ(
      lines[1],
      R"({"event":"validation","step":468,"trial":0,"value":0.3,"values":[0.3],"violation":0.0})");
}

TEST_F(External, OptionsAreValidatedAndNothingStartsOnParse) {
  json j = example_spec();
  std::string marker = (dir_ / "started").string();
  j["searcher"] = {{"name", "external"},
                   {"command", {"/bin/sh", "-c", "touch " + marker}},
                   {"metric", "accuracy"},
                   {"mode", "max"}};
  parse_spec(j);
  EXPECT_FALSE(fs::exists(marker));
  auto error = [&](const json& searcher) {
    json k = j;
    k["searcher"].merge_patch(searcher);
    return error_of([&] { parse_spec(k); });
  };
  EXPECT_EQ(error({{"command", nullptr}}), "searcher.command: missing");
  EXPECT_EQ(error({{"command", json::array()}}),
            "searcher.command: expected at least 1 element, got []");
  EXPECT_EQ(error({{"command", {"/usr/bin/python3", 1}}}),
            "searcher.command[1]: expected a string, got 1");
  EXPECT_EQ(error({{"command", {""}}}), "searcher.command[0]: expected a non-empty string");
  EXPECT_EQ(error({{"timeout_s", 0}}), "searcher.timeout_s: expected a number in (0, 3600], got 0");
  EXPECT_EQ(error({{"timeout_s", 3601}}),
            "searcher.timeout_s: expected a number in (0, 3600], got 3601");
  EXPECT_EQ(error({{"timeout_s", "1"}}), "searcher.timeout_s: expected a number, got \"1\"");
  EXPECT_EQ(error({{"eta", 3}}), "searcher.eta: unknown field");
}

// Each misbehaviour: the error names the command, the event and the problem; the process is gone.
TEST_F(External, MisbehavioursEndTheProcessWithAClearError) {
  struct Case {
    std::string body;     // after reading the start event (and answering it, when `later`)
    bool later;           // fails on the validation that follows a good start
    std::string problem;  // what the error says after the command and the event
  };
  const std::string ok = std::string("echo ") + kStartReply + "\n";
  const std::vector<Case> cases = {
      {"exit 3", false, "event \"start\": exited with status 3"},
      {"read -r l; " + ok + "read -r l; kill -KILL $$", true,
       "event \"validation\": was killed by signal 9 (Killed)"},
      {"read -r l; echo hello", false, "event \"start\": $: not valid JSON"},
      {"read -r l; echo '{\"operations\": [{\"op\": \"jump\"}]}'", false,
       "event \"start\": operations[0].op: unknown operation \"jump\" (expected create, train, "
       "stop or finish)"},
      {"read -r l; echo '{\"operations\": [{\"op\": \"create\", \"trial\": 0, \"params\": "
       "{\"lr.init\": 5, \"lr.milestones[0]\": 1, \"lr.gamma\": 0.1}}]}'",
       false, "event \"start\": operations[0].params: lr.init: value 5 is not in its range"},
      {"read -r l; echo '{\"operations\": [{\"op\": \"create\", \"trial\": 1, \"params\": {}}]}'",
       false,
       "event \"start\": operations[0].trial: expected 0 (trial ids are 0, 1, 2, ... in creation "
       "order)"},
      {"read -r l; echo '{\"operations\": [{\"op\": \"stop\", \"trial\": 0}]}'", false,
       "event \"start\": operations[0].trial: no trial 0 was created"},
      {"read -r l; " + ok +
           "read -r l; echo '{\"operations\": [{\"op\": \"train\", \"trial\": 0, " +
           "\"length\": 100, \"eval_steps\": [50, 50]}]}'",
       true, "event \"validation\": operations[0].eval_steps[1]: expected increasing steps"},
      {"read -r l; " + ok +
           "read -r l; echo '{\"operations\": [{\"op\": \"train\", \"trial\": 0, " +
           "\"length\": 100, \"eval_steps\": [101]}]}'",
       true, "operations[0].eval_steps[0]: expected an integer in [1, 100], got 101"},
      {"read -r l; " + ok +
           "read -r l; echo '{\"operations\": [{\"op\": \"train\", \"trial\": 0, " +
           "\"length\": 0, \"eval_steps\": []}]}'",
       true, "operations[0].length: expected an integer in [1, "},
      {"read -r l; " + ok + "read -r l; echo '{\"operations\": [{\"op\": \"stop\"}]}'", true,
       "event \"validation\": operations[0].trial: missing"},
      {"read -r l; echo '{\"ops\": []}'", false, "event \"start\": ops: unknown field"},
      {"read -r l; r=" + std::string(kStartReply) +
           "; printf '%s\\n%s\\n' \"$r\" \"$r\"; read -r l",
       true, "event \"validation\": wrote a line nobody asked for: \"{\\\"operations\\\""},
      {"read -r l; head -c 1100000 /dev/zero | tr '\\0' x; read -r l", false,
       "event \"start\": wrote a line longer than 1 MiB"},
      {"read -r l; exit 0", false, "event \"start\": exited with status 0"},
      {"cat > /dev/null", false, "event \"start\": no reply within timeout_s = 0.3 s"},
      {"read -r l; " + ok + "sleep 30", true, "event \"validation\": no reply within timeout_s"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    fs::remove(dir_ / "searcher.pid");
    ExternalSearcher searcher(sh(c.body, 0.3));
    auto started = std::chrono::steady_clock::now();
    std::string error = error_of([&] {
      searcher.on_study_start();
      if (c.later) searcher.on_validation(0, 468, 0.5);
    });
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
    EXPECT_EQ(error.rfind(label() + "\", ", 0), 0u) << error;
    EXPECT_NE(error.find(c.problem), std::string::npos) << error;
    EXPECT_EQ(searcher.pid(), -1);
    EXPECT_TRUE(reaped(pid_of_script()));
    EXPECT_EQ(error_of([&] { searcher.save(); }), error);  // every later call fails the same
  }
}

TEST_F(External, CommandThatCannotStart) {
  json j = example_spec();
  j["searcher"] = {{"name", "external"},
                   {"command", {(dir_ / "missing").string()}},
                   {"metric", "accuracy"},
                   {"mode", "max"}};
  ExternalSearcher searcher(parse_spec(j));
  EXPECT_EQ(error_of([&] { searcher.on_study_start(); }),
            "external searcher \"" + (dir_ / "missing").string() +
                "\", event \"start\": cannot start it: No such file or directory");
}

TEST_F(External, DestroyingKillsAProcessThatIgnoresItsInput) {
  pid_t pid = -1;
  auto started = std::chrono::steady_clock::now();
  {
    ExternalSearcher searcher(sh(std::string("read -r l; echo ") + kStartReply + "\nsleep 30"));
    searcher.on_study_start();
    pid = searcher.pid();
    EXPECT_EQ(pid, pid_of_script());
  }
  EXPECT_TRUE(reaped(pid));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(1));
}

}  // namespace
}  // namespace hippo
