// `hippo run` (embedded: a master in this process and N worker processes over ZeroMQ, exactly as
// in a cluster), `hippo master` (a long-running master) and `hippo submit` (send a study to one).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "master/cli/cli.h"
#include "master/master.h"
#include "protocol/auth.h"
#include "protocol/log.h"
#include "protocol/message.h"
#include "protocol/socket.h"

extern char** environ;

namespace hippo::cli {
namespace {

using hippo::Clock;
using nlohmann::json;

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) {
  g_interrupted = 1;
}

SearchPlan open_plan(const std::string& path) {
  try {
    return SearchPlan::open(path);
  } catch (const std::exception& e) {
    throw BadInput(e.what());
  }
}

void print_summary(const master::StudySummary& s, Format format) {
  if (format == Format::kJson) {
    std::printf("%s\n", s.to_json().dump().c_str());
    return;
  }
  std::printf("study %s: %s\n", s.name.c_str(), s.status.c_str());
  if (!s.error.empty()) std::printf("  error: %s\n", s.error.c_str());
  std::printf("  trials               %lld\n", static_cast<long long>(s.trials));
  std::printf("  steps trial-based    %lld\n", static_cast<long long>(s.steps_trial_based));
  std::printf("  steps unique         %lld (%.2fx less)\n", static_cast<long long>(s.steps_unique),
              s.steps_unique ? double(s.steps_trial_based) / double(s.steps_unique) : 0.0);
  std::printf("  steps executed       %lld\n", static_cast<long long>(s.steps_executed));
  if (s.steps_reused > 0)
    std::printf("  steps reused         %lld (trained by earlier studies)\n",
                static_cast<long long>(s.steps_reused));
  std::printf("  critical path steps  %lld\n", static_cast<long long>(s.critical_path_steps));
  std::printf("  wall time            %.2f s (makespan / lower bound %.2f)\n", s.wall_s,
              s.makespan_ratio);
  std::printf("  master per trial     %.3f ms\n", s.master_ms_per_trial);
  if (s.has_best)
    std::printf("  best                 trial %lld: %s = %.6g at step %lld, params %s\n",
                static_cast<long long>(s.best_trial), s.metric.c_str(), s.best_value,
                static_cast<long long>(s.best_step), s.best_params.dump().c_str());
}

void draw_progress(const master::Progress& p) {
  double done = p.steps_unique ? double(p.steps_trained) / double(p.steps_unique) : 0;
  int filled = static_cast<int>(done * 30);
  double left = done > 0 ? p.elapsed_s * (1 - done) / done : 0;
  std::fprintf(stderr, "\r[%s%s] trials %lld/%lld  steps %lld/%lld  %.1f s  ~%.0f s left ",
               std::string(filled, '#').c_str(), std::string(30 - filled, '.').c_str(),
               static_cast<long long>(p.trials_closed), static_cast<long long>(p.trials),
               static_cast<long long>(p.steps_trained), static_cast<long long>(p.steps_unique),
               p.elapsed_s, left);
}

std::string worker_binary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "hippo-worker").string();
}

// The private directory of one `hippo run` (mode 0700: no other user can reach what is inside):
// the master's socket, and the key pairs of the master and of its workers, so that nothing but
// the workers it starts can connect. Removed at the end.
struct RunDirectory {
  RunDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hippo-run-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw RunFailed("cannot make a directory in " + pattern);
    path = pattern;
    protocol::write_key_pair(path + "/master", master = protocol::generate_key_pair());
    protocol::write_key_pair(path + "/worker", worker = protocol::generate_key_pair());
  }
  ~RunDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string address() const { return "ipc://" + path + "/master.sock"; }

  std::string path;
  protocol::KeyPair master, worker;
};

