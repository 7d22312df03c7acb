// The balance of a pipelined gpt's stages as `hippo preview` and `hippo pipeline-plan --model`
// print it: for the pipeline as given, and with and without vocabulary parallelism and with
// BPipe where the model and shape allow them, each stage's blocks, forward compute and memory
// (parameters, gradients, optimizer state, peak activations; worker/engine/stage_balance.h), and
// the largest stage over the mean of each.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "pipeline/shape.h"

namespace hippo::cli {

// BadInput naming the problem unless `model` is a valid gpt model spec.
void check_gpt_model(const nlohmann::json& model);

// `model`: a gpt model spec; micro-batches of `sequences` sequences; `optimizer` "sgd", "adam" or
// "adamw". BadInput naming the problem when the model is not a valid gpt or the shape does not fit.
void print_pipeline_balance(const nlohmann::json& model, const pipeline::PipelineShape& shape,
                            int sequences, const std::string& optimizer);

}  // namespace hippo::cli
