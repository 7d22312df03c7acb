// `hippo pipeline-plan --stages P --microbatches M --schedule S [--chunks V] [--vocab-cost C]
// [--vocab-parallel] [--model GPT --sequences B --optimizer O [--measure]]`: generates the
// pipeline program, simulates it and prints a timeline per stage with the bubble and the peak
// stash of each stage, so users can size a pipelined run before they start it; with --model,
// each stage's compute and memory for that gpt (pipeline_balance.h); with --measure, simulated
// with that gpt's passes timed on this CPU (worker/engine/stage_balance.h), and the samples/s
// that predicts. `--format json`
// prints {"bubble_fraction", "peak_stash", "steps", ...} on one line; `--format csv` the steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "master/cli/cli.h"
#include "master/cli/pipeline_balance.h"
#include "master/cli/report.h"
#include "pipeline/schedules.h"
#include "pipeline/simulator.h"
#include "worker/engine/stage_balance.h"

namespace hippo::cli {
namespace {

struct PlanOptions {
  int stages = 0;
  int microbatches = 0;
  std::string schedule;
  int chunks = 1;
  bool chunks_given = false;
  double forward_cost = 1;   // of a whole stage's forward of one micro-batch
  double backward_cost = 2;  // of a whole stage's backward
  double transfer_cost = 0;  // of each transfer (activation, gradient, lent stash)
  // The output layer's forward over the whole vocabulary (its backward twice): on the last stage,
  // or with vocab_parallel a p-th of it on every stage (pipeline/README.md).
  double vocab_cost = 0;
  bool vocab_parallel = false;
  // A gpt model spec (JSON text): its stages' balance is printed after the plan.
  std::string model;
  int sequences = 1;  // per micro-batch
  std::string optimizer = "adam";
  // Simulate with --model's instruction times measured on this machine's CPU (one thread per
  // stage) instead of the cost options.
  bool measure = false;
};

pipeline::PipelineShape checked_shape(const PlanOptions& o) {
  std::optional<pipeline::Schedule> schedule = pipeline::parse_schedule(o.schedule);
  if (!schedule) {
    throw BadInput("--schedule: unknown schedule \"" + o.schedule +
                   "\" (known: " + pipeline::kScheduleNames + ")");
  }
  if (o.chunks_given && *schedule != pipeline::Schedule::kInterleaved)
    throw BadInput("--chunks: only the interleaved schedule has chunks, the schedule is " +
                   o.schedule);
  pipeline::PipelineShape shape{o.stages, o.microbatches, *schedule, o.chunks, o.vocab_parallel};
  if (std::string problem = pipeline::check_shape(shape); !problem.empty())
    throw BadInput("--" + (problem.starts_with("vocab_parallel")
                               ? "vocab-parallel" + problem.substr(std::strlen("vocab_parallel"))
                               : problem));
  auto check_cost = [](const char* name, double value, bool zero_allowed) {
    if (!std::isfinite(value) || value < 0 || (!zero_allowed && value == 0))
      throw BadInput(std::string(name) + ": expected a " + (zero_allowed ? "" : "positive ") +
                     "finite time, got " + cell(value));
  };
  check_cost("--forward-cost", o.forward_cost, false);
  check_cost("--backward-cost", o.backward_cost, false);
  check_cost("--transfer-cost", o.transfer_cost, true);
  check_cost("--vocab-cost", o.vocab_cost, true);
  return shape;
}

// Forward and backward costs per chunk (a stage's divided by its chunks), transfers as given;
// the output layer's on the last stage's chunks, or a p-th of it in every stage's vocabulary
// passes.
pipeline::Costs costs_of(const PlanOptions& o, int stages, int chunks) {
  using pipeline::Op;
  pipeline::Costs costs =
      pipeline::Costs::uniform(o.forward_cost / chunks, o.backward_cost / chunks);
  for (Op receive :
       {Op::kRecvActivation, Op::kRecvGradient, Op::kHold, Op::kReload, Op::kRecvEmbedding,
        Op::kRecvEmbedGradient, Op::kRecvVocabInput, Op::kRecvVocabStats, Op::kRecvVocabGradient})
    costs.by_op[static_cast<int>(receive)] = o.transfer_cost;
  if (o.vocab_cost == 0) return costs;
  auto& by_op = costs.by_op;
  if (o.vocab_parallel) {
    by_op[static_cast<int>(Op::kVocabForward)] = o.vocab_cost / stages;
    by_op[static_cast<int>(Op::kVocabBackward)] = 2 * o.vocab_cost / stages;
    return costs;
  }
  costs.by_stage.assign(stages, by_op);
  costs.by_stage.back()[static_cast<int>(Op::kForward)] += o.vocab_cost / chunks;
  costs.by_stage.back()[static_cast<int>(Op::kBackward)] += 2 * o.vocab_cost / chunks;
  return costs;
}

// One character per column: a-z the forward of micro-batch 0-25 (then again from a), A-Z its
// backward, 'o' the optimizer step, '~' a transfer, '.' idle. A column is the smallest compute
// cost wide, or wider when that would take more than kMaxColumns.
constexpr int kMaxColumns = 160;

std::string timeline_row(const std::vector<pipeline::TimedInstruction>& steps, double width,
                         int columns) {
  using pipeline::Op;
  std::string row(columns, '.');
  for (const pipeline::TimedInstruction& step : steps) {
    if (step.end <= step.start) continue;
    char mark = '~';
    if (step.instruction.op == Op::kForward) mark = char('a' + step.instruction.microbatch % 26);
    if (step.instruction.op == Op::kBackward) mark = char('A' + step.instruction.microbatch % 26);
    if (step.instruction.op == Op::kOptimizerStep) mark = 'o';
    if (step.instruction.op >= Op::kEmbedForward && step.instruction.op <= Op::kVocabBackward)
      mark = '*';
    // Columns whose middle lies inside the step.
    const int first = static_cast<int>(std::ceil(step.start / width - 0.5));
    const int last = static_cast<int>(std::ceil(step.end / width - 0.5)) - 1;
    for (int c = std::max(first, 0); c <= std::min(last, columns - 1); ++c) row[c] = mark;
  }
  return row;
}

void print_plan(const pipeline::Program& program, const pipeline::SimulationReport& report,
                const PlanOptions& o) {
  const int p = program.stages, m = program.microbatches, v = program.chunks;
  std::printf("%s: %d stages, %d micro-batches", program.schedule.c_str(), p, m);
  if (v > 1) std::printf(", %d chunks per stage", v);
  if (o.measure)
    std::printf("; the model's passes as measured on this CPU (one thread per stage), seconds\n");
  else
    std::printf("; a stage's forward takes %g, its backward %g, a transfer %g\n", o.forward_cost,
                o.backward_cost, o.transfer_cost);
  if (o.vocab_cost > 0)
    std::printf("the output layer's forward takes %g, %s\n", o.vocab_cost,
                program.vocab_parallel ? "a p-th of it in each stage's vocabulary passes"
                                       : "on the last stage");
  std::printf(
      "makespan %g, bubble %.1f%% (1F1B theory with free transfers: (p-1)/(v*m+p-1) = "
      "%.1f%%)\n\n",
      report.makespan, 100 * report.bubble_fraction, 100.0 * (p - 1) / (v * m + p - 1));
  const double smallest = o.measure ? 0 : std::min(o.forward_cost, o.backward_cost) / v;
  const double width = std::max(smallest, report.makespan / kMaxColumns);
  const int columns = std::max(1, static_cast<int>(std::ceil(report.makespan / width - 1e-9)));
  std::vector<std::vector<std::string>> rows = {
      {"stage", "timeline", "busy", "idle", "peak stash"}};
  for (int s = 0; s < p; ++s) {
    char busy[32], idle[32];
    std::snprintf(busy, sizeof busy, "%g", report.busy[s]);
    std::snprintf(idle, sizeof idle, "%g", report.makespan - report.busy[s]);
    rows.push_back({std::to_string(s), timeline_row(report.timeline[s], width, columns), busy, idle,
                    std::to_string(report.peak_stash[s])});
  }
  print_table(rows);
  std::printf(
      "\none column = %g time; a-z: forward of micro-batch 0-25 (mod 26), A-Z: its "
      "backward, o: optimizer step, *: vocabulary pass, ~: transfer, .: idle\n",
      width);
  std::printf("peak stash: stashed micro-batch activations held at once (own and lent%s)\n",
              v > 1 ? "; in chunk units, 1/v of a stage each" : "");
}

nlohmann::json steps_json(const pipeline::SimulationReport& report) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& steps : report.timeline) {
    nlohmann::json list = nlohmann::json::array();
    for (const pipeline::TimedInstruction& step : steps) {
      nlohmann::json item = {
          {"op", pipeline::op_name(step.instruction.op)}, {"start", step.start}, {"end", step.end}};
      if (step.instruction.microbatch >= 0) item["microbatch"] = step.instruction.microbatch;
      if (step.instruction.op != pipeline::Op::kOptimizerStep)
        item["chunk"] = step.instruction.chunk;
      if (step.instruction.peer >= 0) item["peer"] = step.instruction.peer;
      list.push_back(item);
    }
    stages.push_back(list);
  }
  return stages;
}