// `devices`: the pipeline stages of the study (each a thread of the worker).
pid_t spawn_worker(const RunDirectory& run, const std::string& checkpoints, int index,
                   bool allow_trainers, int devices) {
  std::string binary = worker_binary();
  std::string name = "run-" + std::to_string(getpid()) + "-" + std::to_string(index);
  std::vector<std::string> args = {binary,          "--master",  run.address(), "--threads", "1",
                                   "--checkpoints", checkpoints, "--name",      name};
  args.insert(args.end(), {"--devices", "cpu:" + std::to_string(devices)});
  args.insert(args.end(),
              {"--master-key", run.path + "/master.pub", "--key", run.path + "/worker.key"});
  if (allow_trainers) args.insert(args.end(), {"--allow-exec", "trainer"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    throw RunFailed("cannot start " + binary);
  return pid;
}

int run(const std::string& path, int workers, const std::string& policy_text,
        std::string checkpoints, const master::StudyRules& rules, const GlobalOptions& global) {
  Policy policy = policy_of(policy_text);
  LoadedSpec l = load_spec_file(path);
  if (checkpoints.empty()) checkpoints = global.db + ".checkpoints";
  RunDirectory run_dir;
  master::Options options;
  options.bind = run_dir.address();
  options.checkpoints = checkpoints;
  options.rules = rules;
  options.auth = protocol::ServerKeys{
      run_dir.master, "", {{run_dir.worker.public_key, protocol::kWorkerRole, "run-workers"}}};
  master::Master m(open_plan(global.db), options);
  int64_t study = 0;
  try {
    study = m.submit(l.spec, l.spec_json, policy);
  } catch (const SpecError& e) {
    throw BadInput(e.what());
  } catch (const std::invalid_argument& e) {
    throw BadInput(e.what());
  }

  // Each worker is one process with one thread, so N workers use N cores without contention.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  // The embedded master has no CURVE: keys meant for a cluster must not reach its workers.
  unsetenv("HIPPO_MASTER_KEY");
  unsetenv("HIPPO_KEY");
  std::vector<pid_t> children;
  for (int i = 0; i < workers; ++i)
    children.push_back(
        spawn_worker(run_dir, checkpoints, i, rules.exec.trainer, l.spec.pipeline.stages));
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  bool tty = isatty(STDERR_FILENO);
  auto last_draw = Clock::now();
  std::string failure;
  while (m.study_running(study) && !g_interrupted) {
    m.poll(20);
    if (tty && Clock::now() - last_draw > std::chrono::milliseconds(200)) {
      draw_progress(m.progress(study));
      last_draw = Clock::now();
    }
    int alive = 0;
    for (pid_t& pid : children) {
      if (pid <= 0) continue;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid)
        pid = -1;
      else
        ++alive;
    }
    if (alive == 0) {
      failure = "every worker process exited";
      break;
    }
  }
  if (tty) {
    draw_progress(m.progress(study));
    std::fprintf(stderr, "\n");
  }
  m.shutdown_workers();
  auto deadline = Clock::now() + std::chrono::seconds(5);
  for (pid_t pid : children) {
    if (pid <= 0) continue;
    while (waitpid(pid, nullptr, WNOHANG) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  m.remove_unreported_checkpoints();
  if (g_interrupted) failure = "interrupted";
  if (!failure.empty() && m.study_running(study)) m.fail_study(study, failure);
  master::StudySummary summary = m.summary(study);
  print_summary(summary, global.format);
  return summary.status == "done" ? 0 : 1;
}

// Whether only this machine can reach `address`: ipc, inproc, or tcp on a loopback address.
bool loopback_only(const std::string& address) {
  for (const char* prefix :
       {"ipc://", "inproc://", "tcp://127.", "tcp://localhost:", "tcp://[::1]:"})
    if (address.rfind(prefix, 0) == 0) return true;
  return false;
}

// `hippo master`'s authentication options.
struct MasterAuth {
  bool auth = false, insecure = false;
  std::string key, authorized;
};

int serve(std::string bind, const std::string& checkpoints, double timeout_s,
          int64_t snapshot_every, const MasterAuth& auth, const master::StudyRules& rules,
          const GlobalOptions& global) {
  master::Options options;
  options.rules = rules;
  const bool insecure = auth.insecure || global.insecure;
  std::string admits;
  if (auth.auth) {
    if (auth.key.empty() || auth.authorized.empty())
      throw BadInput(
          "--auth needs --key (this master's secret key file, from hippo keygen) and "
          "--authorized (a directory of the .pub files of the workers and clients it admits, in "
          "its workers/, clients/ and admins/)");
    if (insecure) throw BadInput("--insecure contradicts --auth");
    try {
      options.auth = protocol::ServerKeys{protocol::read_secret_key(auth.key), auth.authorized, {}};
      size_t n = protocol::read_authorized_keys(auth.authorized).size();  // a bad file: now
      admits = "CURVE authentication: admits the " + std::to_string(n) + " keys of " +
               auth.authorized +
               ", each with the role of its subdirectory (read again at every "
               "connection)";
    } catch (const protocol::AuthError& e) {
      throw BadInput(e.what());
    }
    if (bind.empty()) bind = "tcp://*:5555";
  } else {
    if (!auth.key.empty() || !auth.authorized.empty())
      throw BadInput("--key and --authorized need --auth");
    if (bind.empty()) bind = "tcp://127.0.0.1:5555";
    if (!loopback_only(bind) && !insecure)
      throw BadInput("--bind " + bind +
                     ": other machines can reach it, and only the operator's own processes may "
                     "connect to a master without --auth; start the master with --auth (README, "
                     "Security), or add --insecure to let anyone who reaches it in");
    if (!insecure) {
      try {
        protocol::KeyPair local = protocol::local_key_pair();
        options.auth =
            protocol::ServerKeys{local, "", {{local.public_key, protocol::kAllRoles, "local"}}};
      } catch (const protocol::AuthError& e) {
        throw BadInput(e.what());
      }
      admits = "admits only this user's local key (" + protocol::local_key_dir() +
               "/local.key): the workers and clients of this OS user on this machine";
    }
  }
  options.bind = bind;
  options.checkpoints = checkpoints.empty() ? global.db + ".checkpoints" : checkpoints;
  options.worker_timeout_s = timeout_s;
  options.snapshot_every = snapshot_every;
  if (!admits.empty())
    spdlog::info("{}", admits);
  else
    spdlog::warn(
        "{} admits anyone who reaches it WITHOUT authentication (--insecure): any process that "
        "can connect to it can submit studies, cancel them, and act as a worker",
        bind);
  if (rules.exec.searcher || rules.exec.trainer)
    spdlog::warn(
        "--allow-exec {}: studies may name commands of these kinds, which this master "
        "(searcher) or its workers (trainer) run as their users",
        protocol::to_string(rules.exec));
  master::Master m(open_plan(global.db), options);
  spdlog::info("listening on {}, search plan {}, checkpoints in {}", bind, global.db,
               options.checkpoints);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  while (!g_interrupted) m.poll(50);
  spdlog::info("stopping");
  return 0;
}

int submit(const std::string& path, const std::string& policy_text, bool wait,
           const GlobalOptions& global) {
  Policy policy = policy_of(policy_text);
  LoadedSpec l = load_spec_file(path);
  protocol::Submit request{.spec = l.spec_json, .policy = to_string(policy)};
  int64_t study = ask_master(global, request.to_json())["study"];
  if (!wait) {
    if (global.format == Format::kJson)
      std::printf("%s\n", json{{"study", l.spec.name}, {"id", study}}.dump().c_str());
    else
      std::printf("submitted study %s (id %lld)\n", l.spec.name.c_str(),
                  static_cast<long long>(study));
    return 0;
  }
  while (true) {
    json r = ask_master(global, protocol::Status{.study = study}.to_json());
    if (!r["running"].get<bool>()) {
      json s = r["summary"];
      if (global.format == Format::kJson)
        std::printf("%s\n", s.dump().c_str());
      else
        std::printf("%s\n", s.dump(2).c_str());
      return s["status"] == "done" ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

void add_budget_options(CLI::App* cmd, Budget* budget) {
  cmd->add_option("--max-trials", budget->trials,
                  "trials one study may create (default " + std::to_string(budget->trials) + ")")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  cmd->add_option("--max-steps", budget->steps,
                  "steps one study's trials may request in all (default " +
                      std::to_string(budget->steps) + ")")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  cmd->add_option("--max-evaluations", budget->evaluations,
                  "evaluations one study's trials may request in all (default " +
                      std::to_string(budget->evaluations) + ")")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
}

LoadedSpec load_spec_file(const std::string& path) {
  try {
    LoadedSpec l;
    l.spec = load_spec(path);
    std::ifstream in(path);
    l.spec_json = json::parse(in);
    return l;
  } catch (const SpecError& e) {
    throw BadInput(e.what());
  }
}

Policy policy_of(const std::string& text) {
  try {
    return parse_policy(text);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--policy: ") + e.what());
  }
}

// --keep-checkpoints: the checkpoint directory's budget (master/retention.h).
void add_keep_option(CLI::App* cmd, std::string* size) {
  cmd->add_option("--keep-checkpoints", *size,
                  "disk budget of the checkpoint directory, with the states kept for later "
                  "studies (e.g. 20GB, 500MiB; 0 keeps none; default " +
                      master::format_size(master::kDefaultKeepCheckpointBytes) + ")");
}

int64_t keep_bytes(const std::string& size) {
  if (size.empty()) return master::kDefaultKeepCheckpointBytes;
  try {
    return master::parse_size(size);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--keep-checkpoints: ") + e.what());
  }
}

void add_exec_option(CLI::App* cmd, std::string* kinds, const std::string& what) {
  cmd->add_option("--allow-exec", *kinds, what + " (searcher, trainer or searcher,trainer)");
}

protocol::ExecKinds exec_kinds(const std::string& text) {
  if (text.empty()) return {};
  try {
    return protocol::parse_exec_kinds(text);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--allow-exec: ") + e.what());
  }
}

void add_run_commands(CLI::App& app, const GlobalOptions& global, Action* action) {
  {
    CLI::App* cmd = app.add_subcommand("run", "run a study to the end with local worker processes");
    cmd->fallthrough();
    struct Args {
      std::string spec, policy = "shared", checkpoints, allow_exec, keep;
      Budget budget;
      int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("spec", a->spec, "study spec (JSON file)")->required();
    cmd->add_option("--workers", a->workers, "worker processes (default: one per core)")
        ->check(CLI::Range(1, 1024));
    cmd->add_option("--policy", a->policy, "shared (default) or trial-based");
    cmd->add_option("--checkpoints", a->checkpoints,
                    "checkpoint directory (default DB.checkpoints)");
    add_exec_option(cmd, &a->allow_exec,
                    "run the spec's commands of these kinds: searcher (in this process), trainer "
                    "(in the local workers)");
    add_budget_options(cmd, &a->budget);
    add_keep_option(cmd, &a->keep);
    cmd->callback([a, &global, action] {
      *action = [a, &global] {
        return run(a->spec, a->workers, a->policy, a->checkpoints,
                   {a->budget, exec_kinds(a->allow_exec), keep_bytes(a->keep)}, global);
      };
    });
  }
  {
    CLI::App* cmd =
        app.add_subcommand("master", "run a master that workers and clients connect to");
    cmd->fallthrough();
    struct Args {
      std::string bind, checkpoints, allow_exec, keep;
      double timeout = 10;
      int64_t snapshot_every = 0;
      MasterAuth auth;
      Budget budget;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("--bind", a->bind,
                    "address to listen on (default tcp://127.0.0.1:5555; with --auth "
                    "tcp://*:5555)");
    cmd->add_flag("--auth", a->auth.auth,
                  "admit only the workers and clients whose public key is in --authorized "
                  "(CURVE); without it, only this user's local key");
    cmd->add_option("--key", a->auth.key, "with --auth: this master's secret key file (keygen)");
    cmd->add_option("--authorized", a->auth.authorized,
                    "with --auth: directory of the admitted peers' public key files, in workers/, "
                    "clients/ and admins/");
    cmd->add_flag("--insecure", a->auth.insecure,
                  "admit anyone who reaches the address, without authentication, on any --bind");
    add_exec_option(cmd, &a->allow_exec,
                    "accept studies whose commands are of these kinds: searcher (run by this "
                    "master), trainer (run by the workers that allow it themselves)");
    add_budget_options(cmd, &a->budget);
    add_keep_option(cmd, &a->keep);
    cmd->add_option("--checkpoints", a->checkpoints,
                    "the master's checkpoint directory (workers may share it or have their own)");
    cmd->add_option("--worker-timeout", a->timeout, "seconds of silence before a worker is lost")
        ->check(CLI::Range(0.1, 3600.0));
    cmd->add_option("--snapshot-every", a->snapshot_every, "also snapshot every N steps (0: off)")
        ->check(CLI::Range(int64_t{0}, INT64_MAX));
    cmd->callback([a, &global, action] {
      *action = [a, &global] {
        return serve(a->bind, a->checkpoints, a->timeout, a->snapshot_every, a->auth,
                     {a->budget, exec_kinds(a->allow_exec), keep_bytes(a->keep)}, global);
      };
    });
  }
  {
    CLI::App* cmd = app.add_subcommand("submit", "send a study to a running master");
    cmd->fallthrough();
    struct Args {
      std::string spec, policy = "shared";
      bool wait = false;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("spec", a->spec, "study spec (JSON file)")->required();
    cmd->add_option("--policy", a->policy, "shared (default) or trial-based");
    cmd->add_flag("--wait", a->wait, "wait for the study to end and print its summary");
    cmd->callback([a, &global, action] {
      *action = [a, &global] { return submit(a->spec, a->policy, a->wait, global); };
    });
  }
}

}  // namespace hippo::cli
