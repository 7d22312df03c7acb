#include "master/worker_pool.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace hippo::master {

bool Claims::add(StageId stage, const std::string& key, size_t keys_connected) {
  std::set<std::string>& keys = keys_[stage];
  keys.insert(key);
  if (keys.size() < std::min<size_t>(2, std::max<size_t>(1, keys_connected))) return false;
  keys_.erase(stage);
  return true;
}

bool Claims::would_believe(StageId stage, const std::string& key, size_t keys_connected) const {
  std::set<std::string> keys;
  if (auto it = keys_.find(stage); it != keys_.end()) keys = it->second;
  keys.insert(key);
  return keys.size() >= std::min<size_t>(2, std::max<size_t>(1, keys_connected));
}

bool Claims::made_by(StageId stage, const std::string& key) const {
  auto it = keys_.find(stage);
  return it != keys_.end() && it->second.count(key);
}

void Claims::clear(StageId stage) {
  keys_.erase(stage);
}

ConnectedWorker& WorkerPool::join(const std::string& peer, const protocol::PeerIdentity& identity,
                                  const protocol::Hello& hello) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    const ConnectedWorker& other = it->second;
    if (other.peer != peer && other.hello.name == hello.name) {
      if (other.identity.key != identity.key)
        throw protocol::ProtocolError("hello.name: worker " + hello.name +
                                      " is connected already, with another key");
    } else if (other.peer != peer) {
      ++it;
      continue;
    }
    // The same connection again, or the same key and name anew: a reconnection.
    if (other.job >= 0) drop_job(other.job);
    idle_.erase(other.peer);
    it = workers_.erase(it);
  }
  ConnectedWorker& w = workers_[peer];
  w.peer = peer;
  w.identity = identity;
  w.hello = hello;
  w.last_seen = Clock::now();
  idle_.insert(peer);
  return w;
}

ConnectedWorker* WorkerPool::find(const std::string& peer) {
  auto it = workers_.find(peer);
  return it == workers_.end() ? nullptr : &it->second;
}

size_t WorkerPool::keys() const {
  std::set<std::string> keys;
  for (const auto& [peer, w] : workers_) keys.insert(w.identity.key);
  return keys.size();
}

bool WorkerPool::any_runs_trainers() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const auto& pw) { return pw.second.hello.runs_trainers; });
}

ConnectedWorker* WorkerPool::find_named(const std::string& name) {
  for (auto& [peer, w] : workers_)
    if (w.hello.name == name) return &w;
  return nullptr;
}

int64_t WorkerPool::most_devices() const {
  int64_t most = 0;
  for (const auto& [peer, w] : workers_) most = std::max(most, w.hello.devices);
  return most;
}

void WorkerPool::remove(const std::string& peer) {
  auto it = workers_.find(peer);
  if (it == workers_.end()) return;
  if (it->second.job >= 0) drop_job(it->second.job);
  idle_.erase(peer);
  workers_.erase(it);
}

RunningJob& WorkerPool::start(ConnectedWorker& worker, RunningJob job) {
  next_job_ = std::max(next_job_, job.order.id + 1);
  job.worker = worker.peer;
  worker.job = job.order.id;
  idle_.erase(worker.peer);
  job_changes_.push_back(job.order.id);
  return jobs_[job.order.id] = std::move(job);
}

RunningJob& WorkerPool::job_of(const ConnectedWorker& worker, int64_t job, const char* what) {
  if (job != worker.job || job < 0)
    throw protocol::ProtocolError(std::string(what) + ".job: not this worker's job");
  return jobs_.at(job);
}

void WorkerPool::end_job(int64_t job, const std::optional<std::vector<int64_t>>& held) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  if (ConnectedWorker* worker = find(it->second.worker); worker && worker->job == job) {
    worker->job = -1;
    if (held) worker->held = {held->begin(), held->end()};
    idle_.insert(worker->peer);
  }
  drop_job(job);
}

std::vector<std::string> WorkerPool::silent(double timeout_s) {
  std::vector<std::string> lost;
  if (seconds_since(oldest_seen_) < timeout_s) return lost;  // nobody can have expired yet
  oldest_seen_ = Clock::now();
  for (const auto& [peer, w] : workers_) {
    if (seconds_since(w.last_seen) < timeout_s)
      oldest_seen_ = std::min(oldest_seen_, w.last_seen);
    else
      lost.push_back(peer);
  }
  return lost;
}

std::vector<int64_t> WorkerPool::orphans(
    const std::function<bool(const RunningJob&)>& needed) const {
  std::vector<int64_t> out;
  for (const auto& [id, job] : jobs_)
    if (!job.abandoned && !needed(job)) out.push_back(id);
  return out;
}

