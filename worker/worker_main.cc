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
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "kernels/blas_env.h"
#include "protocol/message.h"
#include "protocol/socket.h"
#include "worker/engine/engine.h"
#include "worker/external_trainer.h"

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
  protocol::ClientKeys keys;        // --master-key and --key: CURVE (protocol/auth.h)
  bool allow_exec = false;          // run the commands of external-model jobs
  double trainer_timeout_s = 3600;  // the longest an external trainer may go without a line
  // --devices: the device group that runs the stages of a pipelined job ("cpu:N": N stage
  // threads; "cuda:A-B": GPUs A..B); its size is the most pipeline stages this worker takes.
  std::string devices = "cpu:1";
  int device_count = 1;
};

// Parses --devices: "cpu:N" (1 <= N <= 256), "cuda:A" or "cuda:A-B" (A <= B). CUDA devices must be
// present. Returns the problem, or "" and fills device_count.
std::string parse_devices(Options& o) {
  auto number = [](const std::string& text, int& out) {
    if (text.empty() || text.size() > 4 ||
        text.find_first_not_of("0123456789") != std::string::npos)
      return false;
    out = std::stoi(text);
    return true;
  };
  const std::string& d = o.devices;
  if (d.rfind("cpu:", 0) == 0) {
    if (!number(d.substr(4), o.device_count) || o.device_count < 1 || o.device_count > 256)
      return "expected cpu:N with N from 1 to 256, got \"" + d + "\"";
    return "";
  }
  if (d.rfind("cuda:", 0) != 0) return "expected cpu:N or cuda:A-B, got \"" + d + "\"";
  const std::string range = d.substr(5);
  const size_t dash = range.find('-');
  int first = 0, last = 0;
  if (!number(range.substr(0, dash), first) ||
      !number(dash == std::string::npos ? range : range.substr(dash + 1), last) || last < first)
    return "expected cuda:A or cuda:A-B with A <= B, got \"" + d + "\"";
  const int present = hippo::kernels::cuda_device_count();
  if (last >= present)
    return d + " requested, this machine has " + std::to_string(present) + " CUDA devices";
  o.device_count = last - first + 1;
  return "";
}

// A job that failed because of the disk, not the stage: a checkpoint that could not be written
// (the master retries the stage) or a parent checkpoint that could not be read (lost_file: the
// master forgets it and rebuilds the state by replay).
struct StorageFailure : std::runtime_error {
  StorageFailure(const std::string& what, std::string lost)
      : std::runtime_error(what), lost_file(std::move(lost)) {}
  std::string lost_file;
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
        handshakes_(context_, socket_, options.keys.enabled()),
        cache_(options.cache_states) {
    connect();
  }

