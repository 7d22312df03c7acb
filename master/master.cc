#include "master/master.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <utility>

#include "master/checkpoint_files.h"
#include "protocol/checkpoint_storage.h"
#include "protocol/log.h"
#include "protocol/socket.h"

namespace hippo::master {
namespace {

// Why a chunk of a job's parent checkpoint cannot be used ("" when it can): its reader's error,
// or a file of another size than the job's order says.
std::string chunk_error(const protocol::FileBytes& chunk, int64_t parent_bytes) {
  if (!chunk.error.empty() || chunk.total == parent_bytes) return chunk.error;
  return "it has " + std::to_string(chunk.total) + " bytes, not " + std::to_string(parent_bytes);
}

std::string random_incarnation() {
  std::random_device random;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", random(), random());
  return buf;
}

}  // namespace

void StepCosts::add(const std::string& root_key, double seconds, int64_t steps) {
  costs_[root_key].first += seconds;
  costs_[root_key].second += steps;
}

double StepCosts::per_step(const std::string& root_key) const {
  auto it = costs_.find(root_key);
  if (it == costs_.end() || it->second.second == 0) return 1.0;
  return it->second.first / static_cast<double>(it->second.second);
}

Master::Master(SearchPlan plan, const Options& options)
    : Master(std::move(plan), options,
             std::make_unique<ZmqTransport>(options.bind, options.auth, options.connections)) {}

Master::Master(SearchPlan plan, const Options& options, std::unique_ptr<Transport> transport)
    : plan_(std::move(plan)),
      lock_(plan_.path(), "a master"),
      options_(options),
      transport_(std::move(transport)),
      states_(random_incarnation()),
      storages_(options.checkpoints),
      driver_(plan_, tree_, states_, storages_, options.rules,
              [this](const Change& change) { on_tree_change(change); }) {
  tree_ = plan_.load_tree();
  restore_checkpoints();
  sweep_checkpoints();
  driver_.restore();
  trials_to_close_ = true;  // the previous master may have died between a snapshot and its done
}

Master::~Master() = default;

void Master::restore_checkpoints() {
  for (const CheckpointRow& row : plan_.checkpoints()) {
    StateInfo info = state_of(row, storages_.own());
    std::error_code ec;
    // Only the master's own directory can be looked at; other storages' workers say what they
    // lack when asked for it.
    if (info.storages.count(storages_.own()) &&
        !std::filesystem::exists(std::filesystem::path(options_.checkpoints) / row.file, ec)) {
      // Lost with its disk: forgotten (replayed from an earlier state when it is needed), unless
      // another storage holds a copy.
      info.storages.erase(storages_.own());
      plan_.transaction([&] {
        if (info.storages.empty())
          plan_.delete_checkpoint(row.id);
        else
          plan_.set_checkpoint_storages(row.id, {info.storages.begin(), info.storages.end()});
        plan_.add_event(std::nullopt, "checkpoint_lost",
                        {{"file", row.file}, {"why", "missing"}, {"storage", storages_.own()}});
      });
      if (info.storages.empty()) continue;
    }
    states_.add_restored(info);
  }
}

void Master::sweep_checkpoints() {
  std::set<std::string> named;
  for (const EventRow& event : plan_.events_of_kind("master_started"))
    incarnations_.insert(event.detail.value("incarnation", ""));
  for (const auto& [id, info] : states_.all())
    if (info.storages.count(storages_.own())) named.insert(info.file);
  const int64_t removed = sweep_checkpoint_files(options_.checkpoints, incarnations_, named);
  incarnations_.insert(states_.incarnation());
  spdlog::info("removed {} checkpoint file(s) in {} that no row of the search plan names", removed,
               options_.checkpoints);
  // Before any worker hears of the incarnation: the next start knows the files it names.
  plan_.add_event(std::nullopt, "master_started",
                  {{"incarnation", states_.incarnation()}, {"checkpoint_files_removed", removed}});
}

// ---------------------------------------------------------------------------------------------
// What the CLI asks.

int64_t Master::submit(const StudySpec& spec, const json& spec_json, Policy policy) {
  // In-process (outside poll): its CPU time is measured here; a submit message's, in try_handle.
  const double started = thread_cpu_seconds();
  int64_t id = driver_.submit(spec, spec_json, policy);
  driver_.charge_master_time(thread_cpu_seconds() - started);
  schedule_changed_ = true;
  return id;
}

void Master::fail_study(int64_t study, const std::string& error) {
  driver_.fail(study, error);
}

StudySummary Master::summary(int64_t study) {
  return summarize(driver_, tree_, plan_, study, pool_.size());
}

Progress Master::progress(int64_t study) const {
  return master::progress(driver_, tree_, study);
}

void Master::shutdown_workers() {
  for (const auto& [peer, w] : pool_.workers()) {
    if (w.job >= 0) record_unfinished(pool_.jobs().at(w.job), w, ExecutionOutcome::kAbandoned);
    send(peer, protocol::Shutdown{}.to_json());
  }
}

void Master::remove_unreported_checkpoints() {
  const std::set<std::string> known = states_.files();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.checkpoints, ec)) {
    std::string name = entry.path().filename().string();
    if (incarnation_of(name) == states_.incarnation() && !known.count(name))
      remove_checkpoint_file(options_.checkpoints, name);
  }
}

// ---------------------------------------------------------------------------------------------
// Messages.

