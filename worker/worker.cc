#include "worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <utility>

#include "protocol/log.h"
#include "protocol/text.h"

namespace hippo::worker {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

}  // namespace

void install_stop_signals() {
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
}

Worker::Worker(const Options& options)
    : options_(options),
      environment_(worker_environment(options_.device, options_.threads)),
      connection_(options_),
      store_(options_.checkpoints),
      cache_(options_.cache_states),
      snapshots_(options_.checkpoints, cache_,
                 [this](protocol::Snapshot s) {
                   s.incarnation = job_incarnation_;
                   record_.snapshot(s);
                   connection_.send(s.to_json());
                 }),
      runner_(options_, cache_, snapshots_, store_),
      record_(options_.checkpoints) {
  record_.write_every(std::chrono::milliseconds(options_.heartbeat_ms));
}

int Worker::run() {
  hello();
  while (!shutdown_ && !g_stop) {
    if (runner_.stop_idle_trainer(options_.trainer_idle_s))
      spdlog::info("ended the external trainer kept for {} s without a stage to train",
                   options_.trainer_idle_s);
    if (master_silent())
      spdlog::warn("no word from the master for {} ms: connecting again", silence_limit().count());
    if (connection_.broken() || master_silent()) {
      connection_.reconnect();
      last_heard_ = Clock::now();
      hello();
    } else if (hello_due_) {
      hello();  // after a job that the master's restart did not stop
    }
    std::optional<protocol::json> message = connection_.receive(options_.heartbeat_ms);
    if (!message) {
      // A master that refuses our handshakes stays silent: say why instead of waiting forever.
      // Once a master welcomed us, a failure is rather someone else at its address (while it
      // is down): refused, and we wait for the master we know.
      if (std::optional<std::string> why = connection_.handshake_failure()) {
        if (!welcomed_once_) {
          spdlog::error("{}", *why);
          return 2;
        }
        if (Clock::now() - last_refusal_log_ > std::chrono::seconds(10)) {
          spdlog::error("refused the peer at {}: {}; waiting for the master we know",
                        options_.master, *why);
          last_refusal_log_ = Clock::now();
        }
      }
      if (refused_) {
        if (may_hello()) hello();
        continue;
      }
      connection_.send(protocol::Heartbeat{.fault = fault()}.to_json());
      continue;
    }
    handle(*message);
  }
  // An Abandoned (or the last Done) must reach the master before the process ends.
  connection_.linger(std::chrono::seconds(1));
  return 0;
}

void Worker::hello() {
  awaiting_welcome_ = true;
  hello_due_ = false;
  hello_sent_ = Clock::now();
  protocol::Hello m;
  m.name = options_.name;
  m.device = options_.device;
  m.threads = options_.threads;
  m.devices = options_.device_count;
  m.pid = static_cast<int64_t>(getpid());
  m.held = cache_.ids();
  m.runs_trainers = options_.allow_trainers;
  m.environment = environment_.engine;
  m.trainer_environment = environment_.trainer;
  m.storage = store_.identity();
  m.files = store_.list();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) m.host = host;
  said_record_.reset();
  if (const std::optional<protocol::DroppedJob>& r = record_.get()) {
    m.dropped = {*r};
    said_record_ = {r->job, r->incarnation};
  }
  connection_.send(m.to_json());
}

const std::string& Worker::fault() {
  if (fault_.empty() || Clock::now() - probed_ < std::chrono::seconds(5)) return fault_;
  probed_ = Clock::now();
  if (std::string why = store_.probe(); why.empty()) {
    spdlog::info("the checkpoint directory {} takes writes again: ready for work",
                 options_.checkpoints);
    fault_.clear();
  } else {
    fault_ = why;
  }
  return fault_;
}

std::chrono::milliseconds Worker::silence_limit() const {
  return std::chrono::milliseconds(std::max(10 * options_.heartbeat_ms, 60000));
}

bool Worker::master_silent() const {
  return welcomed_once_ && !refused_ && Clock::now() - last_heard_ > silence_limit();
}

bool Worker::may_hello() const {
  return !awaiting_welcome_ || Clock::now() - hello_sent_ > hello_wait_;
}

// ---------------------------------------------------------------------------------------------
// The master's messages.

