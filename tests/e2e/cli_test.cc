// The `hippo` command line as a user meets it, against the real binaries: preview's trial numbers
// against a real study's, `resume` without a plan, the output formats of every command (each prints
// the format asked for or refuses it, exit 2, changing nothing), `submit --wait`'s summary,
// --version, --help and `hippo worker`; results as an Optuna user expects them: ASHA's stopped
// trials, parameter columns in the spec's order, `summary` equal to what `run` printed, `wait` on a
// cluster's study, steps shared between studies, bf16 refused where it would fail, and messages
// that suggest what works.
#include <map>
#include <sstream>

#include "protocol/version.h"
#include "protocol/wire.h"
#include "storage/plan.h"
#include "storage/schema.h"
#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

const std::string kWorker = (fs::path(kHippo).parent_path() / "hippo-worker").string();

class Cli : public E2ETest {
 protected:
  // A plan with the CI example run to its end (4 trials), as `studies` and the others read it.
  void run_ci_study(const std::string& db) {
    ASSERT_EQ(
        sh(hippo(db) + "run " + kExamples + "/fmnist-mlp-ci.json --workers 2 >/dev/null").status,
        0);
  }
};

// A CSV text as {trial number -> {column -> value}} (the values hold no commas here), keeping
// only `columns`.
std::map<std::string, std::map<std::string, std::string>> csv_by_trial(
    const std::string& text, const std::vector<std::string>& columns) {
  std::istringstream in(text);
  std::vector<std::string> header;
  std::map<std::string, std::map<std::string, std::string>> out;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string f; std::getline(cells, f, ',');) fields.push_back(f);
    if (header.empty()) {
      header = fields;
      continue;
    }
    for (size_t i = 0; i < fields.size() && i < header.size(); ++i)
      if (std::find(columns.begin(), columns.end(), header[i]) != columns.end())
        out[fields[0]][header[i]] = fields[i];
  }
  return out;
}

// preview numbers trials as the study will: its trial 1 is `hippo trials`' trial 1.
TEST_F(Cli, PreviewNumbersTrialsAsTheStudyWill) {
  const std::string ci = kExamples + "/fmnist-mlp-ci.json";
  Result preview = sh(hippo("plan.db") + "--format csv preview " + ci);
  ASSERT_EQ(preview.status, 0);
  run_ci_study("plan.db");
  Result trials = sh(hippo("plan.db") + "--format csv trials fmnist-mlp-ci");
  ASSERT_EQ(trials.status, 0);
  const std::vector<std::string> columns = {"length", "lr.init", "lr.every"};
  auto foreseen = csv_by_trial(preview.out, columns);
  EXPECT_EQ(foreseen.size(), 4u) << preview.out;
  EXPECT_EQ(foreseen.begin()->first, "1") << preview.out;
  EXPECT_EQ(foreseen, csv_by_trial(trials.out, columns)) << preview.out << trials.out;
}

// Without `parallel`, a searcher keeps as many trials in flight as there are workers, resolved
// once when the study is submitted: preview shows it for its --workers, `run` stores it in the
// study's spec (a restart replays it), the same file resumes as that study, and an explicit
// `parallel` below the workers is said once.
TEST_F(Cli, ParallelIsResolvedFromTheWorkersAtSubmit) {
  json asha = json::parse(read_file(kExamples + "/fmnist-mlp-asha.json"));
  asha["searcher"].erase("parallel");
  asha["searcher"]["max_trials"] = 3;
  asha["searcher"]["max_length"] = {{"epochs", 3}};
  asha["length"] = {{"epochs", 3}};
  asha["model"]["hidden"] = {8};
  asha["data"] = {{"name", "fashion-mnist"}, {"train_samples", 512}, {"eval_samples", 128}};
  const std::string file = path("asha.json");
  std::ofstream(file) << asha.dump();
  for (int workers : {2, 3}) {
    Result preview =
        sh(kHippo + " --format json preview " + file + " --workers " + std::to_string(workers));
    ASSERT_EQ(preview.status, 0) << preview.out;
    EXPECT_EQ(json::parse(preview.out)["parallel"], workers) << preview.out;
    EXPECT_EQ(json::parse(preview.out)["trials"], workers) << preview.out;
  }
  Result table = sh(kHippo + " preview " + file + " --workers 3");
  EXPECT_NE(table.out.find("searcher asha (parallel 3)"), std::string::npos) << table.out;
  ASSERT_EQ(sh(hippo("p.db") + "run " + file + " --workers 2 >/dev/null 2>&1").status, 0);
  const std::vector<StudyRow> studies = SearchPlan::open_read_only(path("p.db")).studies();
  ASSERT_EQ(studies.size(), 1u);
  EXPECT_EQ(studies[0].spec["searcher"]["parallel"], 2) << studies[0].spec;
  Result again = sh(hippo("p.db") + "run " + file + " --resume --workers 1 2>&1");
  EXPECT_EQ(again.status, 2) << again.out;
  EXPECT_NE(again.out.find("there is nothing to resume"), std::string::npos) << again.out;
  asha["searcher"]["parallel"] = 1;
  std::ofstream(file) << asha.dump();
  Result idle = sh(kHippo + " simulate " + file + " --workers 4 --step-time 0.01 2>&1");
  ASSERT_EQ(idle.status, 0) << idle.out;
  const std::string says = "searcher.parallel = 1 keeps at most 1 trials in flight, so 3 of the 4";
  EXPECT_NE(idle.out.find(says), std::string::npos) << idle.out;
}

