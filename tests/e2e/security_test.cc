// Security, end to end: CURVE keys from `hippo keygen`, a master with --auth that admits only the
// keys of its --authorized directory (with their roles), the rules of a master without --auth
// (the local key, loopback unless --insecure), and a worker that a hostile master (a real ROUTER
// socket, started with --insecure on both sides) cannot derail. The attacks on the trust
// boundaries themselves are trust_test.cc's.
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Security : public E2ETest {
 protected:
  // `hippo keygen` NAME; the public half also into `authorized` (e.g. authorized/workers) when
  // given.
  void keygen(const std::string& name, const std::string& authorized = "") {
    ASSERT_EQ(sh(kHippo + " keygen " + path(name) + " >/dev/null").status, 0);
    if (authorized.empty()) return;
    fs::create_directories(path(authorized));
    fs::copy_file(path(name + ".pub"), path(authorized + "/" + name + ".pub"));
  }
  std::string log_path(pid_t pid) const { return path("process-" + std::to_string(pid) + ".log"); }
};

TEST_F(Security, KeygenWritesAPairAndNeverOverwritesOne) {
  Result r = sh(kHippo + " --format json keygen " + path("node"));
  ASSERT_EQ(r.status, 0) << r.out;
  std::string secret = read_file(path("node.key")), pub = read_file(path("node.pub"));
  EXPECT_EQ(secret.size(), 41u);  // 40 Z85 characters and a newline
  EXPECT_EQ(pub.size(), 41u);
  EXPECT_NE(secret, pub);
  EXPECT_EQ(last_json(r.out)["public_key"], pub.substr(0, 40));
  struct stat st;
  ASSERT_EQ(stat(path("node.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // A second keygen of the same name changes nothing and says why.
  Result again = sh(kHippo + " keygen " + path("node") + " 2>&1");
  EXPECT_EQ(again.status, 2);
  EXPECT_NE(again.out.find("exists already"), std::string::npos) << again.out;
  EXPECT_EQ(read_file(path("node.key")), secret);
  EXPECT_EQ(read_file(path("node.pub")), pub);
  // Only the .pub is there: still refused, and no .key is written beside it.
  fs::copy_file(path("node.pub"), path("half.pub"));
  EXPECT_EQ(sh(kHippo + " keygen " + path("half") + " 2>/dev/null").status, 2);
  EXPECT_FALSE(fs::exists(path("half.key")));
  EXPECT_EQ(sh(kHippo + " keygen " + path("no/such/dir/k") + " 2>/dev/null").status, 2);
}

TEST_F(Security, MasterWithoutAuthStaysOnLoopbackUnlessInsecure) {
  std::string port = std::to_string(free_port());
  Result open = sh(hippo("open.db") + "master --bind tcp://0.0.0.0:" + port + " 2>&1");
  EXPECT_EQ(open.status, 2);
  EXPECT_NE(open.out.find("--insecure"), std::string::npos) << open.out;
  EXPECT_NE(open.out.find("--auth"), std::string::npos) << open.out;
  EXPECT_FALSE(fs::exists(path("open.db")));  // refused before anything was made

  pid_t loopback =
      spawn({kHippo, "--db", path("lo.db"), "master", "--bind", "tcp://127.0.0.1:" + port});
  EXPECT_TRUE(appears(log_path(loopback), "admits only this user's local key"))
      << read_file(log_path(loopback));
  kill(loopback, SIGKILL);  // frees the port for the next master
  waitpid(loopback, nullptr, 0);

  pid_t insecure = spawn(
      {kHippo, "--db", path("in.db"), "master", "--bind", "tcp://0.0.0.0:" + port, "--insecure"});
  EXPECT_TRUE(appears(log_path(insecure), "WITHOUT authentication"))
      << read_file(log_path(insecure));
  // It serves: a study can be submitted (by anyone: that is what the warning says), by a client
  // that accepts to connect without authentication; one that does not stops with the reason.
  std::string open_client = kHippo + " --master tcp://127.0.0.1:" + port + " ";
  Result r = sh(open_client + "--insecure submit " + spec("open", json::object()));
  EXPECT_EQ(r.status, 0) << r.out;
  Result careful = sh(open_client + "submit " + spec("careful", json::object()) + " 2>&1");
  EXPECT_EQ(careful.status, 2) << careful.out;
  // (Which side sees the mismatch of mechanisms first varies: both causes name --insecure.)
  EXPECT_NE(careful.out.find("--insecure"), std::string::npos) << careful.out;

  // Options that contradict each other are bad input.
  EXPECT_EQ(sh(hippo("x.db") + "master --key " + path("none.key") + " 2>/dev/null").status, 2);
  EXPECT_EQ(sh(hippo("x.db") + "master --auth 2>/dev/null").status, 2);
}

// A master with --auth; one worker and one client whose keys are in its --authorized directory,
// and strangers: a key it does not know, no key, the wrong master key.
TEST_F(Security, AuthenticatedClusterAdmitsOnlyItsKeys) {
  keygen("master");
  keygen("worker", "authorized/workers");
  keygen("client", "authorized/clients");
  keygen("stranger");
  const int port = free_port();
  std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  std::string db = path("auth.db"), checkpoints = path("ck");
  pid_t master =
      spawn({kHippo, "--db", db, "master", "--bind", address, "--checkpoints", checkpoints,
             "--auth", "--key", path("master.key"), "--authorized", path("authorized")});
  std::string master_log = log_path(master);
  ASSERT_TRUE(appears(master_log, "listening on")) << read_file(master_log);
  EXPECT_NE(read_file(master_log).find("admits the 2 keys"), std::string::npos);

  // Workers that the master refuses stop with the reason, in bounded time: a stranger's key, and
  // a worker given no keys (it expects the master to prove this user's local key, which it cannot).
  pid_t unknown =
      spawn({kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name",
             "unknown", "--master-key", path("master.pub"), "--key", path("stranger.key")});
  pid_t keyless = spawn(
      {kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "nokey"});
  EXPECT_EQ(exit_status_within(unknown, 20), 2);
  EXPECT_NE(read_file(log_path(unknown)).find("refused our key"), std::string::npos)
      << read_file(log_path(unknown));
  EXPECT_EQ(exit_status_within(keyless, 20), 2);
  EXPECT_NE(
      read_file(log_path(keyless)).find("runs with --auth (then give --master-key and --key)"),
      std::string::npos)
      << read_file(log_path(keyless));

  // Clients likewise: a clear error and exit status 2, within seconds, not the 30 s timeout.
  std::string spec_file = spec("secure", json::object());
  std::string client = kHippo + " --master " + address + " ";
  auto started = Clock::now();
  Result stranger = sh(client + "--master-key " + path("master.pub") + " --key " +
                       path("stranger.key") + " submit " + spec_file + " 2>&1");
  EXPECT_EQ(stranger.status, 2);
  EXPECT_NE(stranger.out.find("refused our key"), std::string::npos) << stranger.out;
  Result keyless_client = sh(client + "submit " + spec_file + " 2>&1");
  EXPECT_EQ(keyless_client.status, 2);
  EXPECT_NE(keyless_client.out.find("runs with --auth (then give --master-key and --key)"),
            std::string::npos)
      << keyless_client.out;
  Result open_client = sh(client + "--insecure submit " + spec_file + " 2>&1");
  EXPECT_EQ(open_client.status, 2);
  EXPECT_NE(open_client.out.find("requires CURVE"), std::string::npos) << open_client.out;
  // A worker's key is no client's.
  Result worker_key = sh(client + "--master-key " + path("master.pub") + " --key " +
                         path("worker.key") + " submit " + spec_file + " 2>&1");
  EXPECT_EQ(worker_key.status, 2);
  EXPECT_NE(worker_key.out.find("is not a client"), std::string::npos) << worker_key.out;
  Result wrong_master = sh(client + "--master-key " + path("stranger.pub") + " --key " +
                           path("client.key") + " submit " + spec_file + " 2>&1");
  EXPECT_EQ(wrong_master.status, 2);
  EXPECT_NE(wrong_master.out.find("--master-key"), std::string::npos) << wrong_master.out;
  // (Bounded well below one 30 s timeout, with room for a loaded CI machine.)
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - started).count(), 25);

  // A peer without CURVE: the master logs the refusal, and its garbage never reaches the master's
  // message handling. The peer is a raw TCP socket that sends a ZMTP 3.0 greeting offering the
  // NULL mechanism and then stays connected, so the master reads the greeting and sees the
  // mismatch itself (a ZeroMQ socket without CURVE could drop the connection first, and then the
  // master sees only a disconnect).
  {
    int fd = connect_loopback(port);
    std::array<unsigned char, 64> greeting{};  // signature, version 3.0, "NULL", client, filler
    greeting[0] = 0xff;
    greeting[9] = 0x7f;
    greeting[10] = 3;
    std::memcpy(greeting.data() + 12, "NULL", 4);
    const std::string garbage = "not json";
    EXPECT_EQ(send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL), 64);
    send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL);  // the master may have closed already
    EXPECT_TRUE(appears(master_log, "does not use CURVE")) << read_file(master_log);
    close(fd);
  }

  // The admitted worker (keys from the environment) and client run a study to the end.
  pid_t worker = spawn(
      {kHippo, "worker", "--master", address, "--checkpoints", checkpoints, "--name", "admitted"},
      [&] {
        setenv("HIPPO_MASTER_KEY", path("master.pub").c_str(), 1);
        setenv("HIPPO_KEY", path("worker.key").c_str(), 1);
      });
  Result r = sh(client + "--master-key " + path("master.pub") + " --key " + path("client.key") +
                " --format json submit " + spec_file + " --wait");
  ASSERT_EQ(r.status, 0) << r.out << read_file(log_path(worker)) << read_file(master_log);
  json summary = last_json(r.out);
  EXPECT_EQ(summary["status"], "done");
  EXPECT_EQ(summary["trials"], 4);
  EXPECT_EQ(summary["steps_executed"], summary["steps_unique"]);

  // The master named each refusal, processed no message of a refused peer, and saw one worker.
  std::string text = read_file(master_log);
  EXPECT_NE(text.find("refused a connection from 127.0.0.1: its key"), std::string::npos) << text;
  EXPECT_EQ(text.find("refused a message"), std::string::npos) << text;
  // A key directly in the authorized directory has no role: the master refuses to start.
  fs::copy_file(path("stranger.pub"), path("authorized/stranger.pub"));
  Result flat =
      sh(hippo("flat.db") + "master --bind tcp://127.0.0.1:" + std::to_string(free_port()) +
         " --auth --key " + path("master.key") + " --authorized " + path("authorized") + " 2>&1");
  EXPECT_EQ(flat.status, 2) << flat.out;
  EXPECT_NE(flat.out.find("has no role"), std::string::npos) << flat.out;
  Result joined =
      sh("sqlite3 " + db + " \"SELECT count(*) FROM events WHERE kind = 'worker_joined'\"");
  EXPECT_EQ(joined.out, "1\n");
}