void Master::poll(int timeout_ms) {
  // The master's CPU time is read once here and once after each message and at the end: each
  // read ends one measurement and begins the next (a read is a system call).
  cpu_mark_ = thread_cpu_seconds();
  if (!deferred_.empty() && seconds_since(last_busy_) >= 1) {
    // Short tries, so that the master keeps answering clients while the lock is held.
    int busy_timeout = plan_.set_busy_timeout(100);
    while (!deferred_.empty() && try_handle(deferred_.front())) deferred_.pop_front();
    plan_.set_busy_timeout(busy_timeout);
    if (deferred_.empty()) spdlog::info("the search plan is writable again");
  }
  // A study that enters the plan in batches goes on between the messages (waiting for none).
  if (deferred_.empty() && driver_.expanding()) {
    try {
      driver_.expand(0.025);
    } catch (const PlanBusy&) {
      // locked by another process: the next poll tries again
    }
    // Charged to the expanding studies, not to the first message after it.
    const double now = thread_cpu_seconds();
    driver_.charge_master_time(now - std::exchange(cpu_mark_, now));
    if (driver_.expanding()) timeout_ms = 0;
  }
  auto envelope = transport_->receive(timeout_ms);
  while (envelope) {
    std::vector<protocol::Envelope> together;
    for (; envelope && together.size() < kMessagesPerCommit; envelope = transport_->receive(0))
      together.push_back(std::move(*envelope));
    handle_together(together);
  }
  transport_->check();
  // Scheduling work is shared by the running studies, in proportion to their trials.
  const double started = cpu_mark_;
  check_workers();
  if (trials_to_close_ && deferred_.empty()) {
    try {
      driver_.close_trained_trials();
      trials_to_close_ = false;
    } catch (const PlanBusy&) {
      // the plan is locked by another process: the next poll tries again
    }
  }
  // Work becomes ready or a worker free only through some events (schedule_changed_ says which
  // happened): otherwise there is nothing to recompute.
  if (driver_.take_schedule_change()) schedule_changed_ = true;
  if (schedule_changed_) {
    abandon_orphan_jobs();
    retire_drained_workers();
    dispatch();
  }
  if (!storages_.deletions().empty()) send_deletions();
  schedule_changed_ = false;
  driver_.charge_master_time(thread_cpu_seconds() - started);
}

const std::map<std::string, Master::Handler>& Master::handlers() {
  // A worker's message, from a worker's key and from a connection that said hello: decoded, then
  // handled. A connection that has not said hello (a worker from before a restart, a stranger)
  // gets Reset: it says hello first.
  auto from_worker = [](auto handler, auto decode) -> Handler {
    return [handler, decode](Master& master, const Sender& from, const json& m) {
      if (!from.identity.has(protocol::kWorkerRole))
        throw protocol::ProtocolError("message.type: " + from.identity.describe() +
                                      " is not a worker (its key is not in workers/)");
      ConnectedWorker* w = master.pool_.find(from.peer);
      if (!w) return master.send(from.peer, protocol::Reset{}.to_json());
      if (w->identity.key != from.identity.key)  // a connection proves one key: never
        throw protocol::ProtocolError("message: not from the key of worker " + w->hello.name);
      (master.*handler)(*w, decode(m));
    };
  };
  // A client's request, from a client's key: answered with the handler's fields, or with the
  // error that refused it.
  auto from_client = [](auto handler, auto decode) -> Handler {
    return [handler, decode](Master& master, const Sender& from, const json& m) {
      protocol::Reply reply;
      try {
        if (!from.identity.has(protocol::kClientRole))
          throw std::invalid_argument(from.identity.describe() +
                                      " is not a client of this master (its key is not in "
                                      "clients/ or admins/ of the master's --authorized)");
        reply.fields = (master.*handler)(from, decode(m));
        reply.ok = true;
      } catch (const std::exception& e) {  // a locked plan too: a submit fails with its error
        reply.error = e.what();
      }
      master.send(from.peer, reply.to_json());
    };
  };
  using namespace protocol;
  static const std::map<std::string, Handler> table = {
      {Hello::kType,
       [](Master& master, const Sender& from, const json& m) {
         if (!from.identity.has(kWorkerRole))
           throw ProtocolError("hello: " + from.identity.describe() +
                               " is not a worker (its key is not in workers/)");
         master.on_hello(from, Hello::from_json(m));
       }},
      {Heartbeat::kType, from_worker(&Master::on_heartbeat, &Heartbeat::from_json)},
      {Metric::kType, from_worker(&Master::on_metric, &Metric::from_json)},
      {Snapshot::kType, from_worker(&Master::on_snapshot, &Snapshot::from_json)},
      {Done::kType, from_worker(&Master::on_done, &Done::from_json)},
      {Failed::kType, from_worker(&Master::on_failed, &Failed::from_json)},
      {Abandoned::kType, from_worker(&Master::on_abandoned, &Abandoned::from_json)},
      {FetchParent::kType, from_worker(&Master::on_fetch_parent, &FetchParent::from_json)},
      {FileBytes::kType, from_worker(&Master::on_file_bytes, &FileBytes::from_json)},
      {Fetched::kType, from_worker(&Master::on_fetched, &Fetched::from_json)},
      {Submit::kType, from_client(&Master::on_submit, &Submit::from_json)},
      {Status::kType, from_client(&Master::on_status, &Status::from_json)},
      {Cancel::kType, from_client(&Master::on_cancel, &Cancel::from_json)},
      {ListWorkers::kType, from_client(&Master::on_list_workers, &ListWorkers::from_json)},
      {Drain::kType, from_client(&Master::on_drain, &Drain::from_json)},
  };
  return table;
}

RunningJob& Master::reported_job(const ConnectedWorker& w, int64_t job,
                                 const std::string& incarnation, const char* what) {
  if (incarnation != states_.incarnation())
    throw protocol::ProtocolError(std::string(what) + ".incarnation: a report for the master " +
                                  "before this one (stale)");
  return pool_.job_of(w, job, what);
}

