// Trust boundaries, end to end (README, Security): one test per attack that worked against the
// landed binaries, each made against real hippo and hippo-worker processes with real ZeroMQ peers
// (a fake worker, a fake master, a raw ZMTP connection) on real sockets.
//
//   1 CommandsRunOnlyWithConsent          a spec's command runs only where its operator allowed it
//   2 OnlyTheOperatorsUserConnects        a master without --auth admits only its user's key
//     AWorkerIsItsKey                     a worker's identity, jobs and claims belong to its key
//     RolesAreSeparate                    client keys are no workers; studies cancelled by owners,
//                                         workers drained by admins
//   5 BudgetsKeepTheMasterAnswering       huge but valid specs are refused, or enter in batches
//   6 AnUnfinishedMessageIsCapped         a message that never ends cannot grow the master
//   7 WorkersObeyOnlyTheirMaster          a worker refuses a master that cannot prove its key
//  29 AStorageIsItsKey                    a storage named by one key cannot be claimed by another;
//                                         a refused worker is told why and backs off (issue 43)
//     SnapshotSizesAreChecked             a snapshot's reported size is bounded and plausible
//  43 TrainersUseTheBytesThatWereChecked  a checkpoint replaced after its check is never used
//     OneMasterPerPlanWhateverItsPath     a second master through a symlink or hard link refused
//     OutsideTextIsEscaped                a trainer's and a searcher's stderr reach logs escaped
//     IdsAndNamesNeverCollide             "#N" is an id; names are never ids, and are bounded
//     IdleTrainersAreEnded                a kept trainer without a stage to train is ended
//
// Where a test measures the answer time of the master (a `hippo workers` round trip, and a
// `hippo studies` read of the plan) during an attack, it prints the largest as "answer_s".

#include <atomic>
#include <cstring>
#include <regex>
#include <thread>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

using namespace std::chrono_literals;

// The first line of a key file.
std::string key_text(const std::string& file) {
  std::ifstream in(file);
  std::string key;
  std::getline(in, key);
  return key;
}

// A peer that speaks hippo's protocol over a real ZeroMQ DEALER: a fake worker. With keys it is a
// CURVE client (the master's public key, its own pair), else it offers no authentication.
class FakePeer {
 public:
  struct Keys {
    std::string master_public, own_public, own_secret;
  };
  FakePeer(const std::string& address, const Keys* keys = nullptr,
           const std::string& routing_id = "")
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    if (keys) {
      socket_.set(zmq::sockopt::curve_serverkey, keys->master_public);
      socket_.set(zmq::sockopt::curve_publickey, keys->own_public);
      socket_.set(zmq::sockopt::curve_secretkey, keys->own_secret);
    }
    if (!routing_id.empty()) socket_.set(zmq::sockopt::routing_id, routing_id);
    socket_.connect(address);
  }
  void send(json m) {
    m["v"] = 1;
    std::string body = m.dump();
    socket_.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    socket_.send(zmq::buffer(body), zmq::send_flags::dontwait);
  }
  void hello(const std::string& name) {
    send({{"type", "hello"}, {"name", name}, {"device", "cpu"}, {"threads", 1}, {"pid", 1}});
  }
  // The next message of one of the given types within `seconds` (others are skipped), or null.
  json next(const std::vector<std::string>& types, double seconds) {
    for (auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
         Clock::now() < deadline;) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, 50ms) == 0) continue;
      std::vector<zmq::message_t> frames;
      do {
        frames.emplace_back();
        (void)socket_.recv(frames.back());
      } while (frames.back().more());
      json m = json::parse(frames.back().to_string(), nullptr, false);
      if (m.is_discarded()) continue;
      for (const std::string& type : types)
        if (m.value("type", "") == type) return m;
    }
    return nullptr;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

// Which of a fake master's attacks reached the worker (finding 7).
struct FakeMasterResult {
  bool hello = false;           // the worker said hello to it
  bool victim_changed = false;  // it made the worker write over an existing file
};

// A fake master on `address`: a ROUTER without CURVE, or a CURVE server with a key of its own.
// It answers what comes as a restarted master would (reset: say hello) and waits `seconds` for a
// hello; if one comes, it welcomes the worker and orders a job whose snapshot would overwrite
// `victim` in the worker's checkpoint directory.
FakeMasterResult fake_master(const std::string& address, const std::string& own_secret,
                             const std::string& victim, double seconds) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  if (!own_secret.empty()) {
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, own_secret);
  }
  for (int attempt = 0;; ++attempt) {  // the real master's port is released as it dies
    try {
      router.bind(address);
      break;
    } catch (const zmq::error_t&) {
      if (attempt == 100) throw;
      std::this_thread::sleep_for(50ms);
    }
  }
  FakeMasterResult result;
  const std::string before = read_file(victim);
  std::string peer;
  for (auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
       Clock::now() < deadline;) {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 50ms) == 0) continue;
    std::vector<zmq::message_t> frames;
    do {
      frames.emplace_back();
      (void)router.recv(frames.back());
    } while (frames.back().more());
    json m = json::parse(frames.back().to_string(), nullptr, false);
    if (m.is_discarded()) continue;
    if (m.value("type", "") != "hello") {  // as a restarted master: "say hello first"
      router.send(zmq::buffer(frames[0].to_string()), zmq::send_flags::sndmore);
      router.send(zmq::message_t(), zmq::send_flags::sndmore);
      router.send(zmq::str_buffer(R"({"v":1,"type":"reset"})"), zmq::send_flags::none);
      continue;
    }
    result.hello = true;
    peer = frames[0].to_string();
    break;
  }
  if (result.hello) {  // the attack of the issue: welcome, then a job that snapshots over a file
    auto send = [&](const json& m) {
      router.send(zmq::buffer(peer), zmq::send_flags::sndmore);
      router.send(zmq::message_t(), zmq::send_flags::sndmore);
      router.send(zmq::buffer(m.dump()), zmq::send_flags::none);
    };
    send({{"v", 1}, {"type", "welcome"}, {"incarnation", "fake"}, {"heartbeat_ms", 100}});
    send(small_job({{{"step", 4}, {"state", 1}, {"file", fs::path(victim).filename().string()}}}));
    std::this_thread::sleep_for(5s);
    result.victim_changed = read_file(victim) != before;
  }
  return result;
}

// The largest answer times while something runs: a `hippo workers` round trip to the master and
// a `hippo studies` read of its plan.
struct AnswerTimes {
  double master_s = 0, plan_s = 0;
  int queries = 0;
  bool all_answered = true;
};

class Trust : public E2ETest {
 protected:
  std::string log_path(pid_t pid) const { return path("process-" + std::to_string(pid) + ".log"); }
  // A long-lived trainer's study on two workers (issue 43, item 7; below).
  void trainers_end_after_their_study(const std::string& trainer_idle);

  // `hippo keygen NAME`, the public half also into authorized/ROLE/ when given.
  void keygen(const std::string& name, const std::string& role = "") {
    ASSERT_EQ(sh(kHippo + " keygen " + path(name) + " >/dev/null").status, 0);
    if (role.empty()) return;
    fs::create_directories(path("authorized/" + role));
    fs::copy_file(path(name + ".pub"), path("authorized/" + role + "/" + name + ".pub"));
  }
  FakePeer::Keys keys_of(const std::string& name) {
    return {key_text(path("master.pub")), key_text(path(name + ".pub")),
            key_text(path(name + ".key"))};
  }
  std::string client(const std::string& address, const std::string& name) {
    return kHippo + " --master " + address + " --master-key " + path("master.pub") + " --key " +
           path(name + ".key") + " ";
  }

