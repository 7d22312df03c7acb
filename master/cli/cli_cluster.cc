// Operating a running master: `hippo cancel STUDY`, `hippo enqueue STUDY PARAMS`, `hippo workers`
// and `hippo drain WORKER`. They need the master (--master ADDR or $HIPPO_MASTER): a study is
// cancelled, or given a configuration, by the master that runs it, and only the master knows its
// workers. `hippo enqueue` without one asks this user's `hippo run` of the plan of --db, which
// records where it listens (master/run_record.h). Also ask_master, the one request/reply of every
// client command.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <zmq.hpp>

#include "master/cli/cli.h"
#include "master/cli/report.h"
#include "master/run_record.h"
#include "protocol/message.h"
#include "protocol/socket.h"
#include "protocol/text.h"

namespace hippo::cli {
namespace {

using nlohmann::json;

int cancel(const std::string& study, const GlobalOptions& global) {
  // A name or an id: the master resolves it (study_id_in).
  json summary = ask_master(global, protocol::Cancel{.study = study}.to_json())["summary"];
  if (global.format == Format::kJson)
    std::printf("%s\n", summary.dump().c_str());
  else
    std::printf("study %s cancelled: %lld trials, %lld steps executed\n",
                protocol::printable(summary.value("study", study)).c_str(),
                static_cast<long long>(summary.value("trials", int64_t{0})),
                static_cast<long long>(summary.value("steps_executed", int64_t{0})));
  return 0;
}

// PARAMS: a JSON object as text, or a file that holds one.
json params_argument(const std::string& text) {
  std::string content = text;
  if (text.find_first_not_of(" \t\n") == std::string::npos ||
      text[text.find_first_not_of(" \t\n")] != '{') {
    std::ifstream in(text, std::ios::binary);
    if (!in) throw BadInput("params: " + text + " is neither a JSON object nor a readable file");
    std::ostringstream read;
    read << in.rdbuf();
    content = read.str();
  }
  try {
    json params = parse_json_text(content);
    if (!params.is_object()) throw SpecError("expected a JSON object: a value for every leaf");
    return params;
  } catch (const SpecError& e) {
    throw BadInput(std::string("params: ") + e.what());
  }
}

// One request to the master at `address`; protocol::AuthError when our keys are refused. `gone`:
// protocol::request's.
json ask(const std::string& address, const protocol::ClientKeys& keys, const json& request,
         const std::function<bool()>& gone = nullptr) {
  zmq::context_t context;
  protocol::Reply reply;
  try {
    reply =
        protocol::Reply::from_json(protocol::request(context, address, request, 30000, keys, gone));
  } catch (const protocol::AuthError&) {
    throw;
  } catch (const protocol::ProtocolError& e) {
    throw RunFailed(e.what());
  }
  if (!reply.ok) throw BadInput(reply.error);
  return reply.fields;
}

// Why no `hippo run` of this user on this host can take a configuration for `study` of the plan
// at `db`: the plan says what became of it.
std::string no_run_for(const std::string& study, const std::string& db) {
  if (!std::filesystem::exists(db))
    return "no master to ask: give --master ADDR (or set HIPPO_MASTER) for a cluster master's "
           "study; without it, the `hippo run` of the plan of --db is asked, and there is no "
           "plan at " +
           db;
  SearchPlan plan = open_existing_plan(db);
  std::optional<StudyRow> row = plan.study_by_name(study);
  if (std::optional<int64_t> id = study_id_in(study); !row && id) row = plan.study(*id);
  if (!row || row->deleted_at) return "no study named " + study + " in " + db;
  if (row->status == StudyStatus::kInterrupted)
    return "study " + row->name + " is interrupted: resume it (hippo resume " + row->name +
           "), then enqueue";
  if (row->status != StudyStatus::kRunning)
    return "study " + row->name + " has already ended: " + to_string(row->status);
  return "study " + row->name + " is running, but no `hippo run` of this user (uid " +
         std::to_string(geteuid()) +
         ") on this host runs it: a cluster master's study needs "
         "--master ADDR; a run takes configurations from its own OS user only (its record in " +
         protocol::local_key_dir() +
         "/runs); a run that was killed left its study running until `hippo resume " + row->name +
         "`";
}

// The master that runs `study`: the one of --master, else this user's `hippo run` of the plan of
// --db (master/run_record.h), proven with the local key.
json ask_study_master(const std::string& study, const json& request, const GlobalOptions& global) {
  if (!global.master.empty()) return ask_master(global, request);
  if (global.insecure || !global.key.empty() || !global.master_key.empty())
    throw BadInput(
        "--insecure, --key and --master-key are for a cluster master: give its --master ADDR (a "
        "`hippo run` of this user is reached with the local key)");
  std::optional<master::RunAddress> run;
  try {
    run = master::find_run(global.db);
  } catch (const std::exception& e) {
    if (!std::filesystem::exists(global.db)) throw BadInput(no_run_for(study, global.db));
    throw BadInput(std::string("the record of a `hippo run`: ") + e.what());
  }
  if (!run) throw BadInput(no_run_for(study, global.db));
  protocol::ClientKeys keys = client_keys(global);  // the local key pair
  keys.master_public_key = run->master_key;
  // A run that ends meanwhile answers no more: its process gone, the plan says how it ended.
  const pid_t pid = static_cast<pid_t>(run->pid);
  try {
    return ask(run->address, keys, request, [pid] { return kill(pid, 0) != 0; });
  } catch (const RunFailed&) {
    if (kill(pid, 0) == 0) throw;
    throw BadInput(no_run_for(study, global.db));
  } catch (const protocol::AuthError&) {
    // Its record was in this user's directory, yet the run does not know this key: the record was
    // copied there, or the local key changed since the run started.
    throw BadInput("the `hippo run` of " + global.db + " (pid " + std::to_string(run->pid) +
                   ") refused this user's local key, " + protocol::local_key_dir() +
                   "/local.key: a run admits the local key of the $HIPPO_HOME it started with");
  }
}

int enqueue(const std::string& study, const std::string& params, const GlobalOptions& global) {
  json reply = ask_study_master(
      study, protocol::Enqueue{.study = study, .params = params_argument(params)}.to_json(),
      global);
  if (global.format == Format::kJson) {
    std::printf("%s\n", reply.dump().c_str());
    return 0;
  }
  const std::string name = protocol::printable(reply.value("name", study));
  if (!reply.contains("existing"))
    std::printf("enqueued in study %s: its next trial, before the searcher's own proposals\n",
                name.c_str());
  else if (const json& had = reply["existing"]; had.contains("trial"))
    std::printf("study %s has these params already: trial %lld (%s); nothing enqueued\n",
                name.c_str(), had["trial"].get<long long>(),
                protocol::printable(had.value("status", "")).c_str());
  else
    std::printf(
        "study %s has these params enqueued already, waiting for a free slot to become a trial; "
        "nothing enqueued\n",
        name.c_str());
  return 0;
}

int workers(const GlobalOptions& global) {
  json list = ask_master(global, protocol::ListWorkers{}.to_json())["workers"];
  if (global.format == Format::kJson) {
    std::printf("%s\n", list.dump().c_str());
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"name", "device", "threads", "pid", "last seen", "states", "working on", "environment"}};
  for (const json& w : list) {
    std::string work = "idle";
    if (w.contains("job")) {
      const json& job = w["job"];
      std::string studies;
      for (const json& s : job["studies"]) studies += (studies.empty() ? "" : ",") + cell(s);
      work = (studies.empty() ? std::string("(ended study)") : studies) + " trial " +
             cell(job["trial"]) + ", steps " + cell(job["from"]) + "-" + cell(job["to"]) + ", at " +
             cell(job["step"]);
    }
    if (w.value("draining", false)) work += " (draining)";
    // Why it gets no work (its own fault, or set aside after failures): idle is not the word.
    if (w.contains("unavailable") && !w.contains("job"))
      work = "no work: " + w["unavailable"].get<std::string>();
    std::string environment = w.value("environment", "");
    if (w.contains("trainer_environment"))
      environment += "; trainers: " + w["trainer_environment"].get<std::string>();
    rows.push_back({cell(w["name"]), cell(w["device"]), cell(w["threads"]), cell(w["pid"]),
                    cell(w["last_seen_s"]) + " s ago", cell(w["states_held"]), work, environment});
  }
  if (global.format == Format::kCsv)
    print_csv(rows);
  else
    print_table(rows);
  return 0;
}

int drain(const std::string& worker, const GlobalOptions& global) {
  json reply = ask_master(global, protocol::Drain{.worker = worker}.to_json());
  if (global.format == Format::kJson)
    std::printf("%s\n", reply.dump().c_str());
  else if (reply.value("busy", false))
    std::printf("worker %s gets no more work: it exits once its job ends\n",
                protocol::printable(worker).c_str());
  else
    std::printf("worker %s was idle: it exits now\n", protocol::printable(worker).c_str());
  return 0;
}

}  // namespace

