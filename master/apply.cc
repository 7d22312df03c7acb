// The master's one applier (LevelDB's LogAndApply): every change of the master's state is an
// operation of an Edit (edit.h), carried out here, one after the other, each writing its rows to
// the search plan in the transaction that is open and then changing memory. The study driver's
// operations are the driver's to carry out (StudyDriver::apply_op); the workers' and jobs' are
// below. What an operation makes follow (a split's effects on states and running jobs) comes back
// as more operations, applied next in the same loop, never as a call into a handler.
#include <algorithm>

#include "master/jobs.h"
#include "master/master.h"
#include "protocol/log.h"

namespace hippo::master {

void Master::apply(const Edit& edit) {
  if (!outbox_)  // a bug: every edit is applied in a transaction, whose commit sends its messages
    throw PlanFailure("an edit was applied outside a transaction");
  try {
    for (const EditOp& op : edit.ops) {
      apply_op(op);
      if (events_) events_->after(op, driver_);
      // A trial placed or extended split stages: states above the split point move up, and a
      // running job that passes it is told to snapshot there too.
      for (const Split& split : driver_.take_splits()) {
        states_.on_split(split);
        for (int64_t id : jobs_to_snapshot_at_split(split, tree_, states_, pool_.jobs()))
          apply_op(edit::SnapshotAt{id, states_.new_snapshot_order(split.at)});
      }
    }
  } catch (const PlanFailure&) {
    throw;
  } catch (const std::exception& e) {
    // Memory may now be ahead of the plan: the master cannot go on (a restart resumes from the
    // plan, which holds everything that was committed).
    throw PlanFailure(std::string("applying an edit: ") + e.what());
  }
  driver_.queue(edit);
  for (const auto& [peer, message] : edit.sends) send(peer, message);
  for (const auto& [peer, body] : edit.bodies) outbox_->emplace_back(peer, body);
}

void Master::apply_op(const EditOp& op) {
  std::visit(
      [&](const auto& o) {
        using Op = std::decay_t<decltype(o)>;
        if constexpr (requires { apply_worker_op(o); })
          apply_worker_op(o);
        else
          driver_.apply_op(op);
        // A lost state is forgotten by the workers that hold it in memory too (an evicted one is
        // the same state there: nothing asks for it any more).
        if constexpr (std::is_same_v<Op, edit::DropState>)
          if (!o.lost.empty()) pool_.forget_state(o.id);
      },
      op);
}

void Master::apply_worker_op(const edit::JoinWorker& op) {
  protocol::Hello hello = op.hello;
  hello.files.clear();  // looked at once, by the hello's handler
  hello.dropped.clear();
  pool_.join(op.peer, op.identity, hello);
}

void Master::apply_worker_op(const edit::LeaveWorker& op) {
  pool_.remove(op.peer);
}

void Master::apply_worker_op(const edit::AdmitStorage& op) {
  storages_.admit(plan_, op.storage, op.identity);
}

void Master::apply_worker_op(const edit::StartJob& op) {
  const RunningJob& job = op.job;
  plan_.add_running_job(running_job_row(job, states_.incarnation(), worker_name(op.peer)));
  ConnectedWorker& w = *pool_.find(op.peer);
  if (op.keeps_trainer) w.keeps_trainer = true;
  pool_.start(w, job);
  ++costs_.jobs;
}

void Master::apply_worker_op(const edit::JobProgress& op) {
  RunningJob& job = pool_.jobs().at(op.job);
  if (op.reported > job.reported_step)
    plan_.set_running_job_counted(states_.incarnation(), op.job, op.reported);
  job.reported_step = std::max(job.reported_step, op.reported);
  job.progress_step = std::max(job.progress_step, op.progress);
  if (op.evaluated) job.evaluated.insert(*op.evaluated);
  if (op.held)
    if (ConnectedWorker* w = pool_.find(job.worker)) w->held.insert(*op.held);
}

void Master::apply_worker_op(const edit::SnapshotAt& op) {
  RunningJob& job = pool_.jobs().at(op.job);
  plan_.add_running_job_file(states_.incarnation(), op.job, op.order.step, op.order.file);
  auto& snapshots = job.order.snapshots;
  snapshots.insert(std::lower_bound(snapshots.begin(), snapshots.end(), op.order,
                                    [](const auto& a, const auto& b) { return a.step < b.step; }),
                   op.order);
  send(job.worker, protocol::SnapshotAt{.job = op.job, .order = op.order}.to_json());
}

void Master::apply_worker_op(const edit::AbandonJob& op) {
  pool_.jobs().at(op.job).abandoned = true;
}

void Master::apply_worker_op(const edit::EndJob& op) {
  auto it = pool_.jobs().find(op.job);
  if (it == pool_.jobs().end()) return;
  plan_.delete_running_job(states_.incarnation(), op.job);
  const RunningJob& job = it->second;
  if (op.done) {
    const int64_t steps = job.order.to - job.order.from;
    if (steps > 0 && op.busy_s > 0)
      step_costs_.add(tree_.trial(job.representative).root_key, op.busy_s, steps);
    if (ConnectedWorker* w = pool_.find(job.worker)) pool_.done_on_worker(*w);
  }
  pool_.end_job(op.job, op.held);
}

void Master::apply_worker_op(const edit::SettleEarlierJob& op) {
  plan_.delete_running_job(op.incarnation, op.job);
  earlier_jobs_.erase({op.incarnation, op.job});
  earlier_heard_.erase({op.incarnation, op.job});
  schedule_changed_ = true;  // the work of its stage waited for it
}

void Master::apply_worker_op(const edit::Attempt& op) {
  if (op.lost)
    pool_.add_lost_attempt(op.stage, op.peer);
  else
    pool_.add_storage_failure(op.stage, op.peer);
  next_retry_ = std::min(next_retry_, pool_.next_retry());
}

void Master::apply_worker_op(const edit::ClearFailures& op) {
  pool_.clear_storage_failures(op.stage);
  if (op.claims) pool_.claims().clear(op.stage);
}

void Master::apply_worker_op(const edit::Claim& op) {
  pool_.claims().add(op.stage, op.key, pool_.keys());
}

void Master::apply_worker_op(const edit::WorkerFault& op) {
  if (ConnectedWorker* w = pool_.find(op.peer)) pool_.set_fault(*w, op.fault);
}

void Master::apply_worker_op(const edit::WorkerFailed& op) {
  ConnectedWorker* w = pool_.find(op.peer);
  if (!w || !pool_.failed_on_worker(*w, op.error)) return;
  plan_.add_event(std::nullopt, "worker_set_aside",
                  {{"name", w->hello.name}, {"why", w->set_aside}});
  spdlog::warn("worker {} gets no work for a while: it {}", w->hello.name, w->set_aside);
  next_retry_ = std::min(next_retry_, pool_.next_retry());
}

void Master::apply_worker_op(const edit::DrainWorker& op) {
  if (ConnectedWorker* w = pool_.find(op.peer)) {
    w->draining = true;
    w->handed_over = w->handed_over || op.handed_over;
  }
}

void Master::apply_worker_op(const edit::KeepTrainer& op) {
  if (ConnectedWorker* w = pool_.find(op.peer)) w->keeps_trainer = op.keeps;
}

void Master::apply_worker_op(const edit::LendThreads& op) {
  RunningJob& job = pool_.jobs().at(op.job);
  job.order.threads = op.threads;
  spdlog::debug("job {}: {} threads from its next step (idle cores of its host)", op.job,
                op.threads);
  send(job.worker, protocol::Threads{.job = op.job, .threads = op.threads}.to_json());
}

std::string Master::worker_name(const std::string& peer) {
  const ConnectedWorker* w = pool_.find(peer);
  return w ? w->hello.name : peer;
}

}  // namespace hippo::master