void Master::handle_together(std::vector<protocol::Envelope>& messages) {
  size_t next = 0;
  if (deferred_.empty()) {
    // BEGIN does not wait: if another process holds the plan, the messages go one by one, as
    // they always could (clients' reads are answered, workers' writes wait in deferred_).
    const int busy_timeout = plan_.set_busy_timeout(0);
    outbox_.emplace();
    try {
      plan_.transaction([&] {
        for (; next < messages.size(); ++next) handle_or_defer(messages[next]);
      });
    } catch (const PlanBusy&) {
      // At BEGIN, nothing handled and nothing to send (inside, the lock is ours: nothing waits).
      if (next != 0) throw;
    } catch (...) {
      // A failed COMMIT: what the handlers changed in memory is not in the plan. Nothing of it is
      // sent; the master stops, and a restart goes on from the plan.
      outbox_.reset();
      throw;
    }
    plan_.set_busy_timeout(busy_timeout);
    const std::vector<std::pair<std::string, std::string>> sent = std::move(*outbox_);
    outbox_.reset();
    for (const auto& [peer, body] : sent) transport_->send(peer, body);
  }
  for (; next < messages.size(); ++next) handle_or_defer(messages[next]);
}

void Master::handle_or_defer(protocol::Envelope& envelope) {
  // A worker's messages keep their order: behind one that waits for the plan, they wait too.
  // Others (clients, hellos) never wait: they only read, or fail with the lock's error.
  ConnectedWorker* worker = pool_.find(envelope.peer);
  if (worker) worker->last_seen = Clock::now();  // alive all the same
  if (!worker || deferred_.empty()) {
    if (!try_handle(envelope)) deferred_.push_back(std::move(envelope));
  } else {
    deferred_.push_back(std::move(envelope));
  }
}

bool Master::try_handle(const protocol::Envelope& envelope) {
  try {
    json m = protocol::parse(envelope.body);
    const std::string type = m["type"];
    auto handler = handlers().find(type);
    if (handler == handlers().end())
      throw protocol::ProtocolError("message.type: unknown type \"" + type + "\"");
    handler->second(*this, Sender{envelope.peer, transport_->identity_of(envelope)}, m);
    // Since the last mark: this message's parsing and handling (and the first one's receiving).
    const double now = thread_cpu_seconds(), cpu_s = now - std::exchange(cpu_mark_, now);
    MasterCosts::Count& cost = costs_.messages[handler->first];
    ++cost.count;
    cost.cpu_s += cpu_s;
    driver_.charge_master_time(cpu_s);
  } catch (const PlanBusy& e) {
    // Every handler's first write is a BEGIN IMMEDIATE, and nothing before it changes what a
    // retry would do: the message is handled again, whole, once the lock is released.
    if (deferred_.empty())
      spdlog::warn("{}; worker messages wait and are retried every second", e.what());
    last_busy_ = Clock::now();
    return false;
  } catch (const std::exception& e) {
    // A bad message is refused and logged; it changed nothing (handlers validate before they
    // write, and their writes are transactions).
    spdlog::warn("refused a message: {}", e.what());
    log_event(std::nullopt, "refused_message", {{"error", e.what()}});
  }
  return true;
}

void Master::send(const std::string& peer, const json& message) {
  if (outbox_)
    outbox_->emplace_back(peer, protocol::serialize(message));
  else
    transport_->send(peer, protocol::serialize(message));
}

void Master::log_event(std::optional<int64_t> study, const std::string& kind, const json& detail) {
  try {
    plan_.add_event(study, kind, detail);
  } catch (const std::exception& e) {
    spdlog::warn("event {} not logged: {}", kind, e.what());
  }
}

void Master::on_hello(const Sender& from, const protocol::Hello& hello) {
  // A worker that says hello again while it had a job (it restarted, or reconnected under the
  // same key and name) lost that job. (join refuses a name that another key holds: nothing lost.)
  std::vector<std::pair<RunningJob, ConnectedWorker>> lost;
  for (const auto& [peer, old] : pool_.workers())
    if (old.job >= 0 && (peer == from.peer ||
                         (old.hello.name == hello.name && old.identity.key == from.identity.key)))
      lost.emplace_back(pool_.jobs().at(old.job), old);
  protocol::Hello m = hello;
  const std::vector<std::string> files = std::exchange(m.files, {});
  ConnectedWorker& w = pool_.join(from.peer, from.identity, m);
  const std::string& peer = from.peer;
  for (const auto& [job, old] : lost) record_unfinished(job, old, ExecutionOutcome::kLost);
  schedule_changed_ = true;
  log_event(std::nullopt, "worker_joined",
            {{"name", w.hello.name}, {"device", w.hello.device}, {"key", from.identity.name}});
  // Five heartbeats fit in the timeout, so one late heartbeat never loses a worker.
  protocol::Welcome welcome;
  welcome.incarnation = states_.incarnation();
  welcome.heartbeat_ms =
      std::clamp<int64_t>(static_cast<int64_t>(options_.worker_timeout_s * 200), 10, 60000);
  send(peer, welcome.to_json());
  // On another storage, the files of this plan's earlier masters that no state has there go
  // (what a crash or a collection while it was away left), with the deletions that waited for it.
  const std::string storage = storage_of(w);
  if (storage == storages_.own()) return;
  std::set<std::string> kept;
  for (const auto& [id, info] : states_.all())
    if (info.storages.count(storage)) kept.insert(info.file);
  protocol::DeleteFiles unneeded{storages_.take_deletions(storage)};
  for (const std::string& file : files) {
    const std::optional<std::string> incarnation = incarnation_of(file);
    if (incarnation != states_.incarnation() && incarnations_.count(*incarnation) &&
        !kept.count(file))
      unneeded.files.push_back(file);
  }
  if (!unneeded.files.empty()) send(peer, unneeded.to_json());
}