void Worker::handle(const protocol::json& m) {
  last_heard_ = Clock::now();
  const std::string type = m["type"];  // parse() checked that it is a string
  if (type == protocol::Job::kType && running_job_ >= 0) {
    spdlog::warn("refused a job while busy");
    return;
  }
  protocol::AnyMessage message;
  try {
    message = protocol::decode(m);
  } catch (const protocol::ProtocolError& e) {
    if (type == protocol::Job::kType) {
      // The master waits for this job's end: it learns that the job could not even be read.
      const protocol::json& id = m.contains("job") ? m["job"] : protocol::json();
      int64_t job = id.is_number_integer() && id.get<int64_t>() >= 0 ? id.get<int64_t>() : -1;
      spdlog::error("job {} failed: {}", job, e.what());
      fail(job, e.what(), false, "");
    } else {
      spdlog::warn("{} refused: {}", type, e.what());
    }
    return;
  }
  std::visit([this](const auto& order) { on(order); }, message);
}

void Worker::on(const protocol::Welcome& m) {
  if (running_job_ >= 0) return;  // a second welcome (two hellos crossed): nothing new
  // The master heard the record that our hello carried (a record of a job started since is
  // another one: it waits for the next hello).
  if (const std::optional<protocol::DroppedJob>& r = record_.get();
      awaiting_welcome_ && r && said_record_ == std::pair(r->job, r->incarnation))
    record_.heard();
  // State ids are the master's: a master that (re)starts names states anew.
  awaiting_welcome_ = false;
  refused_ = false;
  hello_wait_ = std::chrono::seconds(5);
  welcomed_once_ = true;
  incarnation_ = m.incarnation;
  cache_.clear();
  last_job_ = 0;
  options_.heartbeat_ms = static_cast<int>(m.heartbeat_ms);
  record_.write_every(std::chrono::milliseconds(options_.heartbeat_ms));
}

void Worker::on(const protocol::Heartbeat&) {}  // its arrival is what counts (handle)

void Worker::on(const protocol::Job& m) {
  // A master numbers its jobs upwards from its welcome: an old number is a replay, and running
  // it again would report steps and snapshots that nobody asked for.
  if (m.id <= last_job_) {
    spdlog::warn("refused job {}: a replay (job {} came already)", m.id, last_job_);
    return;
  }
  last_job_ = m.id;
  execute(m);
}

void Worker::on(const protocol::SnapshotAt& m) {
  if (running_job_ < 0) {  // its job ended before the order came: the master replays the state
    spdlog::warn("snapshot_at refused: its job has ended");
    return;
  }
  if (m.job != running_job_) return;  // an order for a job that has ended
  if (std::string why = runner_.add_snapshot(m.order); !why.empty())
    spdlog::warn("snapshot_at refused: {}", why);
}

void Worker::on(const protocol::Threads& m) {
  if (running_job_ < 0 || m.job != running_job_) return;  // its job ended: the next one says
  runner_.set_threads(static_cast<int>(m.threads));
}

void Worker::on(const protocol::Abandon& m) {
  // No running study needs this job any more (e.g. it was cancelled). An order that comes after
  // its job ended needs nothing: the master has its Done or Failed.
  if (running_job_ < 0 || m.job != running_job_) return;
  stop_job_ = true;
}

void Worker::on(const protocol::Prepare& m) {
  // Only while idle: a job under way has its trainer already (or none to share the core with).
  if (!options_.allow_trainers || running_job_ >= 0) return;
  try {
    if (runner_.prepare(m.run))
      spdlog::info("started the trainer {} ahead of its first stage",
                   m.run.model.value("command", nlohmann::json()).dump());
  } catch (const std::exception& e) {
    // Its first stage starts it again, and fails with the reason if it still cannot start.
    spdlog::warn("could not start a trainer ahead of its stages: {}", e.what());
  }
}

void Worker::on(const protocol::EndTrainer&) {
  // A running job has its trainer in use (a stage of another study's); an idle one is ended.
  if (running_job_ >= 0 || !runner_.end_trainer()) return;
  spdlog::info("ended the external trainer kept for a study that has ended");
}

void Worker::on(const protocol::Reset&) {
  // The master restarted and does not know a running job: the job goes on to its end, and the
  // hello after it carries its record.
  if (running_job_ >= 0) {
    if (!hello_due_)
      spdlog::warn(
          "the master does not know us (it restarted, or lost us): job {} goes on to its "
          "end, then we say hello again",
          running_job_);
    hello_due_ = true;
    return;
  }
  if (!may_hello()) return;
  spdlog::warn("the master does not know us (it restarted, or lost us): saying hello again");
  hello();
}

