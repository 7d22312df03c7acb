// A job as the master tracks it while a worker runs it: the order that was sent, whose work it
// is, and how far the worker got.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "protocol/message.h"
#include "searchers/spec.h"
#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::master {

struct RunningJob {
  protocol::Job order;          // as sent (its snapshots grow with each SnapshotAt)
  std::string worker;           // the peer that runs it
  TrialId representative = -1;  // the trial whose path it trains
  std::set<int64_t> studies;    // whose trials need this work (executed steps are counted there)
  int64_t reported_step = 0;    // the latest step whose state the worker reported
  int64_t progress_step = 0;    // the latest step the worker said it reached
  bool abandoned = false;       // no running study needs it; the worker was told to stop
  double started_at = 0;        // unix seconds, for the plan's record of executions
  ExecutionKind kind = ExecutionKind::kTrain;
  // While its parent checkpoint is fetched from another storage (order.fetch_parent): the peer
  // of the worker asked to read the chunk it waits for ("" when none is asked), and its offset.
  std::string fetch_source{};
  int64_t fetch_offset = 0;
  // The steps of order.eval_steps whose metrics came: one that did not by the job's end fails
  // the trials that wait for it (they say why).
  std::set<int64_t> evaluated{};
};

// The stage a job over [from, to) of `trial`'s path trains first: the one that holds step
// `from`; for an evaluation-only job (from == to), the stage that made the evaluated state. A
// job's failure is this stage's.
inline StageId first_stage(const StageTree& tree, TrialId trial, int64_t from, int64_t to) {
  return tree.stage_at(trial, to > from ? from + 1 : from);
}

// What a worker must know of a study to build its engine (every field of its root key).
inline protocol::RunSpec run_spec(const StudySpec& spec) {
  protocol::RunSpec run;
  run.model = spec.model;
  run.data = spec.data.name;
  run.train_samples = spec.data.train_samples;
  run.eval_samples = spec.data.eval_samples;
  run.data_fields = spec.data.fields;
  run.seed = spec.seed;
  run.fixed = spec.fixed;
  run.microbatches = spec.pipeline.microbatches;
  run.pipeline_stages = spec.pipeline.stages;
  run.pipeline_schedule = spec.pipeline.schedule;
  run.pipeline_chunks = spec.pipeline.chunks;
  return run;
}

}  // namespace hippo::master
