// A job as the master tracks it while a worker runs it: the order that was sent, whose work it
// is, and how far the worker got.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "master/state_registry.h"
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
  // The environment of its worker for its model (worker_environment below): the states it
  // reports were computed in it.
  std::string environment{};
  // Who its states and metrics are recorded as made by: its worker, on its parent's lineage.
  Provenance provenance{};
  // It may run with idle cores of its host lent to it (order.threads): the built-in engine on a
  // CPU, unpipelined (borrows_cores).
  bool borrows = false;
};

// Whether a job of `spec` on worker `w` may take idle cores of its host: its results must not
// depend on its thread count, which holds for the built-in engine's CPU kernels (kernels/README.md)
// and not for an external trainer (PyTorch on a CPU changes its bits with its threads), nor for a
// pipeline (its stages' threads are its own); a worker that does not name its host lends nothing.
inline bool borrows_cores(const protocol::Hello& w, const StudySpec& spec) {
  return !w.host.empty() && w.device.rfind("cpu", 0) == 0 && !spec.external_model() &&
         spec.pipeline.stages <= 1;
}

// The stage a job over [from, to) of `trial`'s path trains first: the one that holds step
// `from`; for an evaluation-only job (from == to), the stage that made the evaluated state. A
// job's failure is this stage's.
inline StageId first_stage(const StageTree& tree, TrialId trial, int64_t from, int64_t to) {
  return tree.stage_at(trial, to > from ? from + 1 : from);
}

// The environment in which `worker` computes states of `spec`'s model (worker/environment.h):
// its engine's for built-in models, its trainers' for external ones; "" when it did not say.
inline const std::string& worker_environment(const protocol::Hello& worker, const StudySpec& spec) {
  return spec.external_model() ? worker.trainer_environment : worker.environment;
}

// Whether a worker of `environment` may go on from a state computed in `state_environment`: a
// trial is trained in one environment, so the two must be the same unless either is unknown ("":
// a state from before environments were recorded, a worker that does not say).
inline bool may_continue_in(const std::string& state_environment, const std::string& environment) {
  return state_environment.empty() || environment.empty() || state_environment == environment;
}

// What a worker must know to build the engine of `spec`'s trials with `model` (one of its
// architectures, StudySpec::architectures): every field of their root key.
inline protocol::RunSpec run_spec(const StudySpec& spec, const nlohmann::json& model) {
  protocol::RunSpec run;
  run.model = model;
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
  run.pipeline_vocab_parallel = spec.pipeline.vocab_parallel;
  return run;
}

}  // namespace hippo::master
