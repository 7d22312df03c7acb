// hippo-worker: connects to a master (ZeroMQ DEALER), executes the jobs it is sent with the
// engine, and reports metrics, snapshots and the end of each job. Single-threaded: between two
// training steps it sends heartbeats and reads the master's orders (snapshot_at, shutdown), so
// it needs no lock and a job never races with its own orders.
//
// It keeps a few trained states in memory (an LRU keyed by the master's state ids) so that a child
// stage can fork from its parent without reading a checkpoint, and writes checkpoints only into
// its checkpoint directory, under plain names the master chose.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "kernels/blas_env.h"
#include "protocol/message.h"
#include "protocol/socket.h"
#include "worker/engine.h"

namespace hippo::worker {
namespace {

using protocol::json;
using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

struct Options {
  std::string master;
  std::string device = "cpu";
  int threads = 1;
  std::string checkpoints = "checkpoints";
  int cache_states = 4;
  int heartbeat_ms = 1000;
  std::string name;
};

// States held in memory, most recently used first.
class StateCache {
 public:
  explicit StateCache(size_t capacity) : capacity_(capacity) {}
  const TrainState* find(int64_t id) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == id) {
        entries_.splice(entries_.begin(), entries_, it);
        return &entries_.front().second;
      }
    return nullptr;
  }
  void put(int64_t id, const TrainState& state) {
    if (find(id)) {
      entries_.front().second = state;
      return;
    }
    entries_.emplace_front(id, state);
    if (entries_.size() > capacity_) entries_.pop_back();
  }
  void clear() { entries_.clear(); }
  json ids() const {
    json out = json::array();
    for (const auto& e : entries_) out.push_back(e.first);
    return out;
  }

 private:
  size_t capacity_;
  std::list<std::pair<int64_t, TrainState>> entries_;
};

class Worker {
 public:
  Worker(const Options& options)
      : options_(options),
        socket_(context_, zmq::socket_type::dealer),
        cache_(options.cache_states) {
    protocol::configure(socket_);
    // A stable identity lets a restarted master recognize this worker's reconnection.
    socket_.set(zmq::sockopt::routing_id, options_.name);
    socket_.connect(options_.master);
  }

  int run() {
    hello();
    while (!g_stop) {
      std::optional<json> message = receive(options_.heartbeat_ms);
      if (!message) {
        send(protocol::make("heartbeat"));
        continue;
      }
      const json& m = *message;
      const std::string type = m["type"];
      if (type == "shutdown") return 0;
      if (type == "reset" && may_hello()) hello();  // the master restarted
      if (type == "welcome") {
        // State ids are the master's: a master that (re)starts names states anew.
        awaiting_welcome_ = false;
        cache_.clear();
        try {
          options_.heartbeat_ms = static_cast<int>(protocol::get_int(m, "heartbeat_ms", 10, 60000));
        } catch (const protocol::ProtocolError& e) {
          std::fprintf(stderr, "worker %s: %s\n", options_.name.c_str(), e.what());
        }
      }
      if (type == "job") execute(m);
      if (type == "snapshot_at")  // its job ended before the order came: the master replays
        std::fprintf(stderr, "worker %s: snapshot_at refused: its job has ended\n",
                     options_.name.c_str());
    }
    return 0;
  }

 private:
  // A hello that got no welcome in 5 s is repeated (the master may have refused it).
  bool may_hello() const {
    return !awaiting_welcome_ || Clock::now() - hello_sent_ > std::chrono::seconds(5);
  }

  // Says who we are. Until the welcome comes, further resets (answers to heartbeats that crossed
  // the hello) are ignored, so that one restart makes one hello.
  void hello() {
    awaiting_welcome_ = true;
    hello_sent_ = Clock::now();
    json m = protocol::make("hello");
    m["name"] = options_.name;
    m["device"] = options_.device;
    m["threads"] = options_.threads;
    m["pid"] = static_cast<int64_t>(getpid());
    m["held"] = cache_.ids();
    send(m);
  }

  void send(const json& m) { protocol::dealer_send(socket_, m); }