  int run() {
    hello();
    while (!g_stop) {
      if (connection_lost_) reconnect();
      std::optional<json> message = receive(options_.heartbeat_ms);
      if (!message) {
        // A master that refuses our handshakes stays silent: say why instead of waiting forever.
        if (std::optional<std::string> why = handshakes_.failure(0)) {
          std::fprintf(stderr, "error: worker %s: %s\n", options_.name.c_str(), why->c_str());
          return 2;
        }
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
        last_job_ = 0;
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
      // An "abandon" that comes after its job ended: the master has its "done" or "failed".
      if (type != "shutdown" && type != "reset" && type != "welcome" && type != "job" &&
          type != "snapshot_at" && type != "abandon")
        std::fprintf(stderr, "worker %s: refused a message of unknown type \"%s\"\n",
                     options_.name.c_str(), type.c_str());
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
    m["devices"] = options_.device_count;
    m["pid"] = static_cast<int64_t>(getpid());
    m["held"] = cache_.ids();
    send(m);
  }

  void send(const json& m) {
    if (!protocol::dealer_send(socket_, m)) connection_lost_ = true;
  }

  // Call with a fresh socket_ and handshakes_.
  void connect() {
    protocol::configure(socket_);
    protocol::secure_client(socket_, options_.keys);
    // A stable identity lets a restarted master recognize this worker's reconnection.
    socket_.set(zmq::sockopt::routing_id, options_.name);
    socket_.connect(options_.master);
  }

  // ZeroMQ gives a connection up for good after a protocol error (a frame over the size limit)
  // and sends fail from then on: a new socket is the way back, and the master hears hello anew.
  void reconnect() {
    std::fprintf(stderr, "worker %s: the connection to the master broke off; connecting again\n",
                 options_.name.c_str());
    connection_lost_ = false;
    socket_ = zmq::socket_t(context_, zmq::socket_type::dealer);
    handshakes_ = protocol::HandshakeWatch(context_, socket_, options_.keys.enabled());
    connect();
    hello();
  }

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
    config.microbatches = run.microbatches;
    config.pipeline_stages = run.pipeline_stages;
    config.pipeline_schedule = run.pipeline_schedule;
    config.pipeline_chunks = run.pipeline_chunks;
    config.pipeline_devices = options_.devices;  // the engine places the stages on them
    if (run.pipeline_stages > options_.device_count)
      throw std::runtime_error("the job's pipeline has " + std::to_string(run.pipeline_stages) +
                               " stages, this worker has " + std::to_string(options_.device_count) +
                               " devices (--devices " + options_.devices + ")");
    std::string key = json{{"m", run.model},
                           {"d", run.data},
                           {"t", run.train_samples},
                           {"e", run.eval_samples},
                           {"s", run.seed},
                           {"mb", run.microbatches},
                           {"p", run.pipeline_stages},
                           {"ps", run.pipeline_schedule},
                           {"pc", run.pipeline_chunks}}
                          .dump();
    auto it = engines_.find(key);
    if (it == engines_.end()) {
      if (engines_.size() >= 4) engines_.clear();  // a worker serves few root keys at a time
      it =
          engines_.emplace(key, std::make_unique<Engine>(config, options_.threads, options_.device))
              .first;
    }
    return *it->second;
  }

  std::string checkpoint_path(const std::string& file) const {
    return (std::filesystem::path(options_.checkpoints) / file).string();
  }

  void execute(const json& message) {
    int64_t job_id = -1;
    try {
      job_id = protocol::get_int(message, "job");  // to report even a job that does not decode
      protocol::Job job = protocol::job_from_json(message);
      // A master numbers its jobs upwards from its welcome: an old number is a replay, and
      // running it again would report steps and snapshots that nobody asked for.
      if (job.id <= last_job_) {
        std::fprintf(stderr, "worker %s: refused job %lld: a replay (job %lld came already)\n",
                     options_.name.c_str(), static_cast<long long>(job.id),
                     static_cast<long long>(last_job_));
        return;
      }
      last_job_ = job.id;
      run_job(job);
    } catch (const StorageFailure& e) {
      settle_snapshots();
      json m = protocol::make("failed");
      m["job"] = job_id;
      m["error"] = e.what();
      m["retry"] = true;
      if (!e.lost_file.empty()) m["lost_file"] = e.lost_file;
      m["held"] = cache_.ids();
      send(m);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker %s: job %lld failed: %s\n", options_.name.c_str(),
                   static_cast<long long>(job_id), e.what());
      settle_snapshots();
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

  // A snapshot's file is written in the background: training waits only for the state's copy to
  // host memory (encode_checkpoint). Its message, which tells the master that the file exists,
  // waits for the write, and snapshots are announced in the order they were taken.
  struct PendingSnapshot {
    json message;
    int64_t state;
    TrainState copy;                  // for the cache, once announced
    std::string path;                 // empty: a state kept in memory only
    std::future<int64_t> file_bytes;  // valid while a file is being written
  };

  void snapshot(int64_t job, const TrainState& s, const protocol::SnapshotOrder& order,
                uint64_t config_hash) {
    PendingSnapshot p;
    p.message = protocol::make("snapshot");
    p.message["job"] = job;
    p.message["step"] = s.step;
    p.message["state"] = order.state;
    p.message["file"] = order.file;
    p.message["bytes"] = 0;
    p.state = order.state;
    p.copy = s;
    if (!order.file.empty()) {
      p.path = checkpoint_path(order.file);
      auto bytes = std::make_shared<const std::vector<char>>(encode_checkpoint(s, config_hash));
      p.file_bytes = std::async(std::launch::async, [path = p.path, bytes] {
        write_checkpoint_file(path, *bytes);
        // Already gone (a disk lost): the master finds out when it needs the file, and replays.
        std::error_code ec;
        auto size = std::filesystem::file_size(path, ec);
        return ec ? int64_t{0} : static_cast<int64_t>(size);
      });
    }
    pending_snapshots_.push_back(std::move(p));
    announce_snapshots(false);
  }

  // Announces the snapshots whose files are written, in order (wait: all of them, waiting for
  // their writes). A failed write (e.g. a full disk: write_checkpoint_file leaves nothing) throws
  // StorageFailure; the snapshots after it are dropped unannounced and their files removed.
  void announce_snapshots(bool wait) {
    while (!pending_snapshots_.empty()) {
      PendingSnapshot& p = pending_snapshots_.front();
      if (p.file_bytes.valid()) {
        if (!wait && p.file_bytes.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
          return;
        try {
          p.message["bytes"] = p.file_bytes.get();
        } catch (const CheckpointError& e) {
          pending_snapshots_.pop_front();
          drop_snapshots();
          throw StorageFailure(e.what(), "");
        }
      }
      cache_.put(p.state, p.copy);  // only a state the master will know of
      send(p.message);
      pending_snapshots_.pop_front();
    }
  }

  // After a job failed: announces the snapshots taken before the failure whose files could be
  // written (they are good states), and drops the others.
  void settle_snapshots() {
    try {
      announce_snapshots(true);
    } catch (const StorageFailure&) {
      // announce_snapshots dropped the rest; the job's own failure is what gets reported
    }
  }

  // Forgets the snapshots not yet announced (an abandoned job, a failed write) once their writes
  // are over, removing their files: nobody will be told of them.
  void drop_snapshots() {
    for (PendingSnapshot& p : pending_snapshots_) {
      if (!p.file_bytes.valid()) continue;
      try {
        p.file_bytes.get();
      } catch (const CheckpointError&) {
        continue;  // nothing was left behind
      }
      std::error_code ec;  // best effort: nothing refers to the file
      std::filesystem::remove(p.path, ec);
    }
    pending_snapshots_.clear();
  }

  void run_job(protocol::Job& job) {
    auto started = Clock::now();
    abandon_ordered_ = false;
    if (is_external(job)) {
      if (run_external(job))
        send_done(job, started);
      else
        acknowledge_abandon(job);
      return;
    }
    Engine& engine = engine_for(job.run);
    TrainState state;
    if (job.parent_state < 0) {
      state = engine.initial_state();
    } else if (const TrainState* held = cache_.find(job.parent_state)) {
      state = *held;  // fork in memory: one copy per buffer
    } else if (!job.parent_file.empty()) {
      try {
        state = load_checkpoint(checkpoint_path(job.parent_file), engine.config_hash(),
                                engine.backend());
      } catch (const CheckpointError& e) {  // missing or corrupt: the master rebuilds it
        throw StorageFailure(e.what(), job.parent_file);
      }
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
      announce_snapshots(false);
      return !stop && !g_stop;
    });
    if (stop || g_stop) {  // abandoned: the master gives the work out again, or needs it no more
      drop_snapshots();
      acknowledge_abandon(job);
      return;
    }
    announce_snapshots(true);
    send_done(job, started);
  }

  // After a job stopped early: if the master ordered it, say that it has stopped (the master
  // keeps this worker busy until then).
  void acknowledge_abandon(const protocol::Job& job) {
    if (!abandon_ordered_) return;
    json m = protocol::make("abandoned");
    m["job"] = job.id;
    m["held"] = cache_.ids();
    send(m);
  }

  void send_done(const protocol::Job& job, Clock::time_point started) {
    json done = protocol::make("done");
    done["job"] = job.id;
    done["step"] = job.to;
    done["busy_s"] = std::chrono::duration<double>(Clock::now() - started).count();
    done["held"] = cache_.ids();
    send(done);
  }

  static bool is_external(const protocol::Job& job) {
    return job.run.model.value("type", "") == "external";
  }

  // Runs the stage on the study's own trainer command (worker/external_trainer.h). False when
  // it was abandoned (an order to stop or reset).
  bool run_external(protocol::Job& job) {
    if (!options_.allow_exec)
      throw std::runtime_error(
          "worker " + options_.name + " refused to run the external trainer " +
          job.run.model["command"].dump() +
          ": it runs no commands it receives unless started with --allow-exec");
    if (job.parent_state >= 0) {
      std::error_code ec;
      if (job.parent_file.empty() ||
          !std::filesystem::is_regular_file(checkpoint_path(job.parent_file), ec))
        throw StorageFailure("the parent checkpoint " + job.parent_file + " is missing",
                             job.parent_file);
    }
    TrainerHooks hooks;
    hooks.tick_ms = options_.heartbeat_ms;
    hooks.timeout_s = options_.trainer_timeout_s;
    hooks.metrics = [&](int64_t step, const json& metrics) {
      json m = protocol::make("metric");
      m["job"] = job.id;
      m["step"] = step;
      m["metrics"] = metrics;
      send(m);
    };
    hooks.checkpoint = [&](int64_t step) {
      for (const protocol::SnapshotOrder& order : job.snapshots) {
        if (order.step != step) continue;
        json m = protocol::make("snapshot");
        m["job"] = job.id;
        m["step"] = step;
        m["state"] = order.state;
        m["file"] = order.file;
        std::error_code ec;
        auto bytes = std::filesystem::file_size(checkpoint_path(order.file), ec);
        m["bytes"] = ec ? int64_t{0} : static_cast<int64_t>(bytes);
        send(m);
      }
    };
    bool stop = false;
    hooks.tick = [&](int64_t step) {
      json beat = protocol::make("heartbeat");
      beat["job"] = job.id;
      beat["step"] = step;
      send(beat);
      read_orders(job, step, job.snapshots.size(), stop);
      return !stop && !g_stop;
    };
    return run_external_trainer(job, options_.checkpoints, hooks);
  }

  // Reads the orders the master sent while this job runs, without waiting.
  void read_orders(protocol::Job& job, int64_t step, size_t next_snapshot, bool& stop) {
    if (connection_lost_) stop = true;  // the master forgets the job when we reconnect
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
      } else if (type == "snapshot_at" && is_external(job)) {
        // The trainer got its checkpoints when it started: the master replays this state.
        std::fprintf(stderr, "worker %s: snapshot_at refused: an external trainer is running\n",
                     options_.name.c_str());
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
      } else if (type == "abandon") {
        // No running study needs this job any more (e.g. it was cancelled).
        try {
          if (protocol::get_int(m, "job") != job.id) continue;  // an order for an ended job
          abandon_ordered_ = true;
          stop = true;
        } catch (const protocol::ProtocolError& e) {
          std::fprintf(stderr, "worker %s: abandon refused: %s\n", options_.name.c_str(), e.what());
        }
      } else if (type == "job") {
        std::fprintf(stderr, "worker %s: refused a job while busy\n", options_.name.c_str());
      } else if (type != "welcome" && type != "reset") {
        std::fprintf(stderr, "worker %s: refused a message of unknown type \"%s\"\n",
                     options_.name.c_str(), type.c_str());
      }
    }
  }