// --model's gpt spec (null without it); BadInput naming --model when it is not one.
nlohmann::json checked_model(const PlanOptions& o) {
  if (o.model.empty()) return nullptr;
  const nlohmann::json model = nlohmann::json::parse(o.model, nullptr, /*allow_exceptions=*/false);
  try {
    check_gpt_model(model);
  } catch (const BadInput& e) {
    throw BadInput(std::string("--") + e.what());
  }
  return model;
}

// The simulated samples/s of `shape` from measured times: its micro-batches over the program's
// makespan and the update after it. BadInput when the shape does not fit the model.
double predicted_samples_per_s(const worker::Gpt& model, const pipeline::PipelineShape& shape,
                               int sequences, const worker::InstructionTimes& times) {
  pipeline::Costs costs;
  try {
    costs = worker::measured_costs(model, shape, times);
  } catch (const std::invalid_argument& e) {
    throw BadInput(std::string("--model: ") + e.what());
  }
  const pipeline::SimulationReport report = pipeline::simulate(pipeline::generate(shape), costs);
  return double(shape.microbatches) * sequences / (report.makespan + times.update);
}

int pipeline_plan(const PlanOptions& o, Format format) {
  const pipeline::PipelineShape shape = checked_shape(o);
  const nlohmann::json model = checked_model(o);
  if (o.measure && model.is_null()) throw BadInput("--measure: needs --model");
  std::unique_ptr<worker::Gpt> gpt;
  worker::InstructionTimes times;
  pipeline::Costs costs = costs_of(o, shape.stages, shape.chunks);
  if (o.measure) {
    gpt = std::make_unique<worker::Gpt>(worker::GptShape::parse(model));
    times = worker::measure_instruction_times(*gpt, o.sequences, kernels::make_cpu_backend(1));
    predicted_samples_per_s(*gpt, shape, o.sequences, times);  // checks that the shape fits
    costs = worker::measured_costs(*gpt, shape, times);
  }
  const pipeline::Program program = pipeline::generate(shape);
  const pipeline::SimulationReport report = pipeline::simulate(program, costs);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.error_text().c_str());  // one line per broken instruction
    throw RunFailed("the generated program is broken (above)");
  }
  // With measured times: the predicted samples/s, and with vocab_parallel toggled where it fits.
  double predicted = 0, toggled_predicted = 0;
  if (o.measure) {
    predicted = predicted_samples_per_s(*gpt, shape, o.sequences, times);
    pipeline::PipelineShape toggled = shape;
    toggled.vocab_parallel = !shape.vocab_parallel;
    if (pipeline::check_shape(toggled).empty()) try {
        toggled_predicted = predicted_samples_per_s(*gpt, toggled, o.sequences, times);
      } catch (const BadInput&) {  // the model does not fit it: not shown
      }
  }
  if (format == Format::kJson) {
    nlohmann::json out = {{"schedule", program.schedule},
                          {"stages", program.stages},
                          {"microbatches", program.microbatches},
                          {"chunks", program.chunks},
                          {"vocab_parallel", program.vocab_parallel},
                          {"makespan", report.makespan},
                          {"bubble_fraction", report.bubble_fraction},
                          {"peak_stash", report.peak_stash},
                          {"busy", report.busy},
                          {"steps", steps_json(report)}};
    if (o.measure) out["predicted_samples_per_s"] = predicted;
    std::printf("%s\n", out.dump().c_str());
  } else if (format == Format::kCsv) {
    std::vector<std::vector<std::string>> rows = {
        {"stage", "index", "op", "microbatch", "chunk", "peer", "start", "end"}};
    for (int s = 0; s < program.stages; ++s) {
      for (size_t i = 0; i < report.timeline[s].size(); ++i) {
        const pipeline::TimedInstruction& step = report.timeline[s][i];
        rows.push_back(
            {std::to_string(s), std::to_string(i), pipeline::op_name(step.instruction.op),
             std::to_string(step.instruction.microbatch), std::to_string(step.instruction.chunk),
             std::to_string(step.instruction.peer), cell(step.start), cell(step.end)});
      }
    }
    print_csv(rows);
  } else {
    print_plan(program, report, o);
    if (o.measure) {
      std::printf("\npredicted: %.2f samples/s (%d micro-batches of %d sequences, then the update)",
                  predicted, shape.microbatches, o.sequences);
      if (toggled_predicted > 0)
        std::printf("; %s vocab_parallel: %.2f samples/s (%.2fx)",
                    shape.vocab_parallel ? "without" : "with", toggled_predicted,
                    toggled_predicted / predicted);
      std::printf("\n");
    }
    if (!model.is_null()) {
      std::printf("\n");
      print_pipeline_balance(model, shape, o.sequences, o.optimizer);
    }
  }
  return 0;
}

}  // namespace