  // The next message from the master within timeout_ms, or nullopt. A malformed one is logged,
  // dropped and also gives nullopt.
  std::optional<json> receive(int timeout_ms) {
    std::optional<std::string> body = protocol::dealer_receive(socket_, timeout_ms);
    if (!body) return std::nullopt;
    try {
      return protocol::parse(*body);
    } catch (const protocol::ProtocolError& e) {
      std::fprintf(stderr, "worker %s: refused a message: %s\n", options_.name.c_str(), e.what());
      return std::nullopt;
    }
  }

  Engine& engine_for(const protocol::RunSpec& run) {
    RunConfig config;
    config.model = run.model;
    config.data = run.data;
    config.train_samples = run.train_samples;
    config.eval_samples = run.eval_samples;
    config.seed = run.seed;
    std::string key = json{
        {"m", run.model},
        {"d", run.data},
        {"t", run.train_samples},
        {"e", run.eval_samples},
        {"s", run.seed}}.dump();
    auto it = engines_.find(key);
    if (it == engines_.end()) {
      if (engines_.size() >= 4) engines_.clear();  // a worker serves few root keys at a time
      it = engines_.emplace(key, std::make_unique<Engine>(config, options_.threads)).first;
    }
    return *it->second;
  }

  std::string checkpoint_path(const std::string& file) const {
    return (std::filesystem::path(options_.checkpoints) / file).string();
  }

  void execute(const json& message) {
    int64_t job_id = -1;
    try {
      protocol::Job job = protocol::job_from_json(message);
      job_id = job.id;
      run_job(job);
    } catch (const std::exception& e) {
      json m = protocol::make("failed");
      m["job"] = job_id;
      m["error"] = e.what();
      m["held"] = cache_.ids();
      send(m);
    }
  }

  void report_metric(int64_t job, int64_t step, const Metrics& metrics) {
    json m = protocol::make("metric");
    m["job"] = job;
    m["step"] = step;
    m["metrics"] = {{"accuracy", metrics.accuracy}, {"loss", metrics.loss}};
    send(m);
  }

  void snapshot(int64_t job, const TrainState& s, const protocol::SnapshotOrder& order,
                uint64_t config_hash) {
    cache_.put(order.state, s);
    json m = protocol::make("snapshot");
    m["job"] = job;
    m["step"] = s.step;
    m["state"] = order.state;
    m["file"] = order.file;
    m["bytes"] = 0;
    if (!order.file.empty()) {
      std::string path = checkpoint_path(order.file);
      save_checkpoint(path, s, config_hash);
      m["bytes"] = static_cast<int64_t>(std::filesystem::file_size(path));
    }
    send(m);
  }

  void run_job(protocol::Job& job) {
    auto started = Clock::now();
    Engine& engine = engine_for(job.run);
    TrainState state;
    if (job.parent_state < 0) {
      state = engine.initial_state();
    } else if (const TrainState* held = cache_.find(job.parent_state)) {
      state = *held;  // fork in memory: one copy per buffer
    } else if (!job.parent_file.empty()) {
      state = load_checkpoint(checkpoint_path(job.parent_file), engine.config_hash(),
                              engine.backend());
    } else {
      throw std::runtime_error("parent state " + std::to_string(job.parent_state) +
                               " is neither in memory nor in a checkpoint");
    }
    if (state.step != job.from)
      throw std::runtime_error("parent state is at step " + std::to_string(state.step) +
                               ", the job starts at " + std::to_string(job.from));

    size_t next_eval = 0, next_snapshot = 0;
    auto due_evals = [&](const TrainState& s) {
      while (next_eval < job.eval_steps.size() && job.eval_steps[next_eval] == s.step) {
        report_metric(job.id, s.step, engine.evaluate(s));
        ++next_eval;
      }
    };
    due_evals(state);
    auto last_beat = Clock::now();
    bool stop = false;
    engine.train(state, job.to, job.hyperparams, job.run.fixed, [&](const TrainState& s) {
      due_evals(s);
      while (next_snapshot < job.snapshots.size() && job.snapshots[next_snapshot].step <= s.step) {
        if (job.snapshots[next_snapshot].step == s.step)
          snapshot(job.id, s, job.snapshots[next_snapshot], engine.config_hash());
        ++next_snapshot;
      }
      if (Clock::now() - last_beat > std::chrono::milliseconds(options_.heartbeat_ms)) {
        last_beat = Clock::now();
        json beat = protocol::make("heartbeat");
        beat["job"] = job.id;
        beat["step"] = s.step;
        send(beat);
      }
      read_orders(job, s.step, next_snapshot, stop);
      return !stop && !g_stop;
    });
    if (stop || g_stop) return;  // abandoned: the master gives the work out again
    json done = protocol::make("done");
    done["job"] = job.id;
    done["step"] = state.step;
    done["busy_s"] = std::chrono::duration<double>(Clock::now() - started).count();
    done["held"] = cache_.ids();
    send(done);
  }