void Master::on_heartbeat(ConnectedWorker& w, const protocol::Heartbeat& m) {
  if (m.job >= 0 && w.job >= 0 && m.job == w.job && m.incarnation == states_.incarnation())
    pool_.jobs().at(w.job).progress_step = m.step;
  // Answered, so that a worker hears of us even when we have nothing to say: one that hears
  // nothing for long connects anew (worker.h).
  send(w.peer, protocol::Heartbeat{}.to_json());
}

json Master::on_submit(const Sender& from, const protocol::Submit& m) {
  Policy policy = parse_policy(m.policy);
  StudySpec spec = parse_spec(m.spec);
  int64_t id = driver_.submit(spec, m.spec, policy, from.identity.key);
  schedule_changed_ = true;
  return {{"study", id}, {"name", spec.name}};
}

json Master::on_status(const Sender&, const protocol::Status& m) {
  if (!driver_.studies().count(m.study))
    throw std::invalid_argument("no study " + std::to_string(m.study));
  return {{"summary", summary(m.study).to_json()}, {"running", driver_.running(m.study)}};
}

json Master::on_cancel(const Sender& from, const protocol::Cancel& m) {
  int64_t id = driver_.find(m.study);
  if (!may_cancel(from.identity, driver_.studies().at(id).owner))
    throw std::invalid_argument("study " + driver_.studies().at(id).spec.name +
                                " was submitted by another key: only its owner or an admin (a key "
                                "in admins/ of the master's --authorized) may cancel it");
  driver_.cancel(id);
  schedule_changed_ = true;
  return {{"summary", summary(id).to_json()}};
}

json Master::on_list_workers(const Sender&, const protocol::ListWorkers&) {
  return {{"workers", workers_json(pool_, driver_)}};
}

json Master::on_drain(const Sender& from, const protocol::Drain& m) {
  if (!may_drain(from.identity))
    throw std::invalid_argument(
        "draining a worker is an operator's act: only an admin (a key in "
        "admins/ of the master's --authorized) may");
  ConnectedWorker* w = pool_.find_named(m.worker);
  if (!w) throw std::invalid_argument("no connected worker is named " + m.worker);
  w->draining = true;
  log_event(std::nullopt, "worker_draining", {{"name", w->hello.name}, {"busy", w->job >= 0}});
  spdlog::info("draining worker {}: no more work{}", w->hello.name,
               w->job >= 0 ? "; it exits once its job ends" : "; it exits now");
  schedule_changed_ = true;
  return {{"worker", w->hello.name}, {"busy", w->job >= 0}};
}

void Master::on_metric(ConnectedWorker& w, const protocol::Metric& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "metric");
  if (m.step < job.order.from || m.step > job.order.to)
    throw protocol::ProtocolError("metric.step: " + std::to_string(m.step) + " is outside [" +
                                  std::to_string(job.order.from) + ", " +
                                  std::to_string(job.order.to) + "]");
  driver_.record_metrics(state_key(tree_, job.representative, m.step), m.metrics);
}

void Master::on_snapshot(ConnectedWorker& w, const protocol::Snapshot& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "snapshot");
  if (m.step <= job.order.from || m.step > job.order.to)
    throw protocol::ProtocolError("snapshot.step: " + std::to_string(m.step) + " is outside [" +
                                  std::to_string(job.order.from + 1) + ", " +
                                  std::to_string(job.order.to) + "]");
  auto order = std::find_if(job.order.snapshots.begin(), job.order.snapshots.end(),
                            [&](const auto& o) { return o.state == m.state && o.step == m.step; });
  if (order == job.order.snapshots.end())
    throw protocol::ProtocolError("snapshot.state: no such snapshot was ordered");
  StateKey key = state_key(tree_, job.representative, m.step);
  std::optional<int64_t> known = states_.state_at(key);
  // A snapshot announced after every study of its job ended (its file is announced once written,
  // so the message can come late) is a state that nobody can reach.
  const bool orphan = std::none_of(job.studies.begin(), job.studies.end(),
                                   [&](int64_t id) { return driver_.running(id); });
  StateInfo info{.stage = key.first,
                 .step = m.step,
                 .file = order->file,
                 .bytes = order->file.empty() ? 0 : m.bytes};
  if (!order->file.empty()) info.storages = {storage_of(w)};
  const bool fresh = !known && !orphan;
  try {
    plan_.transaction([&] {
      if (fresh && !order->file.empty()) {
        CheckpointRow row{0, key.first, m.step, order->file, m.bytes, "", 0};
        row.storages = {storage_of(w)};
        info.checkpoint_row = plan_.add_checkpoint(row);
      }
      mark_progress(job, m.step);
      // Known before trials close: the last one to close may end its study, whose collection
      // must see this state.
      if (fresh) states_.add(m.state, info);
      // Trials that end here are trained: they close now (their searchers decide on them), not
      // when the job, which may go on far beyond them, is done.
      if (!orphan) driver_.close_trials_ending(job.representative, job.order.from, m.step);
    });
  } catch (...) {
    if (fresh && states_.has(m.state)) states_.forget(m.state);  // its row was rolled back
    throw;
  }
  if (!fresh) {
    // Made twice (a replay raced with a late snapshot: keep the first), or an orphan: this file
    // goes.
    if (!(known && order->file == states_.info(*known).file))
      storages_.remove_after_commit(plan_, {storage_of(w)}, order->file);
    return;
  }
  if (!states_.has(m.state)) return;  // its study ended here, and collection took it
  w.held.insert(m.state);
  schedule_changed_ = true;
  job.progress_step = std::max(job.progress_step, m.step);
  if (info.checkpoint_row >= 0) driver_.keep_within_budget();
}

