// hippo-worker: parses its options, checks them (devices, keys, the checkpoint directory), and
// serves a master (worker.h). `hippo worker ...` runs this binary, with argv[0] "hippo worker":
// the name its --help gives it.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kernels/blas_env.h"
#include "kernels/kernels.h"
#include "protocol/checkpoint_storage.h"
#include "protocol/log.h"
#include "protocol/version.h"
#include "protocol/wire.h"
#include "worker/options.h"
#include "worker/worker.h"

int main(int argc, char** argv) {
  hippo::kernels::use_native_blas_kernels(argv);
  using hippo::worker::Options;
  std::string log_level = std::getenv("HIPPO_LOG_LEVEL") ? std::getenv("HIPPO_LOG_LEVEL") : "info";
  const std::string name = std::filesystem::path(argv[0]).filename().string();
  CLI::App app{name + ": executes stages for a hippo master", name};
  app.set_version_flag("--version", std::string("hippo-worker ") + hippo::kVersion + " (protocol " +
                                        std::to_string(hippo::protocol::kVersion) + ")");
  Options options;
  app.add_option("--master", options.master, "master address, e.g. tcp://127.0.0.1:5555")
      ->required();
  app.add_option("--device", options.device,
                 "cpu or cuda:N (a CUDA device; cuda:N:im2col: hippo's own fp32 convolutions; "
                 "default cpu)");
  app.add_option("--threads", options.threads, "threads for this worker's kernels")
      ->check(CLI::Range(1, 256));
  app.add_option("--devices", options.devices,
                 "devices for pipelined studies: cpu:N (N stage threads) or cuda:A-B (default "
                 "cpu:1)");
  app.add_option("--checkpoints", options.checkpoints, "checkpoint directory");
  app.add_option("--cache", options.cache_states,
                 "trained states kept in memory (0: none; every job reads its parent's checkpoint)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--heartbeat-ms", options.heartbeat_ms,
                 "heartbeat interval until the master sets one")
      ->check(CLI::Range(10, 60000));
  app.add_option("--name", options.name, "worker name (default host-pid)");
  const char* env_master_key = std::getenv("HIPPO_MASTER_KEY");
  const char* env_key = std::getenv("HIPPO_KEY");
  std::string master_key = env_master_key ? env_master_key : "";
  std::string key = env_key ? env_key : "";
  app.add_option("--master-key", master_key,
                 "public key file of a master with --auth (default $HIPPO_MASTER_KEY)");
  app.add_option("--key", key, "this worker's secret key file (default $HIPPO_KEY)");
  std::string allow_exec;
  app.add_option("--allow-exec", allow_exec,
                 "trainer: run the trainer commands of studies with model.type external (off by "
                 "default: the commands come from the master)");
  bool insecure = false;
  app.add_flag("--insecure", insecure,
               "connect without authentication, to a master started with --insecure (without "
               "keys, the worker proves this user's local key and obeys only a master that "
               "proves it too)");
  app.add_option("--trainer-timeout", options.trainer_timeout_s,
                 "seconds an external trainer may go without an output line")
      ->check(CLI::Range(0.1, 1e9));
  app.add_option("--trainer-idle", options.trainer_idle_s,
                 "seconds a long-lived external trainer is kept without a stage to train (one "
                 "started ahead, or between stages) before it is ended (default 60)")
      ->check(CLI::Range(0.1, 1e9));
  app.add_option("--log-level", log_level,
                 std::string("what it logs on stderr: ") + hippo::logging::kLevels +
                     " (default info, or $HIPPO_LOG_LEVEL)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    hippo::protocol::ExecKinds kinds;
    if (!allow_exec.empty()) kinds = hippo::protocol::parse_exec_kinds(allow_exec);
    if (kinds.searcher)
      throw std::invalid_argument("a worker runs no searchers: give --allow-exec trainer");
    options.allow_trainers = kinds.trainer;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: --allow-exec: %s\n", e.what());
    return 2;
  }
  try {
    options.keys = hippo::protocol::resolve_client_keys(
        master_key, key, insecure, "--master-key ($HIPPO_MASTER_KEY)", "--key ($HIPPO_KEY)");
  } catch (const hippo::protocol::AuthError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (std::string problem = hippo::worker::parse_devices(options); !problem.empty()) {
    std::fprintf(stderr, "error: --devices: %s\n", problem.c_str());
    return 2;
  }
  try {  // a device that is not there fails now, not at the first job
    hippo::kernels::make_backend(options.device, options.threads);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: --device: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --device %s: %s\n", options.device.c_str(), e.what());
    return 1;
  }
  if (options.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options.name = std::string(host) + "-" + std::to_string(getpid());
  }
  try {
    hippo::logging::setup("worker " + options.name, log_level);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: --log-level: %s\n", e.what());
    return 2;
  }
  try {
    hippo::protocol::make_checkpoint_directory(options.checkpoints);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --checkpoints %s\n", e.what());
    return 2;
  }
  try {  // its storage's identity (made on the first use of the directory)
    hippo::protocol::storage_identity(options.checkpoints);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --checkpoints %s: %s\n", options.checkpoints.c_str(), e.what());
    return 2;
  }
  hippo::worker::install_stop_signals();
  try {
    hippo::worker::Worker worker(options);
    return worker.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