void add_pipeline_command(CLI::App& app, const GlobalOptions& global, Action* action) {
  CLI::App* cmd = app.add_subcommand(
      "pipeline-plan", "simulate a pipeline schedule: per-stage timeline, bubble, peak stash");
  cmd->fallthrough();
  auto o = std::make_shared<PlanOptions>();
  cmd->add_option("--stages", o->stages, "pipeline stages (devices), P >= 1")->required();
  cmd->add_option("--microbatches", o->microbatches, "micro-batches per optimizer step, M >= 1")
      ->required();
  cmd->add_option("--schedule", o->schedule, pipeline::kScheduleNames)->required();
  CLI::Option* chunks = cmd->add_option("--chunks", o->chunks,
                                        "model chunks per stage (interleaved only; default 1)");
  cmd->add_option("--forward-cost", o->forward_cost, "time of a stage's forward (default 1)");
  cmd->add_option("--backward-cost", o->backward_cost, "time of a stage's backward (default 2)");
  cmd->add_option("--transfer-cost", o->transfer_cost, "time of one transfer (default 0)");
  cmd->add_option("--vocab-cost", o->vocab_cost,
                  "time of the output layer's forward over the vocabulary (default 0)");
  cmd->add_flag("--vocab-parallel", o->vocab_parallel,
                "the embedding and output layer cut by vocabulary over all stages (1f1b, "
                "interleaved)");
  cmd->add_option("--model", o->model,
                  "a gpt model spec (JSON): print each stage's compute and memory for it");
  cmd->add_option("--sequences", o->sequences, "sequences per micro-batch, for --model (default 1)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--optimizer", o->optimizer, "for --model: sgd, adam or adamw (default adam)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  cmd->add_flag("--measure", o->measure,
                "simulate with --model's passes timed on this machine's CPU (one thread per "
                "stage): the predicted samples/s, with and without vocab_parallel");
  set_action(cmd, action, kEveryFormat, [o, chunks, &global] {
    o->chunks_given = chunks->count() > 0;
    return pipeline_plan(*o, global.format);
  });
}

}  // namespace hippo::cli