void Master::on_done(ConnectedWorker& w, const protocol::Done& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "done");
  if (m.step != job.order.to)
    throw protocol::ProtocolError("done.step: " + std::to_string(m.step) +
                                  " is not the job's end " + std::to_string(job.order.to));
  // A job that outlived every study it worked for (a study may end while work is under way)
  // leaves states that nobody can reach.
  bool orphan = std::none_of(job.studies.begin(), job.studies.end(),
                             [&](int64_t id) { return driver_.running(id); });
  // The worker is past every split point of its job: no snapshot order goes to it any more.
  job.progress_step = m.step;
  // One commit for the progress and every trial this job closes; if the plan is locked, nothing
  // has changed yet and the message is retried whole.
  plan_.transaction([&] {
    mark_progress(job, m.step);
    record_execution(job, w, ExecutionOutcome::kDone, m.step);
    if (orphan) driver_.collect_checkpoints();
    // Trials whose last step this job trained (and that need no more evaluations) close now.
    driver_.close_trials_ending(job.representative, job.order.from, m.step);
  });
  int64_t steps = job.order.to - job.order.from;
  if (steps > 0 && m.busy_s > 0)
    step_costs_.add(tree_.trial(job.representative).root_key, m.busy_s, steps);
  driver_.count_busy(job.studies, m.busy_s);
  const StageId stage = first_stage(tree_, job.representative, job.order.from, job.order.to);
  pool_.clear_storage_failures(stage);
  pool_.claims().clear(stage);
  pool_.end_job(w, m.held);
  schedule_changed_ = true;
}

void Master::on_failed(ConnectedWorker& w, const protocol::Failed& m) {
  const RunningJob job = reported_job(w, m.job, m.incarnation, "failed");
  if (!m.lost_file.empty() && (m.lost_file != job.order.parent_file || job.order.parent_state < 0))
    throw protocol::ProtocolError("failed.lost_file: not the job's parent checkpoint");
  std::string error = m.error;
  StageId stage = first_stage(tree_, job.representative, job.order.from, job.order.to);
  // A claim that would destroy others' work counts once enough keys made it (Claims).
  auto believed = [&](const std::string& what) {
    if (pool_.claims().add(stage, w.identity.key, pool_.keys())) return true;
    spdlog::warn("worker {} says {}: a worker of another key tries the stage before it is believed",
                 w.hello.name, what);
    log_event(std::nullopt, "claim_doubted",
              {{"worker", w.hello.name}, {"claim", what}, {"error", error}});
    return false;
  };
  if (!m.lost_file.empty()) {
    // The parent checkpoint is missing or corrupt: rebuilt by replay (or read from another
    // storage's copy), the stage is not at fault. The copy on the worker's storage goes; a copy
    // it fetched was bad at its source, which goes with every copy. A file that the master sees
    // in its own directory is deleted only on the word of enough keys.
    const std::string storage = storage_of(w);
    std::error_code ec;
    const bool missing =
        storage == storages_.own() &&
        !std::filesystem::exists(std::filesystem::path(options_.checkpoints) / m.lost_file, ec);
    if (states_.has(job.order.parent_state) &&
        (missing || believed("checkpoint " + m.lost_file + " is unreadable"))) {
      if (job.order.fetch_parent)
        forget_state(job.order.parent_state, error);
      else
        lose_copy(job.order.parent_state, storage, error);
    }
  } else if (m.retry && pool_.storage_failures(stage) + 1 < kStorageAttempts) {
    // The worker could not write a checkpoint (a full disk), or its trainer process died:
    // another worker, if there is one, tries again from the newest state reported.
    log_event(std::nullopt, "stage_retry", {{"worker", w.hello.name}, {"error", error}});
    spdlog::warn("worker {} failed a stage, retrying: {}", w.hello.name, error);
  } else if (m.retry || believed("the stage fails")) {
    if (m.retry) error += " (the stage failed " + std::to_string(kStorageAttempts) + " times)";
    // One transaction first: if the plan is locked, nothing has changed and this is retried.
    plan_.transaction([&] { driver_.fail_trials_through(stage, error); });
    pool_.claims().clear(stage);
  }
  if (m.retry && m.lost_file.empty()) pool_.add_storage_failure(stage, w.peer);
  record_unfinished(job, w, ExecutionOutcome::kFailed, error);
  pool_.end_job(w, m.held);
  schedule_changed_ = true;
}

void Master::on_abandoned(ConnectedWorker& w, const protocol::Abandoned& m) {
  const RunningJob& job = reported_job(w, m.job, m.incarnation, "abandoned");
  if (!job.abandoned)
    throw protocol::ProtocolError("abandoned.job: not a job this worker was told to abandon");
  record_unfinished(job, w, ExecutionOutcome::kAbandoned);
  pool_.end_job(w, m.held);
  schedule_changed_ = true;
}

void Master::on_fetch_parent(ConnectedWorker& w, const protocol::FetchParent& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "fetch_parent");
  if (!job.order.fetch_parent)
    throw protocol::ProtocolError("fetch_parent.job: its parent is not fetched");
  if (m.offset >= job.order.parent_bytes)
    throw protocol::ProtocolError("fetch_parent.offset: past the parent checkpoint's " +
                                  std::to_string(job.order.parent_bytes) + " bytes");
  serve_fetch(job, m.offset);
}