void Worker::on(const protocol::Refused& m) {
  refused_ = true;
  awaiting_welcome_ = true;
  hello_sent_ = Clock::now();
  hello_wait_ = std::min(hello_wait_ * 2, std::chrono::seconds(300));
  spdlog::error("the master refused us: {}; saying hello again in {} s",
                protocol::printable(m.error), hello_wait_.count());
}

void Worker::on(const protocol::Shutdown&) {
  // The running job stops at its next step and says where (execute: Abandoned), then we exit.
  shutdown_ = true;
  stop_job_ = true;
}

void Worker::on(const protocol::ReadFile& m) {
  // Served idle or between two steps: a chunk is one read of at most kChunkBytes.
  connection_.send(store_.read(m).to_json());
}

void Worker::on(const protocol::FileBytes& m) {
  if (!fetch_ || m.read != fetch_->job) return;  // an answer to a fetch that has ended
  if (!m.error.empty()) {
    fetch_->error = m.error;
  } else if (m.total != fetch_->total) {
    fetch_->error = "the parent checkpoint has " + std::to_string(m.total) +
                    " bytes where the job said " + std::to_string(fetch_->total);
  } else if (m.offset == static_cast<int64_t>(fetch_->bytes.size())) {
    fetch_->bytes += m.data;  // (an answer to a repeated request comes twice: the second is late)
  }
}

void Worker::on(const protocol::DeleteFiles& m) {
  store_.remove(m.files);
}

template <typename M>
void Worker::on(const M&) {
  spdlog::warn("refused a message of type {}: a master does not send it to workers", M::kType);
}

// ---------------------------------------------------------------------------------------------
// Jobs.

void Worker::execute(const protocol::Job& job) {
  const auto started = Clock::now();
  running_job_ = job.id;
  job_incarnation_ = incarnation_;
  record_.start(job, job_incarnation_);
  stop_job_ = false;
  last_heartbeat_ = started;
  JobHost host;
  host.metric = [&](protocol::Metric m) {
    m.incarnation = job_incarnation_;
    record_.metric(m.step, m.metrics);
    connection_.send(m.to_json());
  };
  host.between_steps = [&](int64_t step) { return between_steps(step); };
  host.fetch_parent = [&] { return fetch_parent(job); };
  host.fetched = [&](int64_t bytes) {
    connection_.send(protocol::Fetched{.job = job.id,
                                       .bytes = bytes,
                                       .seconds = seconds_since(fetch_started_),
                                       .incarnation = job_incarnation_}
                         .to_json());
  };
  try {
    if (runner_.run(job, host)) {
      protocol::Done done;
      done.job = job.id;
      done.step = runner_.diverged_at().value_or(job.to);
      done.diverged = runner_.diverged_at().has_value();
      done.incarnation = job_incarnation_;
      done.busy_s = std::chrono::duration<double>(Clock::now() - started).count();
      done.times = runner_.times();
      done.held = cache_.ids();
      record_.end(done.step, true, done.diverged);
      connection_.send(done.to_json());
    } else {
      // Abandoned by the master, or stopped by a shutdown or a signal: the master keeps this
      // worker busy until it hears that the job stopped, and counts the steps it reached.
      record_.end(runner_.reached(), false, false);
      connection_.send(protocol::Abandoned{.job = job.id,
                                           .held = cache_.ids(),
                                           .incarnation = job_incarnation_,
                                           .step = runner_.reached()}
                           .to_json());
    }
  } catch (const StorageFailure& e) {
    spdlog::error("job {} failed on storage: {}", job.id, e.what());
    snapshots_.settle();
    // A checkpoint it could not write is its own disk's fault: it says so until a write works.
    if (e.lost_file.empty()) {
      fault_ = std::string("its checkpoint directory failed: ") + e.what();
      probed_ = Clock::now();
    }
    fail(job.id, e.what(), true, e.lost_file);
  } catch (const TrainerError& e) {
    // A trainer process that died mid-stage: the master tries the stage again from its newest
    // snapshot (a protocol error fails it at once).
    spdlog::error("job {} failed: {}", job.id, e.what());
    snapshots_.settle();
    fail(job.id, e.what(), e.crashed, "");
  } catch (const std::exception& e) {
    spdlog::error("job {} failed: {}", job.id, e.what());
    snapshots_.settle();
    fail(job.id, e.what(), false, "");
  }
  running_job_ = -1;
}

