// The `hippo` command line: global options and the registration of each subcommand. Each
// subcommand lives in its own cli_*.cc file, registers itself in main.cc, and reports through its
// exit status (0 success, 1 a run that failed, 2 bad input) as docs/spec.md says.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "protocol/auth.h"
#include "protocol/trust.h"
#include "searchers/budget.h"
#include "searchers/spec.h"
#include "storage/plan.h"

namespace hippo::cli {

enum class Format { kTable, kJson, kCsv };

struct GlobalOptions {
  std::string db;      // --db, else $HIPPO_DB, else ./hippo.db
  std::string master;  // --master, else $HIPPO_MASTER (empty: none)
  // For a master with --auth: its public key file and ours (protocol/auth.h).
  std::string master_key;  // --master-key, else $HIPPO_MASTER_KEY
  std::string key;         // --key, else $HIPPO_KEY
  // --insecure: no CURVE, for a master started with --insecure. Without it and without keys, a
  // client proves the operator's local key (protocol/auth.h).
  bool insecure = false;
  Format format = Format::kTable;  // --format, else the command's default (main.cc)
  std::string log_level = "info";  // --log-level, else $HIPPO_LOG_LEVEL (protocol/log.h)
};

// Thrown by a subcommand for bad input: main prints "error: <what>" and exits 2.
struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Thrown for a run that failed: main prints "error: <what>" and exits 1.
struct RunFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The output formats a command prints on stdout; the first is what it prints without --format.
// None: it prints nothing there, and refuses any --format.
using Formats = std::vector<Format>;
inline const Formats kEveryFormat = {Format::kTable, Format::kJson, Format::kCsv};
inline const Formats kTableOrJson = {Format::kTable, Format::kJson};
const char* to_string(Format format);
// "table (default), json or csv", or that it prints nothing: for --help and errors.
std::string formats_text(const Formats& formats);

// The chosen subcommand: the formats it prints, and what it does (its return value is the exit
// status). main checks --format against `formats` before it runs anything (exit 2 otherwise).
struct Action {
  Formats formats;
  std::function<int()> run;
};
// Makes {formats, run} the action of `cmd` when it is chosen, and says the formats in its --help.
void set_action(CLI::App* cmd, Action* action, const Formats& formats, std::function<int()> run);
// The study a command works on, into `study`: its name, or its id as "#N" or `--id N` (one of
// them; protocol/names.h: a name is never an id).
void add_study_argument(CLI::App* cmd, std::string* study);

// Registration functions, one per cli_*.cc. Each adds its subcommand to `app` and stores the
// action to run into `*action` when that subcommand is chosen.
void add_preview_command(CLI::App& app, const GlobalOptions& global, Action* action);
// run, master, submit
void add_run_commands(CLI::App& app, const GlobalOptions& global, Action* action);
// studies, trials, best, tree, export
void add_query_commands(CLI::App& app, const GlobalOptions& global, Action* action);
// pipeline-plan
void add_pipeline_command(CLI::App& app, const GlobalOptions& global, Action* action);
// keygen
void add_key_commands(CLI::App& app, const GlobalOptions& global, Action* action);
// cancel, enqueue, workers, drain
void add_cluster_commands(CLI::App& app, const GlobalOptions& global, Action* action);
// dashboard, report
void add_dashboard_commands(CLI::App& app, const GlobalOptions& global, Action* action);
// checkpoints
void add_checkpoints_command(CLI::App& app, const GlobalOptions& global, Action* action);

// simulate
void add_simulate_command(CLI::App& app, const GlobalOptions& global, Action* action);
// The hippo-worker binary: beside this one (`hippo run` starts it, `hippo worker` runs it).
std::string worker_binary();

// The CURVE keys of --master-key and --key, none with --insecure, else the local key pair;
// BadInput on a bad file.
protocol::ClientKeys client_keys(const GlobalOptions& global);

// BadInput unless there is a search plan file at `path` (a command that only reads or resumes).
void require_plan(const std::string& path);
// The search plan at `path`, which must exist (the query commands, `checkpoints`); BadInput if
// it does not or cannot be opened.
SearchPlan open_existing_plan(const std::string& path);

// A spec file, parsed and as written; BadInput naming the problem.
struct LoadedSpec {
  StudySpec spec;
  nlohmann::json spec_json;
};
LoadedSpec load_spec_file(const std::string& path);
// A study's summary (master::StudySummary::to_json's fields), as `run`, `resume`, `submit --wait`,
// `summary` and `wait` print it: one JSON line, or the table.
void print_summary(const nlohmann::json& summary, Format format);
// BadInput when the spec needs a GPU (precision bf16 on a built-in model) and `on_gpus` is false:
// for `run` without --gpus, and for `preview` on a machine without a CUDA device.
void check_devices(const StudySpec& spec, bool on_gpus);
// The spec as a study is stored when `workers` run it: searcher.parallel resolved
// (master::resolve_parallel), parsed again.
LoadedSpec resolved(LoadedSpec l, int64_t workers);
// --policy: shared or trial-based; BadInput otherwise.
Policy policy_of(const std::string& text);

// --max-trials, --max-steps and --max-evaluations (searchers/budget.h), for master, run, preview.
void add_budget_options(CLI::App* cmd, Budget* budget);
// --keep-checkpoints SIZE, for master, run and simulate (master/retention.h); keep_bytes parses
// the text (the default for none), BadInput naming the option otherwise.
void add_keep_option(CLI::App* cmd, std::string* size);
int64_t keep_bytes(const std::string& size);
// --events FILE, for master, run and simulate (master/events.h); checked_events_file returns
// the path once it can be appended to ("" and "-" as they are), BadInput naming it otherwise.
void add_events_option(CLI::App* cmd, std::string* path);
std::string checked_events_file(const std::string& path);
// --allow-exec KINDS, for master and run: the text goes to *kinds, parsed by exec_kinds.
void add_exec_option(CLI::App* cmd, std::string* kinds, const std::string& what);
// BadInput naming --allow-exec when the text is not searcher, trainer or both.
protocol::ExecKinds exec_kinds(const std::string& text);
// Sends one request to the master of --master and returns the fields of its reply. BadInput when no
// master is given, our keys are refused, or the master refuses the request (its error); RunFailed
// when the master does not answer.
nlohmann::json ask_master(const GlobalOptions& global, const nlohmann::json& request);

}  // namespace hippo::cli
