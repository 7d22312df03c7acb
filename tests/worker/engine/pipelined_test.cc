// The pipelined gpt (pipelined_engine.h): for every schedule, with 2 and 4 stages on CPU threads,
// the same trial trained pipelined and unpipelined over the same micro-batches has the same
// parameters and optimizer state, bit for bit, after several optimizer steps; and the cut.
#include <gtest/gtest.h>

#include "tests/worker/engine/recipe.h"
#include "worker/engine/engine.h"
#include "worker/engine/pipelined_engine.h"

namespace hippo::worker {
namespace {

constexpr int64_t kSteps = 3;

// 8 blocks (embedding, 6 transformer blocks, head): enough for 4 stages of 2 chunks.
RunConfig config(int stages, const std::string& schedule, int chunks, bool tied = true) {
  RunConfig c = testing::small_config("gpt");
  c.model["layers"] = 6;
  c.model["tied"] = tied;
  c.eval_samples = 8;
  c.microbatches = 4;
  c.pipeline_stages = stages;
  c.pipeline_schedule = schedule;
  c.pipeline_chunks = chunks;
  return c;
}

struct Trained {
  TrainState state;
  Metrics metrics;
  uint64_t hash;
};

Trained train(const RunConfig& c) {
  Engine engine(c, 1);
  TrainState s = engine.initial_state();
  // batch 16 = 4 micro-batches of 4 sequences; the learning rate changes at step 2.
  engine.train(s, kSteps, {{"lr", multistep(3e-3, {2}, 0.5)}},
               {{"optimizer", "adamw"}, {"batch_size", 16}, {"weight_decay", 0.1}}, {});
  return {s, engine.evaluate(s), engine.config_hash()};
}

TEST(PipelinedTest, EverySchedulePipelinedEqualsUnpipelinedBitForBit) {
  for (bool tied : {true, false}) {
    const Trained alone = train(config(1, "1f1b", 1, tied));
    ASSERT_EQ(alone.state.step, kSteps);
    struct Shape {
      int stages;
      const char* schedule;
      int chunks;
    };
    for (const Shape& p :
         {Shape{2, "gpipe", 1}, Shape{4, "gpipe", 1}, Shape{2, "1f1b", 1}, Shape{4, "1f1b", 1},
          Shape{2, "interleaved", 2}, Shape{4, "interleaved", 2}, Shape{2, "bpipe", 1},
          Shape{4, "bpipe", 1}}) {
      SCOPED_TRACE(std::string(p.schedule) + " stages " + std::to_string(p.stages) + " chunks " +
                   std::to_string(p.chunks) + (tied ? " tied" : " untied"));
      const Trained piped = train(config(p.stages, p.schedule, p.chunks, tied));
      EXPECT_TRUE(piped.state == alone.state);
      EXPECT_EQ(piped.metrics.loss, alone.metrics.loss);
      EXPECT_EQ(piped.metrics.accuracy, alone.metrics.accuracy);
      EXPECT_EQ(piped.hash, alone.hash);  // the pipeline does not change results: not hashed
    }
  }
}

// Micro-batches change the sums: another state and another config hash (so that a checkpoint
// of one is refused by the other), while the loss stays close.
TEST(PipelinedTest, MicrobatchesBelongToTheConfig) {
  RunConfig one = config(1, "1f1b", 1);
  one.microbatches = 1;
  const Trained a = train(one), b = train(config(1, "1f1b", 1));
  EXPECT_FALSE(a.state == b.state);
  EXPECT_NE(a.hash, b.hash);
  EXPECT_NEAR(a.metrics.loss, b.metrics.loss, 1e-3);
}

TEST(PipelinedTest, RefusesPipelinesThatDoNotFit) {
  // The error of building an engine for c and training one step; a refused step leaves the
  // state as it was.
  auto error = [](const RunConfig& c) {
    try {
      Engine engine(c, 1);
      TrainState s = engine.initial_state();
      const TrainState before = s;
      try {
        engine.train(s, 1, {}, {{"optimizer", "sgd"}, {"lr", 0.1}, {"batch_size", 6}}, {});
      } catch (const std::invalid_argument& e) {
        return s == before ? std::string(e.what()) : std::string("state changed");
      }
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  RunConfig c = config(4, "interleaved", 4);  // 16 positions, 8 blocks
  EXPECT_EQ(error(c).rfind("pipeline: 16 pipeline positions (stages x chunks) for a model of 8", 0),
            0u)
      << error(c);
  c = config(3, "interleaved", 2);  // 4 micro-batches are not a multiple of 3 stages
  EXPECT_EQ(error(c).rfind("pipeline.microbatches:", 0), 0u) << error(c);
  c = config(2, "zigzag", 1);
  EXPECT_EQ(error(c).rfind("pipeline.schedule: unknown schedule \"zigzag\"", 0), 0u) << error(c);
  c = testing::small_config("mlp");
  c.pipeline_stages = 2;
  EXPECT_EQ(error(c),
            "pipeline.stages: only a gpt model can be cut into pipeline stages, "
            "model.type is mlp");
  c = config(2, "1f1b", 1);  // batch 6 in 4 micro-batches
  EXPECT_EQ(error(c), "setting batch_size: 6 at step 0 is not a multiple of 4 micro-batches");
}

TEST(PipelinedTest, CutBalancesComputeWithEmbeddingAndHeadAtTheEnds) {
  nlohmann::json spec = {{"type", "gpt"}, {"layers", 4},   {"heads", 2},
                         {"dim", 64},     {"context", 32}, {"vocab", 96}};
  Gpt model(GptShape::parse(spec));
  // Blocks: embedding, 4 transformer blocks, head; the ends are cheap, so 2 stages get 2
  // transformer blocks each, 4 stages one each.
  EXPECT_EQ(cut_blocks(model, 1), (std::vector<size_t>{0, 6}));
  EXPECT_EQ(cut_blocks(model, 2), (std::vector<size_t>{0, 3, 6}));
  EXPECT_EQ(cut_blocks(model, 4), (std::vector<size_t>{0, 2, 3, 4, 6}));
  EXPECT_EQ(cut_blocks(model, 6), (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(cut_blocks(model, 7), std::invalid_argument);
  // A vocabulary so large that the output layer costs more than a block gets a stage alone.
  spec["vocab"] = 4096;
  spec["layers"] = 2;
  EXPECT_EQ(cut_blocks(Gpt(GptShape::parse(spec)), 2), (std::vector<size_t>{0, 3, 4}));
}

}  // namespace
}  // namespace hippo::worker