// `resume` without --master resumes from the plan at --db: where there is none, it says so and
// makes none.
TEST_F(Cli, ResumeWithoutAPlanRefusesAndMakesNone) {
  Result r = sh(hippo("none.db") + "resume fmnist-mlp-ci 2>&1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("no search plan at " + path("none.db")), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("none.db")));
  EXPECT_FALSE(fs::exists(path("none.db.checkpoints")));
}

// --events FILE that cannot be opened is bad input, refused before a plan or a worker is made.
TEST_F(Cli, EventsToAFileThatCannotBeOpenedIsRefused) {
  const std::string ci = kExamples + "/fmnist-mlp-ci.json";
  Result r =
      sh(hippo("e.db") + "run " + ci + " --workers 1 --events " + path("no/such/dir/e") + " 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--events " + path("no/such/dir/e") + ": cannot open it"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(path("e.db")));
}

// Every subcommand, with each format: the output is that format, or the command refuses it
// (exit 2, naming the formats it prints) before it does anything.
TEST_F(Cli, EveryCommandPrintsTheFormatAskedOrRefusesIt) {
  run_ci_study("plan.db");
  const std::string db = hippo("plan.db"), ci = kExamples + "/fmnist-mlp-ci.json";
  const std::string none = hippo("none.db");  // a plan that does not exist, and must not
  const std::string master = kHippo + " --master ipc://" + path("no-master.sock") + " ";
  const std::string table = "table", json_ = "json", csv = "csv";
  // What a command does here with a format it prints: succeeds; fails for another reason (no
  // plan there); or is not run (it would change the plan the others read, make files, or wait for
  // a master that is not there), only its refusals are.
  enum Then { kSucceeds, kFails, kNotRun };
  struct Case {
    std::string command;              // with {F} where --format F goes
    std::vector<std::string> prints;  // the formats it prints; the others it refuses
    Then then;
  };
  const std::vector<Case> cases = {
      {db + "{F} studies", {table, json_, csv}, kSucceeds},
      {db + "{F} trials fmnist-mlp-ci", {table, json_, csv}, kSucceeds},
      {db + "{F} best fmnist-mlp-ci", {table, json_, csv}, kSucceeds},
      {db + "{F} tree fmnist-mlp-ci", {table, json_, csv}, kSucceeds},
      {db + "{F} export fmnist-mlp-ci", {csv, json_, table}, kSucceeds},
      {db + "{F} export --wide fmnist-mlp-ci", {csv, json_, table}, kSucceeds},
      {db + "{F} summary fmnist-mlp-ci", {table, json_}, kSucceeds},
      {db + "{F} wait fmnist-mlp-ci", {table, json_}, kSucceeds},
      {db + "{F} checkpoints", {table, json_, csv}, kSucceeds},
      {db + "{F} checkpoints --free-to 0", {table, json_}, kNotRun},
      {db + "{F} delete fmnist-mlp-ci", {table, json_}, kNotRun},
      {none + "{F} preview " + ci, {table, json_, csv}, kSucceeds},
      {none + "{F} simulate " + ci + " --workers 2 --step-time 0.01",
       {table, json_, csv},
       kSucceeds},
      {none + "{F} pipeline-plan --stages 2 --microbatches 2 --schedule 1f1b",
       {table, json_, csv},
       kSucceeds},
      {none + "{F} run " + ci + " --workers 1", {table, json_}, kNotRun},
      {none + "{F} resume fmnist-mlp-ci", {table, json_}, kFails},
      {none + "{F} keygen " + path("key"), {table, json_}, kNotRun},
      {none + "{F} dashboard --bind 127.0.0.1:0", {table}, kFails},
      {none + "{F} report fmnist-mlp-ci -o " + path("r.html"), {}, kNotRun},
      {none + "{F} master --bind ipc://" + path("m.sock"), {}, kNotRun},
      {master + "{F} submit " + ci, {table, json_}, kNotRun},
      {master + "{F} cancel fmnist-mlp-ci", {table, json_}, kNotRun},
      {master + "{F} enqueue fmnist-mlp-ci '{\"lr\": 0.1}'", {table, json_}, kNotRun},
      {master + "{F} drain w", {table, json_}, kNotRun},
      {master + "{F} workers", {table, json_, csv}, kNotRun},
  };
  const std::string trials_before = sh(db + "--format json trials fmnist-mlp-ci").out;
  const std::string checkpoints_before = sh(db + "--format json checkpoints").out;
  for (const Case& c : cases) {
    std::map<std::string, std::string> printed_as;  // format -> what the command printed
    for (const std::string& format : {table, json_, csv}) {
      // A command that ignored --format and ran (a master, a dashboard) would never end.
      std::string command = "timeout 10 " + c.command;
      command.replace(command.find("{F}"), 3, "--format " + format);
      const bool printed = std::find(c.prints.begin(), c.prints.end(), format) != c.prints.end();
      if (!printed) {
        Result r = sh(command + " 2>&1");
        EXPECT_EQ(r.status, 2) << command << ": " << r.out;
        EXPECT_NE(r.out.find("error: --format " + format + ": "), std::string::npos)
            << command << ": " << r.out;
        EXPECT_NE(r.out.find(c.prints.empty() ? "prints nothing on stdout"
                                              : " prints " + c.prints.front() + " (default)"),
                  std::string::npos)
            << command << ": " << r.out;
        continue;
      }
      if (c.then == kNotRun) continue;
      Result r = sh(command + " 2>" + path("stderr"));
      if (c.then == kFails) {  // for another reason than its format
        EXPECT_EQ(r.status, 2) << command;
        EXPECT_EQ(read_file(path("stderr")).find("--format"), std::string::npos)
            << command << ": " << read_file(path("stderr"));
        continue;
      }
      ASSERT_EQ(r.status, 0) << command << ": " << read_file(path("stderr"));
      printed_as[format] = r.out;
      const bool is_json = !json::parse(r.out, nullptr, false).is_discarded();
      EXPECT_EQ(is_json, format == json_) << command << ": " << r.out;
      const std::string first = r.out.substr(0, r.out.find('\n'));
      if (format == csv) {
        EXPECT_NE(first.find(','), std::string::npos) << command << ": " << r.out;
        EXPECT_EQ(first.find("  "), std::string::npos) << command << ": " << r.out;
      }
    }
    if (printed_as.count(table) && printed_as.count(csv)) {
      EXPECT_NE(printed_as[table], printed_as[csv]) << c.command << ": the table is CSV";
    }
  }
  // The refusals changed nothing: no plan, file or key made, nothing deleted or evicted.
  EXPECT_FALSE(fs::exists(path("none.db")));
  EXPECT_FALSE(fs::exists(path("key.key")));
  EXPECT_FALSE(fs::exists(path("r.html")));
  EXPECT_EQ(sh(db + "--format json trials fmnist-mlp-ci").out, trials_before);
  EXPECT_EQ(sh(db + "--format json checkpoints").out, checkpoints_before);

  // export without --format is the CSV of every metric, with --format table the same rows aligned.
  Result export_csv = sh(db + "export fmnist-mlp-ci");
  Result export_table = sh(db + "--format table export fmnist-mlp-ci");
  EXPECT_EQ(
      export_csv.out.rfind("trial,status,length,end_step,lr.init,lr.every,step,metric,value\n", 0),
      0u)
      << export_csv.out;
  EXPECT_EQ(
      export_table.out.rfind("trial  status  length  end_step  lr.init  lr.every  step  metric", 0),
      0u)
      << export_table.out;
  EXPECT_EQ(std::count(export_csv.out.begin(), export_csv.out.end(), '\n'),
            std::count(export_table.out.begin(), export_table.out.end(), '\n'));
  // tree's CSV: the stages of its JSON, the trials ending in each separated by spaces.
  Result tree = sh(db + "--format csv tree fmnist-mlp-ci");
  EXPECT_EQ(
      tree.out.rfind("stage,parent,start,end,trained_until,trials_ending\n0,-1,0,32,32,\n", 0), 0u)
      << tree.out;
  EXPECT_EQ(std::count(tree.out.begin(), tree.out.end(), '\n'), 1 + 6) << tree.out;
  // simulate's CSV: a row per measure, a column per run.
  Result sim = sh(none + "--format csv simulate " + ci + " --workers 2 --step-time 0.01");
  EXPECT_EQ(sim.out.rfind("measure,shared,trial-based\nmakespan (s),", 0), 0u) << sim.out;
}

// `submit --wait` prints the study's summary as `run` does: a table, or the JSON line of
// docs/spec.md.
TEST_F(Cli, SubmitWaitPrintsTheSummaryAsRunDoes) {
  const std::string address = "ipc://" + path("master.sock");
  spawn({kHippo, "--db", path("cluster.db"), "master", "--bind", address});
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("checkpoints")});
  const std::string client = kHippo + " --master " + address + " ";
  Result table = sh(client + "submit " + spec("table", json::object()) + " --wait");
  ASSERT_EQ(table.status, 0) << table.out;
  EXPECT_EQ(table.out.rfind("study table: done\n  trials               4\n", 0), 0u) << table.out;
  EXPECT_NE(table.out.find("\n  best                 trial "), std::string::npos) << table.out;
  Result line = sh(client + "--format json submit " + spec("line", json::object()) + " --wait");
  ASSERT_EQ(line.status, 0) << line.out;
  EXPECT_EQ(json::parse(line.out)["study"], "line");
  Result run = sh(hippo("alone.db") + "run " + spec("run", json::object()) + " --workers 1");
  ASSERT_EQ(run.status, 0);
  // The same lines but for the times.
  // Without what is measured: times, and the time split's rows (its workers differ too).
  auto untimed = [](const std::string& text) {
    std::string out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
      if (l.find("wall time") == std::string::npos &&
          l.find("master per trial") == std::string::npos &&
          l.find("time of all workers") == std::string::npos &&
          l.rfind(std::string(23, ' '), 0) == std::string::npos)
        out += l.substr(l.find(':') + 1) + "\n";
    return out;
  };
  EXPECT_EQ(untimed(table.out), untimed(run.out));
}

