#include "master/jobs.h"

#include <algorithm>

#include "protocol/clock.h"

namespace hippo::master {

RunningJob build_job(const WorkItem& work, const StudySpec& spec, const StageTree& tree,
                     StateRegistry& states, const std::set<int64_t>& held,
                     const std::string& storage, int64_t snapshot_every) {
  RunningJob job;
  job.representative = work.representative;
  job.reported_step = work.from;
  job.progress_step = work.from;
  job.started_at = unix_seconds();
  job.kind = work.from == work.to     ? ExecutionKind::kEvaluate
             : work.stage == kNoStage ? ExecutionKind::kReplay
                                      : ExecutionKind::kTrain;
  protocol::Job& order = job.order;
  order.run = run_spec(
      spec, spec.model_with_root_key(shared_root_key(tree.trial(work.representative).root_key)));
  order.hyperparams = tree.trial(work.representative).hyperparams;
  order.from = work.from;
  order.to = work.to;
  order.parent_state = work.parent_state;
  if (work.parent_state >= 0) {
    const StateInfo& parent = states.info(work.parent_state);
    order.parent_file = parent.file;
    order.parent_checksum = parent.file.empty() ? "" : parent.checksum;  // its loader compares
    // Neither in the worker's memory nor on its storage: it fetches the file through the master.
    order.fetch_parent =
        !parent.file.empty() && !held.count(work.parent_state) && !parent.storages.count(storage);
    if (order.fetch_parent) order.parent_bytes = parent.bytes;
  }
  order.eval_steps = work.evals;
  order.trial = work.representative;
  for (int64_t step : snapshot_steps(tree, work, snapshot_every))
    order.snapshots.push_back(states.new_snapshot_order(step));
  return job;
}

void add_progress(Edit& e, const RunningJob& job, const StageTree& tree, int64_t step) {
  for (StageId id : tree.path(job.representative)) {
    const Stage& x = tree.stage(id);
    if (x.end <= job.order.from) continue;
    if (x.start >= step) break;
    // A stage the job trains from its start, or one whose trained part reaches the job's start.
    if (x.start >= job.order.from || x.trained_until >= job.order.from)
      e.add(edit::TrainStage{id, std::min(step, x.end)});
  }
  if (step > job.reported_step) e.add(edit::Count{job.studies, step - job.reported_step});
}

bool trains_needed(const RunningJob& job, const StageTree& tree,
                   const std::unordered_map<StageId, int64_t>& needed_ends) {
  const protocol::Job& o = job.order;
  const int64_t got = std::max(o.from, job.progress_step);    // trained this far
  const int64_t saved = std::max(o.from, job.reported_step);  // its states announced this far
  auto announces = [&](int64_t step) {  // a snapshot ordered at `step`, not announced yet
    return step > saved && std::any_of(o.snapshots.begin(), o.snapshots.end(),
                                       [&](const auto& s) { return s.step == step; });
  };
  for (StageId id : tree.path(job.representative)) {
    const Stage& x = tree.stage(id);
    if (x.end <= saved) continue;
    if (x.start >= o.to) break;
    auto end = needed_ends.find(id);
    if (end == needed_ends.end()) continue;
    if (end->second > got || announces(end->second)) return true;
  }
  return false;
}

RunningJobRow running_job_row(const RunningJob& job, const std::string& incarnation,
                              const std::string& worker) {
  RunningJobRow row;
  row.incarnation = incarnation;
  row.job = job.order.id;
  row.worker = worker;
  row.trial = job.representative;
  row.kind = job.kind;
  row.from = job.order.from;
  row.to = job.order.to;
  row.counted = std::clamp(job.reported_step, job.order.from, job.order.to);
  row.studies.assign(job.studies.begin(), job.studies.end());
  for (const protocol::SnapshotOrder& s : job.order.snapshots)
    if (!s.file.empty()) row.files.emplace_back(s.step, s.file);
  row.started_at = job.started_at;
  return row;
}

RunningJob running_job_of(const RunningJobRow& row) {
  RunningJob job;
  job.order.id = row.job;
  job.order.trial = row.trial;
  job.order.from = row.from;
  job.order.to = row.to;
  job.representative = row.trial;
  job.studies = {row.studies.begin(), row.studies.end()};
  job.reported_step = job.progress_step = row.counted;
  job.started_at = row.started_at;
  job.kind = row.kind;
  return job;
}

edit::AddExecution execution(const RunningJob& job, const StageTree& tree,
                             const std::string& worker, ExecutionOutcome outcome, int64_t reached,
                             const std::string& error) {
  const protocol::Job& order = job.order;
  ExecutionRow row;
  row.stage = first_stage(tree, job.representative, order.from, order.to);
  row.trial = job.representative;
  row.kind = job.kind;
  row.from = order.from;
  row.to = order.to;
  row.reached = std::clamp(reached, order.from, order.to);
  row.worker = worker;
  row.started_at = job.started_at;
  row.ended_at = std::max(job.started_at, unix_seconds());
  row.outcome = outcome;
  row.error = error;
  row.studies.assign(job.studies.begin(), job.studies.end());
  return {row};
}

void add_unfinished(Edit& e, const RunningJob& job, const StageTree& tree,
                    const std::string& worker, ExecutionOutcome outcome,
                    std::optional<int64_t> reached, const std::string& error) {
  const int64_t got =
      std::clamp(std::max(job.progress_step, reached.value_or(0)), job.order.from, job.order.to);
  e.add(execution(job, tree, worker, outcome, got, error));
  if (got > job.reported_step) e.add(edit::Count{job.studies, got - job.reported_step});
}

}  // namespace hippo::master