void Master::serve_fetch(RunningJob& job, int64_t offset) {
  const protocol::Job& order = job.order;
  const int64_t state = order.parent_state;
  const protocol::ReadFile read{
      .read = order.id,
      .file = order.parent_file,
      .offset = offset,
      .length = std::min(protocol::kChunkBytes, order.parent_bytes - offset)};
  job.fetch_source.clear();
  job.fetch_offset = offset;
  while (states_.has(state)) {
    const StateInfo& info = states_.info(state);
    if (info.storages.count(storages_.own())) {
      protocol::FileBytes bytes = protocol::read_file_bytes(options_.checkpoints, read);
      bytes.error = chunk_error(bytes, order.parent_bytes);
      if (bytes.error.empty()) return send(job.worker, bytes.to_json());
      lose_copy(state, storages_.own(), bytes.error);
      continue;
    }
    // A worker of a storage that holds it reads it; an idle one first.
    const ConnectedWorker* holder = nullptr;
    for (const auto& [peer, x] : pool_.workers())
      if (peer != job.worker && info.storages.count(storage_of(x)) && (!holder || x.job < 0))
        holder = &x;
    if (!holder) {
      forget_state(state, "no connected worker holds a copy");
      break;
    }
    job.fetch_source = holder->peer;
    return send(holder->peer, read.to_json());
  }
  send(job.worker, protocol::FileBytes{.read = order.id,
                                       .offset = offset,
                                       .error = "no copy of " + order.parent_file + " can be read"}
                       .to_json());
}

void Master::on_file_bytes(ConnectedWorker& w, const protocol::FileBytes& m) {
  auto it = pool_.jobs().find(m.read);
  // An answer that comes after its job ended, or after the job's worker asked again (and another
  // holder was asked), is late: dropped. Only the worker asked can answer.
  if (it == pool_.jobs().end() || it->second.fetch_source != w.peer) return;
  RunningJob& job = it->second;
  job.fetch_source.clear();
  const std::string error = chunk_error(m, job.order.parent_bytes);
  if (error.empty()) return send(job.worker, m.to_json());
  // That storage's copy is lost; another one, if there is one, is read instead.
  if (states_.has(job.order.parent_state))
    lose_copy(job.order.parent_state, storage_of(w), "worker " + w.hello.name + ": " + error);
  serve_fetch(job, m.offset);
}

void Master::on_fetched(ConnectedWorker& w, const protocol::Fetched& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "fetched");
  if (!job.order.fetch_parent || m.bytes != job.order.parent_bytes)
    throw protocol::ProtocolError("fetched.bytes: not the job's parent checkpoint (" +
                                  std::to_string(job.order.parent_bytes) + " bytes)");
  driver_.count_moved(job.studies, m.bytes, m.seconds);
  const int64_t state = job.order.parent_state;
  if (!states_.has(state) || states_.info(state).file != job.order.parent_file) return;
  std::set<std::string> storages = states_.info(state).storages;
  if (storages.insert(storage_of(w)).second) set_storages(state, std::move(storages));
}