TEST_F(Cli, VersionNamesTheBinaryItsProtocolAndItsPlanSchema) {
  const std::string protocol = std::to_string(protocol::kVersion);
  const std::string schema = std::to_string(latest_schema_version());
  Result text = sh(kHippo + " --version");
  EXPECT_EQ(text.status, 0);
  EXPECT_EQ(text.out, std::string("hippo ") + kVersion + " (protocol " + protocol +
                          ", plan schema " + schema + ")\n");
  Result j = sh(kHippo + " --format json --version");
  EXPECT_EQ(j.status, 0);
  EXPECT_EQ(std::count(j.out.begin(), j.out.end(), '\n'), 1) << j.out;
  EXPECT_EQ(json::parse(j.out), json({{"version", kVersion},
                                      {"protocol", protocol::kVersion},
                                      {"plan_schema", latest_schema_version()}}));
  Result csv = sh(kHippo + " --format csv --version 2>&1");
  EXPECT_EQ(csv.status, 2);
  EXPECT_NE(csv.out.find("--format csv: --version prints table (default) or json"),
            std::string::npos)
      << csv.out;

  const std::string worker_line =
      std::string("hippo-worker ") + kVersion + " (protocol " + protocol + ")\n";
  for (const std::string& command : {kWorker, kHippo + " worker"}) {
    Result w = sh(command + " --version");
    EXPECT_EQ(w.status, 0) << command;
    EXPECT_EQ(w.out, worker_line) << command;
  }
  // Without --version, a subcommand is still needed.
  Result none = sh(kHippo + " 2>&1");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.out.find("a subcommand is required"), std::string::npos) << none.out;
}

