// `hippo run` (embedded: a master in this process and N worker processes over ZeroMQ, exactly as
// in a cluster), `hippo master` (a long-running master) and `hippo submit` (send a study to one).
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/kernels.h"
#include "master/cli/cli.h"
#include "master/master.h"
#include "master/run_record.h"
#include "master/warm_start.h"
#include "protocol/auth.h"
#include "protocol/failpoint.h"
#include "protocol/log.h"
#include "protocol/message.h"
#include "protocol/socket.h"
#include "protocol/text.h"
#include "searchers/searcher.h"
#include "storage/time_split.h"

extern char** environ;

namespace hippo::cli {
namespace {

using hippo::Clock;
using nlohmann::json;

volatile std::sig_atomic_t g_interrupted = 0;  // the signal that came
void on_signal(int signal) {
  g_interrupted = signal;
}

SearchPlan open_plan(const std::string& path) {
  try {
    return SearchPlan::open(path);
  } catch (const std::exception& e) {
    throw BadInput(e.what());
  }
}

}  // namespace

// Where each worker's time went (TimeSplit::to_json): seconds per part, each worker's adding to
// the wall time, and the parts' shares of all workers' time.
static void print_time_split(const json& split) {
  const json& workers = split.at("workers");
  if (workers.empty()) return;
  auto width = [](const char* part) { return std::max(8, static_cast<int>(std::strlen(part))); };
  std::printf("  time per worker (s)  %-12s %4s", "", "jobs");
  for (const char* part : kTimeParts) std::printf(" %*s", width(part), part);
  std::printf("\n");
  auto row = [&](const json& w) {
    std::printf("                       %-12s %4lld",
                protocol::printable(w.at("worker").get<std::string>()).c_str(),
                w.at("jobs").get<long long>());
    for (const char* part : kTimeParts)
      std::printf(" %*.2f", width(part), w.at(std::string(part) + "_s").get<double>());
    std::printf("\n");
  };
  for (const json& w : workers) row(w);
  const json& all = split.at("all");
  double total = 0;
  for (const char* part : kTimeParts) total += all.at(std::string(part) + "_s").get<double>();
  if (total <= 0) return;
  std::string shares;
  for (const char* part : kTimeParts)
    if (const double s = all.at(std::string(part) + "_s").get<double>(); s > 0)
      shares += (shares.empty() ? "" : ", ") + std::string(part) + " " +
                std::to_string(static_cast<int>(std::lround(100 * s / total))) + "%";
  std::printf("  time of all workers  %s\n", shares.c_str());
}

void print_summary(const json& s, Format format) {
  if (format == Format::kJson) {
    std::printf("%s\n", s.dump().c_str());
    return;
  }
  auto count = [&](const char* field) { return s.value(field, json(0)).get<long long>(); };
  auto text = [](const json& object, const char* field) {
    return object.at(field).get<std::string>();
  };
  std::printf("study %s: %s\n", protocol::printable(text(s, "study")).c_str(),
              text(s, "status").c_str());
  if (s.contains("error"))
    std::printf("  error: %s\n", protocol::printable(text(s, "error")).c_str());
  std::printf("  trials               %lld\n", count("trials"));
  std::printf("  steps trial-based    %lld\n", count("steps_trial_based"));
  std::printf("  steps unique         %lld (%.2fx less)\n", count("steps_unique"),
              count("steps_unique")
                  ? double(count("steps_trial_based")) / double(count("steps_unique"))
                  : 0.0);
  std::printf("  steps executed       %lld\n", count("steps_executed"));
  // executed + reused = unique + redone: each part says where its steps came from.
  if (count("steps_reused") > 0)
    std::printf("  steps reused         %lld (trained for other studies, not again for this one)\n",
                count("steps_reused"));
  if (count("steps_earlier_runs") > 0)
    std::printf(
        "  steps of earlier runs %lld (of those executed: this study's runs before this one)\n",
        count("steps_earlier_runs"));
  if (count("steps_shared") > 0)
    std::printf(
        "  steps shared         %lld (of those executed: trained once for this study and others "
        "running with it)\n",
        count("steps_shared"));
  if (count("steps_redone") > 0)
    std::printf(
        "  steps redone         %lld (of those executed: trained again after a lost state "
        "or job)\n",
        count("steps_redone"));
  std::printf("  critical path steps  %lld\n", count("critical_path_steps"));
  // Wall time from submit to end; when a master was down meanwhile, the part some master ran it.
  const double wall = s.at("wall_s").get<double>(), active = s.value("active_s", wall);
  if (wall - active > 0.05)
    std::printf(
        "  wall time            %.2f s, %.2f s of it with a master (makespan / lower "
        "bound %.2f)\n",
        wall, active, s.at("makespan_ratio").get<double>());
  else if (s.at("makespan_ratio").get<double>() > 0)
    std::printf("  wall time            %.2f s (makespan / lower bound %.2f)\n", wall,
                s.at("makespan_ratio").get<double>());
  else  // nothing was left to train: no bound to compare with
    std::printf("  wall time            %.2f s\n", wall);
  std::printf("  master per trial     %.3f ms\n", s.at("master_ms_per_trial").get<double>());
  if (s.contains("time")) print_time_split(s["time"]);
  if (s.contains("best")) {
    const json& b = s["best"];
    std::printf("  best                 trial %lld: %s = %.6g at step %lld, params %s\n",
                b.at("trial").get<long long>(), protocol::printable(text(b, "metric")).c_str(),
                b.at("value").get<double>(), b.at("step").get<long long>(),
                protocol::printable(b.at("params").dump()).c_str());
  }
  auto format_number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  if (s.contains("front")) {  // several objectives: the Pareto-optimal feasible trials
    std::printf("  pareto front         %zu trial(s)%s\n", s["front"].size(),
                s["front"].empty() ? " (no feasible trial with every objective)" : "");
    for (const json& t : s["front"]) {
      std::string values;
      for (const auto& [metric, value] : t.at("values").items())
        values += (values.empty() ? "" : ", ") + protocol::printable(metric) + " = " +
                  format_number(value.get<double>());
      std::printf("                       trial %lld: %s at step %lld, params %s\n",
                  t.at("trial").get<long long>(), values.c_str(), t.at("step").get<long long>(),
                  protocol::printable(t.at("params").dump()).c_str());
    }
  }
}

namespace {

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

// A worker process of this run. It is our child and ends with us: the kernel sends it SIGTERM
// when this process dies, however it dies (PR_SET_PDEATHSIG), so no worker outlives its run.
// `device`: "cpu" or "cuda:N" (its trainers get that GPU); `devices`: the pipeline stages of the
// study (each a thread of the worker).
pid_t spawn_worker(const RunDirectory& run, const std::string& checkpoints, int index,
                   const std::string& device, bool allow_trainers, int devices) {
  std::string binary = worker_binary();
  std::string name = "run-" + std::to_string(getpid()) + "-" + std::to_string(index);
  std::vector<std::string> args = {binary, "--master",      run.address(), "--threads",
                                   "1",    "--checkpoints", checkpoints,   "--name",
                                   name,   "--device",      device};
  args.insert(args.end(), {"--devices", "cpu:" + std::to_string(devices)});
  args.insert(args.end(),
              {"--master-key", run.path + "/master.pub", "--key", run.path + "/worker.key"});
  if (allow_trainers) args.insert(args.end(), {"--allow-exec", "trainer"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // Between fork and exec only system calls (this process has other threads: ZeroMQ's).
  const pid_t pid = fork();
  if (pid < 0) throw RunFailed("cannot start " + binary + ": fork failed");
  if (pid == 0) {
    // A process group of its own: a Ctrl-C at the terminal reaches the run alone, which tells
    // its workers to stop (Shutdown) and hears from each how far its job got before it exits.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the run died before the line above: nobody to serve
    execve(binary.c_str(), argv.data(), environ);
    _exit(127);
  }
  return pid;
}

// How to run a study with local workers, and where.
struct LocalRun {
  int workers = 1;
  std::vector<int> gpus;  // when given: worker i on cuda:gpus[i]
  std::string checkpoints;
  master::StudyRules rules;
  std::string events;       // --events FILE ("-": stdout)
  bool lend_cores = false;  // --lend-cores
};

// The master of a run: in this process, with its own keys, on the plan, resuming no study but the
// one it is asked to run (the others left `running` by a run that crashed are interrupted).
struct EmbeddedMaster {
  EmbeddedMaster(const LocalRun& local, const GlobalOptions& global) {
    // Without its workers a run could only be interrupted: refuse before the plan is touched.
    const std::string worker = worker_binary();
    if (access(worker.c_str(), X_OK) != 0)
      throw RunFailed("cannot start workers: " + worker + ": " + std::strerror(errno) +
                      " (hippo runs the hippo-worker binary beside itself: install both together)");
    master::Options options;
    options.bind = dir.address();
    options.checkpoints =
        local.checkpoints.empty() ? global.db + ".checkpoints" : local.checkpoints;
    options.rules = local.rules;
    options.resume_running = false;
    options.events = local.events;
    options.lend_cores = local.lend_cores;
    options.auth = protocol::ServerKeys{
        dir.master, "", {{dir.worker.public_key, protocol::kWorkerRole, "run-workers"}}};
    // `hippo enqueue` of the run's operator, from another process: this OS user's local key is
    // admitted as a client (and an admin: the operator's), for enqueue only, and the run records
    // where it listens in the user's own $HIPPO_HOME (master/run_record.h).
    std::optional<protocol::KeyPair> operator_key;
    try {
      operator_key = protocol::local_key_pair();
      options.auth->admitted.push_back(
          {operator_key->public_key, protocol::kClientRole | protocol::kAdminRole, "local"});
    } catch (const protocol::AuthError& e) {
      spdlog::warn("this run takes no `hippo enqueue`: {}", e.what());
    }
    options.client_requests = std::set<std::string>{protocol::Enqueue::kType};
    lock.emplace(global.db, "a run", /*create=*/true);  // before the plan is opened: plan_lock.h
    master.emplace(open_plan(global.db), options);
    checkpoints = options.checkpoints;
    if (!operator_key) return;
    try {
      record.emplace(global.db, master::RunAddress{dir.address(), dir.master.public_key, getpid()});
    } catch (const std::runtime_error& e) {
      spdlog::warn("this run takes no `hippo enqueue`: {}", e.what());
    }
  }
  RunDirectory dir;
  std::optional<master::PlanLock> lock;
  std::optional<master::Master> master;
  std::string checkpoints;
  std::optional<master::RunRecord> record;  // removed first, before the directory it names
};

// Runs the study to its end with `local.workers` worker processes, draws the progress, and
// prints the summary. A signal (Ctrl-C, SIGTERM) or the loss of every worker interrupts it: it
// stays resumable. Returns the exit status: 0 when the study is done.
int run_to_end(EmbeddedMaster& em, int64_t study, const LocalRun& local, int pipeline_stages,
               const std::string& resume_hint, const GlobalOptions& global) {
  master::Master& m = *em.master;
  // Each worker is one process with one thread, so N workers use N cores without contention.
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  // The run's workers prove the run's own worker key to its master (CURVE): keys meant for a
  // cluster must not reach them.
  unsetenv("HIPPO_MASTER_KEY");
  unsetenv("HIPPO_KEY");
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::vector<pid_t> children;
  for (int i = 0; i < local.workers; ++i) {
    const std::string device =
        local.gpus.empty() ? "cpu" : "cuda:" + std::to_string(local.gpus[static_cast<size_t>(i)]);
    children.push_back(
        spawn_worker(em.dir, em.checkpoints, i, device, local.rules.exec.trainer, pipeline_stages));
  }

  bool tty = isatty(STDERR_FILENO);
  auto last_draw = Clock::now();
  std::string why;  // the study was interrupted
  std::string plan_failure;
  try {
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
        why = "every worker process exited";
        break;
      }
    }
    // It takes no configuration any more: a client finds the plan's word instead of this run.
    em.record.reset();
    if (tty) {
      draw_progress(m.progress(study));
      std::fprintf(stderr, "\n");
    }
    // A study that ended lets its last jobs finish (their Done is on the way); then each worker
    // stops and says how far its job got.
    if (!g_interrupted && why.empty()) m.finish_jobs(5);
    m.shutdown_workers();
  } catch (const master::PlanFailure& e) {
    // The plan cannot be written (a full disk): the study stays as the plan last had it, and
    // the next run finds it interrupted.
    plan_failure = e.what();
  }
  if (!plan_failure.empty() || !why.empty())
    for (pid_t pid : children)
      if (pid > 0) kill(pid, SIGTERM);
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
  if (!plan_failure.empty())
    throw RunFailed("the search plan failed: " + plan_failure + "; " + resume_hint);
  m.remove_unreported_checkpoints();
  if (g_interrupted) why = std::string("interrupted by ") + strsignal(g_interrupted);
  if (!why.empty() && m.study_running(study)) m.interrupt(study, why);
  // What `hippo summary` prints later: the same, recorded in the plan.
  const json summary = m.record_summary(study);
  print_summary(summary, global.format);
  if (summary["status"] == "interrupted") std::fprintf(stderr, "%s\n", resume_hint.c_str());
  return summary["status"] == "done" ? 0 : 1;
}

std::string resume_hint(const std::string& spec_path, const std::string& name) {
  return "the study can be resumed where it stopped: hippo run " + spec_path +
         " --resume, or hippo resume " + protocol::printable(name);
}

int run(const std::string& path, const std::string& policy_text, bool resume, const LocalRun& local,
        const GlobalOptions& global) {
  Policy policy = policy_of(policy_text);
  LoadedSpec l = load_spec_file(path);
  check_devices(l.spec, !local.gpus.empty());
  EmbeddedMaster em(local, global);
  master::Master& m = *em.master;
  int64_t study = 0;
  std::optional<StudyRow> old = m.study_named(l.spec.name);
  try {
    if (resume && old) {
      if (old->status != StudyStatus::kInterrupted)
        throw BadInput("study " + old->name + " is " + to_string(old->status) +
                       ": there is nothing to resume (`hippo trials " + old->name +
                       "` shows it; to run the spec again, give it another \"name\" or `hippo "
                       "delete " +
                       old->name + "`)");
      // A file without `parallel` is the spec it was stored as, with the value resolved then
      // (and its warm start's evaluations).
      std::optional<int64_t> parallel = parallel_of(old->spec);
      if (master::as_written(old->spec) !=
          (parallel ? with_parallel(l.spec_json, *parallel) : l.spec_json))
        throw BadInput("study " + old->name + " was submitted with another spec than " + path +
                       ": resume it as it was with `hippo resume " + old->name +
                       "`, or give this spec another \"name\"");
      m.resume(old->id);
      study = old->id;
    } else {
      l = resolved(std::move(l), local.workers);
      study = m.submit(l.spec, l.spec_json, policy);
    }
  } catch (const SpecError& e) {
    throw BadInput(e.what());
  } catch (const std::invalid_argument& e) {
    // Only an interrupted study can be resumed: --resume is suggested for it alone.
    const bool resumable = !resume && old && old->status == StudyStatus::kInterrupted;
    throw BadInput(std::string(e.what()) +
                   (resumable ? " (or `hippo run " + path + " --resume`)" : ""));
  }
  return run_to_end(em, study, local, l.spec.pipeline.stages, resume_hint(path, l.spec.name),
                    global);
}

// `hippo resume STUDY`: on the master of --master if there is one, else in this process with
// local workers, as `hippo run` would.
int resume_study(const std::string& name, const LocalRun& local, const GlobalOptions& global) {
  if (!global.master.empty()) {
    json r = ask_master(global, protocol::Resume{.study = name}.to_json());
    if (global.format == Format::kJson)
      std::printf("%s\n", r.dump().c_str());
    else
      std::printf("study %s resumed on its master\n",
                  protocol::printable(r.value("name", name)).c_str());
    return 0;
  }
  require_plan(global.db);  // a study to resume is in one
  EmbeddedMaster em(local, global);
  master::Master& m = *em.master;
  std::optional<StudyRow> row = m.study_named(name);
  if (!row) throw BadInput("no study named " + name + " in " + global.db);
  protocol::failpoint("resume.read");  // it may be deleted now (tests/e2e/race_test.cc)
  StudySpec spec;
  try {
    spec = parse_spec(row->spec);
    check_devices(spec, !local.gpus.empty());  // before it is taken up: nothing changes
    m.resume(row->id);
  } catch (const SpecError& e) {
    throw BadInput(e.what());
  } catch (const std::invalid_argument& e) {
    throw BadInput(e.what());
  }
  return run_to_end(em, row->id, local, spec.pipeline.stages,
                    "the study can be resumed where it stopped: hippo resume " + row->name, global);
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
          const std::string& events, bool lend_cores, const GlobalOptions& global) {
  master::Options options;
  options.rules = rules;
  options.lend_cores = lend_cores;
  options.events = checked_events_file(events);
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
  // Locked before it is opened, so that a second master (through any path) writes nothing.
  master::PlanLock lock(global.db, "a master", /*create=*/true);
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
      std::printf("submitted study %s (id %lld)\n", protocol::printable(l.spec.name).c_str(),
                  static_cast<long long>(study));
    return 0;
  }
  while (true) {
    json r = ask_master(global, protocol::Status{.study = study}.to_json());
    if (!r["running"].get<bool>()) {
      json s = r["summary"];
      print_summary(s, global.format);
      if (s["status"] == "interrupted")
        std::fprintf(stderr, "study %s was interrupted (%s): resume it with `hippo resume %s`\n",
                     protocol::printable(l.spec.name).c_str(),
                     protocol::printable(s.value("error", std::string())).c_str(),
                     protocol::printable(l.spec.name).c_str());
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

void check_devices(const StudySpec& spec, bool on_gpus) {
  if (spec.external_model() || on_gpus) return;
  // bf16 is the CUDA backend's alone (the CPU backend refuses it): on CPU workers every trial
  // would fail, so it is refused before anything runs.
  std::string where;
  if (spec.fixed.value("precision", json()) == "bf16") where = "fixed.precision";
  if (const json* v = spec.space.value_of("precision");
      v && v->dump().find("\"bf16\"") != std::string::npos)
    where = "hyperparameters.precision";
  if (where.empty()) return;
  const int present = kernels::cuda_device_count();
  throw BadInput(where + ": bf16 trains on a CUDA GPU only, and " +
                 (present == 0
                      ? "this machine has none (" + kernels::cuda_devices_unseen_reason() + ")"
                      : std::string("this run's workers are on the CPU (give --gpus)")) +
                 ": every trial would fail; use \"fp32\"");
}

LoadedSpec resolved(LoadedSpec l, int64_t workers) {
  try {
    l.spec_json = master::resolve_parallel(l.spec_json, workers);
    l.spec = parse_spec(l.spec_json);
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

// --events FILE: the studies' events as JSON lines (master/events.h), appended to FILE; "-" is
// standard output. BadInput when FILE cannot be opened for appending, before anything starts.
std::string checked_events_file(const std::string& path) {
  if (path.empty() || path == "-") return path;
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) throw BadInput("--events " + path + ": cannot open it: " + std::strerror(errno));
  std::fclose(f);
  return path;
}
void add_events_option(CLI::App* cmd, std::string* path) {
  cmd->add_option("--events", *path,
                  "write the studies' events as JSON lines to FILE as they happen (- for "
                  "standard output): trials started and ended, evaluations, the best so far");
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

namespace {

// The options of a run with local workers (`run`, `resume`), into `a`; `commands` says what
// --allow-exec lets it run.
// --gpus: "all" (every CUDA device this process sees) or device numbers ("0,2"); one worker each.
std::vector<int> parse_gpus(const std::string& text) {
  const int present = kernels::cuda_device_count();
  const std::string seen = "this machine has " + std::to_string(present) + " CUDA device" +
                           (present == 1 ? "" : "s") +
                           (present == 0 ? " (" + kernels::cuda_devices_unseen_reason() + ")" : "");
  std::vector<int> gpus;
  if (text == "all") {
    if (present == 0) throw BadInput("--gpus all: " + seen);
    for (int g = 0; g < present; ++g) gpus.push_back(g);
    return gpus;
  }
  for (std::string_view item : protocol::comma_separated(text)) {  // the form, then the devices
    if (item.empty() || item.size() > 4 ||
        item.find_first_not_of("0123456789") != std::string_view::npos)
      throw BadInput("--gpus: expected all or device numbers like 0,1, got \"" + text + "\"");
    const int g = std::stoi(std::string(item));
    if (std::find(gpus.begin(), gpus.end(), g) != gpus.end())
      throw BadInput("--gpus: cuda:" + std::to_string(g) + " named twice");
    gpus.push_back(g);
  }
  for (int g : gpus)
    if (g >= present) throw BadInput("--gpus: cuda:" + std::to_string(g) + " requested, " + seen);
  return gpus;
}

struct LocalRunArgs {
  std::string checkpoints, allow_exec, keep, gpus, events;
  Budget budget;
  int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CLI::Option* workers_given = nullptr;
  bool lend_cores = false;
  LocalRun local() const {
    LocalRun run{workers,
                 {},
                 checkpoints,
                 {budget, exec_kinds(allow_exec), keep_bytes(keep)},
                 checked_events_file(events),
                 lend_cores};
    if (!gpus.empty()) {
      if (workers_given != nullptr && workers_given->count() > 0)
        throw BadInput("--gpus and --workers: give one (--gpus starts a worker per GPU)");
      run.gpus = parse_gpus(gpus);
      run.workers = static_cast<int>(run.gpus.size());
    }
    return run;
  }
};
// `run` and `master`: the master lends idle workers' cores (Options::lend_cores).
void add_lend_cores_flag(CLI::App* cmd, bool* lend_cores) {
  cmd->add_flag("--lend-cores", *lend_cores,
                "a built-in model's stage takes the cores of idle workers while fewer stages can "
                "run than there are workers (the same bits; a gain on a machine of its own only)");
}

void add_local_run_options(CLI::App* cmd, LocalRunArgs* a, const std::string& commands) {
  a->workers_given =
      cmd->add_option("--workers", a->workers, "local worker processes (default: one per core)")
          ->check(CLI::Range(1, 1024));
  cmd->add_option("--gpus", a->gpus,
                  "a worker per GPU instead: all, or device numbers (0,1); each worker's "
                  "trainers see its GPU alone");
  cmd->add_option("--checkpoints", a->checkpoints, "checkpoint directory (default DB.checkpoints)");
  add_exec_option(cmd, &a->allow_exec,
                  "run the " + commands +
                      " commands of these kinds: searcher (in this process), trainer (in the "
                      "local workers)");
  add_budget_options(cmd, &a->budget);
  add_keep_option(cmd, &a->keep);
  add_events_option(cmd, &a->events);
  add_lend_cores_flag(cmd, &a->lend_cores);
}

}  // namespace

void add_run_commands(CLI::App& app, const GlobalOptions& global, Action* action) {
  {
    CLI::App* cmd = app.add_subcommand("run", "run a study to the end with local worker processes");
    cmd->fallthrough();
    struct Args : LocalRunArgs {
      std::string spec, policy = "shared";
      bool resume = false;
    };
    auto a = std::make_shared<Args>();
    cmd->add_option("spec", a->spec, "study spec (JSON file)")->required();
    cmd->add_option("--policy", a->policy, "shared (default) or trial-based");
    cmd->add_flag("--resume", a->resume,
                  "if the spec's study was interrupted, go on where it stopped (else start it)");
    add_local_run_options(cmd, a.get(), "spec's");
    set_action(cmd, action, kTableOrJson,
               [a, &global] { return run(a->spec, a->policy, a->resume, a->local(), global); });
  }
  {
    CLI::App* cmd = app.add_subcommand(
        "resume",
        "go on with an interrupted study where it stopped: on the master of --master, or with "
        "local worker processes");
    cmd->fallthrough();
    struct Args : LocalRunArgs {
      std::string study;
    };
    auto a = std::make_shared<Args>();
    add_study_argument(cmd, &a->study);
    add_local_run_options(cmd, a.get(), "study's");
    set_action(cmd, action, kTableOrJson,
               [a, &global] { return resume_study(a->study, a->local(), global); });
  }
  {
    CLI::App* cmd =
        app.add_subcommand("master", "run a master that workers and clients connect to");
    cmd->fallthrough();
    struct Args {
      std::string bind, checkpoints, allow_exec, keep, events;
      double timeout = 10;
      int64_t snapshot_every = 0;
      MasterAuth auth;
      Budget budget;
      bool lend_cores = false;
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
    add_events_option(cmd, &a->events);
    cmd->add_option("--checkpoints", a->checkpoints,
                    "the master's checkpoint directory (workers may share it or have their own)");
    cmd->add_option("--worker-timeout", a->timeout, "seconds of silence before a worker is lost")
        ->check(CLI::Range(0.1, 3600.0));
    cmd->add_option("--snapshot-every", a->snapshot_every, "also snapshot every N steps (0: off)")
        ->check(CLI::Range(int64_t{0}, INT64_MAX));
    add_lend_cores_flag(cmd, &a->lend_cores);
    set_action(cmd, action, {}, [a, &global] {  // it logs on stderr
      return serve(a->bind, a->checkpoints, a->timeout, a->snapshot_every, a->auth,
                   {a->budget, exec_kinds(a->allow_exec), keep_bytes(a->keep)}, a->events,
                   a->lend_cores, global);
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
    set_action(cmd, action, kTableOrJson,
               [a, &global] { return submit(a->spec, a->policy, a->wait, global); });
  }
}

}  // namespace hippo::cli