void WorkerPool::forget_state(int64_t state) {
  for (auto& [peer, w] : workers_) w.held.erase(state);
}

double stage_retry_delay(int attempts) {
  return std::min(30.0, std::ldexp(1.0, std::max(0, attempts - 1)));
}

int WorkerPool::storage_failures(StageId stage) const {
  auto it = storage_failures_.find(stage);
  return it == storage_failures_.end() ? 0 : it->second.count;
}

int WorkerPool::lost_attempts(StageId stage) const {
  auto it = storage_failures_.find(stage);
  return it == storage_failures_.end() ? 0 : it->second.lost;
}

void WorkerPool::add_attempt(StageId stage, const std::string& peer, int StorageFailures::*kind) {
  StorageFailures& f = storage_failures_[stage];
  ++(f.*kind);
  f.workers.insert(peer);
  f.retry_at =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(stage_retry_delay(f.count + f.lost)));
}

void WorkerPool::add_storage_failure(StageId stage, const std::string& peer) {
  add_attempt(stage, peer, &StorageFailures::count);
}

void WorkerPool::add_lost_attempt(StageId stage, const std::string& peer) {
  add_attempt(stage, peer, &StorageFailures::lost);
}

bool WorkerPool::backing_off(StageId stage) const {
  auto it = storage_failures_.find(stage);
  return it != storage_failures_.end() && Clock::now() < it->second.retry_at;
}

Clock::time_point WorkerPool::next_retry() const {
  Clock::time_point next = Clock::time_point::max();
  const Clock::time_point now = Clock::now();
  for (const auto& [stage, f] : storage_failures_)
    if (f.retry_at > now) next = std::min(next, f.retry_at);
  for (const auto& [peer, w] : workers_)
    if (!w.set_aside.empty() && w.set_aside_until > now) next = std::min(next, w.set_aside_until);
  return next;
}

bool WorkerPool::failed_on_worker(ConnectedWorker& w, const std::string& error) {
  // Set aside after kWorkerFailuresInARow, and again after each failed probation job; never the
  // last worker that may work: its failures may be the study's (a trainer that always crashes),
  // whose stages' own attempts are bounded, and waiting gains nothing.
  const bool another = std::any_of(workers_.begin(), workers_.end(), [&](const auto& entry) {
    return &entry.second != &w && unavailable(entry.second).empty();
  });
  if (++w.failures_in_a_row < kWorkerFailuresInARow ||
      (!w.set_aside.empty() && Clock::now() < w.set_aside_until) || !another)
    return false;
  ++w.times_set_aside;
  const double seconds = std::min(600.0, 30.0 * std::ldexp(1.0, w.times_set_aside - 1));
  w.set_aside =
      "failed " + std::to_string(w.failures_in_a_row) + " jobs in a row (the last: " + error + ")";
  w.set_aside_until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(seconds));
  return true;
}

void WorkerPool::done_on_worker(ConnectedWorker& w) {
  w.failures_in_a_row = 0;
  w.times_set_aside = 0;
  w.set_aside.clear();
}

void WorkerPool::set_fault(ConnectedWorker& w, const std::string& fault) {
  if (fault.empty() && !w.fault.empty()) {  // it says it recovered
    w.set_aside.clear();
    w.failures_in_a_row = 0;
  }
  w.fault = fault;
}

std::string WorkerPool::unavailable(const ConnectedWorker& w) const {
  if (w.draining) return "draining";
  if (!w.fault.empty()) return w.fault;
  if (!w.set_aside.empty() && Clock::now() < w.set_aside_until) return w.set_aside;
  return "";
}

void WorkerPool::clear_storage_failures(StageId stage) {
  storage_failures_.erase(stage);
}

const std::set<std::string>* WorkerPool::excluded_for(StageId stage) const {
  auto it = storage_failures_.find(stage);
  if (it == storage_failures_.end() || it->second.workers.size() >= workers_.size()) return nullptr;
  return &it->second.workers;
}

bool WorkerPool::should_avoid(StageId stage, const ConnectedWorker& w) const {
  const std::set<std::string>* failed = excluded_for(stage);
  auto avoided = [&](const ConnectedWorker& x) {
    return (failed && failed->count(x.peer)) || claims_.made_by(stage, x.identity.key);
  };
  if (!avoided(w)) return false;
  return std::any_of(workers_.begin(), workers_.end(),
                     [&](const auto& pw) { return !avoided(pw.second); });
}

}  // namespace hippo::master