TEST_F(Cli, HelpListsWorkerWhichNamesItselfAsItWasStarted) {
  Result help = sh(kHippo + " --help");
  ASSERT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("\n  worker "), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("`hippo worker --help` lists its options"), std::string::npos);

  Result through_hippo = sh(kHippo + " worker --help");
  EXPECT_EQ(through_hippo.status, 0);
  EXPECT_NE(through_hippo.out.find("Usage: hippo worker [OPTIONS]"), std::string::npos)
      << through_hippo.out;
  EXPECT_NE(through_hippo.out.find("--master"), std::string::npos) << through_hippo.out;
  EXPECT_EQ(through_hippo.out.find("hippo-worker"), std::string::npos) << through_hippo.out;
  Result direct = sh(kWorker + " --help");
  EXPECT_EQ(direct.status, 0);
  EXPECT_NE(direct.out.find("Usage: hippo-worker [OPTIONS]"), std::string::npos) << direct.out;

  // `worker` comes first: hippo's own options before it are refused, not dropped.
  Result after_options = sh(hippo("plan.db") + "worker --master ipc://" + path("m.sock") + " 2>&1");
  EXPECT_EQ(after_options.status, 2);
  EXPECT_NE(after_options.out.find("hippo's own options do not apply to a worker"),
            std::string::npos)
      << after_options.out;
  EXPECT_FALSE(fs::exists(path("plan.db")));
}

