// `hippo simulate`: the studies run by the real master in virtual time with simulated workers
// (master/simulator.h), once per policy and schedule order asked, side by side.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "master/cli/cli.h"
#include "master/cli/report.h"
#include "master/recorded_curves.h"
#include "master/retention.h"
#include "master/simulator.h"
#include "protocol/log.h"
#include "protocol/text.h"

namespace hippo::cli {
namespace {

using nlohmann::json;

struct Args {
  std::vector<std::string> specs;
  std::vector<double> submit_at;
  int64_t workers = 0;
  int64_t devices = 0;  // 0: the most pipeline stages of the specs
  int64_t cache = 4;
  std::string policy;  // empty: both, or shared with --plan (which keeps one run's plan)
  std::string order = "critical-path";
  double step_s = -1, eval_s = 0, job_s = 0;
  std::string state_bytes = "1MiB", bandwidth = "1GB";
  std::string times_from, metrics_from, curves_from, events;
  double curve_steps = 1000;
  double mtbf_s = 0, restart_s = 60;
  uint64_t seed = 1;
  std::string allow_exec, keep;
  Budget budget;
  std::string plan;
};

int64_t size_of(const std::string& option, const std::string& text) {
  try {
    return master::parse_size(text);
  } catch (const std::invalid_argument& e) {
    throw BadInput(option + ": " + e.what());
  }
}

// One column of the table: a policy with a schedule order.
struct Column {
  std::string name;
  Policy policy;
  master::ScheduleOrder order;
  master::SimulatedRun run;
};

std::vector<Column> columns(const Args& a) {
  // Without --policy: both, or shared alone with --plan (which keeps the plan of one run).
  const std::string policy = !a.policy.empty() ? a.policy : a.plan.empty() ? "both" : "shared";
  std::vector<Policy> policies;
  if (policy == "both")
    policies = {Policy::kShared, Policy::kTrialBased};
  else
    policies = {policy_of(policy)};
  std::vector<master::ScheduleOrder> orders;
  try {
    if (a.order == "both")
      orders = {master::ScheduleOrder::kCriticalPath, master::ScheduleOrder::kFifo};
    else
      orders = {master::parse_schedule_order(a.order)};
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--order: ") + e.what() + " or both");
  }
  std::vector<Column> out;
  for (Policy p : policies)
    for (master::ScheduleOrder o : orders) {
      // The order of a trial-based run matters less; it is one column unless asked alone.
      if (p == Policy::kTrialBased && o != orders.front()) continue;
      std::string name = to_string(p);
      if (orders.size() > 1 && p == Policy::kShared)
        name += o == master::ScheduleOrder::kFifo ? " fifo" : " critical-path";
      out.push_back({name, p, o, {}});
    }
  return out;
}

// A row per measure (the first row names the columns), as the table and CSV print them.
std::vector<std::vector<std::string>> measure_rows(const std::vector<Column>& cols,
                                                   const master::SimulationOptions& options) {
  std::vector<std::vector<std::string>> rows = {{"measure"}};
  for (const Column& c : cols) rows[0].push_back(c.name);
  auto row = [&](const char* label, auto value) {
    rows.push_back({label});
    for (const Column& c : cols) rows.back().push_back(value(c.run));
  };
  auto number = [](double v, const char* fmt) {
    char buf[64];
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  row("makespan (s)", [&](const auto& r) { return number(r.makespan_s, "%.1f"); });
  row("GPU-hours", [&](const auto& r) { return number(r.busy_s / 3600, "%.3f"); });
  row("utilization", [&](const auto& r) { return number(r.utilization, "%.3f"); });
  row("steps executed", [&](const auto& r) { return number(double(r.steps_executed), "%.0f"); });
  row("steps unique", [&](const auto& r) { return number(double(r.steps_unique), "%.0f"); });
  row("steps trial-based",
      [&](const auto& r) { return number(double(r.steps_trial_based), "%.0f"); });
  row("critical path (s)", [&](const auto& r) { return number(r.critical_path_s, "%.1f"); });
  row("jobs", [&](const auto& r) { return number(double(r.jobs), "%.0f"); });
  if (options.mtbf_s > 0)
    row("failures", [&](const auto& r) { return number(double(r.failures), "%.0f"); });
  row("master us/decision", [&](const auto& r) {
    return number(r.master.decisions.count
                      ? 1e6 * r.master.decisions.cpu_s / double(r.master.decisions.count)
                      : 0,
                  "%.1f");
  });
  auto per_message = [&](const master::SimulatedRun& r, const char* type) {
    auto it = r.master.messages.find(type);
    return number(it != r.master.messages.end() && it->second.count
                      ? 1e6 * it->second.cpu_s / double(it->second.count)
                      : 0,
                  "%.1f");
  };
  row("master us/metric", [&](const auto& r) { return per_message(r, "metric"); });
  row("master us/done", [&](const auto& r) { return per_message(r, "done"); });
  row("plan (MB)", [&](const auto& r) { return number(double(r.plan_bytes) / 1e6, "%.1f"); });
  row("simulation wall (s)", [&](const auto& r) { return number(r.wall_s, "%.2f"); });
  return rows;
}

void print_simulation(const std::vector<Column>& cols, const master::SimulationOptions& options) {
  std::printf("simulated %" PRId64 " workers; times per root key: ", options.workers);
  if (options.times.by_root_key.empty())
    std::printf("step %.4g s, evaluation %.4g s, job %.4g s\n", options.times.defaults.step_s,
                options.times.defaults.eval_s, options.times.defaults.job_s);
  else
    for (const auto& [root, t] : options.times.by_root_key)
      std::printf("[%s: step %.4g s, evaluation %.4g s, job %.4g s, state %s] ",
                  root.substr(0, 8).c_str(), t.step_s, t.eval_s, t.job_s,
                  master::format_size(t.state_bytes).c_str());
  if (!options.times.by_root_key.empty()) std::printf("(measured)\n");
  for (const std::vector<std::string>& row : measure_rows(cols, options)) {
    std::printf("%-28s", row[0].c_str());
    for (size_t i = 1; i < row.size(); ++i) std::printf("%22s", row[i].c_str());
    std::printf("\n");
  }
  // Ratios against the last column (trial-based when it ran).
  const master::SimulatedRun& base = cols.back().run;
  for (size_t i = 0; i + 1 < cols.size(); ++i)
    std::printf("%s against %s: makespan %.2fx shorter, GPU-hours %.2fx fewer\n",
                cols[i].name.c_str(), cols.back().name.c_str(),
                cols[i].run.makespan_s > 0 ? base.makespan_s / cols[i].run.makespan_s : 0,
                cols[i].run.busy_s > 0 ? base.busy_s / cols[i].run.busy_s : 0);
  for (const Column& c : cols)
    for (const master::StudySummary& s : c.run.studies)
      if (s.status != "done")
        std::printf("%s: study %s ended %s%s%s\n", c.name.c_str(),
                    protocol::printable(s.name).c_str(), s.status.c_str(),
                    s.error.empty() ? "" : ": ", protocol::printable(s.error).c_str());
}

int simulate(const Args& a, const GlobalOptions& global) {
  master::SimulationOptions options;
  options.workers = a.workers;
  options.cache_states = a.cache;
  options.mtbf_s = a.mtbf_s;
  options.restart_s = a.restart_s;
  options.seed = a.seed;
  options.rules = {a.budget, exec_kinds(a.allow_exec), keep_bytes(a.keep)};
  options.plan_path = a.plan;
  if (!a.plan.empty() && std::filesystem::exists(a.plan))
    throw BadInput("--plan: " + a.plan + " exists; the simulated plan goes to a new file");
  if (!a.submit_at.empty() && a.submit_at.size() != a.specs.size())
    throw BadInput("--at: give one submit time per spec (" + std::to_string(a.specs.size()) +
                   "), or none");
  std::vector<master::SimulatedStudy> studies;
  int64_t stages = 1;
  for (size_t i = 0; i < a.specs.size(); ++i) {
    LoadedSpec l = resolved(load_spec_file(a.specs[i]), a.workers);
    stages = std::max<int64_t>(stages, l.spec.pipeline.stages);
    studies.push_back({l.spec, l.spec_json, a.submit_at.empty() ? 0 : a.submit_at[i]});
  }
  options.devices = a.devices > 0 ? a.devices : stages;
  // With --curves-from every job has its configuration's own times (recorded_curves.h).
  options.times.defaults.step_s = a.curves_from.empty() ? a.step_s : std::max(a.step_s, 0.0);
  options.times.defaults.eval_s = a.eval_s;
  options.times.defaults.job_s = a.job_s;
  options.times.defaults.state_bytes = size_of("--state-bytes", a.state_bytes);
  options.times.bandwidth_bytes_s = static_cast<double>(size_of("--bandwidth", a.bandwidth));
  if (options.times.bandwidth_bytes_s <= 0) throw BadInput("--bandwidth: must be above 0");
  if (!a.times_from.empty()) {
    try {
      options.times.by_root_key = master::times_from_plan(a.times_from);
    } catch (const std::exception& e) {
      throw BadInput("--times-from: " + std::string(e.what()));
    }
    for (const master::SimulatedStudy& s : studies)
      for (const auto& [root_key, model] : s.spec.architectures)
        if (!options.times.by_root_key.count(root_key) && a.step_s < 0)
          throw BadInput("--times-from " + a.times_from + ": no finished jobs of study " +
                         s.spec.name + "'s model " + model.dump() +
                         " and data there; give --step-time for it");
  } else if (a.step_s < 0 && a.curves_from.empty()) {
    throw BadInput(
        "--step-time or --times-from (or --curves-from): the simulation needs a time per step");
  }
  if (!a.curves_from.empty() && !a.metrics_from.empty())
    throw BadInput("--curves-from and --metrics-from: give one source of metrics");
  std::unique_ptr<master::MetricModel> metrics;
  try {
    if (!a.curves_from.empty())
      metrics = std::make_unique<master::RecordedCurves>(a.curves_from);
    else if (a.metrics_from.empty())
      metrics = std::make_unique<master::SyntheticCurves>(a.curve_steps);
    else
      metrics = std::make_unique<master::ReplayedMetrics>(a.metrics_from);
  } catch (const std::exception& e) {
    throw BadInput((a.curves_from.empty() ? "--metrics-from: " : "--curves-from: ") +
                   std::string(e.what()));
  }
  options.events = checked_events_file(a.events);

  std::vector<Column> cols = columns(a);
  if (!a.plan.empty() && cols.size() > 1)
    throw BadInput("--plan keeps one simulated plan: give one --policy and one --order");
  for (Column& c : cols) {
    options.policy = c.policy;
    options.order = c.order;
    try {
      c.run = master::simulate(studies, options, *metrics);
    } catch (const SpecError& e) {
      throw BadInput(e.what());
    } catch (const std::invalid_argument& e) {
      throw BadInput(e.what());
    } catch (const std::runtime_error& e) {
      throw RunFailed(e.what());
    }
  }
  if (global.format == Format::kJson) {
    json out = json::object();
    for (const Column& c : cols) out[c.name] = c.run.to_json();
    std::printf("%s\n", out.dump().c_str());
  } else if (global.format == Format::kCsv) {
    print_csv(measure_rows(cols, options));
  } else {
    print_simulation(cols, options);
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* cmd = app.add_subcommand(
      "simulate", "run studies with the real master in virtual time on simulated workers");
  cmd->fallthrough();
  auto a = std::make_shared<Args>();
  cmd->add_option("specs", a->specs, "study specs (JSON files), submitted together")->required();
  cmd->add_option("--workers", a->workers, "simulated workers")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  cmd->add_option("--at", a->submit_at, "submit time of each spec in seconds (default all at 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--policy", a->policy,
                  "shared, trial-based or both (default both; shared with --plan)");
  cmd->add_option("--order", a->order,
                  "schedule order: critical-path (default), fifo, or both to compare");
  cmd->add_option("--step-time", a->step_s, "seconds per training step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--eval-time", a->eval_s, "seconds per evaluation (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--job-time", a->job_s, "fixed seconds of every job (default 0)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--state-bytes", a->state_bytes, "size of one checkpoint (default 1MiB)");
  cmd->add_option("--bandwidth", a->bandwidth,
                  "checkpoint bytes written or read per second (default 1GB)");
  cmd->add_option("--times-from", a->times_from,
                  "measure the times of each model from the finished jobs of this plan file");
  cmd->add_option("--metrics-from", a->metrics_from,
                  "replay the metrics of the finished studies of this plan file (default: a "
                  "synthetic learning curve)");
  cmd->add_option("--curves-from", a->curves_from,
                  "replay this table of recorded learning curves (bench/curves/): each trial the "
                  "nearest recorded configuration's, a step an epoch, at its measured times");
  cmd->add_option("--curve-steps", a->curve_steps,
                  "steps over which the synthetic curve rises (default 1000)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--devices", a->devices,
                  "devices of each worker (default: the most pipeline stages of the specs)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cache", a->cache, "states each worker keeps in memory (default 4)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--mtbf", a->mtbf_s, "mean seconds between failures of a worker (default none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--restart-time", a->restart_s,
                  "seconds from a failure to the worker's return (default 60)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->seed, "seed of the failures (default 1)");
  add_exec_option(cmd, &a->allow_exec,
                  "run the spec's searcher commands (trainers never run: nothing trains)");
  add_budget_options(cmd, &a->budget);
  add_keep_option(cmd, &a->keep);
  add_events_option(cmd, &a->events);
  cmd->add_option("--plan", a->plan,
                  "keep the simulated search plan in this new file (for the history queries)");
  set_action(cmd, action, kEveryFormat, [a, &global] {
    // The master's lines per event would drown the table: warnings only, unless debugging.
    if (global.log_level != "debug") spdlog::set_level(spdlog::level::warn);
    return simulate(*a, global);
  });
}

}  // namespace hippo::cli
