#include "master/master.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "master/checkpoint_files.h"
#include "master/jobs.h"
#include "protocol/failpoint.h"
#include "protocol/log.h"
#include "protocol/random_token.h"
#include "protocol/socket.h"
#include "protocol/text.h"
#include "searchers/searcher.h"

namespace hippo::master {
namespace {

// Refusals of one sender logged (and recorded as events) per minute; the rest are counted.
constexpr int64_t kRefusalsLogged = 10;

// Appends what `more` decided to `e`, after what is there.
void merge(Edit& e, Edit more) {
  for (EditOp& op : more.ops) e.ops.push_back(std::move(op));
  for (Work& w : more.next) e.next.push_back(std::move(w));
  for (Work& w : more.later) e.later.push_back(std::move(w));
  for (auto& s : more.sends) e.sends.push_back(std::move(s));
  for (auto& b : more.bodies) e.bodies.push_back(std::move(b));
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
      states_(protocol::random_hex(16)),
      storages_(options.checkpoints),
      driver_(plan_, tree_, states_, storages_, options.rules),
      copies_(states_, storages_, pool_) {
  if (!options.events.empty()) events_ = std::make_unique<EventStream>(options.events);
  tree_ = plan_.load_tree();
  storages_.restore_owners(plan_);
  restore_checkpoints();
  // The jobs earlier masters sent and never saw end: their workers' hellos say what became of
  // them (adopt), and their files stay until then.
  for (RunningJobRow& row : plan_.running_jobs())
    earlier_jobs_[{row.incarnation, row.job}] = std::move(row);
  sweep_checkpoints();
  in_process([&] {
    apply(driver_.restore(options.resume_running));
    drain();
  });
}

Master::~Master() = default;

void Master::restore_checkpoints() {
  Edit e;
  for (const CheckpointRow& row : plan_.checkpoints()) {
    const StateInfo info = state_of(row, storages_.own());
    const int64_t id = states_.add_restored(info);
    std::error_code ec;
    // Only the master's own directory can be looked at; other storages' workers say what they
    // lack when asked for it. Lost with its disk: forgotten (replayed from an earlier state when
    // it is needed), unless another storage holds a copy.
    if (info.storages.count(storages_.own()) &&
        !std::filesystem::exists(std::filesystem::path(options_.checkpoints) / row.file, ec)) {
      std::set<std::string> left = info.storages;
      left.erase(storages_.own());
      if (left.empty())
        e.add(edit::DropState{id, "missing"});
      else
        e.add(edit::SetStorages{id, left, "missing", storages_.own()});
    }
  }
  if (!e.empty()) in_process([&] { apply(e); });
}

void Master::sweep_checkpoints() {
  std::set<std::string> named;
  for (const EventRow& event : plan_.events_of_kind("master_started"))
    incarnations_.insert(event.detail.value("incarnation", ""));
  for (const auto& [id, info] : states_.all())
    if (info.storages.count(storages_.own())) named.insert(info.file);
  // The files earlier masters' running jobs may have written unheard of (past their counted step:
  // those before were reported, and have rows or were dropped) wait for their workers' word.
  for (const auto& [key, row] : earlier_jobs_)
    for (const auto& [step, file] : row.files)
      if (step > row.counted) named.insert(file);
  const int64_t removed = sweep_checkpoint_files(options_.checkpoints, incarnations_, named);
  incarnations_.insert(states_.incarnation());
  spdlog::info("removed {} checkpoint file(s) in {} that no row of the search plan names", removed,
               options_.checkpoints);
  // Before any worker hears of the incarnation: the next start knows the files it names.
  in_process([&] {
    apply(Edit{}.add(edit::AddEvent{
        std::nullopt,
        "master_started",
        {{"incarnation", states_.incarnation()}, {"checkpoint_files_removed", removed}}}));
  });
}

// ---------------------------------------------------------------------------------------------
// What the CLI asks (in-process, between polls).

void Master::in_process(const std::function<void()>& fn) {
  outbox_.emplace();
  try {
    plan_.transaction([&] {
      fn();
      record_due_summaries();
    });
  } catch (...) {
    outbox_.reset();  // nothing was committed: nothing is sent
    if (events_) events_->discard();
    throw;
  }
  const std::vector<std::pair<std::string, std::string>> sent = std::move(*outbox_);
  outbox_.reset();
  if (events_) events_->commit();
  for (const auto& [peer, body] : sent) transport_->send(peer, body);
}

json resolve_parallel(const json& spec_json, int64_t workers) {
  const json name = spec_json.is_object() ? spec_json.value("name", json()) : json();
  if (std::optional<int64_t> parallel = parallel_of(spec_json);
      parallel && *parallel < workers && name.is_string())
    spdlog::warn(
        "study {}: searcher.parallel = {} keeps at most {} trials in flight, so {} of the {} "
        "workers idle unless other studies have work (without `parallel` it keeps as many as "
        "there are workers)",
        protocol::printable(name.get<std::string>()), *parallel, *parallel, workers - *parallel,
        workers);
  return with_parallel(spec_json, workers);
}

int64_t Master::submit(const StudySpec& spec, const json& spec_json, Policy policy) {
  const double started = thread_cpu_seconds();
  int64_t id = 0;
  in_process([&] {
    apply(driver_.submit(spec, spec_json, policy));
    id = driver_.created();
    drain();
  });
  driver_.charge_master_time(thread_cpu_seconds() - started);
  schedule_changed_ = true;
  return id;
}

void Master::resume(int64_t study) {
  in_process([&] {
    apply(driver_.resume(study));
    drain();
  });
  schedule_changed_ = true;
}

void Master::interrupt(int64_t study, const std::string& why) {
  if (!driver_.running(study)) return;
  in_process([&] {
    apply(driver_.interrupt(study, why));
    drain();
  });
}

std::optional<StudyRow> Master::study_named(const std::string& name_or_id) {
  if (std::optional<StudyRow> row = plan_.study_by_name(name_or_id)) return row;
  if (std::optional<int64_t> id = study_id_in(name_or_id))
    if (std::optional<StudyRow> row = plan_.study(*id); row && !row->deleted_at) return row;
  return std::nullopt;
}

std::optional<double> Master::seconds_to_wake() const {
  if (next_retry_ == Clock::time_point::max()) return std::nullopt;
  return std::max(0.0, std::chrono::duration<double>(next_retry_ - Clock::now()).count());
}

StudySummary Master::summary(int64_t study) {
  return summarize(driver_, tree_, plan_, study, pool_.size());
}

json Master::record(int64_t study) {
  json s = summary(study).to_json();
  std::optional<EventRow> last = plan_.last_event(study, "summary");
  if (!last || last->detail != s) apply(Edit{}.add(edit::AddEvent{study, "summary", s}));
  return s;
}

void Master::record_due_summaries() {
  for (int64_t study : driver_.take_summaries_due()) record(study);
}

json Master::record_summary(int64_t study) {
  json s;
  in_process([&] { s = record(study); });
  return s;
}

Progress Master::progress(int64_t study) const {
  return master::progress(driver_, tree_, study);
}

void Master::finish_jobs(double patience_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(patience_s));
  while (!pool_.jobs().empty() && Clock::now() < deadline) poll(10);
}

void Master::shutdown_workers(double patience_s) {
  stopping_ = true;  // no new work: the workers are told to exit
  // Each worker stops its job at the next step and says how far it got (Abandoned) before it
  // exits: the steps it trained are counted, not guessed from its last heartbeat.
  in_process([&] {
    Edit e;
    for (const auto& [id, job] : pool_.jobs())
      if (!job.abandoned) e.add(edit::AbandonJob{id});
    for (const auto& [peer, w] : pool_.workers())
      e.sends.emplace_back(peer, protocol::Shutdown{}.to_json());
    apply(e);
  });
  finish_jobs(patience_s);
  // Those that did not say (a worker that died meanwhile): as far as their heartbeats said.
  in_process([&] {
    Edit e;
    for (const auto& [id, job] : pool_.jobs()) {
      add_unfinished(e, job, tree_, worker_name(job.worker), ExecutionOutcome::kAbandoned);
      e.add(edit::EndJob{.job = id});
    }
    e.add(edit::SaveAccounts{0});
    apply(e);
  });
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
// Polls and transactions.

void Master::poll(int timeout_ms) {
  // The master's CPU time is read once here and once after each message and at the end: each
  // read ends one measurement and begins the next (a read is a system call).
  cpu_mark_ = thread_cpu_seconds();
  if (housekeeping_due() || driver_.expanding()) timeout_ms = 0;
  std::optional<protocol::Envelope> envelope = transport_->receive(timeout_ms);
  do {
    std::vector<protocol::Envelope> batch;
    for (; envelope && batch.size() < kMessagesPerCommit; envelope = transport_->receive(0))
      batch.push_back(std::move(*envelope));
    step(batch);
  } while (envelope);
  driver_.charge_master_time(thread_cpu_seconds() - cpu_mark_);
}

bool Master::housekeeping_due() const {
  return driver_.has_work() || trials_to_close_ || schedule_changed_ ||
         pool_.expiry_due(options_.worker_timeout_s) || Clock::now() >= next_retry_ ||
         !storages_.deletions().empty();
}

void Master::step(std::vector<protocol::Envelope>& batch) {
  for (const protocol::Envelope& m : batch)
    if (ConnectedWorker* w = pool_.find(m.peer)) w->last_seen = Clock::now();  // alive all the same
  const bool retry = !deferred_.empty() && seconds_since(last_busy_) >= 1;
  if (!deferred_.empty() && !retry) {
    for (protocol::Envelope& m : batch) handle_while_locked(m);
    return;
  }
  if (batch.empty() && !retry && !housekeeping_due() && !driver_.expanding()) return;
  const bool began = transact([&] {
    // Messages that waited for the plan come first, in the order they came.
    for (; !deferred_.empty(); deferred_.pop_front()) handle(deferred_.front());
    for (const protocol::Envelope& m : batch) handle(m);
    // The housekeeping of the round.
    check_workers();
    if (trials_to_close_) {
      driver_.close_trained_trials();
      trials_to_close_ = false;
    }
    // A study that enters the plan in batches goes on between the messages, about 25 ms a round.
    const double started = thread_cpu_seconds();
    while (driver_.expanding() && thread_cpu_seconds() - started < 0.025 && driver_.expand())
      drain();
    drain();
    if (Clock::now() >= next_retry_) schedule_changed_ = true;  // a stage may be tried again
    if (driver_.take_schedule_change()) schedule_changed_ = true;
    if (schedule_changed_) {
      abandon_orphan_jobs();
      retire_drained_workers();
      dispatch();
      drain();  // a job that no worker can take fails its studies
      schedule_changed_ = false;
    }
    if (!storages_.deletions().empty()) apply(copies_.deletions());
    apply(Edit{}.add(edit::SaveAccounts{5}));
    record_due_summaries();
  });
  if (began) {
    if (!busy_error_.empty()) spdlog::info("the search plan is writable again");
    busy_error_.clear();
    return;
  }
  last_busy_ = Clock::now();
  for (protocol::Envelope& m : batch) handle_while_locked(m);
}

bool Master::transact(const std::function<void()>& fn) {
  // BEGIN does not wait: if another process holds the plan, nothing is handled now.
  const int busy_timeout = plan_.set_busy_timeout(0);
  bool began = false;
  outbox_.emplace();
  try {
    plan_.transaction([&] {
      began = true;
      plan_.set_busy_timeout(busy_timeout);
      fn();
    });
  } catch (const PlanBusy& e) {
    plan_.set_busy_timeout(busy_timeout);
    outbox_.reset();
    if (events_) events_->discard();
    if (began) throw PlanFailure(e.what());  // inside, the lock is ours: this is no lock
    if (busy_error_.empty())
      spdlog::warn("{}; worker messages wait and are retried every second", e.what());
    busy_error_ = e.what();
    return false;
  } catch (const PlanFailure&) {
    outbox_.reset();
    if (events_) events_->discard();
    throw;
  } catch (const std::exception& e) {
    // A failed COMMIT (or a bug): what was applied in memory is not in the plan. Nothing of it is
    // sent (nor told as an event); the master stops, and a restart goes on from the plan.
    outbox_.reset();
    if (events_) events_->discard();
    throw PlanFailure(e.what());
  }
  const std::vector<std::pair<std::string, std::string>> sent = std::move(*outbox_);
  outbox_.reset();
  if (events_) events_->commit();
  protocol::failpoint("master.after_commit");  // a crash here: committed, not sent (tests)
  for (const auto& [peer, body] : sent) transport_->send(peer, body);
  return true;
}

void Master::send(const std::string& peer, const json& message) {
  if (outbox_)
    outbox_->emplace_back(peer, protocol::serialize(message));
  else
    transport_->send(peer, protocol::serialize(message));
}

void Master::drain() {
  while (driver_.has_work()) apply(driver_.next());
}

void Master::require_writable() const {
  if (!outbox_)
    throw std::runtime_error(busy_error_.empty() ? "the search plan is not writable now"
                                                 : busy_error_);
}

void Master::refuse(const std::string& peer, const std::string& error) {
  // One entry per sender; senders come and go (connections), so the table is bounded.
  if (refusals_.size() >= 1024 && !refusals_.count(peer)) refusals_.clear();
  Refusals& r = refusals_[peer];
  if (seconds_since(r.since) >= 60) {
    if (r.count > kRefusalsLogged)
      spdlog::warn("... and {} more message(s) of that sender refused in a minute",
                   r.count - kRefusalsLogged);
    r = {Clock::now(), 0};
  }
  if (++r.count > kRefusalsLogged) return;
  spdlog::warn("refused a message: {}", error);
  if (outbox_)
    apply(Edit{}.add(edit::AddEvent{std::nullopt, "refused_message", {{"error", error}}}));
  if (r.count == kRefusalsLogged)
    spdlog::warn("more refusals of this sender in the next minute are counted, not logged");
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
      if (!w) {
        // A worker that trains on for an earlier master (it says hello once its job ends) keeps
        // that job waiting for its word (adopt) rather than given up.
        if (m.value("type", "") == protocol::Heartbeat::kType) {
          const protocol::Heartbeat h = protocol::Heartbeat::from_json(m);
          if (auto it = master.earlier_jobs_.find({h.incarnation, h.job});
              it != master.earlier_jobs_.end())
            master.earlier_heard_[it->first] = Clock::now();
        }
        return master.send(from.peer, protocol::Reset{}.to_json());
      }
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
        if (const auto& allowed = master.options_.client_requests;
            allowed && !allowed->count(m.value("type", "")))
          throw std::invalid_argument(
              "this master is a `hippo run`'s: it answers a client's enqueue only (" +
              m.value("type", std::string()) + " needs a cluster master, `hippo master`)");
        reply.fields = (master.*handler)(from, decode(m));
        reply.ok = true;
      } catch (const PlanFailure&) {
        throw;
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
         try {
           if (!from.identity.has(kWorkerRole))
             throw ProtocolError("hello: " + from.identity.describe() +
                                 " is not a worker (its key is not in workers/)");
           master.on_hello(from, Hello::from_json(m));
         } catch (const ProtocolError& e) {  // the worker is told why, and waits longer
           master.send(from.peer, Refused{e.what()}.to_json());
           throw;
         }
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
      {Resume::kType, from_client(&Master::on_resume, &Resume::from_json)},
      {Enqueue::kType, from_client(&Master::on_enqueue, &Enqueue::from_json)},
      {ListWorkers::kType, from_client(&Master::on_list_workers, &ListWorkers::from_json)},
      {Drain::kType, from_client(&Master::on_drain, &Drain::from_json)},
  };
  return table;
}

void Master::handle(const protocol::Envelope& envelope) {
  try {
    json m = protocol::parse(envelope.body);
    const std::string type = m["type"];
    auto handler = handlers().find(type);
    if (handler == handlers().end())
      throw protocol::ProtocolError("message.type: unknown type \"" + type + "\"");
    handler->second(*this, Sender{envelope.peer, transport_->identity_of(envelope)}, m);
    // What it set going is done before the next message is handled (which may depend on it).
    if (outbox_) drain();
    // Since the last mark: this message's parsing and handling (and the first one's receiving).
    const double now = thread_cpu_seconds(), cpu_s = now - std::exchange(cpu_mark_, now);
    MasterCosts::Count& cost = costs_.messages[handler->first];
    ++cost.count;
    cost.cpu_s += cpu_s;
    driver_.charge_master_time(cpu_s);
  } catch (const PlanFailure&) {
    throw;
  } catch (const std::exception& e) {
    // A bad message is refused; it changed nothing (handlers decide before they apply).
    refuse(envelope.peer, e.what());
  }
}

void Master::handle_while_locked(protocol::Envelope& envelope) {
  // A worker's messages keep their order: they wait for the plan, behind its earlier ones.
  // Others (clients) never wait: they are answered what needs no write.
  if (pool_.find(envelope.peer)) {
    deferred_.push_back(std::move(envelope));
    return;
  }
  try {
    const json m = protocol::parse(envelope.body);
    const std::string type = m.value("type", "");
    if (type == protocol::Hello::kType || type == protocol::Heartbeat::kType) {
      deferred_.push_back(std::move(envelope));  // a worker that is not in the pool yet
      return;
    }
  } catch (const std::exception&) {
  }
  handle(envelope);  // outside a transaction: handlers that would write refuse (require_writable)
}

RunningJob& Master::reported_job(const ConnectedWorker& w, int64_t job,
                                 const std::string& incarnation, const char* what) {
  if (incarnation != states_.incarnation())
    throw protocol::ProtocolError(std::string(what) + ".incarnation: a report for the master " +
                                  "before this one (stale)");
  return pool_.job_of(w, job, what);
}

// ---------------------------------------------------------------------------------------------
// Workers' messages.

void Master::on_hello(const Sender& from, const protocol::Hello& hello) {
  require_writable();
  // A name belongs to the key that first took it (a reconnection is the same key and name).
  for (const auto& [peer, old] : pool_.workers())
    if (peer != from.peer && old.hello.name == hello.name && old.identity.key != from.identity.key)
      throw protocol::ProtocolError("hello.name: worker " + hello.name +
                                    " is connected already, with another key");
  // So does a storage (storages.h): refused here, before anything changed, when another key owns
  // it; its first key becomes its owner.
  const std::string storage = storages_.of_worker(hello.storage);
  Edit e;
  if (storages_.unowned(storage, from.identity)) e.add(edit::AdmitStorage{storage, from.identity});
  // A worker that says hello again while it had a job (it restarted, or reconnected under the
  // same key and name) lost that job, unless its record says what became of it.
  std::set<int64_t> recorded;
  for (const protocol::DroppedJob& d : hello.dropped)
    if (d.incarnation == states_.incarnation()) recorded.insert(d.job);
  for (const auto& [peer, old] : pool_.workers())
    if (peer == from.peer ||
        (old.hello.name == hello.name && old.identity.key == from.identity.key)) {
      if (old.job >= 0 && !recorded.count(old.job))
        add_lost_job(e, pool_.jobs().at(old.job), old.hello.name);
      copies_.drop_handover(peer);
    }
  // Its record of its latest job: what it trained, wrote and measured while we did not hear it.
  const std::set<std::string> files(hello.files.begin(), hello.files.end());
  for (const protocol::DroppedJob& d : hello.dropped)
    adopt(e, d, hello.name, producer_of(from.identity), storage, hello.environment, files);
  e.add(edit::JoinWorker{from.peer, from.identity, hello});
  e.add(edit::AddEvent{
      std::nullopt,
      "worker_joined",
      {{"name", hello.name}, {"device", hello.device}, {"key", from.identity.name}}});
  // Five heartbeats fit in the timeout, so one late heartbeat never loses a worker.
  protocol::Welcome welcome;
  welcome.incarnation = states_.incarnation();
  welcome.heartbeat_ms =
      std::clamp<int64_t>(static_cast<int64_t>(options_.worker_timeout_s * 200), 10, 60000);
  e.sends.emplace_back(from.peer, welcome.to_json());
  apply(e);
  // On another storage, the files of this plan's earlier masters that no state has there go.
  apply(
      copies_.on_hello(*pool_.find(from.peer), hello.files, incarnations_, states_.incarnation()));
  schedule_changed_ = true;
}

void Master::adopt(Edit& e, const protocol::DroppedJob& d, const std::string& worker,
                   const std::string& producer, const std::string& storage,
                   const std::string& environment, const std::set<std::string>& files) {
  // The job as its master recorded it: this master's own (a worker that reconnected), or an
  // earlier master's (running_jobs). A record of neither was settled already (its Done came, or
  // it was given up): the worker keeps its record until its next job, and says it again.
  const RunningJob* mine = nullptr;
  const RunningJobRow* earlier = nullptr;
  if (d.incarnation == states_.incarnation()) {
    auto it = pool_.jobs().find(d.job);
    if (it == pool_.jobs().end() || it->second.order.trial != d.trial ||
        it->second.order.from != d.from || it->second.order.to != d.to)
      return;  // ended here already: nothing to adopt
    mine = &it->second;
  } else if (auto it = earlier_jobs_.find({d.incarnation, d.job}); it != earlier_jobs_.end()) {
    earlier = &it->second;
    if (earlier->trial != d.trial || earlier->from != d.from || earlier->to != d.to)
      throw protocol::ProtocolError("hello.dropped: not the job " + std::to_string(d.job) +
                                    " its master sent");
  } else {
    return;
  }
  if (!tree_.has_trial(d.trial) || d.to > tree_.trial(d.trial).length) return;
  RunningJob job = mine ? *mine : running_job_of(*earlier);
  if (!mine) {
    // An earlier master's job: it started from the state at its first step, if that is known.
    std::optional<int64_t> parent;
    if (d.from > 0) parent = states_.state_at(state_key(tree_, d.trial, d.from));
    job.provenance = made_by(producer, parent ? states_.info(*parent).provenance : Provenance{});
  }
  const int64_t counted = job.reported_step;
  // The steps it trained past what was counted: once.
  if (d.reached > counted) e.add(edit::Count{job.studies, d.reached - counted, d.busy_s});
  // The states it wrote, hashed, on its storage: those nobody has are this master's now.
  int64_t adopted = 0, adopted_to = 0;
  for (const protocol::DroppedSnapshot& snap : d.snapshots) {
    if (!files.count(snap.file) || !incarnation_of(snap.file)) continue;
    const StateKey key = state_key(tree_, d.trial, snap.step);
    if (states_.state_at(key)) continue;
    StateInfo info{.stage = key.first,
                   .step = snap.step,
                   .file = snap.file,
                   .bytes = snap.bytes,
                   .checksum = snap.checksum,
                   .environment = environment,
                   .provenance = job.provenance};
    info.storages = {storage};
    e.add(edit::AddState{states_.new_state_id(), info});
    adopted_to = snap.step;
    ++adopted;
  }
  // The evaluations it measured: delivered to the trials that wait for them.
  for (const protocol::DroppedMetric& metric : d.metrics)
    merge(e, driver_.deliver_metrics(state_key(tree_, d.trial, metric.step),
                                     {metric.metrics, job.provenance}));
  // Its execution: done when it ran to its end, else abandoned where it got.
  edit::AddExecution row =
      execution(job, tree_, worker, d.done ? ExecutionOutcome::kDone : ExecutionOutcome::kLost,
                d.reached, d.done ? "" : "its master restarted or went silent");
  if (d.done) row.row.busy_s = d.busy_s;
  job.reported_step = d.reached;  // counted above
  if (adopted > 0) add_progress(e, job, tree_, adopted_to);
  e.add(row);
  if (mine)
    e.add(edit::EndJob{.job = d.job, .done = d.done, .busy_s = d.busy_s});
  else
    e.add(edit::SettleEarlierJob{d.incarnation, d.job});
  merge(e, driver_.close_trials_ending(d.trial, d.from, d.reached));
  e.add(edit::AddEvent{std::nullopt,
                       "job_adopted",
                       {{"worker", worker},
                        {"trial", d.trial},
                        {"from", d.from},
                        {"to", d.to},
                        {"counted", counted},
                        {"reached", d.reached},
                        {"done", d.done},
                        {"states", adopted},
                        {"evaluations", d.metrics.size()}}});
  trials_to_close_ = true;
}

void Master::give_up_earlier_jobs() {
  // A worker says hello within seconds of a master's start (it reconnects at once, or after its
  // job): past a worker timeout, a job that nobody spoke for is lost at what was counted.
  if (earlier_jobs_.empty() || seconds_since(started_) < returning_s()) return;
  Edit e;
  for (const auto& [key, row] : earlier_jobs_) {
    if (auto heard = earlier_heard_.find(key);
        heard != earlier_heard_.end() && seconds_since(heard->second) < returning_s())
      continue;  // its worker still trains it
    if (tree_.has_trial(row.trial) && row.to <= tree_.trial(row.trial).length)
      e.add(execution(running_job_of(row), tree_, row.worker, ExecutionOutcome::kLost, row.counted,
                      "its master restarted and its worker never said how it ended"));
    e.add(edit::SettleEarlierJob{row.incarnation, row.job});
  }
  apply(e);
}

void Master::on_heartbeat(ConnectedWorker& w, const protocol::Heartbeat& m) {
  require_writable();
  Edit e;
  if (m.job >= 0 && w.job >= 0 && m.job == w.job && m.incarnation == states_.incarnation())
    e.add(edit::JobProgress{.job = w.job, .progress = m.step});
  if (m.fault != w.fault) {
    const bool recovered = m.fault.empty();
    e.add(edit::WorkerFault{w.peer, m.fault});
    e.add(edit::AddEvent{std::nullopt,
                         recovered ? "worker_recovered" : "worker_fault",
                         {{"name", w.hello.name}, {"fault", m.fault}}});
    if (recovered)
      spdlog::info("worker {} says it recovered: it gets work again", w.hello.name);
    else
      spdlog::warn("worker {} cannot work: {}", w.hello.name, m.fault);
    schedule_changed_ = true;
  }
  // Answered, so that a worker hears of us even when we have nothing to say: one that hears
  // nothing for long connects anew (worker.h).
  e.sends.emplace_back(w.peer, protocol::Heartbeat{}.to_json());
  apply(e);
}

void Master::on_metric(ConnectedWorker& w, const protocol::Metric& m) {
  const RunningJob& job = reported_job(w, m.job, m.incarnation, "metric");
  if (m.step < job.order.from || m.step > job.order.to)
    throw protocol::ProtocolError("metric.step: " + std::to_string(m.step) + " is outside [" +
                                  std::to_string(job.order.from) + ", " +
                                  std::to_string(job.order.to) + "]");
  Edit e = driver_.deliver_metrics(state_key(tree_, job.representative, m.step),
                                   {m.metrics, job.provenance});
  e.add(edit::JobProgress{.job = job.order.id, .progress = m.step, .evaluated = m.step});
  apply(e);
}

void Master::on_snapshot(ConnectedWorker& w, const protocol::Snapshot& m) {
  const RunningJob& job = reported_job(w, m.job, m.incarnation, "snapshot");
  if (m.step <= job.order.from || m.step > job.order.to)
    throw protocol::ProtocolError("snapshot.step: " + std::to_string(m.step) + " is outside [" +
                                  std::to_string(job.order.from + 1) + ", " +
                                  std::to_string(job.order.to) + "]");
  auto order = std::find_if(job.order.snapshots.begin(), job.order.snapshots.end(),
                            [&](const auto& o) { return o.state == m.state && o.step == m.step; });
  if (order == job.order.snapshots.end())
    throw protocol::ProtocolError("snapshot.state: no such snapshot was ordered");
  const std::string storage = copies_.storage_of(w);
  // Its size counts against the disk budget (retention): refused unless plausible.
  const bool sized = !order->file.empty() && check_snapshot_bytes(w, job, m, storage);
  const StateKey key = state_key(tree_, job.representative, m.step);
  const std::optional<int64_t> known = states_.state_at(key);
  // A snapshot announced after every study of its job ended (its file is announced once written,
  // so the message can come late) is a state that nobody can reach.
  const bool orphan = std::none_of(job.studies.begin(), job.studies.end(),
                                   [&](int64_t id) { return driver_.running(id); });
  const bool fresh = !known && !orphan;
  Edit e;
  add_progress(e, job, tree_, m.step);
  if (fresh) {
    StateInfo info{.stage = key.first,
                   .step = m.step,
                   .file = order->file,
                   .bytes = order->file.empty() ? 0 : m.bytes,
                   .checksum = order->file.empty() ? "" : m.checksum,
                   .environment = job.environment,
                   .provenance = job.provenance};
    if (!order->file.empty()) info.storages = {storage};
    e.add(edit::AddState{m.state, info});
    // Over the disk budget with states kept for later studies: some of those go (never for a
    // size that nothing confirmed).
    if (sized && states_.bytes() + m.bytes > options_.rules.keep_checkpoint_bytes &&
        states_.kept() > 0)
      e.later.push_back(Collect{});
  } else if (!(known && order->file == states_.info(*known).file)) {
    // Made twice (a replay raced with a late snapshot: the first stays), or an orphan's.
    e.add(edit::RemoveFile{{storage}, order->file});
  }
  // Trials that end here are trained: they close now (their searchers decide on them), not when
  // the job, which may go on far beyond them, is done.
  if (!orphan) merge(e, driver_.close_trials_ending(job.representative, job.order.from, m.step));
  edit::JobProgress progress{.job = job.order.id, .reported = m.step, .progress = m.step};
  if (fresh) progress.held = m.state;
  e.add(progress);
  e.add(edit::ClearFailures{first_stage(tree_, job.representative, job.order.from, job.order.to)});
  apply(e);
  schedule_changed_ = true;
}

bool Master::check_snapshot_bytes(const ConnectedWorker& w, const RunningJob& job,
                                  const protocol::Snapshot& m, const std::string& storage) {
  // In the master's own directory the file can be measured (when it is there: a worker that
  // wrongly names this storage leaves it missing, a lost copy when it is needed).
  std::optional<int64_t> measured;
  if (storage == storages_.own()) {
    const std::filesystem::path file = std::filesystem::path(options_.checkpoints) / m.file;
    std::error_code ec;
    if (std::filesystem::is_regular_file(std::filesystem::symlink_status(file, ec))) {
      const uintmax_t size = std::filesystem::file_size(file, ec);
      if (!ec) measured = static_cast<int64_t>(size);
    }
  }
  const std::string& root_key = tree_.trial(job.representative).root_key;
  std::optional<RootSize> known = root_size(root_key);
  // A size measured here beats one that a worker only said (which may have been false).
  if (measured && known && !known->measured) known.reset();
  const bool external = job.order.run.model.value("type", "") == "external";
  const std::string why = implausible_checkpoint_bytes(
      m.bytes, measured, known ? std::optional(known->bytes) : std::nullopt, external);
  if (!why.empty()) {
    // A size that one key said and another key's report disagrees with is believed no more: the
    // next report sets it again. So a false first claim costs another key one refused snapshot
    // (its state is made again), never all of them.
    if (known && !known->measured && !known->key.empty() && known->key != w.identity.key)
      root_sizes_[root_key] = std::nullopt;
    throw protocol::ProtocolError("snapshot.bytes: " + why + " (state " + std::to_string(m.state) +
                                  " of job " + std::to_string(m.job) + "; not counted)");
  }
  if (!known || (measured && !known->measured))
    root_sizes_[root_key] =
        RootSize{measured.value_or(m.bytes), measured.has_value(), w.identity.key};
  return measured || (known && !external);
}

std::optional<Master::RootSize> Master::root_size(const std::string& root_key) {
  if (auto it = root_sizes_.find(root_key); it != root_sizes_.end()) return it->second;
  // Once per root key and start: the states restored from the plan (sizes an earlier master
  // accepted), or none yet.
  for (const auto& [id, info] : states_.all())
    if (!info.file.empty() && tree_.stage(info.stage).root_key == root_key)
      return root_sizes_[root_key] = RootSize{info.bytes, false, ""};
  return std::nullopt;
}

void Master::on_done(ConnectedWorker& w, const protocol::Done& m) {
  const RunningJob& job = reported_job(w, m.job, m.incarnation, "done");
  if (!m.diverged && m.step != job.order.to)
    throw protocol::ProtocolError("done.step: " + std::to_string(m.step) +
                                  " is not the job's end " + std::to_string(job.order.to));
  // A job stops where its model diverged only at an evaluation it reported there.
  if (m.diverged &&
      (m.step < job.order.from || m.step > job.order.to || !job.evaluated.count(m.step)))
    throw protocol::ProtocolError("done.step: the job did not evaluate step " +
                                  std::to_string(m.step) + ", where it says its model diverged");
  // A job that outlived every study it worked for (a study may end while work is under way)
  // leaves states that nobody can reach.
  const bool orphan = std::none_of(job.studies.begin(), job.studies.end(),
                                   [&](int64_t id) { return driver_.running(id); });
  Edit e;
  add_progress(e, job, tree_, m.step);
  edit::AddExecution done = execution(job, tree_, w.hello.name, ExecutionOutcome::kDone, m.step);
  done.row.busy_s = m.busy_s;
  done.row.times = protocol::to_json(m.times);
  done.row.times["evaluations"] = static_cast<int64_t>(job.evaluated.size());
  e.add(done);
  e.add(edit::Count{job.studies, 0, m.busy_s});
  // Its model diverged at m.step: so did every trial through that state that needs more.
  if (m.diverged)
    merge(e,
          driver_.diverge_through(state_key(tree_, job.representative, m.step),
                                  "the model diverged at step " + std::to_string(m.step) +
                                      " (a non-finite loss there, on a path it shares with trial " +
                                      std::to_string(driver_.trial(job.representative)
                                                         ? driver_.trial(job.representative)->number
                                                         : job.representative) +
                                      ")"));
  // An evaluation the job was asked for and did not report: its trials hear why.
  for (int64_t step : job.order.eval_steps)
    if (step <= m.step && !job.evaluated.count(step))
      merge(e, driver_.deliver_nothing(state_key(tree_, job.representative, step),
                                       "job " + std::to_string(job.order.id) + " on worker " +
                                           w.hello.name +
                                           " ended without reporting its metrics there"));
  if (orphan) e.later.push_back(Collect{});
  // Trials whose last step this job trained (and that need no more evaluations) close now.
  merge(e, driver_.close_trials_ending(job.representative, job.order.from, m.step));
  e.add(edit::ClearFailures{first_stage(tree_, job.representative, job.order.from, job.order.to),
                            true});
  e.add(edit::EndJob{.job = job.order.id, .held = m.held, .done = true, .busy_s = m.busy_s});
  apply(e);
  schedule_changed_ = true;
}

void Master::on_failed(ConnectedWorker& w, const protocol::Failed& m) {
  const RunningJob job = reported_job(w, m.job, m.incarnation, "failed");
  if (!m.lost_file.empty() && (m.lost_file != job.order.parent_file || job.order.parent_state < 0))
    throw protocol::ProtocolError("failed.lost_file: not the job's parent checkpoint");
  std::string error = m.error;
  const StageId stage = first_stage(tree_, job.representative, job.order.from, job.order.to);
  Edit e;
  // A claim that would destroy others' work counts once enough keys made it (Claims).
  auto believed = [&](const std::string& what) {
    const bool believe = pool_.claims().would_believe(stage, w.identity.key, pool_.keys());
    e.add(edit::Claim{stage, w.identity.key});
    if (believe) return true;
    spdlog::warn("worker {} says {}: a worker of another key tries the stage before it is believed",
                 w.hello.name, what);
    e.add(edit::AddEvent{std::nullopt,
                         "claim_doubted",
                         {{"worker", w.hello.name}, {"claim", what}, {"error", error}}});
    return false;
  };
  if (!m.lost_file.empty()) {
    // The parent checkpoint is missing or corrupt: rebuilt by replay (or read from another
    // storage's copy), the stage is not at fault. The copy on the worker's storage goes; a copy
    // it fetched was bad at its source, which goes with every copy. A file that the master sees
    // in its own directory is deleted only on the word of enough keys.
    const std::string storage = copies_.storage_of(w);
    spdlog::warn(
        "worker {} ({}) cannot use checkpoint {} {} {}: {}", w.hello.name, w.identity.describe(),
        m.lost_file,
        job.order.fetch_parent ? "fetched from another storage for its storage" : "on its storage",
        storage, error);
    std::error_code ec;
    const bool missing =
        storage == storages_.own() &&
        !std::filesystem::exists(std::filesystem::path(options_.checkpoints) / m.lost_file, ec);
    if (states_.has(job.order.parent_state) &&
        (missing || believed("checkpoint " + m.lost_file + " is unreadable")))
      merge(e, job.order.fetch_parent ? copies_.forget(job.order.parent_state, error)
                                      : copies_.lose(job.order.parent_state, storage, error));
  } else if (m.retry && pool_.storage_failures(stage) + 1 < kStorageAttempts) {
    // The worker could not write a checkpoint (a full disk), or its trainer process died:
    // another worker, if there is one, tries again from the newest state reported, after a wait.
    e.add(
        edit::AddEvent{std::nullopt, "stage_retry", {{"worker", w.hello.name}, {"error", error}}});
    spdlog::warn("worker {} failed a stage, retrying: {}", w.hello.name, error);
  } else if (m.retry || believed("the stage fails")) {
    if (m.retry) error += " (the stage failed " + std::to_string(kStorageAttempts) + " times)";
    merge(e, driver_.fail_stage(stage, error));
    e.add(edit::ClearFailures{stage, true});
  }
  if (m.retry && m.lost_file.empty()) {
    e.add(edit::Attempt{stage, w.peer});
    e.add(edit::WorkerFailed{w.peer, m.error});
  }
  add_unfinished(e, job, tree_, w.hello.name, ExecutionOutcome::kFailed, m.step, error);
  e.add(edit::EndJob{.job = job.order.id, .held = m.held});
  apply(e);
  schedule_changed_ = true;
}

void Master::on_abandoned(ConnectedWorker& w, const protocol::Abandoned& m) {
  const RunningJob& job = reported_job(w, m.job, m.incarnation, "abandoned");
  if (!job.abandoned)
    throw protocol::ProtocolError("abandoned.job: not a job this worker was told to abandon");
  Edit e;
  add_unfinished(e, job, tree_, w.hello.name, ExecutionOutcome::kAbandoned, m.step);
  e.add(edit::EndJob{.job = job.order.id, .held = m.held});
  apply(e);
  schedule_changed_ = true;
}

void Master::on_fetch_parent(ConnectedWorker& w, const protocol::FetchParent& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "fetch_parent");
  if (!job.order.fetch_parent)
    throw protocol::ProtocolError("fetch_parent.job: its parent is not fetched");
  if (m.offset >= job.order.parent_bytes)
    throw protocol::ProtocolError("fetch_parent.offset: past the parent checkpoint's " +
                                  std::to_string(job.order.parent_bytes) + " bytes");
  apply(copies_.serve(job, m.offset));
}

void Master::on_file_bytes(ConnectedWorker& w, const protocol::FileBytes& m) {
  apply(copies_.on_file_bytes(w, m));
  if (w.draining && w.job < 0 && !copies_.handing_over(w.peer)) schedule_changed_ = true;
}

void Master::on_fetched(ConnectedWorker& w, const protocol::Fetched& m) {
  RunningJob& job = reported_job(w, m.job, m.incarnation, "fetched");
  if (!job.order.fetch_parent || m.bytes != job.order.parent_bytes)
    throw protocol::ProtocolError("fetched.bytes: not the job's parent checkpoint (" +
                                  std::to_string(job.order.parent_bytes) + " bytes)");
  apply(copies_.on_fetched(w, job, m));
}

// ---------------------------------------------------------------------------------------------
// Clients' requests.

json Master::on_submit(const Sender& from, const protocol::Submit& m) {
  require_writable();
  Policy policy = parse_policy(m.policy);
  const json spec_json = resolve_parallel(m.spec, std::max<int64_t>(1, pool_.size()));
  StudySpec spec = parse_spec(spec_json);
  apply(driver_.submit(spec, spec_json, policy, from.identity.key));
  const int64_t id = driver_.created();
  schedule_changed_ = true;
  return {{"study", id}, {"name", spec.name}};
}

json Master::on_status(const Sender&, const protocol::Status& m) {
  if (driver_.studies().count(m.study))
    return {{"summary", summary(m.study).to_json()}, {"running", driver_.running(m.study)}};
  // One this master does not run (a restart found it interrupted, or it ended before): what the
  // plan says of it.
  std::optional<StudyRow> row = plan_.study(m.study);
  if (!row || row->deleted_at)
    throw std::invalid_argument("no study " + std::to_string(m.study) + " on this master");
  json summary = {{"study", row->name},
                  {"status", to_string(row->status)},
                  {"steps_executed", row->account.steps_executed},
                  {"wall_s", std::max(0.0, row->ended_at.value_or(unix_seconds()) -
                                               row->created_at - row->account.paused_s)},
                  {"active_s", row->account.run_s}};
  if (!row->error.empty()) summary["error"] = row->error;
  return {{"summary", summary}, {"running", false}};
}

json Master::on_cancel(const Sender& from, const protocol::Cancel& m) {
  require_writable();
  int64_t id = driver_.find(m.study);
  if (!may_cancel(from.identity, driver_.studies().at(id).owner))
    throw std::invalid_argument("study " + driver_.studies().at(id).spec.name +
                                " was submitted by another key: only its owner or an admin (a key "
                                "in admins/ of the master's --authorized) may cancel it");
  apply(driver_.cancel(id));
  drain();
  spdlog::info("study {} cancelled", driver_.studies().at(id).spec.name);
  schedule_changed_ = true;
  return {{"summary", summary(id).to_json()}};
}

json Master::on_resume(const Sender& from, const protocol::Resume& m) {
  require_writable();
  std::optional<StudyRow> row = stored_study(m.study);
  if (!row) throw std::invalid_argument("no study " + m.study.dump());
  // Its owner's act, or an admin's: the owner recorded when it was submitted.
  std::string owner;
  for (const EventRow& e : plan_.events(row->id, INT64_MAX))
    if (e.kind == "submitted") owner = e.detail.value("owner", "");
  if (!may_cancel(from.identity, owner))
    throw std::invalid_argument("study " + row->name +
                                " was submitted by another key: only its owner or an admin may "
                                "resume it");
  // Read and resumed in one transaction: a `hippo delete` waits (tests/e2e/race_test.cc).
  protocol::failpoint("master.resume_read");
  apply(driver_.resume(row->id));
  schedule_changed_ = true;
  return {{"study", row->id}, {"name", row->name}};
}

std::optional<StudyRow> Master::stored_study(const json& name_or_id) {
  std::optional<StudyRow> row;
  if (name_or_id.is_number_integer()) row = plan_.study(name_or_id.get<int64_t>());
  if (!row && name_or_id.is_string()) {
    row = plan_.study_by_name(name_or_id.get<std::string>());
    if (std::optional<int64_t> id = study_id_in(name_or_id.get<std::string>()); !row && id)
      row = plan_.study(*id);
  }
  if (row && row->deleted_at) row.reset();
  return row;
}

json Master::on_enqueue(const Sender& from, const protocol::Enqueue& m) {
  require_writable();
  int64_t id = 0;
  try {
    id = driver_.find(m.study);
  } catch (const std::invalid_argument&) {
    // A study of the plan that this master does not run: it takes a configuration once it runs.
    std::optional<StudyRow> row = stored_study(m.study);
    if (row && row->status == StudyStatus::kInterrupted)
      throw std::invalid_argument("study " + row->name +
                                  " is interrupted: resume it (hippo resume " + row->name +
                                  "), then enqueue");
    if (row && row->status != StudyStatus::kRunning)
      throw std::invalid_argument("study " + row->name +
                                  " has already ended: " + to_string(row->status));
    throw;
  }
  const TrackedStudy& s = driver_.studies().at(id);
  if (!may_cancel(from.identity, s.owner))
    throw std::invalid_argument("study " + s.spec.name +
                                " was submitted by another key: only its owner or an admin may "
                                "enqueue a configuration in it");
  EnqueueDecision decided = driver_.enqueue(id, m.params);
  json reply = {{"study", id}, {"name", s.spec.name}};
  if (const std::optional<ExistingParams>& had = decided.existing) {
    // Nothing changes: the study has these params (Optuna's skip_if_exists).
    reply["existing"] = had->trial ? json{{"trial", had->trial}, {"status", to_string(had->status)}}
                                   : json{{"waiting", true}};
    return reply;
  }
  apply(decided.edit);
  drain();
  spdlog::info("study {}: a configuration enqueued", s.spec.name);
  schedule_changed_ = true;
  reply["trials"] = s.trials.size();
  return reply;
}

json Master::on_list_workers(const Sender&, const protocol::ListWorkers&) {
  return {{"workers", workers_json(pool_, driver_)}};
}

json Master::on_drain(const Sender& from, const protocol::Drain& m) {
  require_writable();
  if (!may_drain(from.identity))
    throw std::invalid_argument(
        "draining a worker is an operator's act: only an admin (a key in "
        "admins/ of the master's --authorized) may");
  ConnectedWorker* w = pool_.find_named(m.worker);
  if (!w) throw std::invalid_argument("no connected worker is named " + m.worker);
  apply(
      Edit{}
          .add(edit::DrainWorker{w->peer})
          .add(edit::AddEvent{
              std::nullopt, "worker_draining", {{"name", w->hello.name}, {"busy", w->job >= 0}}}));
  spdlog::info("draining worker {}: no more work{}", w->hello.name,
               w->job >= 0 ? "; it exits once its job ends" : "; it exits now");
  schedule_changed_ = true;
  return {{"worker", w->hello.name}, {"busy", w->job >= 0}};
}

// ---------------------------------------------------------------------------------------------
// Workers, jobs and states.

void Master::add_lost_job(Edit& e, const RunningJob& job, const std::string& worker_name) {
  add_unfinished(e, job, tree_, worker_name, ExecutionOutcome::kLost);
  e.add(edit::EndJob{.job = job.order.id});
  const StageId stage = first_stage(tree_, job.representative, job.order.from, job.order.to);
  if (pool_.lost_attempts(stage) + 1 >= kLostAttempts) {
    merge(e, driver_.fail_stage(stage, "its job was lost " + std::to_string(kLostAttempts) +
                                           " times without progress (its workers went silent "
                                           "or restarted mid-job; the last: " +
                                           worker_name + ")"));
    e.add(edit::ClearFailures{stage});
  } else {
    e.add(edit::Attempt{stage, job.worker, true});
  }
  trials_to_close_ = true;
}

void Master::check_workers() {
  give_up_earlier_jobs();
  const std::vector<std::string> peers = pool_.silent(options_.worker_timeout_s);
  if (peers.empty()) return;
  Edit e;
  for (const std::string& peer : peers) {
    // Lost: its job goes back to the queue from the newest state it reported.
    const ConnectedWorker& w = *pool_.find(peer);
    if (w.job >= 0) add_lost_job(e, pool_.jobs().at(w.job), w.hello.name);
    e.add(edit::LeaveWorker{peer});
    e.add(edit::AddEvent{std::nullopt, "worker_lost", {{"name", w.hello.name}}});
    spdlog::warn("lost worker {}", w.hello.name);
    // What a lost worker was asked to read (a chunk of a parent) is read elsewhere now.
    copies_.drop_handover(peer);
    merge(e, copies_.holder_lost(peer));
  }
  apply(e);
  schedule_changed_ = true;
}

// A job that nothing needs any more is abandoned: its studies were cancelled or ended while it
// ran, or the trials that needed its steps stopped, failed or diverged (the stages on its path
// are needed no further than it got, save a state there that it has still to announce: jobs.h's
// trains_needed; and no trial waits for the state it evaluates). Its worker stops at its next
// step and says "abandoned" (or, if it finished first, "done"), and stays busy for the master
// until then.
void Master::abandon_orphan_jobs() {
  // Only a study's end or lower needed ends (computed anew) can make a job unneeded; the latter,
  // frequent under a halving searcher, is looked at once a second (a job goes on that long at
  // most).
  const bool ended = driver_.studies_ended() != studies_ended_seen_;
  if (!ended && seconds_since(last_orphan_scan_) < 1) return;
  const StudyDriver::NeededEnds& needed = driver_.needed_ends();
  if (!ended && needed.version == needed_version_seen_) return;
  last_orphan_scan_ = Clock::now();
  studies_ended_seen_ = driver_.studies_ended();
  needed_version_seen_ = needed.version;
  auto is_needed = [&](const RunningJob& job) {
    if (std::none_of(job.studies.begin(), job.studies.end(),
                     [&](int64_t study) { return driver_.running(study); }))
      return false;
    const protocol::Job& o = job.order;
    // A job that trained its last step is ending: its Done (or its last evaluation) is on the
    // way, and stopping it now would only turn a clean end into an abandoned one.
    if (job.progress_step >= o.to && o.to > o.from) return true;
    if (o.from == o.to)  // an evaluation only
      return !driver_.pending_evaluations()
                  .waiting(state_key(tree_, job.representative, o.from))
                  .empty();
    return trains_needed(job, tree_, needed.ends);
  };
  Edit e;
  for (int64_t id : pool_.orphans(is_needed)) {
    e.sends.emplace_back(pool_.jobs().at(id).worker, protocol::Abandon{.job = id}.to_json());
    e.add(edit::AbandonJob{id});
    e.add(edit::AddEvent{std::nullopt, "job_abandoned", {{"job", id}}});
  }
  if (!e.empty()) apply(e);
}

// ---------------------------------------------------------------------------------------------
// Scheduling.

void Master::retire_drained_workers() {
  std::vector<std::string> drained;
  for (const std::string& peer : pool_.idle())
    if (const ConnectedWorker& w = *pool_.find(peer); w.draining && !copies_.handing_over(peer))
      drained.push_back(peer);
  for (const std::string& peer : drained) {
    const ConnectedWorker& w = *pool_.find(peer);
    // What only its storage holds is handed over first (copies.h); it exits once that is done.
    if (!w.handed_over) {
      apply(copies_.start_handover(w).add(edit::DrainWorker{peer, true}));
      if (copies_.handing_over(peer)) continue;
    }
    Edit e;
    e.add(edit::AddEvent{std::nullopt, "worker_drained", {{"name", w.hello.name}}});
    e.add(edit::LeaveWorker{peer});
    e.sends.emplace_back(peer, protocol::Shutdown{}.to_json());
    apply(e);
  }
}

void Master::dispatch() {
  if (stopping_) return;
  std::vector<IdleWorker> idle;
  for (const std::string& peer : pool_.idle())
    if (const ConnectedWorker& w = *pool_.find(peer); pool_.unavailable(w).empty())
      idle.push_back({peer, w.hello.devices, &w.held, copies_.storage_of(w)});
  next_retry_ = pool_.next_retry();
  if (idle.empty()) return;
  const double started = thread_cpu_seconds();
  const StudyDriver::NeededEnds& needed = driver_.needed_ends();
  priorities_.refresh(tree_, needed.ends, needed.version, needed.raised, needed.uppers,
                      [&](const std::string& root) { return step_costs_.per_step(root); });
  priorities_.forget_trained(tree_, needed.ends, driver_.take_trained_stages());
  in_flight_.update(tree_, pool_.jobs(), driver_.tree_shape(), pool_.take_job_changes());
  SchedulerInput input{tree_,       states_,
                       in_flight_,  driver_.pending_evaluations(),
                       needed.ends, driver_.failed_stages(),
                       priorities_, options_.order};
  // The best few items are what the idle workers need; all of them only when some of those
  // fit no idle worker (a pipeline, an external trainer, a stage waiting to be retried).
  std::vector<WorkItem> work = ready_work(input, idle.size());
  // The study whose spec says how to run an item: a running study whose trials need its stage
  // (the stage's representative may be a trial of a study that ended, or that this master never
  // ran).
  std::map<StageId, std::optional<int64_t>> study_of_stage;
  auto study_for = [&](const WorkItem& item) {
    const StageId stage = first_stage(tree_, item.representative, item.from, item.to);
    auto [it, fresh] = study_of_stage.try_emplace(stage);
    if (fresh) it->second = driver_.study_for(stage);
    return it->second;
  };
  auto spec_of = [&](const WorkItem& item) -> const StudySpec& {
    return driver_.studies().at(*study_for(item)).spec;
  };
  for (const WorkItem& item : work) {
    if (!study_for(item)) continue;
    if (const int64_t devices = spec_of(item).pipeline.stages; devices > 1)
      warn_if_no_worker_has(devices, *study_for(item));
    if (spec_of(item).external_model() && !pool_.any_runs_trainers())
      warn_if_no_worker_runs_trainers(*study_for(item));
  }
  // Work that a job of an earlier master may still be training (its worker has not said what
  // became of it: adopt) waits for that word, or until it is given up (give_up_earlier_jobs).
  std::set<StageId> earlier_stages;
  for (const auto& [key, row] : earlier_jobs_)
    if (tree_.has_trial(row.trial) && row.to <= tree_.trial(row.trial).length)
      earlier_stages.insert(first_stage(tree_, row.trial, row.from, row.to));
  // For a while after a start, workers come back (a busy one says hello once its job ends): a
  // parent whose file only their storages hold waits for them rather than being replayed.
  const bool returning = seconds_since(started_) < returning_s();
  std::optional<std::set<std::string>> connected_storages;  // looked up when first needed
  auto reachable = [&](const WorkItem& item, const IdleWorker& idle_worker) {
    if (!returning || item.parent_state < 0) return true;
    const StateInfo& parent = states_.info(item.parent_state);
    if (parent.file.empty() || idle_worker.held->count(item.parent_state) ||
        parent.storages.count(storages_.own()))
      return true;
    if (!connected_storages) {
      connected_storages.emplace();
      for (const auto& [peer, w] : pool_.workers())
        connected_storages->insert(copies_.storage_of(w));
    }
    if (std::any_of(parent.storages.begin(), parent.storages.end(),
                    [&](const std::string& s) { return connected_storages->count(s) > 0; }))
      return true;
    // It waits: the next decision comes when the wait is over at the latest.
    next_retry_ =
        std::min(next_retry_, started_ + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(returning_s())));
    return false;
  };
  auto usable = [&](const WorkItem& item, const IdleWorker& idle_worker) {
    if (!study_for(item) || !reachable(item, idle_worker)) return false;
    if (!earlier_stages.empty() &&
        earlier_stages.count(first_stage(tree_, item.representative, item.from, item.to)))
      return false;
    const ConnectedWorker& w = *pool_.find(idle_worker.peer);
    const StudySpec& spec = spec_of(item);
    const StageId stage = first_stage(tree_, item.representative, item.from, item.to);
    // A stage that failed on a worker's storage, or that a worker's key made a claim about, goes
    // to another worker while there is one; one that failed a moment ago waits a little.
    return idle_worker.devices >= spec.pipeline.stages &&
           (!spec.external_model() || w.hello.runs_trainers) && !pool_.backing_off(stage) &&
           !pool_.should_avoid(stage, w) &&
           (item.parent_state < 0 || may_continue_in(states_.info(item.parent_state).environment,
                                                     worker_environment(w.hello, spec)));
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
  // Work whose state's environment no connected worker has: said once. Only when some work was
  // left, or something was said (work that every idle worker took has workers of its own).
  if (assignments.size() < work.size() || !environment_warnings_.empty()) {
    struct {
      std::set<std::string> engine, trainer;
    } environments;  // of the connected workers
    for (const auto& [peer, w] : pool_.workers()) {
      environments.engine.insert(w.hello.environment);
      environments.trainer.insert(w.hello.trainer_environment);
    }
    for (const WorkItem& item : work) {
      if (item.parent_state < 0 || !study_for(item)) continue;
      const StudySpec& spec = spec_of(item);
      warn_if_no_worker_continues_in(
          states_.info(item.parent_state).environment,
          spec.external_model() ? environments.trainer : environments.engine, spec,
          *study_for(item));
    }
  }
  std::map<std::string, const StudySpec*> assigned;
  for (const Assignment& a : assignments) assigned[a.peer] = &spec_of(a.work);
  const std::map<std::string, int64_t> threads = lend_cores(assigned);
  for (const Assignment& a : assignments) {
    auto lent = threads.find(a.peer);
    send_job(*pool_.find(a.peer), a.work, *study_for(a.work),
             lent == threads.end() ? 0 : lent->second);
  }
  prepare_trainers(idle);
  ++costs_.decisions.count;
  costs_.decisions.cpu_s += thread_cpu_seconds() - started;
}

std::map<std::string, int64_t> Master::lend_cores(
    const std::map<std::string, const StudySpec*>& assigned) {
  if (!options_.lend_cores) return {};
  std::vector<CoreHolder> holders;
  for (const auto& [peer, w] : pool_.workers()) {
    if (w.hello.host.empty()) continue;  // it lends and borrows nothing
    CoreHolder h{peer, w.hello.host, w.hello.threads};
    if (auto it = assigned.find(peer); it != assigned.end()) {
      h.busy = true;
      h.borrows = borrows_cores(w.hello, *it->second);
    } else if (w.job >= 0) {
      h.busy = true;
      h.borrows = pool_.jobs().at(w.job).borrows;
    }
    holders.push_back(std::move(h));
  }
  std::map<std::string, int64_t> threads = lent_threads(holders);
  Edit e;
  for (const auto& [peer, count] : threads) {
    const ConnectedWorker& w = *pool_.find(peer);
    if (assigned.count(peer)) continue;
    const RunningJob& job = pool_.jobs().at(w.job);
    if (count != (job.order.threads > 0 ? job.order.threads : w.hello.threads))
      e.add(edit::LendThreads{job.order.id, count});
  }
  if (!e.ops.empty()) apply(e);
  return threads;
}

void Master::warn_if_no_worker_has(int64_t devices, int64_t study) {
  int64_t most = pool_.most_devices();
  if (most >= devices || !device_warnings_.insert({study, most}).second) return;
  apply(Edit{}.add(edit::AddEvent{
      study, "no_worker_for_pipeline", {{"devices_needed", devices}, {"devices_most", most}}}));
  spdlog::warn(
      "study {} needs a worker with {} devices (pipeline.stages) and no connected worker has "
      "more than {}: start one with --devices cpu:{}",
      driver_.studies().at(study).spec.name, devices, most, devices);
}

void Master::warn_if_no_worker_runs_trainers(int64_t study) {
  if (!trainer_warnings_.insert(study).second) return;
  apply(Edit{}.add(edit::AddEvent{study, "no_worker_for_trainer", json::object()}));
  spdlog::warn(
      "study {} runs an external trainer and no connected worker runs them: start one with "
      "--allow-exec trainer",
      driver_.studies().at(study).spec.name);
}

void Master::warn_if_no_worker_continues_in(const std::string& environment,
                                            const std::set<std::string>& connected,
                                            const StudySpec& spec, int64_t study) {
  const bool served = std::any_of(connected.begin(), connected.end(), [&](const std::string& e) {
    return may_continue_in(environment, e);
  });
  if (served) {
    environment_warnings_.erase({study, environment});  // said again if they all go
    return;
  }
  if (!environment_warnings_.insert({study, environment}).second) return;
  apply(Edit{}.add(
      edit::AddEvent{study, "no_worker_for_environment", {{"environment", environment}}}));
  spdlog::warn(
      "study {} goes on from states computed in \"{}\" and no connected worker computes in it: "
      "those trials wait for one (a trial is trained in one environment, so that its bits do not "
      "depend on where its stages ran; `hippo workers` lists each worker's)",
      spec.name, environment);
}

void Master::prepare_trainers(const std::vector<IdleWorker>& idle) {
  const StudySpec* spec = nullptr;
  for (const auto& [id, s] : driver_.studies())
    if (driver_.running(id) && s.spec.long_lived_trainer()) {
      spec = &s.spec;
      break;
    }
  if (!spec) {
    // Their study ended: the trainers kept for it go now, not after the workers' --trainer-idle.
    for (const IdleWorker& i : idle) {
      if (const ConnectedWorker& w = *pool_.find(i.peer); !w.keeps_trainer || w.job >= 0) continue;
      Edit e;
      e.add(edit::KeepTrainer{i.peer, false});
      e.sends.emplace_back(i.peer, protocol::EndTrainer{}.to_json());
      apply(e);
    }
    return;
  }
  for (const IdleWorker& i : idle) {
    ConnectedWorker& w = *pool_.find(i.peer);
    if (w.job >= 0 || !w.hello.runs_trainers || w.keeps_trainer || w.draining) continue;
    // A long-lived trainer is external: its model has no leaves, so `model` is every trial's.
    Edit e;
    e.add(edit::KeepTrainer{w.peer});
    e.sends.emplace_back(w.peer, protocol::Prepare{run_spec(*spec, spec->model)}.to_json());
    apply(e);
  }
}

void Master::send_job(ConnectedWorker& w, const WorkItem& work, int64_t study, int64_t threads) {
  const StudySpec& spec = driver_.studies().at(study).spec;
  RunningJob job =
      build_job(work, spec, tree_, states_, w.held, copies_.storage_of(w), options_.snapshot_every);
  job.order.id = pool_.next_job_id();
  job.order.threads = threads;
  job.borrows = borrows_cores(w.hello, spec);
  job.worker = w.peer;
  job.studies =
      driver_.studies_through(first_stage(tree_, work.representative, work.from, work.to));
  // Its states are computed in its worker's environment; one that does not say continues its
  // parent's (may_continue_in let it).
  job.environment = worker_environment(w.hello, spec);
  if (job.environment.empty() && work.parent_state >= 0)
    job.environment = states_.info(work.parent_state).environment;
  job.provenance =
      made_by(producer_of(w.identity),
              work.parent_state >= 0 ? states_.info(work.parent_state).provenance : Provenance{});
  std::string order = protocol::serialize(job.order.to_json());
  const size_t bytes = order.size();
  if (static_cast<int64_t>(bytes) > protocol::kMaxMessageBytes) {
    // No worker could take it (ZeroMQ refuses a frame over the limit): its studies fail now.
    const std::string error =
        "a job of " + std::to_string(bytes) + " bytes (steps " + std::to_string(work.from) +
        " to " + std::to_string(work.to) + ", " + std::to_string(work.evals.size()) +
        " evaluations) is over the message limit of " + std::to_string(protocol::kMaxMessageBytes) +
        " bytes: evaluate less often (eval.every)";
    Edit e;
    for (int64_t id : job.studies)
      if (driver_.running(id)) merge(e, driver_.fail(id, error));
    apply(e);
    schedule_changed_ = true;
    return;
  }
  spdlog::debug("job {} to {}: trial {} steps [{}, {}) from state {}, {} evals, {} threads",
                job.order.id, w.hello.name, work.representative, work.from, work.to,
                work.parent_state, work.evals.size(), threads > 0 ? threads : w.hello.threads);
  Edit e;
  e.bodies.emplace_back(w.peer, std::move(order));
  e.add(edit::StartJob{w.peer, std::move(job), spec.long_lived_trainer()});
  apply(e);
}

}  // namespace hippo::master