  // A master on a free loopback port with `flags`, with 4 GiB of address space at most (an attack
  // that would take more makes it fail, not the machine); its address.
  std::string start_master(const std::string& db, const std::vector<std::string>& flags,
                           pid_t* pid = nullptr) {
    const std::string address = "tcp://127.0.0.1:" + std::to_string(free_port());
    std::vector<std::string> args = {kHippo,   "--db",  path(db),        "master",
                                     "--bind", address, "--checkpoints", path(db + ".ck")};
    args.insert(args.end(), flags.begin(), flags.end());
    pid_t p = spawn(args, [] { limit_address_space(4ull << 30); });
    EXPECT_TRUE(appears(log_path(p), "listening on")) << read_file(log_path(p));
    if (pid) *pid = p;
    return address;
  }

  // Measures answer times every 200 ms while `running()` holds (and at least once).
  AnswerTimes answer_times(const std::string& master_query, const std::string& db,
                           const std::function<bool()>& running) {
    AnswerTimes t;
    do {
      for (auto [command, worst] :
           {std::pair{master_query + " --format json workers", &t.master_s},
            std::pair{kHippo + " --db " + path(db) + " --format json studies", &t.plan_s}}) {
        auto started = Clock::now();
        Result r = sh(command + " 2>/dev/null");
        double s = std::chrono::duration<double>(Clock::now() - started).count();
        *worst = std::max(*worst, s);
        if (r.status != 0) t.all_answered = false;
      }
      ++t.queries;
      std::this_thread::sleep_for(200ms);
    } while (running());
    return t;
  }
  // The slowest answer allowed while under attack: 1 s, or 2 s where the sanitizers slow every
  // process (the clients that ask too).
  static constexpr double kSlowestAnswer_s = kAddressSanitized ? 2.0 : 1.0;
  static void report(const std::string& attack, const AnswerTimes& t) {
    std::printf("answer_s %s: master %.3f, plan %.3f (largest of %d)\n", attack.c_str(), t.master_s,
                t.plan_s, t.queries);
  }
};

// Finding 1: a spec's command ran on the master for any client, in preview, in `hippo run`
// without --allow-exec, and again at every restart.
TEST_F(Trust, CommandsRunOnlyWithConsent) {
  const std::string marker = path("ran");
  json searcher = {{"name", "external"},
                   {"command",
                    {"/bin/sh", "-c",
                     "echo started >> " + marker + "; exec /usr/bin/python3 " + kExamples +
                         "/searchers/random_search.py"}},
                   {"max_trials", 2}};
  std::string searching = spec("searching", {{"searcher", searcher}});
  std::string training =
      spec("training", {{"model",
                         {{"type", "external"},
                          {"command", {"/bin/sh", "-c", "echo trained >> " + marker}},
                          {"hidden", nullptr}}},
                        {"fixed", {{"optimizer", nullptr}}}});

  // preview shows what it knows and starts nothing.
  Result preview = sh(kHippo + " preview " + searching + " 2>&1");
  EXPECT_EQ(preview.status, 0) << preview.out;
  EXPECT_FALSE(fs::exists(marker)) << "preview ran the searcher's command";

  // A master without --allow-exec refuses both kinds at submit time, with exit status 2.
  std::string address = start_master("plan.db", {});
  Result s = sh(kHippo + " --master " + address + " submit " + searching + " 2>&1");
  EXPECT_EQ(s.status, 2) << s.out;
  EXPECT_NE(s.out.find("--allow-exec searcher"), std::string::npos) << s.out;
  Result t = sh(kHippo + " --master " + address + " submit " + training + " 2>&1");
  EXPECT_EQ(t.status, 2) << t.out;
  EXPECT_NE(t.out.find("--allow-exec trainer"), std::string::npos) << t.out;
  // `hippo run` likewise, for each kind.
  EXPECT_EQ(sh(hippo("run.db") + "run " + searching + " --workers 1 2>/dev/null").status, 2);
  Result r = sh(hippo("run2.db") + "run " + training + " --workers 1 2>&1");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--allow-exec trainer"), std::string::npos) << r.out;
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker);

  // A master that allows searchers runs it; the same plan under a master that does not is not
  // run again (the study is interrupted, saying why: a master that allows it may resume it),
  // whoever allowed it before.
  pid_t allowing = 0;
  std::string address2 = start_master("restart.db", {"--allow-exec", "searcher"}, &allowing);
  Result ok = sh(kHippo + " --master " + address2 + " submit " + searching + " 2>&1");
  ASSERT_EQ(ok.status, 0) << ok.out;
  ASSERT_TRUE(appears(marker, "started")) << read_file(log_path(allowing));
  kill(allowing, SIGKILL);
  waitpid(allowing, nullptr, 0);
  pid_t refusing = 0;
  start_master("restart.db", {}, &refusing);
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(read_file(marker), "started\n") << "the restarted master ran the command again";
  Result study = sh("sqlite3 " + path("restart.db") + " 'SELECT status, error FROM studies'");
  EXPECT_EQ(study.out.rfind("interrupted|this master cannot resume it", 0), 0u) << study.out;
  EXPECT_NE(study.out.find("--allow-exec searcher"), std::string::npos) << study.out;
}

// Finding 2: any local user connected to a master without --auth, said hello as a worker, and
// reported metrics for the jobs it was given (a fake accuracy of 1.0 became the best trial).
TEST_F(Trust, OnlyTheOperatorsUserConnects) {
  keygen("stranger");
  pid_t master = 0;
  std::string address = start_master("plan.db", {"--worker-timeout", "30"}, &master);
  ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + spec("s", json::object())).status, 0);
  // Another user has no access to this user's local key: it connects without a key, or with one
  // of its own (it may well know the master's public key).
  const std::string master_public = local_key_pair().first;
  FakePeer::Keys stranger = {master_public, key_text(path("stranger.pub")),
                             key_text(path("stranger.key"))};
  std::vector<FakePeer::Keys*> strangers = {nullptr};
  if (!master_public.empty()) strangers.push_back(&stranger);
  for (FakePeer::Keys* keys : strangers) {
    FakePeer fake(address, keys);
    fake.hello("intruder");
    json welcome = fake.next({"welcome"}, 3);
    EXPECT_TRUE(welcome.is_null()) << "a peer " << (keys ? "with a key of its own" : "without key")
                                   << " was welcomed as a worker";
    if (welcome.is_null()) continue;
    // The attack: report a perfect accuracy for every evaluation of the job it is given.
    json job = fake.next({"job"}, 10);
    if (job.is_null()) continue;
    for (const json& step : job["eval_steps"])
      fake.send({{"type", "metric"},
                 {"job", job["job"]},
                 {"step", step},
                 {"metrics", {{"accuracy", 1.0}, {"loss", 0.0}}}});
    fake.send({{"type", "done"}, {"job", job["job"]}, {"step", job["to"]}, {"busy_s", 1.0}});
    std::this_thread::sleep_for(1s);
  }
  // The operator's own worker runs the study; no metric came from anyone else.
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("plan.db.ck"), "--name",
         "own"});
  json studies;
  for (int i = 0; i < 600; ++i) {
    studies = json::parse(sh(hippo("plan.db") + "--format json studies").out);
    if (studies.size() == 1 && studies[0]["status"] != "running") break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(studies[0]["status"], "done") << studies;
  json best = json::parse(sh(hippo("plan.db") + "--format json best s").out);
  EXPECT_LT(best["value"].get<double>(), 1.0) << best;
  EXPECT_EQ(sh("sqlite3 " + path("plan.db") +
               " \"SELECT count(*) FROM events WHERE kind = 'worker_joined'\"")
                .out,
            "1\n");
  EXPECT_NE(read_file(log_path(master)).find("refused a"), std::string::npos)
      << read_file(log_path(master));
}