json ask_master(const GlobalOptions& global, const json& request) {
  if (global.master.empty()) throw BadInput("no master: give --master ADDR or set HIPPO_MASTER");
  try {
    return ask(global.master, client_keys(global), request);
  } catch (const protocol::AuthError& e) {
    throw BadInput(e.what());
  }
}

void add_cluster_commands(CLI::App& app, const GlobalOptions& global, Action* action) {
  {
    CLI::App* cmd = app.add_subcommand("cancel", "end a running study on its master (--master)");
    cmd->fallthrough();
    auto study = std::make_shared<std::string>();
    add_study_argument(cmd, study.get());
    set_action(cmd, action, kTableOrJson, [study, &global] { return cancel(*study, global); });
  }
  {
    CLI::App* cmd = app.add_subcommand(
        "enqueue",
        "evaluate a configuration next in a running study, before its searcher's own proposals, "
        "unless a trial has it already (--master, else this user's `hippo run` of --db; tpe, gp, "
        "cmaes, median_stop, asha)");
    cmd->fallthrough();
    auto study = std::make_shared<std::string>();
    auto params = std::make_shared<std::string>();
    cmd->add_option("study", *study, "the study's name, or its id as #N")->required();
    cmd->add_option("params", *params,
                    "a value for every leaf: a JSON object ('{\"lr\": 0.1}'), or a file that "
                    "holds one")
        ->required();
    set_action(cmd, action, kTableOrJson,
               [study, params, &global] { return enqueue(*study, *params, global); });
  }
  {
    CLI::App* cmd = app.add_subcommand("workers", "the workers connected to a master (--master)");
    cmd->fallthrough();
    set_action(cmd, action, kEveryFormat, [&global] { return workers(global); });
  }
  {
    CLI::App* cmd = app.add_subcommand(
        "drain", "give a worker no more work; it exits once its job ends (--master; an admin)");
    cmd->fallthrough();
    auto worker = std::make_shared<std::string>();
    cmd->add_option("worker", *worker, "the worker's name (as `hippo workers` lists it)")
        ->required();
    set_action(cmd, action, kTableOrJson, [worker, &global] { return drain(*worker, global); });
  }
}

}  // namespace hippo::cli
