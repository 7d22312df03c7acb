#include "master/worker_pool.h"

#include <algorithm>

namespace hippo::master {

ConnectedWorker& WorkerPool::join(const std::string& peer, const protocol::Hello& hello) {
  auto old = workers_.find(peer);
  if (old != workers_.end() && old->second.job >= 0) jobs_.erase(old->second.job);
  ConnectedWorker& w = workers_[peer] = ConnectedWorker{};
  w.peer = peer;
  w.hello = hello;
  w.last_seen = Clock::now();
  return w;
}

ConnectedWorker* WorkerPool::find(const std::string& peer) {
  auto it = workers_.find(peer);
  return it == workers_.end() ? nullptr : &it->second;
}

int64_t WorkerPool::most_devices() const {
  int64_t most = 0;
  for (const auto& [peer, w] : workers_) most = std::max(most, w.hello.devices);
  return most;
}

RunningJob& WorkerPool::start(ConnectedWorker& worker, RunningJob job) {
  job.order.id = next_job_++;
  job.worker = worker.peer;
  worker.job = job.order.id;
  return jobs_[job.order.id] = std::move(job);
}

RunningJob& WorkerPool::job_of(const ConnectedWorker& worker, int64_t job, const char* what) {
  if (job != worker.job || job < 0)
    throw protocol::ProtocolError(std::string(what) + ".job: not this worker's job");
  return jobs_.at(job);
}

void WorkerPool::end_job(ConnectedWorker& worker, const std::vector<int64_t>& held) {
  jobs_.erase(worker.job);
  worker.job = -1;
  worker.held = {held.begin(), held.end()};
}

std::vector<std::string> WorkerPool::expire(double timeout_s,
                                            const std::function<void(const RunningJob&)>& on_lost) {
  std::vector<std::string> lost;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (seconds_since(it->second.last_seen) < timeout_s) {
      ++it;
      continue;
    }
    lost.push_back(it->second.hello.name);
    if (it->second.job >= 0) {
      on_lost(jobs_.at(it->second.job));
      jobs_.erase(it->second.job);
    }
    it = workers_.erase(it);
  }
  return lost;
}

std::vector<int64_t> WorkerPool::orphans(const std::function<bool(int64_t study)>& study_running) {
  std::vector<int64_t> out;
  for (auto& [id, job] : jobs_) {
    if (job.abandoned || std::any_of(job.studies.begin(), job.studies.end(), study_running))
      continue;
    job.abandoned = true;
    out.push_back(id);
  }
  return out;
}

void WorkerPool::forget_state(int64_t state) {
  for (auto& [peer, w] : workers_) w.held.erase(state);
}

int WorkerPool::storage_failures(StageId stage) const {
  auto it = storage_failures_.find(stage);
  return it == storage_failures_.end() ? 0 : it->second.count;
}

void WorkerPool::add_storage_failure(StageId stage, const std::string& peer) {
  ++storage_failures_[stage].count;
  storage_failures_[stage].workers.insert(peer);
}

void WorkerPool::clear_storage_failures(StageId stage) {
  storage_failures_.erase(stage);
}

const std::set<std::string>* WorkerPool::excluded_for(StageId stage) const {
  auto it = storage_failures_.find(stage);
  if (it == storage_failures_.end() || it->second.workers.size() >= workers_.size()) return nullptr;
  return &it->second.workers;
}

}  // namespace hippo::master