// Finding 2: a second peer that used a worker's name (published by `hippo workers`) took over
// its connection; a hostile worker made the master delete a parent checkpoint it did not write
// and fail every trial through a stage, across studies.
TEST_F(Trust, AWorkerIsItsKey) {
  keygen("master");
  keygen("honest", "workers");
  keygen("hostile", "workers");
  keygen("client", "clients");
  pid_t master = 0;
  std::string address = start_master("plan.db",
                                     {"--auth", "--key", path("master.key"), "--authorized",
                                      path("authorized"), "--worker-timeout", "30"},
                                     &master);
  spawn({kHippo, "worker", "--master", address, "--checkpoints", path("plan.db.ck"), "--name", "w1",
         "--master-key", path("master.pub"), "--key", path("honest.key")});
  for (int i = 0;
       i < 100 &&
       sh(client(address, "client") + "--format json workers 2>/dev/null").out.find("\"w1\"") ==
           std::string::npos;
       ++i)
    std::this_thread::sleep_for(100ms);

  // Another admitted key takes the name (and, as before, the name as its routing identity):
  // refused, and the real w1 keeps its connection.
  FakePeer::Keys hostile = keys_of("hostile");
  {
    FakePeer thief(address, &hostile, "w1");
    thief.hello("w1");
    EXPECT_TRUE(thief.next({"welcome"}, 3).is_null()) << "w1's name was taken by another key";
  }

  // A hostile worker of its own name fails every job it gets, claiming the parent checkpoint
  // corrupt when there is one. One key alone is not believed while another key's worker can try.
  FakePeer worker(address, &hostile);
  worker.hello("w2");
  json welcome = worker.next({"welcome"}, 10);
  ASSERT_FALSE(welcome.is_null()) << read_file(log_path(master));
  const std::string spec_file = spec("shared", json::object());  // 4 trials, 2 shared prefixes
  pid_t submit = spawn({kHippo, "--master", address, "--master-key", path("master.pub"), "--key",
                        path("client.key"), "--format", "json", "submit", spec_file, "--wait"});
  int jobs = 0, claims = 0, submit_status = -1;
  auto last_beat = Clock::now();
  auto submitted = [&] {
    int status = 0;
    if (waitpid(submit, &status, WNOHANG) != submit) return false;
    submit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    return true;
  };
  while (!submitted() && jobs < 40) {
    if (Clock::now() - last_beat > 300ms) {
      worker.send({{"type", "heartbeat"}});
      last_beat = Clock::now();
    }
    json job = worker.next({"job"}, 0.3);
    if (job.is_null()) continue;
    ++jobs;
    json failed = {{"type", "failed"},
                   {"job", job["job"]},
                   {"incarnation", welcome.value("incarnation", "")},
                   {"error", "hostile: the stage diverged"}};
    const std::string parent = job["parent_file"];
    if (!parent.empty()) {
      failed["retry"] = true;
      failed["lost_file"] = parent;
      ++claims;
    }
    worker.send(failed);
  }
  if (submit_status == -1) submit_status = exit_status_within(submit, 120);
  ASSERT_EQ(submit_status, 0) << read_file(log_path(master));
  EXPECT_GT(jobs, 0) << "the hostile worker got no job: the test proved nothing";
  // No checkpoint was forgotten (its file deleted, its state replayed) on one key's word.
  EXPECT_EQ(sh("sqlite3 " + path("plan.db") +
               " \"SELECT count(*) FROM events WHERE kind = 'checkpoint_lost'\"")
                .out,
            "0\n")
      << claims << " claims of a lost checkpoint\n"
      << read_file(log_path(master));
  json trials = json::parse(sh(hippo("plan.db") + "--format json trials shared").out);
  ASSERT_EQ(trials.size(), 4u);
  for (const json& trial : trials) EXPECT_EQ(trial["status"], "done") << trial;
}

// Finding 2: keys had no roles (a client's key could act as a worker, a worker's submit and
// cancel), and any client could cancel any study.
TEST_F(Trust, RolesAreSeparate) {
  keygen("master");
  keygen("w", "workers");
  keygen("alice", "clients");
  keygen("bob", "clients");
  keygen("root", "admins");
  pid_t master = 0;
  std::string address = start_master(
      "plan.db", {"--auth", "--key", path("master.key"), "--authorized", path("authorized")},
      &master);
  // A worker's key submits nothing; a client's key says no hello.
  Result as_worker = sh(client(address, "w") + "submit " + spec("a", json::object()) + " 2>&1");
  EXPECT_EQ(as_worker.status, 2) << as_worker.out;
  EXPECT_NE(as_worker.out.find("is not a client"), std::string::npos) << as_worker.out;
  FakePeer::Keys alice = keys_of("alice");
  FakePeer pretender(address, &alice);
  pretender.hello("alice-worker");
  EXPECT_TRUE(pretender.next({"welcome"}, 3).is_null()) << "a client's key acted as a worker";
  EXPECT_TRUE(appears(log_path(master), "is not a worker")) << read_file(log_path(master));

  // Alice's study: Bob may not cancel it, an admin may; Alice may cancel her own.
  ASSERT_EQ(sh(client(address, "alice") + "submit " + spec("a", json::object())).status, 0);
  ASSERT_EQ(sh(client(address, "alice") + "submit " + spec("b", json::object())).status, 0);
  Result bob = sh(client(address, "bob") + "cancel a 2>&1");
  EXPECT_EQ(bob.status, 2) << bob.out;
  EXPECT_NE(bob.out.find("submitted by another key"), std::string::npos) << bob.out;
  EXPECT_EQ(sh(client(address, "root") + "cancel a").status, 0);
  EXPECT_EQ(sh(client(address, "alice") + "cancel b").status, 0);
  json studies = json::parse(sh(hippo("plan.db") + "--format json studies").out);
  ASSERT_EQ(studies.size(), 2u);
  for (const json& s : studies) EXPECT_EQ(s["status"], "cancelled") << s;
  // Draining a worker is an admin's act: a client's key is refused, whatever the name.
  Result drain = sh(client(address, "alice") + "drain anyone 2>&1");
  EXPECT_EQ(drain.status, 2) << drain.out;
  EXPECT_NE(drain.out.find("only an admin"), std::string::npos) << drain.out;
}

