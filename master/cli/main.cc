// Entry point of the `hippo` binary: parses global options, dispatches to one subcommand.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "master/cli/cli.h"
#include "protocol/log.h"
#include "protocol/text.h"
#include "protocol/version.h"
#include "protocol/wire.h"
#include "storage/schema.h"

namespace {

using namespace hippo::cli;

// The format `command` prints: the one --format asks for if it prints that, its default without
// --format; BadInput naming the formats it prints otherwise.
Format output_format(const std::string& command, const Formats& formats,
                     const CLI::Option& format_option, Format asked) {
  if (format_option.count() == 0) return formats.empty() ? Format::kTable : formats.front();
  if (std::find(formats.begin(), formats.end(), asked) == formats.end())
    throw BadInput(std::string("--format ") + to_string(asked) + ": " + command + " prints " +
                   formats_text(formats));
  return asked;
}

// `hippo --version`: this binary's version, and those of the protocol it speaks and the plan
// schema it writes. The JSON form's keys are what the Python package reads.
int print_version(Format format) {
  if (format == Format::kJson)
    std::printf("%s\n", nlohmann::ordered_json{{"version", hippo::kVersion},
                                               {"protocol", hippo::protocol::kVersion},
                                               {"plan_schema", hippo::latest_schema_version()}}
                            .dump()
                            .c_str());
  else
    std::printf("hippo %s (protocol %d, plan schema %d)\n", hippo::kVersion,
                hippo::protocol::kVersion, hippo::latest_schema_version());
  return 0;
}

// An error, escaped: its text may quote names from outside (protocol/text.h).
void print_error(const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", hippo::protocol::printable(e.what()).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  // A master commits to its plan after every event, and SQLite frees what a commit allocated:
  // glibc would give the top of the heap back to the kernel each time and fault it in again at
  // the next event (a third of a `done`'s cost, measured with hippo simulate). Keeping up to
  // 64 MiB of freed heap avoids that.
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
  // `hippo worker ...` is the hippo-worker binary beside this one: the master side never links
  // the engine (it links none of the kernels), and the user still has one command. Its argv[0] is
  // "hippo worker", the name its --help and messages give it.
  if (argc > 1 && std::string(argv[1]) == "worker") {
    const std::string worker = worker_binary();
    std::string name = std::filesystem::path(argv[0]).filename().string() + " worker";
    argv[1] = name.data();
    execv(worker.c_str(), argv + 1);
    std::fprintf(stderr, "error: %s runs %s (the hippo-worker binary beside hippo): %s\n",
                 name.c_str(), worker.c_str(), std::strerror(errno));
    return 1;
  }
  CLI::App app{"hippo: hyper-parameter optimization that trains shared work once"};
  app.require_subcommand(0, 1);  // none with --version
  GlobalOptions global;
  const char* env_db = std::getenv("HIPPO_DB");
  const char* env_master = std::getenv("HIPPO_MASTER");
  const char* env_master_key = std::getenv("HIPPO_MASTER_KEY");
  const char* env_key = std::getenv("HIPPO_KEY");
  const char* env_log_level = std::getenv("HIPPO_LOG_LEVEL");
  global.db = env_db ? env_db : "hippo.db";
  global.master = env_master ? env_master : "";
  global.master_key = env_master_key ? env_master_key : "";
  global.key = env_key ? env_key : "";
  if (env_log_level) global.log_level = env_log_level;
  app.add_option("--db", global.db, "search plan file (default $HIPPO_DB, else ./hippo.db)");
  app.add_option("--master", global.master, "master address (default $HIPPO_MASTER)");
  app.add_option("--master-key", global.master_key,
                 "public key file of a master with --auth (default $HIPPO_MASTER_KEY)");
  app.add_option("--key", global.key,
                 "your secret key file, for a master with --auth (default $HIPPO_KEY)");
  app.add_flag("--insecure", global.insecure,
               "connect without authentication, to a master started with --insecure (without "
               "keys, a client proves this user's local key)");
  CLI::Option* format_option =
      app.add_option("--format", global.format,
                     "output format: table, json or csv (each command's --help says which it "
                     "prints, and the first there without --format)")
          ->transform(CLI::CheckedTransformer(
              std::map<std::string, Format>{
                  {"table", Format::kTable}, {"json", Format::kJson}, {"csv", Format::kCsv}},
              CLI::ignore_case))
          ->option_text("table|json|csv");
  app.add_option("--log-level", global.log_level,
                 std::string("what the master logs on stderr: ") + hippo::logging::kLevels +
                     " (default info, or $HIPPO_LOG_LEVEL)");
  bool version = false;
  app.add_flag("--version", version,
               "print hippo's version, its protocol's and its plan schema's, and exit (table or "
               "json)");

  Action action;
  add_preview_command(app, global, &action);
  add_run_commands(app, global, &action);
  // Listed for --help. `hippo worker ...` never gets here (above): only options before it do.
  CLI::App* worker = app.add_subcommand(
      "worker",
      "run a worker that trains stages for a master (`hippo worker --help` lists its options)");
  worker->prefix_command();
  set_action(worker, &action, {}, []() -> int {
    throw BadInput(
        "worker: give it first, and its options after it (hippo worker --master ADDR ...): "
        "hippo's own options do not apply to a worker");
  });
  add_query_commands(app, global, &action);
  add_pipeline_command(app, global, &action);
  add_key_commands(app, global, &action);
  add_cluster_commands(app, global, &action);
  add_dashboard_commands(app, global, &action);
  add_checkpoints_command(app, global, &action);
  add_simulate_command(app, global, &action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(e);
    return 2;
  }
  if (!version && app.get_subcommands().empty()) {
    std::fprintf(stderr, "error: a subcommand is required (hippo --help lists them)\n");
    return 2;
  }
  try {
    if (version)
      return print_version(output_format("--version", kTableOrJson, *format_option, global.format));
    const std::string command = app.get_subcommands().front()->get_name();
    global.format = output_format(command, action.formats, *format_option, global.format);
    try {
      // The log's component is the subcommand: "master" for a master, "run" for an embedded one.
      hippo::logging::setup(command, global.log_level);
    } catch (const std::invalid_argument& e) {
      throw BadInput(std::string("--log-level: ") + e.what());
    }
    return action.run();
  } catch (const BadInput& e) {
    print_error(e);
    return 2;
  } catch (const RunFailed& e) {
    print_error(e);
    return 1;
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }
}
