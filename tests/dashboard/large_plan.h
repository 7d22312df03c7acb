// A large finished study written straight through the plan API (one transaction, seconds), as an
// ASHA study on many workers leaves it: what the dashboard's scale tests and bench_dashboard read
// instead of simulating one. Trials share their first 100 steps in groups (300 warm-up learning
// rates), are evaluated at the rungs 100, 300 and 900 and stopped at the first two unless in the
// best third of their rung; every stage is trained once by one of `workers` workers. One
// objective (accuracy, max) or two (accuracy max, latency min, which grows with the model's
// width), deterministic in `seed`.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "stagetree/tree.h"
#include "storage/plan.h"

namespace hippo::testing {

struct LargeStudy {
  int64_t trials = 100000;
  int objectives = 1;
  int64_t workers = 1000;
  uint64_t seed = 1;
  bool running = false;  // left running (its status), for a writer that goes on
};

// Writes the study `name` (root key `name`) into `plan` and returns its id.
inline int64_t write_large_study(SearchPlan& plan, const std::string& name, const LargeStudy& o,
                                 int64_t first_number = 1, int64_t existing = -1) {
  nlohmann::json objectives = {{{"metric", "accuracy"}, {"mode", "max"}}};
  if (o.objectives > 1) objectives.push_back({{"metric", "latency"}, {"mode", "min"}});
  const nlohmann::json spec = {{"name", name},
                               {"model", {{"type", "external"}, {"command", {"train"}}}},
                               {"searcher", {{"name", "asha"}, {"objectives", objectives}}}};
  int64_t study = existing;
  plan.transaction([&] {
    if (study < 0) study = plan.create_study(name, spec, Policy::kShared);
    StageTree tree = plan.load_tree();
    uint64_t state = o.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(first_number);
    auto uniform = [&] {  // in [0, 1)
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<double>(state >> 11) / 9007199254740992.0;
    };
    std::vector<double> clock(static_cast<size_t>(o.workers), 1.7e9);
    TrialId id = plan.next_trial_id();
    for (int64_t number = first_number; number < first_number + o.trials; ++number, ++id) {
      const double warmup = 1e-3 * static_cast<double>(1 + number % 300);
      const double lr = std::pow(10.0, -4 + 3 * uniform()),
                   width = 16 + std::floor(uniform() * 240);
      const double dropout = 0.5 * uniform();
      TrialRow row;
      row.id = id;
      row.study_id = study;
      row.root_key = name;
      row.params = {{"warmup", warmup},
                    {"lr", lr},
                    {"width", width},
                    {"dropout", dropout},
                    {"optimizer", number % 3 == 0 ? "adam" : "sgd"}};
      row.hyperparams = {{"lr", piecewise({{0, warmup}, {100, lr}})}};
      row.length = 900;
      // Accuracy peaks near lr = 0.01 and grows with width; noise makes every value its own.
      const double quality = std::exp(-std::pow(std::log10(lr) + 2, 2)) * (0.5 + width / 512) -
                             0.3 * dropout + 0.05 * uniform();
      const int64_t rungs = quality > 0.55 ? 3 : quality > 0.35 ? 2 : 1;
      const int64_t end = rungs == 3 ? 900 : rungs == 2 ? 300 : 100;
      row.status = rungs == 3 ? TrialStatus::kDone : TrialStatus::kStopped;
      if (row.status == TrialStatus::kStopped) {
        row.end_reason = "stopped at rung " + std::to_string(rungs - 1);
        row.end_step = end;
      }
      plan.add_trial(row);
      plan.save_change(tree, tree.add_trial(id, name, row.hyperparams, row.length));
      for (int64_t step : {100, 300, 900}) {
        if (step > end) break;
        const double a = 0.3 + 0.65 * std::tanh(quality * (0.8 + 0.1 * std::log10(step)));
        plan.add_metric({id, step, "accuracy", a});
        if (o.objectives > 1)
          plan.add_metric({id, step, "latency", width * (0.8 + 0.4 * uniform())});
      }
      // Its path trained as far as it went, each stage by one worker in turn.
      for (StageId s : tree.path(id)) {
        const Stage& st = tree.stage(s);
        const int64_t until = std::min(st.end, std::max(st.trained_until, end));
        if (until <= st.trained_until) continue;
        ExecutionRow e;
        e.stage = s;
        e.trial = id;
        e.from = st.trained_until;
        e.to = e.reached = until;
        const size_t w = static_cast<size_t>(number % o.workers);
        e.worker = "worker-" + std::to_string(w);
        e.started_at = clock[w];
        e.ended_at = clock[w] += 0.002 * static_cast<double>(until - st.trained_until);
        e.studies = {study};
        tree.mark_trained(s, until);
        plan.save_stage(tree.stage(s));
        plan.add_execution(e);
      }
    }
    plan.set_study_status(study, o.running ? StudyStatus::kRunning : StudyStatus::kDone);
  });
  return study;
}

}  // namespace hippo::testing