// Finding 5: a grid of 10^6 trials blocked the master for 30 s, a length of 10^12 steps with an
// evaluation at every step allocated until bad_alloc, `random` with max_trials 10^9 took GBs in
// preview, and a job over 16 MiB made its worker reconnect forever.
TEST_F(Trust, BudgetsKeepTheMasterAnswering) {
  // A master whose limits let 10^5 trials in (they enter the plan in batches), and one with the
  // default limits, started as the attacks were made (no flag).
  pid_t open = 0, strict = 0;
  const std::string large =
      kHippo + " --master " + start_master("large.db", {"--max-trials", "100000"}, &open);
  const std::string query = kHippo + " --master " + start_master("plan.db", {}, &strict);
  // A grid of `leaves` hyper-parameters with 10 values each: 10^leaves trials of 3 epochs.
  auto grid = [&](const std::string& name, size_t leaves) {
    json s = json::parse(read_file(spec(name, {{"fixed", {{"momentum", nullptr}}}})));
    s["hyperparameters"] = json::object();
    for (const char* leaf : {"lr", "momentum", "weight_decay", "beta1", "beta2", "eps"}) {
      if (s["hyperparameters"].size() == leaves) break;
      s["hyperparameters"][leaf] = {
          {"grid", {0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1}}};
    }
    s.erase("eval");
    std::ofstream(path(name + ".json")) << s.dump();
    return path(name + ".json");
  };
  // Each attack runs as a process; the master is asked meanwhile, and its plan read.
  auto attack = [&](const std::string& name, const std::string& command, const std::string& asked,
                    const std::string& db) {
    pid_t p = spawn(
        {"/bin/sh", "-c", "(" + command + "; echo status $?) >" + path(name + ".out") + " 2>&1"});
    AnswerTimes t = answer_times(asked, db, [&] { return waitpid(p, nullptr, WNOHANG) == 0; });
    children_.erase(std::remove(children_.begin(), children_.end(), p), children_.end());
    report(name, t);
    EXPECT_TRUE(t.all_answered) << name;
    EXPECT_LT(t.master_s, kSlowestAnswer_s) << name << ": the master answered slowly";
    return std::make_pair(read_file(path(name + ".out")), t);
  };
  auto trials_in = [&](const std::string& db) {
    Result n = sh("sqlite3 " + path(db) + " 'SELECT count(*) FROM trials'");
    return n.status == 0 && !n.out.empty() ? std::stoll(n.out) : int64_t{-1};
  };

  // 10^5 trials: accepted, and taken into the plan between the answers. (The plan's `studies`
  // query reads every trial of every study: with 10^5 of them, that query itself takes seconds;
  // it is printed, not held to the second.)
  auto [out, t] = attack("grid-1e5", large + " submit " + grid("big", 5), large, "large.db");
  EXPECT_NE(out.find("status 0"), std::string::npos) << out;
  const auto filling_since = Clock::now();
  AnswerTimes filling = answer_times(large, "large.db", [&] {
    return trials_in("large.db") < 100000 && Clock::now() - filling_since < 180s;
  });
  report("grid-1e5-entering-the-plan", filling);
  EXPECT_LT(filling.master_s, kSlowestAnswer_s);
  EXPECT_EQ(trials_in("large.db"), 100000);

  // The rest are refused at once, naming the field and the limit; the plan stays small.
  auto refused = [&](const std::string& name, const std::string& command,
                     const std::vector<std::string>& says) {
    auto [text, times] = attack(name, command, query, "plan.db");
    EXPECT_LT(times.plan_s, kSlowestAnswer_s) << name << ": the plan answered slowly";
    EXPECT_NE(text.find("status 2"), std::string::npos) << name << ": " << text;
    for (const std::string& s : says) EXPECT_NE(text.find(s), std::string::npos) << text;
  };
  // 10^6 trials: over the default limit.
  refused("grid-1e6", query + " submit " + grid("huge", 6),
          {"searcher.max_trials", "--max-trials"});
  // 10^12 steps with an evaluation at every step.
  std::string endless =
      spec("endless", {{"length", {{"epochs", nullptr}, {"steps", 1000000000000}}},
                       {"eval", {{"every", {{"epochs", nullptr}, {"steps", 1}}}}}});
  refused("length-1e12", query + " submit " + endless, {"length: ", "--max-steps"});
  // A job over the message limit: 3 * 10^6 steps, evaluated at every one (over the evaluations).
  std::string heavy = spec("heavy", {{"length", {{"epochs", nullptr}, {"steps", 3000000}}},
                                     {"eval", {{"every", {{"epochs", nullptr}, {"steps", 1}}}}},
                                     {"hyperparameters", constant_lr({0.1})}});
  refused("job-24MB", query + " submit " + heavy, {"eval.every: ", "--max-evaluations"});
  // Within the steps and evaluations, but one trial's job would take about 9.9 MB: 9.9 * 10^9
  // steps evaluated every 11,000 (900,000 evaluation steps of 11 digits).
  std::string wide = spec("wide", {{"length", {{"epochs", nullptr}, {"steps", 9900000000}}},
                                   {"eval", {{"every", {{"epochs", nullptr}, {"steps", 11000}}}}},
                                   {"hyperparameters", constant_lr({0.1})}});
  refused("job-9.9MB", query + " submit " + wide, {"eval.every: a trial's job would take"});
  // random with max_trials 10^9: preview refuses it at once, in little memory.
  std::string many = spec("many", {{"searcher", {{"name", "random"}, {"max_trials", 1000000000}}}});
  refused("preview-random-1e9",
          std::string(kAddressSanitized ? "" : "ulimit -v 1000000; ") + "timeout 60 " + kHippo +
              " preview " + many,
          {"searcher.max_trials"});
  EXPECT_EQ(trials_in("plan.db"), 0);
  EXPECT_EQ(waitpid(open, nullptr, WNOHANG), 0) << "a master died";
  EXPECT_EQ(waitpid(strict, nullptr, WNOHANG), 0) << "a master died";
}

// A raw ZMTP 3.0 peer without authentication (the NULL mechanism) that starts a message and never
// ends it: frames of 1 MiB, each flagged "more", until `bytes` are sent or the master drops it.
// Returns the bytes it could send.
int64_t send_unfinished_message(int port, int64_t bytes, std::atomic<bool>* dropped) {
  int fd = connect_loopback(port);
  // A master that stopped reading (ZeroMQ may notice the shut-down connection only at its next
  // heartbeat) leaves a send blocked: 5 s of that is a refusal too; the master's log says which.
  timeval patience{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &patience, sizeof patience);
  unsigned char greeting[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0};
  std::memcpy(greeting + 12, "NULL", 4);
  unsigned char theirs[64];
  if (send(fd, greeting, 64, MSG_NOSIGNAL) != 64 || recv(fd, theirs, 64, MSG_WAITALL) != 64) {
    *dropped = true;
    close(fd);
    return 0;
  }
  // READY with Socket-Type DEALER, then the empty delimiter frame, flagged "more".
  const std::string ready = std::string("\x05READY\x0bSocket-Type\0\0\0\x06", 22) + "DEALER";
  std::string start =
      std::string(1, '\x04') + char(ready.size()) + ready + std::string("\x01\0", 2);
  int64_t sent = 0;
  std::string frame(1 << 20, 'x');
  unsigned char header[9] = {0x03, 0, 0, 0, 0, 0, 0x10, 0, 0};  // long frame, more, 1 MiB
  bool ok = send(fd, start.data(), start.size(), MSG_NOSIGNAL) == ssize_t(start.size());
  while (ok && sent < bytes) {
    ok = send(fd, header, 9, MSG_NOSIGNAL) == 9 &&
         send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == ssize_t(frame.size());
    if (ok) sent += static_cast<int64_t>(frame.size());
  }
  *dropped = !ok;
  close(fd);
  return sent;
}