TEST_F(Security, KeysForAMasterWithoutAuthFailClearly) {
  keygen("master");
  keygen("client");
  std::string address = "ipc://" + path("master.sock");
  spawn(
      {kHippo, "--db", path("plain.db"), "master", "--bind", address, "--checkpoints", path("ck")});
  std::string keys = " --master-key " + path("master.pub") + " --key " + path("client.key");
  Result r =
      sh(kHippo + " --master " + address + keys + " submit " + spec("s", json::object()) + " 2>&1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("without --auth"), std::string::npos) << r.out;
  pid_t worker = spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"),
                        "--master-key", path("master.pub"), "--key", path("client.key")});
  EXPECT_EQ(exit_status_within(worker, 20), 2);
  EXPECT_NE(read_file(log_path(worker)).find("without --auth"), std::string::npos)
      << read_file(log_path(worker));

  // Half a key pair, or keys swapped, are bad input before anything connects.
  EXPECT_EQ(sh(kHippo + " --master " + address + " --key " + path("client.key") + " submit " +
               spec("t", json::object()) + " 2>/dev/null")
                .status,
            2);
  Result swapped =
      sh(kHippo + " --master " + address + " --master-key " + path("master.key") + " --key " +
         path("client.key") + " submit " + spec("u", json::object()) + " 2>&1");
  EXPECT_EQ(swapped.status, 2);
  EXPECT_NE(swapped.out.find("secret key file"), std::string::npos) << swapped.out;
}

