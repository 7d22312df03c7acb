// A study asks for pipelining with "pipeline": the spec's checks (with JSON paths), what belongs
// to the root key, and the run spec that carries it to the worker.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "protocol/message.h"
#include "searchers/spec.h"

namespace hippo {
namespace {

using nlohmann::json;

json example() {
  std::ifstream in(HIPPO_SOURCE_DIR "/examples/fmnist-mlp-lr-decay.json");
  return json::parse(in);
}

std::string error_of(const json& spec) {
  try {
    parse_spec(spec);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "accepted";
}

json with_pipeline(json pipeline) {
  json spec = example();
  spec["pipeline"] = std::move(pipeline);
  return spec;
}

TEST(PipelineSpec, IsParsedWithDefaults) {
  StudySpec plain = parse_spec(example());
  EXPECT_EQ(plain.pipeline.stages, 1);
  EXPECT_EQ(plain.pipeline.microbatches, 1);
  StudySpec s = parse_spec(with_pipeline({{"stages", 1}, {"microbatches", 4}}));
  EXPECT_EQ(s.pipeline.stages, 1);
  EXPECT_EQ(s.pipeline.microbatches, 4);
  EXPECT_EQ(s.pipeline.schedule, "1f1b");
  EXPECT_EQ(s.pipeline.chunks, 1);
}

// Micro-batches change the sums: they belong to the root key. Writing M = 1 out changes nothing.
TEST(PipelineSpec, OnlyMicrobatchesBelongToTheRootKey) {
  const std::string plain = parse_spec(example()).root_key;
  EXPECT_EQ(parse_spec(with_pipeline({{"stages", 1}, {"microbatches", 1}})).root_key, plain);
  EXPECT_EQ(parse_spec(with_pipeline({{"stages", 1}, {"schedule", "gpipe"}})).root_key, plain);
  const std::string four = parse_spec(with_pipeline({{"stages", 1}, {"microbatches", 4}})).root_key;
  EXPECT_NE(four, plain);
  EXPECT_EQ(parse_spec(with_pipeline({{"stages", 1}, {"microbatches", 4}, {"schedule", "bpipe"}}))
                .root_key,
            four);
}

TEST(PipelineSpec, BadFieldsAreNamedByTheirPath) {
  EXPECT_EQ(error_of(with_pipeline({{"microbatches", 2}})), "pipeline.stages: missing");
  EXPECT_EQ(error_of(with_pipeline({{"stages", 0}})),
            "pipeline.stages: expected an integer in [1, 256], got 0");
  EXPECT_EQ(error_of(with_pipeline({{"stages", 1}, {"schedule", "zigzag"}})),
            "pipeline.schedule: unknown schedule \"zigzag\" (known: gpipe, 1f1b, interleaved, "
            "bpipe)");
  EXPECT_EQ(error_of(with_pipeline({{"stages", 1}, {"chunks", 2}})),
            "pipeline.chunks: only the interleaved schedule has more than one chunk per stage, "
            "got 2 with 1f1b");
  EXPECT_EQ(error_of(with_pipeline({{"stages", 1}, {"microbatches", 3}})),
            "pipeline.microbatches: 3 micro-batches do not divide a batch size of 128");
  EXPECT_EQ(error_of(with_pipeline({{"stages", 2}})),
            "pipeline.stages: only a gpt model can be cut into pipeline stages, model.type is "
            "\"mlp\"");
  EXPECT_EQ(error_of(with_pipeline({{"stages", 1}, {"depth", 2}})).rfind("pipeline.depth: ", 0),
            0u);
  EXPECT_EQ(error_of(with_pipeline(json::array())).rfind("pipeline", 0), 0u);
}

TEST(PipelineSpec, AGptHasAtLeastOneBlockPerPipelinePosition) {
  json spec = example();
  spec["model"] = {{"type", "gpt"}, {"layers", 1},   {"heads", 2},
                   {"dim", 32},     {"context", 16}, {"vocab", 96}};
  spec["data"] = {{"name", "fortunes"}};
  spec["pipeline"] = {{"stages", 3}, {"microbatches", 2}};
  EXPECT_EQ(parse_spec(spec).pipeline.stages, 3);
  spec["pipeline"] = {
      {"stages", 2}, {"microbatches", 2}, {"schedule", "interleaved"}, {"chunks", 2}};
  EXPECT_EQ(error_of(spec),
            "pipeline.stages: 4 pipeline positions (stages x chunks) for a gpt of 3 blocks (the "
            "embedding, model.layers transformer blocks, the head)");
}

TEST(PipelineRunSpec, TravelsInTheJob) {
  protocol::RunSpec run;
  run.model = {{"type", "gpt"}};
  run.data = "fortunes";
  run.train_samples = 100;
  run.eval_samples = 10;
  run.fixed = json::object();
  run.microbatches = 4;
  run.pipeline_stages = 2;
  run.pipeline_schedule = "interleaved";
  run.pipeline_chunks = 2;
  json wire = protocol::to_json(run);
  EXPECT_EQ(protocol::run_spec_from_json(wire), run);
  EXPECT_FALSE(wire["pipeline"].contains("vocab_parallel"));  // omitted when false
  run.pipeline_vocab_parallel = true;
  EXPECT_EQ(protocol::run_spec_from_json(protocol::to_json(run)), run);
  EXPECT_EQ(protocol::to_json(run)["pipeline"]["vocab_parallel"], true);
  EXPECT_FALSE(protocol::run_spec_from_json(wire).pipeline_vocab_parallel);  // an older master's
  // Older masters send no pipeline: none.
  wire.erase("pipeline");
  protocol::RunSpec old = protocol::run_spec_from_json(wire);
  EXPECT_EQ(old.pipeline_stages, 1);
  EXPECT_EQ(old.microbatches, 1);
  // A bad one is refused with its field.
  wire = protocol::to_json(run);
  wire["pipeline"]["stages"] = 0;
  try {
    protocol::run_spec_from_json(wire);
    FAIL() << "accepted";
  } catch (const protocol::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("stages"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hippo