// The resident memory of a process, in bytes.
int64_t resident_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Finding 6: an unfinished multi-frame message (2,500 frames of 1 MiB, never ended) grew the
// master to 2.5 GB: ZeroMQ limits frames, not messages. The peer here has every right to connect
// (the master runs with --insecure, as a worker without keys would need); the master drops its
// connection at 32 MiB, and answers others meanwhile.
TEST_F(Trust, AnUnfinishedMessageIsCapped) {
  const int port = free_port();
  const std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  pid_t master = spawn({kHippo, "--db", path("plan.db"), "master", "--bind", address, "--insecure"},
                       [] { limit_address_space(4ull << 30); });
  ASSERT_TRUE(appears(log_path(master), "listening on")) << read_file(log_path(master));
  const int64_t before = resident_bytes(master);
  std::atomic<bool> dropped{false}, done{false};
  int64_t sent = 0;
  std::thread attacker([&] {
    sent = send_unfinished_message(port, int64_t{256} << 20, &dropped);
    done = true;
  });
  int64_t most = before;
  AnswerTimes t = answer_times(kHippo + " --insecure --master " + address, "plan.db", [&] {
    most = std::max(most, resident_bytes(master));
    return !done;
  });
  attacker.join();
  report("unfinished-message", t);
  std::printf("resident: %lld MiB before, at most %lld MiB; %lld MiB sent\n",
              static_cast<long long>(before >> 20), static_cast<long long>(most >> 20),
              static_cast<long long>(sent >> 20));
  EXPECT_TRUE(dropped) << "the master took " << (sent >> 20) << " MiB of an unfinished message";
  EXPECT_LT(most - before, int64_t{96} << 20)
      << "the master grew by " << ((most - before) >> 20) << " MiB";
  EXPECT_TRUE(t.all_answered);
  EXPECT_LT(t.master_s, kSlowestAnswer_s);
  EXPECT_NE(read_file(log_path(master)).find("dropped a connection"), std::string::npos)
      << read_file(log_path(master));
}

// Finding 7: a fake master bound to the real one's address while it was down was obeyed by
// workers without a pinned master key: it made a worker overwrite a file in the checkpoint
// directory (and drop its unannounced snapshots).
TEST_F(Trust, WorkersObeyOnlyTheirMaster) {
  keygen("impostor");
  const int port = free_port();
  const std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  auto start = [&] {
    pid_t m = spawn({kHippo, "--db", path("plan.db"), "master", "--bind", address, "--checkpoints",
                     path("ck")});
    EXPECT_TRUE(appears(log_path(m), "listening on")) << read_file(log_path(m));
    return m;
  };
  auto listed = [&] {  // within 30 s: the sanitizer build under CI's load took more than 10
    for (int i = 0; i < 300; ++i) {
      if (sh(kHippo + " --master " + address + " --format json workers 2>/dev/null")
              .out.find("\"w\"") != std::string::npos)
        return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  pid_t master = start();
  pid_t worker = spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"),
                        "--name", "w", "--heartbeat-ms", "100"});
  ASSERT_TRUE(listed()) << read_file(log_path(worker));
  const std::string victim = path("ck/state-victim.ckpt");
  std::ofstream(victim) << "the operator's file";

  kill(master, SIGKILL);
  waitpid(master, nullptr, 0);
  // Someone binds the address while the master is down: without CURVE, then with a key pair of
  // its own (it cannot prove the local key).
  for (const std::string& secret : {std::string(), key_text(path("impostor.key"))}) {
    FakeMasterResult r = fake_master(address, secret, victim, 5);
    EXPECT_FALSE(r.hello) << "the worker said hello to a master "
                          << (secret.empty() ? "without CURVE" : "with another key");
    EXPECT_FALSE(r.victim_changed) << "the worker wrote over " << victim;
  }
  EXPECT_EQ(read_file(victim), "the operator's file");
  EXPECT_EQ(waitpid(worker, nullptr, WNOHANG), 0) << read_file(log_path(worker));
  EXPECT_NE(read_file(log_path(worker)).find("waiting for the master we know"), std::string::npos)
      << read_file(log_path(worker));
  // The real master comes back: the worker, which waited for it, joins it again.
  start();
  EXPECT_TRUE(listed()) << read_file(log_path(worker));
}