  Options options_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  protocol::HandshakeWatch handshakes_;
  StateCache cache_;
  std::deque<PendingSnapshot> pending_snapshots_;  // the running job's, oldest first
  bool abandon_ordered_ = false;  // the master said that the running job is needed no more
  bool awaiting_welcome_ = false;
  Clock::time_point hello_sent_;
  int64_t last_job_ = 0;          // the newest job since the welcome (job ids start at 1)
  bool connection_lost_ = false;  // a send failed: reconnect
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
  app.add_option("--device", options.device, "cpu or cuda:N (a CUDA device; default cpu)");
  app.add_option("--threads", options.threads, "threads for this worker's kernels")
      ->check(CLI::Range(1, 256));
  app.add_option("--devices", options.devices,
                 "devices for pipelined studies: cpu:N (N stage threads) or cuda:A-B (default "
                 "cpu:1)");
  app.add_option("--checkpoints", options.checkpoints, "checkpoint directory");
  app.add_option("--cache", options.cache_states, "trained states kept in memory")
      ->check(CLI::Range(1, 1024));
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
  app.add_flag("--allow-exec", options.allow_exec,
               "run the trainer commands of studies with model.type external (off by default: "
               "the commands come from the master)");
  app.add_option("--trainer-timeout", options.trainer_timeout_s,
                 "seconds an external trainer may go without an output line")
      ->check(CLI::Range(0.1, 1e9));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  try {
    options.keys = hippo::protocol::load_client_keys(
        master_key, key, "--master-key ($HIPPO_MASTER_KEY)", "--key ($HIPPO_KEY)");
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