TEST_F(Cli, WorkerWithoutHippoWorkerBesideItSaysWhereItLooked) {
  fs::create_directories(path("bin"));
  fs::copy_file(kHippo, path("bin/hippo"));
  fs::permissions(path("bin/hippo"), fs::perms::owner_all);
  Result r = sh(path("bin/hippo") + " worker --help 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("error: hippo worker runs " + path("bin/hippo-worker")), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("No such file or directory"), std::string::npos) << r.out;
}

// `hippo run` without hippo-worker beside it refuses before it touches the plan: no study is
// left interrupted for a run that could never have trained.
TEST_F(Cli, RunWithoutHippoWorkerBesideItRefusesAndMakesNoPlan) {
  fs::create_directories(path("bin"));
  fs::copy_file(kHippo, path("bin/hippo"));
  fs::permissions(path("bin/hippo"), fs::perms::owner_all);
  Result r =
      sh(path("bin/hippo") + " --db " + path("lone.db") + " run " + small_study("lone") + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot start workers: " + path("bin/hippo-worker")), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(path("lone.db")));
  EXPECT_FALSE(fs::exists(path("lone.db.checkpoints")));
}

// A study named with terminal control characters (a clear screen, a line that forges another):
// tables, trees, the preview, errors, the summary and the log show them escaped, never raw; JSON
// carries the name as it is.
TEST_F(Cli, ControlCharactersInNamesAreEscapedOnTheTerminal) {
  const std::string name = "evil\x1b[2J\x1b[1;31mred\nforged line\x7f\xc2\x9b";
  const std::string file = spec("evil", json::object());
  json s = json::parse(read_file(file));
  s["name"] = name;
  std::ofstream(file) << s.dump();
  Result run = sh(hippo("m.db") + "run " + file + " --workers 1 2>" + path("log"));
  ASSERT_EQ(run.status, 0) << run.out;
  const std::string escaped = "evil\\x1b[2J\\x1b[1;31mred\\x0aforged line\\x7f\\u009b";
  const std::string log = read_file(path("log"));
  // Every table, tree and message that names the study (by its id here: the shell would need
  // the control characters), and an error that quotes it (the same spec again).
  std::vector<Result> outputs = {run, sh(hippo("m.db") + "studies")};
  for (const char* command : {"tree 1", "trials 1", "best 1", "preview "})
    outputs.push_back(sh(hippo("m.db") + command + (command[0] == 'p' ? file : "") + " 2>&1"));
  Result again = sh(hippo("m.db") + "run " + file + " --workers 1 2>&1");
  EXPECT_NE(again.status, 0) << again.out;
  outputs.push_back(again);
  Result as_json = sh(hippo("m.db") + "--format json studies");  // JSON carries the name as it is
  EXPECT_EQ(json::parse(as_json.out)[0]["name"], name) << as_json.out;
  outputs.push_back(sh(hippo("m.db") + "delete 1 2>&1"));
  outputs.push_back(Result{0, log});
  for (const Result& out : outputs) {
    EXPECT_EQ(out.out.find('\x1b'), std::string::npos) << out.out;
    EXPECT_EQ(out.out.find("\xc2\x9b"), std::string::npos) << out.out;
    EXPECT_EQ(out.out.find("\nforged line"), std::string::npos) << out.out;
  }
  EXPECT_NE(run.out.find("study " + escaped + ": done"), std::string::npos) << run.out;
  for (size_t i : {1, 2, 5, 6, 7})  // studies, tree, preview, the error, delete
    EXPECT_NE(outputs[i].out.find(escaped), std::string::npos) << outputs[i].out;
}

// An ASHA study run for real: the trials it leaves below max_length are `stopped` at their rung
// (status and end_step in `trials`, `export`), the others trained to max_length `done`;
// parameter columns come in the spec's order (lr.init before lr.every: step_decay's fields), in
// `trials`, `export` and `best`; and `summary` prints what `run` printed, in both formats.
TEST_F(Cli, AshaStopsWhatItLeavesBelowMaxLengthAndSummaryRepeatsRun) {
  const json asha = {{"searcher",
                      {{"name", "asha"},
                       {"max_trials", 6},
                       {"eta", 3},
                       {"min_length", {{"epochs", 1}}},
                       {"max_length", {{"epochs", 3}}},
                       {"parallel", 1}}}};  // one at a time: its decisions do not race
  Result run = sh(hippo("a.db") + "run " + spec("asha", asha) + " --workers 1");
  ASSERT_EQ(run.status, 0) << run.out;
  Result summary = sh(hippo("a.db") + "summary asha");
  ASSERT_EQ(summary.status, 0) << summary.out;
  EXPECT_EQ(summary.out, run.out);
  const json trials = json::parse(sh(hippo("a.db") + "--format json trials asha").out);
  ASSERT_EQ(trials.size(), 6u) << trials;
  int stopped = 0;
  for (const json& t : trials) {
    if (t["status"] == "stopped") {
      ++stopped;
      EXPECT_EQ(t["length"], 32) << t;  // rung 0: one epoch of 32 steps
      EXPECT_EQ(t["end_step"], 32) << t;
    } else {
      EXPECT_EQ(t["status"], "done") << t;
      EXPECT_EQ(t["length"], 96) << t;  // max_length
    }
  }
  // Those promoted against few results early on go on too: at least one is stopped.
  EXPECT_GE(stopped, 1) << trials;
  const std::string csv = sh(hippo("a.db") + "--format csv trials asha").out;
  EXPECT_EQ(csv.rfind("trial,status,length,end_step,lr.init,lr.every,step,accuracy\n", 0), 0u)
      << csv;
  EXPECT_NE(csv.find(",stopped,32,32,"), std::string::npos) << csv;
  EXPECT_NE(sh(hippo("a.db") + "export asha").out.find(",stopped,32,32,"), std::string::npos);
  for (const char* format : {"table", "json"}) {
    const std::string best = sh(hippo("a.db") + "--format " + format + " best asha").out;
    EXPECT_LT(best.find("lr.init"), best.find("lr.every")) << best;
  }
  // best says its trial's status: the best loss at any step may be a stopped trial's.
  const json best = json::parse(sh(hippo("a.db") + "--format json best asha").out);
  EXPECT_EQ(best["status"], trials[best["trial"].get<int>() - 1]["status"]) << best;
  // The JSON line too: run's last line is summary's.
  Result line =
      sh(hippo("a.db") + "--format json run " + spec("line", json::object()) + " --workers 2");
  ASSERT_EQ(line.status, 0) << line.out;
  EXPECT_EQ(sh(hippo("a.db") + "--format json summary line").out,
            line.out.substr(line.out.rfind('\n', line.out.size() - 2) + 1));
  // A study that is running has no summary yet; an unknown one is bad input.
  EXPECT_EQ(sh(hippo("a.db") + "summary nothing 2>/dev/null").status, 2);
}

// Two studies submitted together to one master share the stages of their common trials: each
// summary shows the steps trained once for both (steps_shared). `hippo wait` returns when a
// study ends, with its summary and status; with --timeout, while it runs, 124.
TEST_F(Cli, WaitReturnsWhenAClusterStudyEndsAndSummariesShowSharedSteps) {
  const std::string address = "ipc://" + path("master.sock"), db = path("cluster.db");
  spawn({kHippo, "--db", db, "master", "--bind", address});
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("checkpoints")});
  const std::string client = kHippo + " --master " + address + " ";
  ASSERT_EQ(sh(client + "submit " + spec("one", json::object())).status, 0);
  ASSERT_EQ(sh(client + "submit " + spec("two", json::object())).status, 0);
  Result early = sh(hippo("cluster.db") + "wait two --timeout 0.2 2>&1");
  EXPECT_EQ(early.status, 124) << early.out;
  EXPECT_NE(early.out.find("still running"), std::string::npos) << early.out;
  EXPECT_EQ(sh(hippo("cluster.db") + "summary two 2>&1").status, 2);  // not yet
  for (const char* name : {"one", "two"})
    ASSERT_EQ(sh(hippo("cluster.db") + "wait " + name + " --timeout 120 >/dev/null").status, 0);
  // Both ended: wait prints what summary does (a job that served a study and reported after its
  // end records a later summary within 5 s: the two reads are retried until it has).
  for (const char* name : {"one", "two"}) {
    Result waited, recorded;
    for (int i = 0; i < 12 && (i == 0 || waited.out != recorded.out); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      waited = sh(hippo("cluster.db") + "--format json wait " + name + " --timeout 120");
      recorded = sh(hippo("cluster.db") + "--format json summary " + name);
    }
    ASSERT_EQ(waited.status, 0) << waited.out;
    EXPECT_EQ(waited.out, recorded.out);
    const json s = json::parse(waited.out);
    EXPECT_EQ(s["status"], "done");
    // The jobs that came once both were submitted trained for both.
    EXPECT_GT(s["steps_shared"].get<int64_t>(), 0) << s;
    EXPECT_LE(s["steps_shared"], s["steps_executed"]) << s;
    EXPECT_NE(sh(hippo("cluster.db") + "summary " + name).out.find("\n  steps shared  "),
              std::string::npos);
  }
}