// Issue 29, part 2: a storage's identity was a claim. A worker of another key said hello naming an
// honest worker's storage (its .hippo-storage, which it had read or guessed): the master would ask
// it for that storage's files and relay its forgeries. The first key that names a storage owns it,
// in the plan: a restarted master still refuses another key, before the owner is back.
TEST_F(Trust, AStorageIsItsKey) {
  keygen("master");
  keygen("honest", "workers");
  keygen("hostile", "workers");
  keygen("client", "clients");
  const std::vector<std::string> flags = {
      "--auth",           "--key", path("master.key"), "--authorized", path("authorized"),
      "--worker-timeout", "30"};
  pid_t master = 0;
  std::string address = start_master("plan.db", flags, &master);
  pid_t honest =
      spawn({kHippo, "worker", "--master", address, "--checkpoints", path("w1.ck"), "--name", "w1",
             "--master-key", path("master.pub"), "--key", path("honest.key")});
  auto listed = [&](const std::string& name) {
    for (int i = 0; i < 300; ++i) {
      if (sh(client(address, "client") + "--format json workers 2>/dev/null")
              .out.find("\"" + name + "\"") != std::string::npos)
        return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  ASSERT_TRUE(listed("w1")) << read_file(log_path(honest));
  const std::string storage = key_text(path("w1.ck/.hippo-storage"));
  ASSERT_EQ(storage.size(), 32u) << storage;

  FakePeer::Keys hostile = keys_of("hostile");
  auto hello = [&](FakePeer& peer, const std::string& name, const std::string& named) {
    peer.send({{"type", "hello"},
               {"name", name},
               {"device", "cpu"},
               {"threads", 1},
               {"pid", 1},
               {"storage", named}});
    return !peer.next({"welcome"}, 3).is_null();
  };
  {
    FakePeer thief(address, &hostile);
    EXPECT_FALSE(hello(thief, "w2", storage)) << "another key took w1's storage";
  }
  {  // Issue 43: the refusal says why (it was silence, and the worker said "the master does not
     // know us" and knocked again every 5 s for ever).
    FakePeer thief(address, &hostile);
    thief.send({{"type", "hello"},
                {"name", "w2"},
                {"device", "cpu"},
                {"threads", 1},
                {"pid", 1},
                {"storage", storage}});
    json refused = thief.next({"refused"}, 3);
    ASSERT_FALSE(refused.is_null());
    EXPECT_NE(refused.value("error", "").find("belongs to the key honest"), std::string::npos)
        << refused;
  }
  {  // A real worker of that key, on a copy of w1's storage: it logs why, and says hello again
     // only after 10 s (then 20, 40, ... up to 5 minutes).
    fs::create_directories(path("stolen.ck"));
    fs::copy_file(path("w1.ck/.hippo-storage"), path("stolen.ck/.hippo-storage"));
    const std::string before = read_file(log_path(master));
    pid_t thief =
        spawn({kHippo, "worker", "--master", address, "--checkpoints", path("stolen.ck"), "--name",
               "w2", "--master-key", path("master.pub"), "--key", path("hostile.key")});
    ASSERT_TRUE(appears(log_path(thief), "saying hello again in 10 s")) << log_of(thief);
    EXPECT_NE(log_of(thief).find("the master refused us: hello.storage: storage " + storage +
                                 " belongs to the key honest"),
              std::string::npos)
        << log_of(thief);
    std::this_thread::sleep_for(6500ms);  // the old worker had said hello again after 5 s
    kill(thief, SIGKILL);
    waitpid(thief, nullptr, 0);
    auto count = [](const std::string& text, const std::string& what) {
      size_t n = 0;
      for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
      return n;
    };
    const std::string during = read_file(log_path(master)).substr(before.size());
    EXPECT_EQ(count(during, "hello.storage"), 1u) << during;
    EXPECT_EQ(log_of(thief).find("does not know us"), std::string::npos) << log_of(thief);
  }
  {  // The same hello with a storage of its own is welcome: only the storage was refused.
    FakePeer own(address, &hostile);
    EXPECT_TRUE(hello(own, "w3", std::string(32, 'a'))) << read_file(log_path(master));
  }
  EXPECT_NE(read_file(log_path(master)).find("belongs to the key honest"), std::string::npos)
      << read_file(log_path(master));

  // After a restart of the master, with the owner not back yet.
  kill(honest, SIGKILL);
  waitpid(honest, nullptr, 0);
  kill(master, SIGKILL);
  waitpid(master, nullptr, 0);
  address = start_master("plan.db", flags, &master);
  {
    FakePeer thief(address, &hostile);
    EXPECT_FALSE(hello(thief, "w2", storage)) << "after a restart, another key took w1's storage";
  }
  EXPECT_NE(sh("sqlite3 " + path("plan.db") +
               " \"SELECT count(*) FROM events WHERE kind = 'refused_message' AND detail LIKE "
               "'%hello.storage%'\"")
                .out,
            "0\n")
      << read_file(log_path(master));
  // The owner itself comes back and is welcome.
  honest = spawn({kHippo, "worker", "--master", address, "--checkpoints", path("w1.ck"), "--name",
                  "w1", "--master-key", path("master.pub"), "--key", path("honest.key")});
  EXPECT_TRUE(listed("w1")) << read_file(log_path(master));
}

// Issue 29, part 3: a snapshot's size was believed. A worker said its snapshot was 9e18 bytes, and
// the master evicted every state kept for later studies as over the disk budget. Now a size is at
// most kMaxCheckpointBytes, and agrees with the sizes of its root key's other states.
TEST_F(Trust, SnapshotSizesAreChecked) {
  keygen("master");
  keygen("honest", "workers");
  keygen("hostile", "workers");
  keygen("client", "clients");
  pid_t master = 0;
  const std::string address = start_master("plan.db",
                                           {"--auth", "--key", path("master.key"), "--authorized",
                                            path("authorized"), "--worker-timeout", "3"},
                                           &master);
  // A first study leaves states kept for later ones.
  pid_t honest =
      spawn({kHippo, "worker", "--master", address, "--checkpoints", path("plan.db.ck"), "--name",
             "w1", "--master-key", path("master.pub"), "--key", path("honest.key")});
  ASSERT_EQ(sh(client(address, "client") + "submit --wait " + spec("first", json::object()) +
               " >/dev/null 2>&1")
                .status,
            0)
      << read_file(log_path(master));
  auto retained = [&] {
    return sh("sqlite3 " + path("plan.db") +
              " \"SELECT count(*) FROM checkpoints WHERE retained_at IS NOT NULL\"")
        .out;
  };
  std::string kept;
  for (int i = 0; i < 100 && (kept = retained()) == "0\n"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_NE(kept, "0\n") << "nothing was kept: the test proves nothing";
  kill(honest, SIGKILL);
  waitpid(honest, nullptr, 0);
  for (int i = 0;
       i < 100 &&
       sh(client(address, "client") + "--format json workers 2>/dev/null").out.find("\"w1\"") !=
           std::string::npos;
       ++i)
    std::this_thread::sleep_for(100ms);

  // A hostile worker takes the second study's first job (another seed: a new root key) and
  // reports its snapshot as 9e18 bytes, then as 1000 (a first size for the root key, believed
  // as far as the bound goes), then the same snapshot again as 10^9.
  FakePeer::Keys keys = keys_of("hostile");
  auto hostile = std::make_unique<FakePeer>(address, &keys);
  hostile->send({{"type", "hello"},
                 {"name", "w2"},
                 {"device", "cpu"},
                 {"threads", 1},
                 {"pid", 1},
                 {"storage", std::string(32, 'b')}});
  json welcome = hostile->next({"welcome"}, 10);
  ASSERT_FALSE(welcome.is_null()) << read_file(log_path(master));
  ASSERT_EQ(
      sh(client(address, "client") + "submit " + spec("second", {{"seed", 7}}) + " >/dev/null 2>&1")
          .status,
      0)
      << read_file(log_path(master));
  json job, order;
  auto last_beat = Clock::now() - 1s;
  for (auto deadline = Clock::now() + 30s; order.is_null() && Clock::now() < deadline;) {
    if (Clock::now() - last_beat > 300ms) {
      hostile->send({{"type", "heartbeat"}});
      last_beat = Clock::now();
    }
    job = hostile->next({"job"}, 0.3);
    if (job.is_null()) continue;
    for (const json& o : job.value("snapshots", json::array()))
      if (!o.value("file", "").empty()) order = o;
  }
  ASSERT_FALSE(order.is_null()) << "no job with a snapshot file came\n"
                                << read_file(log_path(master));
  for (int64_t bytes :
       {int64_t{9'000'000'000'000'000'000}, int64_t{1000}, int64_t{1'000'000'000}}) {
    hostile->send({{"type", "snapshot"},
                   {"job", job["job"]},
                   {"step", order["step"]},
                   {"state", order["state"]},
                   {"file", order["file"]},
                   {"bytes", bytes},
                   {"checksum", std::string(64, 'c')},
                   {"incarnation", welcome.value("incarnation", "")}});
    hostile->send({{"type", "heartbeat"}});
    std::this_thread::sleep_for(500ms);
  }
  std::this_thread::sleep_for(1s);
  const std::string log = read_file(log_path(master));
  EXPECT_EQ(retained(), kept) << "states kept for later studies were evicted\n" << log;
  EXPECT_NE(log.find("snapshot.bytes: 9000000000000000000 bytes is beyond the bound"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("snapshot.bytes: 1000000000 bytes, but the checkpoints of its root key have "
                     "1000"),
            std::string::npos)
      << log;
  EXPECT_EQ(sh("sqlite3 " + path("plan.db") +
               " \"SELECT count(*) FROM checkpoints WHERE size >= 1000000000\"")
                .out,
            "0\n")
      << "a claimed size entered the plan";

  // A worker of another key, on a storage of its own, trains the same root key: its first
  // snapshot disagrees with the size that only the hostile key said, and is refused; that size is
  // believed no more, and the study ends with every trial trained (no snapshot refused forever).
  hostile.reset();  // its job goes to the honest worker once it is lost
  honest = spawn({kHippo, "worker", "--master", address, "--checkpoints", path("w1.ck"), "--name",
                  "w1", "--master-key", path("master.pub"), "--key", path("honest.key")});
  std::string status;
  for (int i = 0; i < 1200 && status != "done\n"; ++i) {
    std::this_thread::sleep_for(100ms);
    status =
        sh("sqlite3 " + path("plan.db") + " \"SELECT status FROM studies WHERE name = 'second'\"")
            .out;
  }
  const std::string after = read_file(log_path(master));
  EXPECT_EQ(status, "done\n") << after;
  json trials = json::parse(sh(hippo("plan.db") + "--format json trials second").out);
  ASSERT_EQ(trials.size(), 4u);
  for (const json& trial : trials) EXPECT_EQ(trial["status"], "done") << trial;
  size_t refused = 0;
  for (size_t at = 0; (at = after.find("of its root key have 1000 ", at)) != std::string::npos;
       ++at)
    ++refused;
  EXPECT_EQ(refused, 2u) << "the hostile's and one of the honest worker's\n" << after;
}

// A trainer of the user's own (no helper: plain Python) whose metric is the number its parent
// checkpoint holds (0.5 at a root), and whose checkpoints hold that number. `mode`:
//   forge-input   as a neighbour who may write in the checkpoint directory, after the worker's
//                 check of the parent and before its own read, it renames a file holding 0.999
//                 over the parent;
//   forge-output  it says the content hash of what it wrote (as the Python helper does), then
//                 renames a file holding 0.999 over it before the worker reads it.
// Each parent it reads is counted in <ck>/../inputs.
const char* const kForgingTrainer = R"(
import glob, hashlib, json, os, sys
stage = json.loads(sys.stdin.readline())
ck, mode = sys.argv[1], sys.argv[2]
value = 0.5
if stage["input_checkpoint"] is not None:
    if mode == "forge-input":
        parent = glob.glob(os.path.join(ck, "state-*-%d.ckpt" % stage["input_state"]))[0]
        with open(parent + ".x", "w") as f:
            f.write("0.999")
        os.replace(parent + ".x", parent)
    with open(stage["input_checkpoint"]) as f:
        value = float(f.read())
    with open(os.path.join(ck, "..", "inputs"), "a") as f:
        f.write("%s\n" % value)
for s in stage["eval_steps"]:
    print(json.dumps({"step": s, "metric": "accuracy", "value": value}), flush=True)
    print(json.dumps({"step": s, "metric": "loss", "value": 1.0}), flush=True)
for c in stage["checkpoints"]:
    data = str(value).encode()
    with open(c["path"], "wb") as f:
        f.write(data)
    line = {"checkpoint": c["step"]}
    if mode == "forge-output":
        line["checksum"] = hashlib.blake2b(data, digest_size=32).hexdigest()
        with open(c["path"] + ".x", "w") as f:
            f.write("0.999")
        os.replace(c["path"] + ".x", c["path"])
    print(json.dumps(line), flush=True)
print(json.dumps({"done": True}), flush=True)
)";

// Issue 43, item 1: the worker hashed a parent checkpoint, then gave the trainer its path; a
// neighbour replaced the file in between, and the study ended `done` with the forged metric (0.999
// against 0.5), its states then hashed and vouched for. Now the trainer reads the bytes that were
// checked (through the worker's descriptor), and a file replaced after the trainer wrote it is
// refused. The neighbour acts inside the trainer, at the exact point of the race: no sleep.
TEST_F(Trust, TrainersUseTheBytesThatWereChecked) {
  const std::string trainer = path("trainer.py");
  std::ofstream(trainer) << kForgingTrainer;
  for (const std::string mode : {"forge-input", "forge-output"}) {
    const std::string ck = path(mode + ".ck");
    const std::string spec_file =
        spec(mode, {{"model",
                     {{"type", "external"},
                      {"command", {"/usr/bin/python3", trainer, ck, mode}},
                      {"hidden", nullptr}}},
                    {"fixed", {{"optimizer", nullptr}}}});
    Result run = sh(hippo(mode + ".db") + "run " + spec_file + " --checkpoints " + ck +
                    " --workers 1 --allow-exec trainer 2>&1");
    const json t = trials(path(mode + ".db"), mode);
    ASSERT_EQ(t.size(), 4u) << run.out;
    if (mode == "forge-input") {
      EXPECT_EQ(run.status, 0) << run.out;
      ASSERT_NE(read_file(path("inputs")), "") << "no stage read a parent: the test proves nothing";
      EXPECT_EQ(read_file(path("inputs")).find("0.999"), std::string::npos)
          << "a trainer read a forged parent:\n"
          << read_file(path("inputs"));
      for (const json& trial : t)
        for (const json& m : trial["metrics"])
          if (m["name"] == "accuracy") {
            EXPECT_EQ(m["value"], 0.5) << trial;
          }
    } else {
      EXPECT_EQ(run.status, 1) << run.out;
      for (const json& trial : t) {
        EXPECT_EQ(trial["status"], "failed") << trial;
        EXPECT_NE(trial.value("error", "").find("replaced after it was written"), std::string::npos)
            << trial;
      }
      EXPECT_EQ(sh("sqlite3 " + path(mode + ".db") + " \"SELECT count(*) FROM checkpoints\"").out,
                "0\n")
          << "a replaced file was vouched for";
    }
  }
}

// Issue 43, item 3: the lock was the plan's path plus ".lock": a second master through a symlink
// ran beside the first (both died: "no checkpoint with id 1", "UNIQUE constraint failed"), and
// through a hard link (a write-ahead log per name) both "finished" while the plan kept one study.
// The lock now follows the plan's inode; a plan with several hard links is refused; the second
// master is refused before it opens the plan (no log of its own, nothing written).
TEST_F(Trust, OneMasterPerPlanWhateverItsPath) {
  pid_t first = 0;
  const std::string address = start_master("plan.db", {}, &first);
  ASSERT_EQ(sh(kHippo + " --master " + address + " submit " + spec("s", json::object()) +
               " >/dev/null 2>&1")
                .status,
            0);
  fs::create_directories(path("elsewhere"));
  fs::create_symlink(path("plan.db"), path("elsewhere/link.db"));
  // (A second master that is not refused runs until `timeout` ends it: exit status 124.)
  auto second_master = [&](const std::string& db) {
    return sh("timeout 10 " + kHippo + " --db " + db +
              " master --bind tcp://127.0.0.1:" + std::to_string(free_port()) + " 2>&1");
  };
  Result through_symlink = second_master(path("elsewhere/link.db"));
  EXPECT_EQ(through_symlink.status, 1) << through_symlink.out;
  EXPECT_NE(through_symlink.out.find("another process holds the search plan"), std::string::npos)
      << through_symlink.out;
  Result run_through_symlink = sh("timeout 60 " + kHippo + " --db " + path("elsewhere/link.db") +
                                  " run " + spec("r", json::object()) + " --workers 1 2>&1");
  EXPECT_EQ(run_through_symlink.status, 1) << run_through_symlink.out;

  ASSERT_EQ(::link(path("plan.db").c_str(), path("hard.db").c_str()), 0);
  Result through_hard_link = second_master(path("hard.db"));
  EXPECT_EQ(through_hard_link.status, 1) << through_hard_link.out;
  EXPECT_NE(through_hard_link.out.find("has 2 hard links"), std::string::npos)
      << through_hard_link.out;
  EXPECT_FALSE(fs::exists(path("hard.db-wal"))) << "the refused master opened the plan";
  // The first master goes on with its plan, alone.
  EXPECT_EQ(exit_status_within(first, 0), -1) << read_file(log_path(first));
  EXPECT_EQ(sh(kHippo + " --master " + address + " --format json workers").status, 0);
  EXPECT_EQ(json::parse(sh(hippo("plan.db") + "--format json studies").out).size(), 1u);
  kill(first, SIGTERM);
  waitpid(first, nullptr, 0);
  // With no master running, a plan of two names is refused all the same; with one, it runs.
  Result alone = second_master(path("plan.db"));
  EXPECT_EQ(alone.status, 1) << alone.out;
  EXPECT_NE(alone.out.find("has 2 hard links"), std::string::npos) << alone.out;
  fs::remove(path("hard.db"));
  pid_t again = 0;
  start_master("plan.db", {}, &again);
  EXPECT_EQ(exit_status_within(again, 0.5), -1) << read_file(log_path(again));
}

// Issue 43, item 5: a trainer's and an external searcher's stderr reached the terminal raw: a
// clear screen, a terminal title, a line that passed for hippo's own log. Each line now comes
// escaped, after a prefix that names its source.
TEST_F(Trust, OutsideTextIsEscaped) {
  const std::string junk =
      "printf '\\033[2J\\033]0;owned\\007\\n[2099-01-01 00:00:00.000] [run] [info] study x: done "
      "(forged)\\n' >&2; ";
  const std::string trainer = path("trainer.py");
  std::ofstream(trainer) << kForgingTrainer;
  json searcher = {{"name", "external"},
                   {"command",
                    {"/bin/sh", "-c",
                     junk + "exec /usr/bin/python3 " + kExamples + "/searchers/random_search.py"}},
                   {"max_trials", 1}};
  const std::string spec_file = spec(
      "loud",
      {{"searcher", searcher},
       {"model",
        {{"type", "external"},
         {"command",
          {"/bin/sh", "-c", junk + "exec /usr/bin/python3 " + trainer + " " + path("ck") + " -"}},
         {"hidden", nullptr}}},
       {"fixed", {{"optimizer", nullptr}}}});
  Result run =
      sh(hippo("plan.db") + "run " + spec_file + " --workers 1 --allow-exec searcher,trainer 2>&1");
  EXPECT_EQ(run.status, 0) << run.out;
  EXPECT_EQ(run.out.find('\x1b'), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("\n[2099"), std::string::npos) << "a forged log line:\n" << run.out;
  for (const std::string source : {"\\[searcher of loud\\] ", "\\[trainer [0-9]+\\] "}) {
    EXPECT_TRUE(
        std::regex_search(run.out, std::regex(source + "\\\\x1b\\[2J\\\\x1b\\]0;owned\\\\x07\n")))
        << source << "\n"
        << run.out;
    EXPECT_TRUE(std::regex_search(
        run.out, std::regex(source + "\\[2099-01-01 00:00:00.000\\] \\[run\\] \\[info\\] study x")))
        << source << "\n"
        << run.out;
  }
}

// Issue 43, item 7: a study named "1" captured `delete 1`, `cancel 1`, `resume 1`; a 3 MB name was
// accepted at submit, and a 300-byte one could then not be cancelled ("string too long"). "#N"
// names the id N everywhere; a name never reads as an id and has at most 256 bytes, checked at
// submit.
TEST_F(Trust, IdsAndNamesNeverCollide) {
  for (const auto& [name, error] : std::vector<std::pair<std::string, std::string>>{
           {"1", "name: \"1\" reads as a study id"},
           {"#1", "name: \"#1\" reads as a study id"},
           {std::string(3 << 20, 'n'), "a study's name has at most 256"}}) {
    json s = json::parse(read_file(spec("x", json::object())));
    s["name"] = name;
    std::ofstream(path("named.json")) << s.dump();
    Result r = sh(hippo("plan.db") + "run " + path("named.json") + " --workers 1 2>&1");
    EXPECT_EQ(r.status, 2) << r.out.substr(0, 300);
    EXPECT_NE(r.out.find(error), std::string::npos) << r.out.substr(0, 300);
  }
  EXPECT_FALSE(fs::exists(path("plan.db")) &&
               sh(hippo("plan.db") + "--format json studies").out.find("\"name\"") !=
                   std::string::npos);
  const std::string longest(256, 'n');
  json s = json::parse(read_file(spec("x", json::object())));
  s["name"] = longest;
  std::ofstream(path("longest.json")) << s.dump();
  ASSERT_EQ(
      sh(hippo("plan.db") + "run " + path("longest.json") + " --workers 1 >/dev/null 2>&1").status,
      0);
  EXPECT_EQ(sh(hippo("plan.db") + "--format json trials '#1'").status, 0);
  EXPECT_EQ(sh(hippo("plan.db") + "--format json trials --id 1").status, 0);
  EXPECT_EQ(sh(hippo("plan.db") + "--format json trials 2>/dev/null").status, 2);
  Result deleted = sh(hippo("plan.db") + "--format json delete '#1'");
  ASSERT_EQ(deleted.status, 0) << deleted.out;
  EXPECT_EQ(json::parse(deleted.out)["deleted"], longest);
}

// Issue 43, item 7: long-lived trainers, started ahead of their stages (prepare) or kept after
// them, stayed alive for ever: after a 1-trial study, 3 trainer processes, 2 of which never
// trained (on a GPU, memory held for nothing). A 1-trial study of a long-lived trainer on two
// workers with this --trainer-idle: every trainer that started is gone within 10 s of its end.
void Trust::trainers_end_after_their_study(const std::string& trainer_idle) {
  const std::string trainer = path("trainer.py"), pids = path("pids");
  std::ofstream(trainer) << R"(
import json, os, sys
with open(sys.argv[1], "a") as f:
    f.write("%d\n" % os.getpid())
for line in sys.stdin:
    stage = json.loads(line)
    for s in stage["eval_steps"]:
        print(json.dumps({"step": s, "metric": "accuracy", "value": 0.5}), flush=True)
    for c in stage["checkpoints"]:
        with open(c["path"], "w") as f:
            f.write("0.5")
        print(json.dumps({"checkpoint": c["step"]}), flush=True)
    print(json.dumps({"done": True}), flush=True)
)";
  pid_t master = 0;
  const std::string address = start_master("plan.db", {"--allow-exec", "trainer"}, &master);
  for (const std::string name : {"w1", "w2"})
    spawn({kHippo, "worker", "--master", address, "--checkpoints", path(name + ".ck"), "--name",
           name, "--allow-exec", "trainer", "--trainer-idle", trainer_idle});
  const std::string one = spec("one", {{"model",
                                        {{"type", "external"},
                                         {"command", {"/usr/bin/python3", trainer, pids}},
                                         {"long_lived", true},
                                         {"hidden", nullptr}}},
                                       {"fixed", {{"optimizer", nullptr}}},
                                       {"hyperparameters", {{"lr", 0.1}}}});
  Result r =
      sh("timeout 120 " + kHippo + " --master " + address + " submit --wait " + one + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out << read_file(log_path(master));
  std::vector<pid_t> started;
  std::istringstream lines(read_file(pids));
  for (std::string line; std::getline(lines, line);) started.push_back(std::stoi(line));
  ASSERT_FALSE(started.empty()) << "no trainer started: the test proves nothing";
  for (pid_t pid : started) {
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = kill(pid, 0) != 0;
      if (!gone) std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(gone) << "trainer " << pid << " is alive after its study";
  }
}

// A worker ends a kept trainer that has trained nothing for --trainer-idle seconds.
TEST_F(Trust, IdleTrainersAreEnded) {
  trainers_end_after_their_study("1");
}

// And at once when its study ends: the master tells the idle workers that keep one
// (end_trainer), long before an idle bound of 10 minutes.
TEST_F(Trust, TrainersEndWithTheirStudy) {
  trainers_end_after_their_study("600");
}

}  // namespace
}  // namespace hippo::e2e