void Master::send_deletions() {
  for (auto it = storages_.deletions().begin(); it != storages_.deletions().end();) {
    const std::string storage = (it++)->first;  // taking them erases the entry
    for (const auto& [peer, w] : pool_.workers()) {
      if (storage_of(w) != storage) continue;
      std::vector<std::string> files = storages_.take_deletions(storage);
      for (size_t at = 0; at < files.size(); at += protocol::kMaxListedFiles) {
        const size_t end = std::min(files.size(), at + protocol::kMaxListedFiles);
        send(peer, protocol::DeleteFiles{{files.begin() + at, files.begin() + end}}.to_json());
      }
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Workers, jobs and states.

void Master::check_workers() {
  std::vector<std::string> lost =
      pool_.expire(options_.worker_timeout_s, [&](const RunningJob& job) {
        record_unfinished(job, *pool_.find(job.worker), ExecutionOutcome::kLost);
        trials_to_close_ = true;
      });
  for (const std::string& name : lost) {
    // Lost: its job goes back to the queue from the newest state it reported.
    log_event(std::nullopt, "worker_lost", {{"name", name}});
    spdlog::warn("lost worker {}", name);
    schedule_changed_ = true;
  }
  // A chunk that a lost worker was asked to read is read elsewhere now, not when its job's worker
  // asks again.
  if (!lost.empty())
    for (auto& [id, job] : pool_.jobs())
      if (!job.fetch_source.empty() && !pool_.find(job.fetch_source)) try {
          serve_fetch(job, job.fetch_offset);
        } catch (const PlanBusy&) {
          // another process holds the plan: the job's worker asks again in a few seconds
        }
}

void Master::record_unfinished(const RunningJob& job, const ConnectedWorker& w,
                               ExecutionOutcome outcome, const std::string& error) {
  record_execution(job, w, outcome, job.progress_step, error);
  driver_.count_executed(job.studies, std::max<int64_t>(0, job.progress_step - job.reported_step));
}

void Master::record_execution(const RunningJob& job, const ConnectedWorker& w,
                              ExecutionOutcome outcome, int64_t reached, const std::string& error) {
  const protocol::Job& order = job.order;
  ExecutionRow row;
  row.stage = first_stage(tree_, job.representative, order.from, order.to);
  row.trial = job.representative;
  row.kind = job.kind;
  row.from = order.from;
  row.to = order.to;
  row.reached = std::clamp(reached, order.from, order.to);
  row.worker = w.hello.name;
  row.started_at = job.started_at;
  row.ended_at = std::max(job.started_at, unix_seconds());
  row.outcome = outcome;
  row.error = error;
  row.studies.assign(job.studies.begin(), job.studies.end());
  try {
    plan_.add_execution(row);
  } catch (const std::exception& e) {
    spdlog::warn("execution of job {} not recorded: {}", order.id, e.what());
  }
}

void Master::mark_progress(RunningJob& job, int64_t step) {
  for (StageId id : tree_.path(job.representative)) {
    const Stage& x = tree_.stage(id);
    if (x.end <= job.order.from) continue;
    if (x.start >= step) break;
    if (x.start >= job.order.from || x.trained_until >= job.order.from) {
      int64_t before = x.trained_until;
      tree_.mark_trained(id, step);
      driver_.on_progress(id);
      trained_stages_.push_back(id);
      if (tree_.stage(id).trained_until != before) plan_.save_stage(tree_.stage(id));
    }
  }
  driver_.count_executed(job.studies, step - job.reported_step);
  job.reported_step = step;
}

// A job that no running study needs any more (they were cancelled, or ended while it ran) is
// abandoned: its worker stops at its next step and says "abandoned" (or, if it finished first,
// "done"), and stays busy for the master until then.
void Master::abandon_orphan_jobs() {
  if (driver_.studies_ended() == studies_ended_seen_) return;  // no job can have become one
  studies_ended_seen_ = driver_.studies_ended();
  for (int64_t id : pool_.orphans([&](int64_t study) { return driver_.running(study); })) {
    send(pool_.jobs().at(id).worker, protocol::Abandon{.job = id}.to_json());
    log_event(std::nullopt, "job_abandoned", {{"job", id}});
  }
}

void Master::forget_state(int64_t state, const std::string& why) {
  const StateInfo info = states_.info(state);
  plan_.transaction([&] {
    if (info.checkpoint_row >= 0) plan_.delete_checkpoint(info.checkpoint_row);
    plan_.add_event(std::nullopt, "checkpoint_lost", {{"file", info.file}, {"why", why}});
    storages_.remove_after_commit(plan_, info.storages, info.file);  // a corrupt file goes
  });
  spdlog::warn("checkpoint {} is lost ({}); its state will be replayed", info.file, why);
  states_.forget(state);
  pool_.forget_state(state);
}

void Master::lose_copy(int64_t state, const std::string& storage, const std::string& why) {
  std::set<std::string> left = states_.info(state).storages;
  if (!left.erase(storage)) return;
  if (left.empty()) return forget_state(state, why);
  const std::string file = states_.info(state).file;
  const size_t others = left.size();
  plan_.transaction([&] {
    set_storages(state, std::move(left));
    plan_.add_event(std::nullopt, "checkpoint_lost",
                    {{"file", file}, {"why", why}, {"storage", storage}});
    storages_.remove_after_commit(plan_, {storage}, file);
  });
  spdlog::warn("the copy of checkpoint {} on storage {} is lost ({}); {} other cop{} left", file,
               storage, why, others, others == 1 ? "y is" : "ies are");
}

void Master::set_storages(int64_t state, std::set<std::string> storages) {
  if (const int64_t row = states_.info(state).checkpoint_row; row >= 0)
    plan_.set_checkpoint_storages(row, {storages.begin(), storages.end()});
  states_.set_storages(state, std::move(storages));
}

void Master::on_tree_change(const Change& change) {
  for (const Split& split : change.splits) {
    states_.on_split(split);
    for (int64_t id : jobs_to_snapshot_at_split(split, tree_, states_, pool_.jobs())) {
      RunningJob& job = pool_.jobs().at(id);
      protocol::SnapshotOrder order = states_.new_snapshot_order(split.at);
      auto& snapshots = job.order.snapshots;
      snapshots.insert(
          std::lower_bound(snapshots.begin(), snapshots.end(), order,
                           [](const auto& a, const auto& b) { return a.step < b.step; }),
          order);
      send(job.worker, protocol::SnapshotAt{.job = id, .order = order}.to_json());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Scheduling.

void Master::retire_drained_workers() {
  std::vector<std::string> drained;
  for (const std::string& peer : pool_.idle())
    if (pool_.find(peer)->draining) drained.push_back(peer);
  for (const std::string& peer : drained) {
    log_event(std::nullopt, "worker_drained", {{"name", pool_.find(peer)->hello.name}});
    send(peer, protocol::Shutdown{}.to_json());
    pool_.remove(peer);
  }
}

void Master::dispatch() {
  std::vector<IdleWorker> idle;
  for (const std::string& peer : pool_.idle())
    if (const ConnectedWorker& w = *pool_.find(peer); !w.draining)
      idle.push_back({peer, w.hello.devices, &w.held, storage_of(w)});
  if (idle.empty()) return;
  const double started = thread_cpu_seconds();
  const StudyDriver::NeededEnds& needed = driver_.needed_ends();
  priorities_.refresh(tree_, needed.ends, needed.version, needed.raised, needed.uppers,
                      [&](const std::string& root) { return step_costs_.per_step(root); });
  priorities_.forget_trained(tree_, needed.ends, std::exchange(trained_stages_, {}));
  in_flight_.update(tree_, pool_.jobs(), driver_.tree_shape(), pool_.take_job_changes());
  SchedulerInput input{tree_,       states_,
                       in_flight_,  driver_.pending_evaluations(),
                       needed.ends, driver_.failed_stages(),
                       priorities_, options_.order};
  // The best few items are what the idle workers need; all of them only when some of those
  // fit no idle worker (a pipeline, an external trainer).
  std::vector<WorkItem> work = ready_work(input, idle.size());
  // A pipelined stage needs a worker with a device per pipeline stage.
  auto devices_for = [&](const WorkItem& item) {
    return driver_.studies().at(driver_.trial(item.representative)->study).spec.pipeline.stages;
  };
  for (const WorkItem& item : work)
    if (int64_t devices = devices_for(item); devices > 1)
      warn_if_no_worker_has(devices, driver_.trial(item.representative)->study);
  // External trainers run only on workers whose operator allowed them.
  auto external = [&](const WorkItem& item) {
    return driver_.studies().at(driver_.trial(item.representative)->study).spec.external_model();
  };
  for (const WorkItem& item : work)
    if (external(item) && !pool_.any_runs_trainers())
      warn_if_no_worker_runs_trainers(driver_.trial(item.representative)->study);
  auto usable = [&](const WorkItem& item, const IdleWorker& idle_worker) {
    const ConnectedWorker& w = *pool_.find(idle_worker.peer);
    // A stage that failed on a worker's storage, or that a worker's key made a claim about, goes
    // to another worker while there is one.
    return idle_worker.devices >= devices_for(item) && (!external(item) || w.hello.runs_trainers) &&
           !pool_.should_avoid(first_stage(tree_, item.representative, item.from, item.to), w);
  };
  // Bytes a worker must fetch first: none when it holds the parent in memory or on its storage.
  auto moved_bytes = [&](const WorkItem& item, const IdleWorker& idle_worker) -> int64_t {
    if (item.parent_state < 0) return 0;
    const StateInfo& parent = states_.info(item.parent_state);
    return parent.file.empty() || parent.storages.count(idle_worker.storage) ? 0 : parent.bytes;
  };
  std::vector<Assignment> assignments = assign(work, idle, usable, moved_bytes);
  if (assignments.size() < idle.size() && work.size() >= idle.size())
    assignments = assign(work = ready_work(input), idle, usable, moved_bytes);
  for (const Assignment& a : assignments) send_job(*pool_.find(a.peer), a.work);
  ++costs_.decisions.count;
  costs_.decisions.cpu_s += thread_cpu_seconds() - started;
}

void Master::warn_if_no_worker_has(int64_t devices, int64_t study) {
  int64_t most = pool_.most_devices();
  if (most >= devices || !device_warnings_.insert({study, most}).second) return;
  log_event(study, "no_worker_for_pipeline", {{"devices_needed", devices}, {"devices_most", most}});
  spdlog::warn(
      "study {} needs a worker with {} devices (pipeline.stages) and no connected worker has "
      "more than {}: start one with --devices cpu:{}",
      driver_.studies().at(study).spec.name, devices, most, devices);
}

void Master::warn_if_no_worker_runs_trainers(int64_t study) {
  if (!trainer_warnings_.insert(study).second) return;
  log_event(study, "no_worker_for_trainer", json::object());
  spdlog::warn(
      "study {} runs an external trainer and no connected worker runs them: start one with "
      "--allow-exec trainer",
      driver_.studies().at(study).spec.name);
}

void Master::send_job(ConnectedWorker& w, const WorkItem& work) {
  const TrackedStudy& study = driver_.studies().at(driver_.trial(work.representative)->study);
  RunningJob job;
  job.representative = work.representative;
  job.reported_step = work.from;
  job.progress_step = work.from;
  job.started_at = unix_seconds();
  job.kind = work.from == work.to     ? ExecutionKind::kEvaluate
             : work.stage == kNoStage ? ExecutionKind::kReplay
                                      : ExecutionKind::kTrain;
  job.studies =
      driver_.studies_through(first_stage(tree_, work.representative, work.from, work.to));
  protocol::Job& order = job.order;
  order.run = run_spec(study.spec);
  order.hyperparams = tree_.trial(work.representative).hyperparams;
  order.from = work.from;
  order.to = work.to;
  order.parent_state = work.parent_state;
  if (work.parent_state >= 0) {
    const StateInfo& parent = states_.info(work.parent_state);
    order.parent_file = parent.file;
    // Neither in the worker's memory nor on its storage: it fetches the file through us.
    order.fetch_parent = !parent.file.empty() && !w.held.count(work.parent_state) &&
                         !parent.storages.count(storage_of(w));
    if (order.fetch_parent) order.parent_bytes = parent.bytes;
  }
  order.eval_steps = work.evals;
  for (int64_t step : snapshot_steps(tree_, work, options_.snapshot_every))
    order.snapshots.push_back(states_.new_snapshot_order(step));
  const RunningJob& started = pool_.start(w, std::move(job));
  ++costs_.jobs;
  spdlog::debug("job {} to {}: trial {} steps [{}, {}) from state {}, {} evals", started.order.id,
                w.hello.name, work.representative, work.from, work.to, work.parent_state,
                work.evals.size());
  const std::string body = protocol::serialize(started.order.to_json());
  if (static_cast<int64_t>(body.size()) > protocol::kMaxMessageBytes) {
    // No worker could take it (ZeroMQ refuses a frame over the limit): its studies fail now.
    const std::string error =
        "a job of " + std::to_string(body.size()) + " bytes (steps " + std::to_string(work.from) +
        " to " + std::to_string(work.to) + ", " + std::to_string(work.evals.size()) +
        " evaluations) is over the message limit of " + std::to_string(protocol::kMaxMessageBytes) +
        " bytes: evaluate less often (eval.every)";
    const std::set<int64_t> studies = started.studies;
    pool_.end_job(w, std::vector<int64_t>(w.held.begin(), w.held.end()));
    for (int64_t study : studies)
      if (driver_.running(study)) driver_.fail(study, error);
    schedule_changed_ = true;
    return;
  }
  transport_->send(w.peer, body);
}

}  // namespace hippo::master