void Worker::fail(int64_t job, const std::string& error, bool retry, const std::string& lost_file) {
  // A worker that cannot work says so first: the master gives the next job to another one.
  if (!fault_.empty()) connection_.send(protocol::Heartbeat{.fault = fault_}.to_json());
  protocol::Failed m;
  m.job = job;
  m.incarnation = running_job_ >= 0 ? job_incarnation_ : incarnation_;
  m.error = error;
  m.retry = retry;
  m.lost_file = lost_file;
  m.held = cache_.ids();
  if (running_job_ >= 0) {
    m.step = runner_.reached();
    record_.end(m.step, false, false);
  }
  connection_.send(m.to_json());
}

std::optional<std::string> Worker::fetch_parent(const protocol::Job& job) {
  // A request unanswered this long is asked again (its answer may have gone with a connection).
  constexpr auto kPatience = std::chrono::seconds(10);
  constexpr int kAsks = 6;
  fetch_started_ = Clock::now();
  fetch_ = Fetch{.job = job.id, .total = job.parent_bytes};
  fetch_->bytes.reserve(static_cast<size_t>(job.parent_bytes));
  int64_t asked_offset = -1;
  int asks = 0;
  Clock::time_point asked_at;
  while (static_cast<int64_t>(fetch_->bytes.size()) < fetch_->total) {
    if (!fetch_->error.empty()) {
      const std::string error = "fetching " + job.parent_file + ": " + fetch_->error;
      fetch_.reset();
      throw StorageFailure(error, job.parent_file);
    }
    const int64_t offset = static_cast<int64_t>(fetch_->bytes.size());
    if (offset != asked_offset || Clock::now() - asked_at > kPatience) {
      asks = offset == asked_offset ? asks + 1 : 1;
      if (asks > 1)
        spdlog::warn("fetching {}: no answer for {} s, asking again", job.parent_file,
                     kPatience.count());
      if (asks > kAsks) {
        fetch_.reset();
        // Its sources cannot be reached: lost to us, rebuilt by a replay (never the stage's fault).
        throw StorageFailure("fetching " + job.parent_file + ": no bytes came for " +
                                 std::to_string(kAsks * kPatience.count()) + " s",
                             job.parent_file);
      }
      connection_.send(
          protocol::FetchParent{.job = job.id, .offset = offset, .incarnation = job_incarnation_}
              .to_json());
      asked_offset = offset;
      asked_at = Clock::now();
    }
    // The bytes come through the master: without it, the job cannot go on.
    if (!between_steps(job.from, 100) || hello_due_) {
      fetch_.reset();
      return std::nullopt;
    }
  }
  std::string bytes = std::move(fetch_->bytes);
  fetch_.reset();
  spdlog::info("fetched {} ({} bytes) from another storage in {:.3f} s", job.parent_file,
               bytes.size(), seconds_since(fetch_started_));
  return bytes;
}

bool Worker::between_steps(int64_t step, int wait_ms) {
  if (Clock::now() - last_heartbeat_ >= std::chrono::milliseconds(options_.heartbeat_ms)) {
    last_heartbeat_ = Clock::now();
    connection_.send(protocol::Heartbeat{
        .job = running_job_, .step = step, .incarnation = job_incarnation_, .fault = fault()}
                         .to_json());
  }
  record_.progress(step);
  // The job goes on (its reports may be lost: its record keeps them); we connect again and say
  // hello once it has ended. It ends anyway, at its last step.
  if ((connection_.broken() || master_silent()) && !hello_due_) {
    spdlog::warn(
        "the connection to the master broke off, or it went silent: job {} goes on to "
        "its end, then we connect again",
        running_job_);
    hello_due_ = true;
  }
  // Once the job stops, what follows (a welcome, a new job) is for the main loop.
  while (!stop_job_) {
    std::optional<protocol::json> message = connection_.receive(std::exchange(wait_ms, 0));
    if (!message) break;
    handle(*message);
  }
  return !stop_job_ && !g_stop;
}

}  // namespace hippo::worker