// bf16 trains on a GPU only: `run` without --gpus refuses it before it makes anything, and
// `preview` refuses it where no CUDA device is seen (CI), naming the field.
TEST_F(Cli, Bf16IsRefusedWhereItWouldFailEveryTrial) {
  const std::string file = spec("bf16", {{"fixed", {{"precision", "bf16"}}}});
  Result run = sh(hippo("b.db") + "run " + file + " --workers 1 2>&1");
  EXPECT_EQ(run.status, 2) << run.out;
  EXPECT_NE(run.out.find("fixed.precision: bf16 trains on a CUDA GPU only"), std::string::npos)
      << run.out;
  EXPECT_FALSE(fs::exists(path("b.db")));
  Result preview = sh(hippo("b.db") + "preview " + file + " 2>&1");
  const bool gpu = sh("nvidia-smi -L 2>/dev/null | grep -q GPU").status == 0;
  if (preview.status == 0) {
    EXPECT_TRUE(gpu) << "preview accepted bf16 on a machine without a GPU";
  } else {
    EXPECT_EQ(preview.status, 2) << preview.out;
    EXPECT_NE(preview.out.find("fixed.precision: bf16 trains on a CUDA GPU only"),
              std::string::npos)
        << preview.out;
  }
}

// The messages of a name taken: a study that ended is not offered --resume (which would be
// refused), but its summary and delete; `best` of a study without a value says so in English.
TEST_F(Cli, ATakenNameSuggestsWhatWorks) {
  const std::string file = spec("taken", json::object());
  ASSERT_EQ(sh(hippo("t.db") + "run " + file + " --workers 1 >/dev/null").status, 0);
  Result again = sh(hippo("t.db") + "run " + file + " --workers 1 2>&1");
  EXPECT_EQ(again.status, 2) << again.out;
  EXPECT_EQ(again.out.find("--resume"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("hippo resume"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("hippo summary taken"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("hippo delete taken"), std::string::npos) << again.out;
  // A learning rate of 10^6: its one trial diverges at its first evaluation, and `best` has none.
  const std::string diverging =
      spec("nan", {{"hyperparameters", constant_lr({1e6})}, {"length", {{"epochs", 1}}}});
  EXPECT_EQ(sh(hippo("t.db") + "run " + diverging + " --workers 1 >/dev/null 2>&1").status, 1);
  Result best = sh(hippo("t.db") + "best nan 2>&1");
  EXPECT_EQ(best.status, 1) << best.out;
  EXPECT_NE(best.out.find("study nan has no value of accuracy yet"), std::string::npos) << best.out;
}

}  // namespace
}  // namespace hippo::e2e
