// Operating a running master: `hippo cancel STUDY`, `hippo enqueue STUDY PARAMS`, `hippo workers`
// and `hippo drain WORKER`. They need the master (--master ADDR or $HIPPO_MASTER): a study is
// cancelled, or given a configuration, by the master that runs it, and only the master knows its
// workers. Also ask_master, the one request/reply of every client
// command.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <zmq.hpp>

#include "master/cli/cli.h"
#include "master/cli/report.h"
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

int enqueue(const std::string& study, const std::string& params, const GlobalOptions& global) {
  json reply = ask_master(
      global, protocol::Enqueue{.study = study, .params = params_argument(params)}.to_json());
  if (global.format == Format::kJson)
    std::printf("%s\n", reply.dump().c_str());
  else
    std::printf("enqueued in study %s: its next trial, before the searcher's own proposals\n",
                protocol::printable(reply.value("name", study)).c_str());
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
  protocol::ClientKeys keys = client_keys(global);
  zmq::context_t context;
  protocol::Reply reply;
  try {
    reply =
        protocol::Reply::from_json(protocol::request(context, global.master, request, 30000, keys));
  } catch (const protocol::AuthError& e) {
    throw BadInput(e.what());
  } catch (const protocol::ProtocolError& e) {
    throw RunFailed(e.what());
  }
  if (!reply.ok) throw BadInput(reply.error);
  return reply.fields;
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
        "evaluate a configuration next in a running study, before its searcher's own proposals "
        "(--master; tpe, gp, cmaes, median_stop, asha)");
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