  // Reads the orders the master sent while this job runs, without waiting.
  void read_orders(protocol::Job& job, int64_t step, size_t next_snapshot, bool& stop) {
    // Once the job is abandoned, what follows (a welcome, a new job) is for the main loop.
    while (!stop) {
      std::optional<json> message = receive(0);
      if (!message) break;
      const json& m = *message;
      const std::string type = m["type"];
      if (type == "shutdown") {
        g_stop = 1;
        stop = true;
      } else if (type == "reset" && may_hello()) {
        // The master restarted and does not know this job: drop it and introduce ourselves.
        stop = true;
        hello();
      } else if (type == "snapshot_at") {
        try {
          if (protocol::get_int(m, "job") != job.id) continue;
          protocol::SnapshotOrder order{protocol::get_int(m, "step", step + 1, job.to),
                                        protocol::get_int(m, "state"),
                                        protocol::get_file_name(m, "file")};
          auto pos = job.snapshots.begin() + static_cast<std::ptrdiff_t>(next_snapshot);
          while (pos != job.snapshots.end() && pos->step < order.step) ++pos;
          if (pos == job.snapshots.end() || pos->step != order.step)
            job.snapshots.insert(pos, order);
        } catch (const protocol::ProtocolError& e) {
          // Too late (we are past that step) or malformed: the master rebuilds the state itself.
          std::fprintf(stderr, "worker %s: snapshot_at refused: %s\n", options_.name.c_str(),
                       e.what());
        }
      } else if (type == "job") {
        std::fprintf(stderr, "worker %s: refused a job while busy\n", options_.name.c_str());
      }
    }
  }

  Options options_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  StateCache cache_;
  bool awaiting_welcome_ = false;
  Clock::time_point hello_sent_;
  std::map<std::string, std::unique_ptr<Engine>> engines_;
};

}  // namespace
}  // namespace hippo::worker

int main(int argc, char** argv) {
  hippo::kernels::use_native_blas_kernels(argv);
  using hippo::worker::Options;
  CLI::App app{"hippo-worker: executes stages for a hippo master"};
  Options options;
  app.add_option("--master", options.master, "master address, e.g. tcp://127.0.0.1:5555")
      ->required();
  app.add_option("--device", options.device, "cpu (cuda:N needs the CUDA engine)");
  app.add_option("--threads", options.threads, "threads for this worker's kernels")
      ->check(CLI::Range(1, 256));
  app.add_option("--checkpoints", options.checkpoints, "checkpoint directory");
  app.add_option("--cache", options.cache_states, "trained states kept in memory")
      ->check(CLI::Range(1, 1024));
  app.add_option("--heartbeat-ms", options.heartbeat_ms,
                 "heartbeat interval until the master sets one")
      ->check(CLI::Range(10, 60000));
  app.add_option("--name", options.name, "worker name (default host-pid)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (options.device != "cpu") {
    std::fprintf(stderr, "error: --device %s: this worker has only the cpu engine\n",
                 options.device.c_str());
    return 2;
  }
  if (options.name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    options.name = std::string(host) + "-" + std::to_string(getpid());
  }
  std::error_code ec;
  std::filesystem::create_directories(options.checkpoints, ec);
  if (ec) {
    std::fprintf(stderr, "error: --checkpoints %s: %s\n", options.checkpoints.c_str(),
                 ec.message().c_str());
    return 2;
  }
  std::signal(SIGTERM, hippo::worker::on_signal);
  std::signal(SIGINT, hippo::worker::on_signal);
  try {
    hippo::worker::Worker worker(options);
    return worker.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