// A fake master (a ROUTER socket here) sends a real worker garbage, wrong versions, unknown types,
// a frame over the size limit, a broken job and a replay of a job it already ran. The worker
// refuses and logs each, keeps running, and still trains real jobs.
TEST_F(Security, WorkerSurvivesAHostileMaster) {
  zmq::context_t context;
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::router_handover, 1);
  router.set(zmq::sockopt::router_mandatory, 1);
  std::string address = "ipc://" + path("fake.sock");
  router.bind(address);
  pid_t worker = spawn({kHippo, "worker", "--master", address, "--checkpoints", path("ck"),
                        "--name", "w", "--heartbeat-ms", "100", "--insecure"});
  std::string worker_log = log_path(worker);

  // The worker's routing identity (random, new at each reconnection): taken from its messages.
  std::string peer;
  // The next message of the worker with the given type (others are skipped), or null.
  auto next = [&](const std::string& type) -> json {
    for (auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline;) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> frames;
      do {
        frames.emplace_back();
        (void)router.recv(frames.back());
      } while (frames.back().more());
      if (frames.size() != 3) continue;
      peer = frames[0].to_string();
      json m = json::parse(frames[2].to_string(), nullptr, false);
      if (!m.is_discarded() && m.value("type", "") == type) return m;
    }
    return nullptr;
  };
  // Retried while the worker is not connected (router_mandatory makes that an error).
  auto send_frames = [&](const std::vector<std::string>& frames) {
    for (int attempt = 0; attempt < 200; ++attempt) {
      try {
        router.send(zmq::buffer(peer), zmq::send_flags::sndmore);
      } catch (const zmq::error_t& e) {
        if (e.num() != EHOSTUNREACH) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      for (size_t i = 0; i < frames.size(); ++i)
        router.send(zmq::buffer(frames[i]),
                    i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      return;
    }
    ADD_FAILURE() << "the worker did not come back";
  };
  auto send = [&](const std::string& body) { send_frames({"", body}); };

  ASSERT_FALSE(next("hello").is_null()) << read_file(worker_log);
  send(json{{"v", 1}, {"type", "welcome"}, {"heartbeat_ms", 100}}.dump());

  json job = small_job(json::array());
  send(job.dump());
  json first = next("done");
  ASSERT_FALSE(first.is_null()) << read_file(worker_log);
  EXPECT_EQ(first["job"], 1);

  const std::vector<std::vector<std::string>> hostile = {
      {"", "\x01\xff\xfe random bytes \x00\x7f"},
      {"", "{\"v\": 2, \"type\": \"job\", \"job\": 2}"},
      {"", "{\"v\": 1, \"type\": \"launch\"}"},
      {"", "{\"v\": 1, \"type\": 5}"},
      {"", std::string(1 << 20, '[')},
      {"no delimiter"},
      {"", "{}", "an extra frame"},
      {"",
       "{\"v\": 1, \"type\": \"snapshot_at\", \"job\": 1, \"step\": 4, \"state\": 2, "
       "\"file\": \"../../etc/passwd\"}"},
      {"", "{\"v\": 1, \"type\": \"job\", \"job\": 7, \"run\": {}}"},
      {"", job.dump()},  // a replay of job 1
  };
  for (const auto& frames : hostile) send_frames(frames);
  // A frame over the 16 MiB limit makes ZeroMQ drop the connection; the worker reconnects.
  send(std::string((16 << 20) + 1, ' '));
  ASSERT_TRUE(appears(worker_log, "refused job 1: a replay")) << read_file(worker_log);

  std::string text = read_file(worker_log);
  EXPECT_NE(text.find("not valid JSON"), std::string::npos) << text;
  EXPECT_NE(text.find("protocol version 2 is not supported"), std::string::npos) << text;
  EXPECT_NE(text.find("unknown type \"launch\""), std::string::npos) << text;
  EXPECT_NE(text.find("message.type: missing"), std::string::npos) << text;
  EXPECT_NE(text.find("nested deeper"), std::string::npos) << text;
  EXPECT_NE(text.find("snapshot_at refused"), std::string::npos) << text;
  EXPECT_NE(text.find("job 7 failed: job.run"), std::string::npos) << text;
  EXPECT_EQ(waitpid(worker, nullptr, WNOHANG), 0) << "the worker exited:\n" << text;

  // Still a worker: it reconnects after the big frame (a new socket, a new identity, a hello),
  // and the next real job runs and reports its metric.
  ASSERT_FALSE(next("hello").is_null()) << read_file(worker_log);
  send(json{{"v", 1}, {"type", "welcome"}, {"heartbeat_ms", 100}}.dump());
  job["job"] = 2;
  send(job.dump());
  json metric = next("metric");
  ASSERT_FALSE(metric.is_null()) << read_file(worker_log);
  EXPECT_EQ(metric["job"], 2);
  EXPECT_GT(metric["metrics"]["accuracy"].get<double>(), 0.0);
  json second = next("done");
  ASSERT_FALSE(second.is_null()) << read_file(worker_log);
  EXPECT_EQ(second["job"], 2);
  EXPECT_NE(read_file(worker_log).find("connecting again"), std::string::npos);
  send(json{{"v", 1}, {"type", "shutdown"}}.dump());
  EXPECT_EQ(exit_status_within(worker, 10), 0);
}

}  // namespace
}  // namespace hippo::e2e
