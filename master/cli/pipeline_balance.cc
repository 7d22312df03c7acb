#include "master/cli/pipeline_balance.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <vector>

#include "master/cli/cli.h"
#include "master/cli/report.h"
#include "worker/engine/stage_balance.h"

namespace hippo::cli {
namespace {

std::string fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string mib(int64_t floats) {
  return fixed(static_cast<double>(floats) * sizeof(float) / (1 << 20), 1);
}

// The largest over the mean of one column.
template <typename Of>
std::string max_over_mean(const std::vector<worker::StageBalance>& stages, Of of) {
  double largest = 0, sum = 0;
  for (const worker::StageBalance& s : stages) {
    largest = std::max(largest, static_cast<double>(of(s)));
    sum += static_cast<double>(of(s));
  }
  return sum > 0 ? fixed(largest / (sum / static_cast<double>(stages.size())), 2) : "-";
}

std::string title(const pipeline::PipelineShape& shape) {
  std::string t = std::string(pipeline::schedule_name(shape.schedule)) + ", " +
                  std::to_string(shape.stages) + " stages";
  if (shape.chunks > 1) t += " x " + std::to_string(shape.chunks) + " chunks";
  return t + (shape.vocab_parallel ? ", vocab_parallel" : "");
}

void print_one(const worker::Gpt& model, const pipeline::PipelineShape& shape, int sequences,
               int optimizer_floats) {
  std::vector<worker::StageBalance> stages;
  try {
    stages = worker::stage_balance(model, shape, sequences, optimizer_floats);
  } catch (const std::invalid_argument& e) {
    std::printf("%s: not possible (%s)\n", title(shape).c_str(), e.what());
    return;
  }
  std::printf("%s:\n", title(shape).c_str());
  std::vector<std::vector<std::string>> rows = {{"stage", "blocks", "forward GMAC", "params MiB",
                                                 "grads MiB", "optimizer MiB", "activations MiB",
                                                 "total MiB"}};
  for (size_t q = 0; q < stages.size(); ++q) {
    const worker::StageBalance& s = stages[q];
    rows.push_back({std::to_string(q), s.blocks, fixed(s.forward_macs / 1e9, 3),
                    mib(s.memory.params), mib(s.memory.grads), mib(s.memory.optimizer),
                    mib(s.memory.activations), mib(s.memory.total())});
  }
  using B = worker::StageBalance;
  rows.push_back({"max/mean", "", max_over_mean(stages, [](const B& s) { return s.forward_macs; }),
                  max_over_mean(stages, [](const B& s) { return s.memory.params; }),
                  max_over_mean(stages, [](const B& s) { return s.memory.grads; }),
                  max_over_mean(stages, [](const B& s) { return s.memory.optimizer; }),
                  max_over_mean(stages, [](const B& s) { return s.memory.activations; }),
                  max_over_mean(stages, [](const B& s) { return s.memory.total(); })});
  print_table(rows);
}

}  // namespace

void check_gpt_model(const nlohmann::json& model) {
  if (!model.is_object() || model.value("type", "") != "gpt")
    throw BadInput("model: expected a gpt model spec, {\"type\": \"gpt\", ...}, got " +
                   model.dump());
  try {
    worker::GptShape::parse(model);
  } catch (const std::invalid_argument& e) {
    throw BadInput(e.what());
  }
}

void print_pipeline_balance(const nlohmann::json& model_spec, const pipeline::PipelineShape& shape,
                            int sequences, const std::string& optimizer) {
  check_gpt_model(model_spec);
  const auto model = std::make_unique<worker::Gpt>(worker::GptShape::parse(model_spec));
  if (sequences < 1)
    throw BadInput("micro-batches of " + std::to_string(sequences) + " sequences: expected >= 1");
  const int optimizer_floats = optimizer == "sgd" ? 1 : 2;
  const worker::GptShape& g = model->shape();
  std::printf(
      "pipeline balance: gpt of %d layers, dim %d, context %d, vocab %d%s; micro-batches of %d "
      "sequences; %s (%d optimizer value%s per parameter)\n",
      g.layers, g.dim, g.context, g.vocab, g.tied ? " (tied)" : "", sequences, optimizer.c_str(),
      optimizer_floats, optimizer_floats > 1 ? "s" : "");
  // As given, then with vocab_parallel toggled, then BPipe (1F1B with lent stashes).
  std::vector<pipeline::PipelineShape> shapes = {shape};
  pipeline::PipelineShape toggled = shape;
  toggled.vocab_parallel = !shape.vocab_parallel;
  if (toggled.vocab_parallel && toggled.schedule != pipeline::Schedule::kOneFOneB &&
      toggled.schedule != pipeline::Schedule::kInterleaved)
    toggled.schedule = pipeline::Schedule::kOneFOneB, toggled.chunks = 1;
  shapes.push_back(toggled);
  if (shape.schedule != pipeline::Schedule::kBPipe)
    shapes.push_back({shape.stages, shape.microbatches, pipeline::Schedule::kBPipe, 1, false});
  for (const pipeline::PipelineShape& s : shapes) {
    std::printf("\n");
    print_one(*model, s, sequences, optimizer_floats);
  }
  std::printf(
      "\nforward GMAC: multiply-adds of one micro-batch's forward (the backward about twice); "
      "activations: the peak held between passes (stashes, lent ones, vocabulary logits)\n");
}

}  // namespace hippo::cli
